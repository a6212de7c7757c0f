// Where a process stands in a job: its rank, the world size, and the local rank on its machine, read from the
// environment a launcher leaves, in this order of preference:
//   torchrun / kiln launch   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Open MPI (mpirun)        OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   SLURM (srun)             SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// MASTER_ADDR / MASTER_PORT (default 127.0.0.1 and 29500) name the store's server whichever launcher ran.
// `source` says which set was used, so a log can show where a rank came from.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace kiln::distributed {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  std::string source;  // "torchrun", "openmpi", "slurm", or "explicit"
};

// Reads the environment (through `getenv`, replaceable for tests). A partial or malformed set (RANK without
// WORLD_SIZE, a rank outside [0, world size), a port that is not a number) is a kiln::Error naming the
// variable; no recognised set at all is nullopt (a single-process run).
std::optional<RankInfo> rank_info_from_env(const std::function<const char*(const char*)>& getenv_fn = nullptr);

}  // namespace kiln::distributed
