// rank_info_from_env (env.h): the first launcher whose variables are present wins, and a present set must be
// whole and consistent. A malformed set is an error rather than a reason to try the next launcher: falling
// through would quietly run a rank with the wrong identity (say, as rank 0 of a SLURM job it is not part of),
// which shows up much later as a rendezvous that hangs.
//
// An empty variable counts as unset: shells "clear" a variable with `export RANK=`, and a job script that does
// so means "no value", not "a malformed one".
#include "kiln/distributed/env.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "kiln/tensor/error.h"

namespace kiln::distributed {

namespace {

using Getenv = std::function<const char*(const char*)>;

// The value of `name`, or nullopt when it is unset or empty.
std::optional<std::string> lookup(const Getenv& getenv_fn, const char* name) {
  const char* v = getenv_fn(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// `text` as a whole decimal integer in [min, max] (no sign, no spaces, no trailing characters); the error names
// the variable and its value.
int parse_int(const char* name, const std::string& text, int min, int max, const char* expected) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  KILN_CHECK(ec == std::errc{} && ptr == end && value >= min && value <= max, name, "=", text, ": expected ",
             expected);
  return value;
}

int parse_count(const char* name, const std::string& text) {
  return parse_int(name, text, 1, 1 << 30, "a positive integer");
}

int parse_index(const char* name, const std::string& text) {
  return parse_int(name, text, 0, 1 << 30, "a non-negative integer");
}

// The four numbers of one launcher's set, by their variable names there.
struct VarNames {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

// The first of `names` that is set, or nullptr: whether a launcher's set is present at all.
const char* first_set(const Getenv& g, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (lookup(g, name)) return name;
  }
  return nullptr;
}

// A variable of the set that must be present once any of the set is; `present` names the one that was seen.
std::string require(const Getenv& getenv_fn, const char* name, const char* present, const char* source) {
  std::optional<std::string> v = lookup(getenv_fn, name);
  if (!v) {
    const std::optional<std::string> seen = lookup(getenv_fn, present);
    KILN_CHECK(false, present, "=", seen.value_or(""), " is set but ", name, " is not: the ", source,
               " variables come as a set");
  }
  return *v;
}

// Checks that the four numbers of a set agree with each other.
void check_consistent(const RankInfo& info, const VarNames& n) {
  KILN_CHECK(info.rank < info.world_size, n.rank, "=", info.rank, " but ", n.world_size, "=", info.world_size,
             ": a rank must be below the world size");
  KILN_CHECK(info.local_rank < info.local_world_size, n.local_rank, "=", info.local_rank, " but ",
             n.local_world_size, "=", info.local_world_size, ": a local rank must be below the local world size");
  KILN_CHECK(info.local_world_size <= info.world_size, n.local_world_size, "=", info.local_world_size, " but ",
             n.world_size, "=", info.world_size, ": a machine cannot hold more ranks than the job has");
}

// torchrun and kiln launch. RANK and WORLD_SIZE are what a process group needs; LOCAL_RANK and
// LOCAL_WORLD_SIZE come together or not at all, and when neither is set (ranks started by hand on one machine)
// the job is taken to be all on this machine.
std::optional<RankInfo> from_torchrun(const Getenv& g) {
  const VarNames n{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  const char* any = first_set(g, {n.rank, n.world_size, n.local_rank, n.local_world_size});
  if (any == nullptr) return std::nullopt;
  RankInfo info;
  info.source = n.source;
  info.rank = parse_index(n.rank, require(g, n.rank, any, "torchrun-style (RANK, WORLD_SIZE, ...)"));
  info.world_size = parse_count(n.world_size, require(g, n.world_size, any, "torchrun-style (RANK, WORLD_SIZE, ...)"));
  const std::optional<std::string> local_rank = lookup(g, n.local_rank), local_size = lookup(g, n.local_world_size);
  KILN_CHECK(local_rank.has_value() == local_size.has_value(),
             local_rank ? n.local_rank : n.local_world_size, "=", local_rank ? *local_rank : *local_size,
             " is set but ", local_rank ? n.local_world_size : n.local_rank,
             " is not: LOCAL_RANK and LOCAL_WORLD_SIZE come together");
  if (local_rank) {
    info.local_rank = parse_index(n.local_rank, *local_rank);
    info.local_world_size = parse_count(n.local_world_size, *local_size);
  } else {
    info.local_rank = info.rank;
    info.local_world_size = info.world_size;
  }
  check_consistent(info, n);
  return info;
}

// Open MPI's mpirun sets all four for every process it starts.
std::optional<RankInfo> from_openmpi(const Getenv& g) {
  const VarNames n{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                   "OMPI_COMM_WORLD_LOCAL_SIZE"};
  const char* any = first_set(g, {n.rank, n.world_size, n.local_rank, n.local_world_size});
  if (any == nullptr) return std::nullopt;
  RankInfo info;
  info.source = n.source;
  info.rank = parse_index(n.rank, require(g, n.rank, any, "Open MPI"));
  info.world_size = parse_count(n.world_size, require(g, n.world_size, any, "Open MPI"));
  info.local_rank = parse_index(n.local_rank, require(g, n.local_rank, any, "Open MPI"));
  info.local_world_size = parse_count(n.local_world_size, require(g, n.local_world_size, any, "Open MPI"));
  check_consistent(info, n);
  return info;
}

// SLURM_TASKS_PER_NODE lists the tasks of each node in order, runs compressed: "2(x3),1" is nodes of 2, 2, 2
// and 1 tasks. Returns node `node`'s count; the error names the variable and its value.
int slurm_tasks_on_node(const std::string& list, int node) {
  const auto bad = [&](const char* why) {
    KILN_CHECK(false, "SLURM_TASKS_PER_NODE=", list, ": ", why, " (expected a list like 2(x3),1)");
  };
  int first_node = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    const size_t paren = item.find('(');
    int tasks = 0, repeat = 1;
    const std::string count_text = item.substr(0, paren);
    auto r = std::from_chars(count_text.data(), count_text.data() + count_text.size(), tasks);
    if (count_text.empty() || r.ec != std::errc{} || r.ptr != count_text.data() + count_text.size() || tasks < 1) {
      bad("a task count is not a positive integer");
    }
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') bad("a malformed (xN)");
      const std::string rep = item.substr(paren + 2, item.size() - paren - 3);
      r = std::from_chars(rep.data(), rep.data() + rep.size(), repeat);
      if (r.ec != std::errc{} || r.ptr != rep.data() + rep.size() || repeat < 1) bad("a malformed (xN)");
    }
    if (node < first_node + repeat) return tasks;
    first_node += repeat;
    pos = comma + 1;
  }
  KILN_CHECK(false, "SLURM_NODEID=", node, " but SLURM_TASKS_PER_NODE=", list, " lists only ", first_node,
             " nodes");
  return 0;
}

// srun. SLURM_NTASKS_PER_NODE exists only when the job asked for --ntasks-per-node; otherwise this node's
// count comes from SLURM_TASKS_PER_NODE and SLURM_NODEID, which srun always sets.
std::optional<RankInfo> from_slurm(const Getenv& g) {
  const VarNames n{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};
  // SLURM_NTASKS alone is no job step: an allocation's batch shell has it too. SLURM_PROCID marks a task.
  if (!lookup(g, n.rank)) return std::nullopt;
  RankInfo info;
  info.source = n.source;
  info.rank = parse_index(n.rank, *lookup(g, n.rank));
  info.world_size = parse_count(n.world_size, require(g, n.world_size, n.rank, "SLURM"));
  info.local_rank = parse_index(n.local_rank, require(g, n.local_rank, n.rank, "SLURM"));
  if (const std::optional<std::string> per_node = lookup(g, n.local_world_size)) {
    info.local_world_size = parse_count(n.local_world_size, *per_node);
  } else {
    const std::optional<std::string> list = lookup(g, "SLURM_TASKS_PER_NODE");
    const std::optional<std::string> node = lookup(g, "SLURM_NODEID");
    KILN_CHECK(list && node, "SLURM_PROCID=", info.rank,
               " is set but neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE with SLURM_NODEID is: the "
               "number of tasks on this node is unknown");
    info.local_world_size = slurm_tasks_on_node(*list, parse_index("SLURM_NODEID", *node));
  }
  check_consistent(info, n);
  return info;
}

}  // namespace

std::optional<RankInfo> rank_info_from_env(const std::function<const char*(const char*)>& getenv_fn) {
  const Getenv g = getenv_fn ? getenv_fn : Getenv([](const char* name) { return std::getenv(name); });
  std::optional<RankInfo> info = from_torchrun(g);
  if (!info) info = from_openmpi(g);
  if (!info) info = from_slurm(g);
  if (!info) return std::nullopt;
  if (const std::optional<std::string> addr = lookup(g, "MASTER_ADDR")) info->master_addr = *addr;
  if (const std::optional<std::string> port = lookup(g, "MASTER_PORT")) {
    info->master_port = static_cast<uint16_t>(parse_int("MASTER_PORT", *port, 1, 65535, "a port in 1..65535"));
  }
  return info;
}

}  // namespace kiln::distributed
