// rank_info_from_env against hand-written environments (a map behind a fake getenv): each launcher's set read
// whole, which set wins when several are present, and every way a set can be partial or malformed, each error
// checked for the variable and value it must name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "kiln/distributed/env.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed {
namespace {

using Env = std::map<std::string, std::string>;

std::optional<RankInfo> read(const Env& env) {
  return rank_info_from_env([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// Expects reading `env` to throw a kiln::Error whose message holds every one of `parts`.
void expect_error(const Env& env, const std::vector<std::string>& parts) {
  try {
    read(env);
    ADD_FAILURE() << "no error";
  } catch (const kiln::Error& e) {
    for (const auto& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\nlacks: " << p;
    }
  }
}

const Env kTorchrun = {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "1234"}};
const Env kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "6"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
const Env kSlurm = {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                    {"SLURM_NTASKS_PER_NODE", "2"}};

// `a` with the variables of `b` it does not set itself.
Env merged(Env a, const Env& b) {
  a.insert(b.begin(), b.end());
  return a;
}

TEST(RankInfoFromEnv, NothingSetIsASingleProcessRun) {
  EXPECT_FALSE(read({}).has_value());
  EXPECT_FALSE(read({{"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}, {"SLURM_NTASKS", "4"}}).has_value());
}

TEST(RankInfoFromEnv, Torchrun) {
  const RankInfo i = *read(kTorchrun);
  EXPECT_EQ(i.source, "torchrun");
  EXPECT_EQ(i.rank, 5);
  EXPECT_EQ(i.world_size, 8);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_world_size, 4);
  EXPECT_EQ(i.master_addr, "node0");
  EXPECT_EQ(i.master_port, 1234);
}

TEST(RankInfoFromEnv, TorchrunWithoutLocalVariablesIsOneMachine) {
  const RankInfo i = *read({{"RANK", "1"}, {"WORLD_SIZE", "3"}});
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_world_size, 3);
  EXPECT_EQ(i.master_addr, "127.0.0.1");  // the documented defaults
  EXPECT_EQ(i.master_port, 29500);
}

TEST(RankInfoFromEnv, OpenMpi) {
  const RankInfo i = *read(merged(kOpenMpi, {{"MASTER_PORT", "4000"}}));
  EXPECT_EQ(i.source, "openmpi");
  EXPECT_EQ(i.rank, 2);
  EXPECT_EQ(i.world_size, 6);
  EXPECT_EQ(i.local_rank, 0);
  EXPECT_EQ(i.local_world_size, 2);
  EXPECT_EQ(i.master_addr, "127.0.0.1");
  EXPECT_EQ(i.master_port, 4000);
}

TEST(RankInfoFromEnv, Slurm) {
  const RankInfo i = *read(merged(kSlurm, {{"MASTER_ADDR", "10.0.0.1"}}));
  EXPECT_EQ(i.source, "slurm");
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.world_size, 4);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_world_size, 2);
  EXPECT_EQ(i.master_addr, "10.0.0.1");
  EXPECT_EQ(i.master_port, 29500);
}

TEST(RankInfoFromEnv, SlurmLocalSizeFromTasksPerNode) {
  // Nodes of 3, 3 and 1 tasks: rank 6 is alone on node 2; rank 4 is the second of three on node 1.
  const Env base = {{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "0"},
                    {"SLURM_TASKS_PER_NODE", "3(x2),1"}, {"SLURM_NODEID", "2"}};
  EXPECT_EQ(read(base)->local_world_size, 1);
  Env node1 = base;
  node1["SLURM_PROCID"] = "4", node1["SLURM_LOCALID"] = "1", node1["SLURM_NODEID"] = "1";
  EXPECT_EQ(read(node1)->local_world_size, 3);
  Env beyond = base;
  beyond["SLURM_NODEID"] = "3";
  expect_error(beyond, {"SLURM_NODEID=3", "SLURM_TASKS_PER_NODE=3(x2),1", "only 3 nodes"});
  Env garbled = base;
  garbled["SLURM_TASKS_PER_NODE"] = "3(2),1";
  expect_error(garbled, {"SLURM_TASKS_PER_NODE=3(2),1"});
  Env neither = base;
  neither.erase("SLURM_TASKS_PER_NODE");
  expect_error(neither, {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
}

TEST(RankInfoFromEnv, TorchrunWinsOverOpenMpiAndSlurm) {
  // kiln launch (or torchrun) inside an mpirun or srun step: the innermost launcher set RANK.
  EXPECT_EQ(read(merged(merged(kTorchrun, kOpenMpi), kSlurm))->source, "torchrun");
  EXPECT_EQ(read(merged(merged(kTorchrun, kOpenMpi), kSlurm))->rank, 5);
  EXPECT_EQ(read(merged(kOpenMpi, kSlurm))->source, "openmpi");
  EXPECT_EQ(read(merged(kOpenMpi, kSlurm))->rank, 2);
}

TEST(RankInfoFromEnv, AMalformedSetDoesNotFallThroughToTheNext) {
  expect_error(merged({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, kSlurm), {"RANK=x"});
  expect_error(merged({{"OMPI_COMM_WORLD_RANK", "0"}}, kSlurm), {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE"});
}

TEST(RankInfoFromEnv, PartialSets) {
  expect_error({{"RANK", "0"}}, {"RANK=0 is set but WORLD_SIZE is not"});
  expect_error({{"WORLD_SIZE", "2"}}, {"WORLD_SIZE=2 is set but RANK is not"});
  expect_error({{"LOCAL_RANK", "0"}}, {"LOCAL_RANK=0 is set but RANK is not"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}},
               {"LOCAL_RANK=0 is set but LOCAL_WORLD_SIZE is not"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
               {"LOCAL_WORLD_SIZE=2 is set but LOCAL_RANK is not"});
  Env ompi = kOpenMpi;
  ompi.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  expect_error(ompi, {"OMPI_COMM_WORLD_LOCAL_SIZE", "is not"});
  Env slurm = kSlurm;
  slurm.erase("SLURM_NTASKS");
  expect_error(slurm, {"SLURM_PROCID=3 is set but SLURM_NTASKS is not"});
  slurm = kSlurm;
  slurm.erase("SLURM_LOCALID");
  expect_error(slurm, {"SLURM_LOCALID"});
}

TEST(RankInfoFromEnv, MalformedNumbers) {
  for (const std::string bad : {"abc", "-1", "+1", " 1", "1 ", "1x", "1.0", "99999999999"}) {
    expect_error({{"RANK", bad}, {"WORLD_SIZE", "2"}}, {"RANK=" + bad, "non-negative integer"});
  }
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE=0", "positive integer"});
  expect_error(merged({{"OMPI_COMM_WORLD_LOCAL_SIZE", "two"}}, kOpenMpi), {"OMPI_COMM_WORLD_LOCAL_SIZE=two"});
  expect_error(merged({{"SLURM_PROCID", "-3"}}, kSlurm), {"SLURM_PROCID=-3"});
}

TEST(RankInfoFromEnv, InconsistentNumbers) {
  expect_error({{"RANK", "3"}, {"WORLD_SIZE", "2"}}, {"RANK=3 but WORLD_SIZE=2: a rank must be below the world size"});
  expect_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, {"RANK=2 but WORLD_SIZE=2"});
  expect_error(merged({{"LOCAL_RANK", "4"}}, kTorchrun), {"LOCAL_RANK=4 but LOCAL_WORLD_SIZE=4"});
  expect_error(merged({{"LOCAL_WORLD_SIZE", "9"}, {"LOCAL_RANK", "0"}}, kTorchrun),
               {"LOCAL_WORLD_SIZE=9 but WORLD_SIZE=8"});
  expect_error(merged({{"OMPI_COMM_WORLD_RANK", "6"}}, kOpenMpi),
               {"OMPI_COMM_WORLD_RANK=6 but OMPI_COMM_WORLD_SIZE=6"});
  expect_error(merged({{"SLURM_LOCALID", "2"}}, kSlurm), {"SLURM_LOCALID=2 but SLURM_NTASKS_PER_NODE=2"});
}

TEST(RankInfoFromEnv, MasterPort) {
  for (const std::string bad : {"http", "0", "65536", "-1", "80a"}) {
    expect_error(merged({{"MASTER_PORT", bad}}, kOpenMpi), {"MASTER_PORT=" + bad, "1..65535"});
  }
  EXPECT_EQ(read(merged({{"MASTER_PORT", "65535"}}, kOpenMpi))->master_port, 65535);
}

TEST(RankInfoFromEnv, EmptyCountsAsUnset) {
  EXPECT_FALSE(read({{"RANK", ""}, {"WORLD_SIZE", ""}}).has_value());
  const RankInfo i = *read(merged({{"RANK", ""}, {"MASTER_PORT", ""}, {"MASTER_ADDR", ""}}, kSlurm));
  EXPECT_EQ(i.source, "slurm");
  EXPECT_EQ(i.master_addr, "127.0.0.1");
  EXPECT_EQ(i.master_port, 29500);
}

// Without a getenv of its own, the process's environment is read. The variables are put back as they were:
// this test process may itself be a rank of a launched job.
TEST(RankInfoFromEnv, ReadsTheProcessEnvironmentByDefault) {
  const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"};
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* n : names) {
    const char* v = std::getenv(n);
    saved[n] = v ? std::optional<std::string>(v) : std::nullopt;
    ::unsetenv(n);
  }
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_PORT", "4321", 1);
  const std::optional<RankInfo> i = rank_info_from_env();
  for (const auto& [n, v] : saved) {
    if (v) {
      ::setenv(n.c_str(), v->c_str(), 1);
    } else {
      ::unsetenv(n.c_str());
    }
  }
  ASSERT_TRUE(i.has_value());
  EXPECT_EQ(i->rank, 1);
  EXPECT_EQ(i->world_size, 2);
  EXPECT_EQ(i->master_port, 4321);
}

}  // namespace
}  // namespace kiln::distributed
