// The checks every process-group backend shares (collective_checks.h), run over each backend of this build
// whose ranks can be forked processes meeting through a FileStore ("tcp", and "gloo" when built; "mpi" needs
// mpirun: mpi_process_group_test.cpp), and the same inputs through two backends giving the same results.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <csignal>
#include <thread>

#include "distributed/collective_checks.h"
#include "distributed/multiprocess.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/factories.h"

namespace kiln::distributed {
namespace {

using kiln::test::rank_check;
using kiln::test::run_ranks;

// The backends of this build that run in forked processes: all but mpi (its ranks are mpirun's) and nccl (GPUs).
std::vector<std::string> forkable_backends() {
  std::vector<std::string> names;
  for (const auto& name : backends())
    if (name != "mpi" && name != "nccl") names.push_back(name);
  return names;
}

bool has_backend(const std::string& name) {
  const auto names = backends();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string collectives_store(const std::string& name) { return kiln::test::fresh_temp_path("coll_" + name); }

std::shared_ptr<ProcessGroup> make_backend_group(const std::string& backend, const std::string& path, int rank, int world,
                                         const std::string& name = "default") {
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(20);
  o.name = name;
  return new_group(backend, store, rank, world, o);
}

class Collectives : public testing::TestWithParam<std::string> {};

TEST_P(Collectives, WorldOfOneAndArgumentChecks) {
  const std::string backend = GetParam(), path = collectives_store(backend + "_one");
  auto results = run_ranks(1, [&](int rank) {
    auto pg = make_backend_group(backend, path, rank, 1);
    rank_check(pg->backend() == backend, "the backend's name");
    kiln::test::check_world_of_one_and_argument_errors(*pg);
  }, std::chrono::seconds(20));
  kiln::test::expect_all_ok(results);
}

// A backend registered as needing no store gets none from new_group, and others still must have one.
TEST(BackendRegistry, AStorelessBackendTakesNoStoreAndTheOthersNeedOne) {
  EXPECT_TRUE(backend_needs_store("tcp"));
  EXPECT_TRUE(backend_needs_store("no such backend"));
  if (has_backend("mpi")) EXPECT_FALSE(backend_needs_store("mpi"));
  try {
    new_group("tcp", nullptr, 0, 1);
    ADD_FAILURE() << "tcp without a store";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no store"), std::string::npos) << e.what();
  }
  // A world of one over tcp that brings its own store, registered as storeless.
  const std::string path = collectives_store("storeless");
  register_backend(
      "tcp-own-store",
      [path](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& o) {
        EXPECT_EQ(store, nullptr);
        return new_group("tcp", std::make_shared<FileStore>(path, -1, std::chrono::seconds(30)), rank, size, o);
      },
      /*needs_store=*/false);
  EXPECT_FALSE(backend_needs_store("tcp-own-store"));
  auto pg = new_group("tcp-own-store", nullptr, 0, 1);
  Tensor t = full({3}, 2.0);
  pg->allreduce(t)->wait();
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{2, 2, 2}));
  register_backend("tcp-own-store", [](std::shared_ptr<Store> s, int r, int n, const ProcessGroupOptions& o) {
    return new_group("tcp", std::move(s), r, n, o);
  });  // registered again, needing a store now
  EXPECT_TRUE(backend_needs_store("tcp-own-store"));
}

// Worlds 1..8: every op and core dtype on the counts around the world size.
TEST_P(Collectives, AllreduceMatchesReferenceInWorldsOneToEight) {
  const std::string backend = GetParam();
  for (int world = 1; world <= 8; ++world) {
    const std::string path = collectives_store(backend + "_allreduce" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto pg = make_backend_group(backend, path, rank, world);
      kiln::test::check_allreduce_sweep(*pg);
    }, std::chrono::seconds(60));
    for (const auto& r : results) ASSERT_TRUE(r.ok()) << backend << ", world " << world << ": " << r.describe();
  }
}

TEST_P(Collectives, AllreduceSixteenBitFloatsBytesAndBools) {
  const std::string backend = GetParam(), path = collectives_store(backend + "_narrow");
  auto results = run_ranks(5, [&](int rank) {
    auto pg = make_backend_group(backend, path, rank, 5);
    kiln::test::check_allreduce_narrow_dtypes(*pg, true);
    kiln::test::check_allreduce(*pg, kFloat32, (int64_t{1} << 18) + 3, ReduceOp::Sum);
  }, std::chrono::seconds(60));
  kiln::test::expect_all_ok(results);
}

TEST_P(Collectives, OtherCollectivesMatchReferences) {
  const std::string backend = GetParam();
  for (int world : {1, 2, 3, 4, 7, 8}) {
    const std::string path = collectives_store(backend + "_others" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto pg = make_backend_group(backend, path, rank, world);
      kiln::test::check_other_collectives(*pg);
    }, std::chrono::seconds(60));
    for (const auto& r : results) ASSERT_TRUE(r.ok()) << backend << ", world " << world << ": " << r.describe();
  }
}

// Two groups with ops issued back to back without waiting, interleaved: each group keeps its own order.
TEST_P(Collectives, TwoGroupsInterleaved) {
  const std::string backend = GetParam(), path = collectives_store(backend + "_two_groups");
  auto results = run_ranks(4, [&](int rank) {
    auto a = make_backend_group(backend, path, rank, 4, "a");
    auto b = make_backend_group(backend, path, rank, 4, "b");
    kiln::test::check_two_groups_interleaved(*a, *b);
  }, std::chrono::seconds(30));
  kiln::test::expect_all_ok(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, testing::ValuesIn(forkable_backends()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// The same inputs through tcp and gloo, in the same processes: the same results (integers exactly, floats
// within rounding), worlds 2, 3 and 4.
TEST(CrossBackend, TcpAndGlooGiveTheSameResults) {
  if (!has_backend("gloo")) GTEST_SKIP() << "this build has no gloo backend";
  for (int world : {2, 3, 4}) {
    const std::string path = collectives_store("cross" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto tcp = make_backend_group("tcp", path, rank, world, "cross_tcp");
      auto gloo = make_backend_group("gloo", path, rank, world, "cross_gloo");
      kiln::test::compare_results(kiln::test::collective_results(*tcp), kiln::test::collective_results(*gloo),
                                  "tcp against gloo, world " + std::to_string(world), world);
    }, std::chrono::seconds(60));
    for (const auto& r : results) ASSERT_TRUE(r.ok()) << "world " << world << ": " << r.describe();
  }
}

// A gloo op that runs past its deadline (its peer never calls it) fails naming the backend, op, sequence
// number and rank, and the group fails every later op at once.
TEST(CrossBackend, GlooTimeoutNamesTheOpAndStaysFailed) {
  if (!has_backend("gloo")) GTEST_SKIP() << "this build has no gloo backend";
  const std::string path = collectives_store("gloo_timeout");
  auto results = run_ranks(2, [&](int rank) {
    auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
    ProcessGroupOptions o;
    o.timeout = std::chrono::milliseconds(1500);
    auto pg = new_group("gloo", store, rank, 2, o);
    pg->barrier()->wait();
    if (rank == 1) {
      store->wait({"rank0_done"}, std::chrono::seconds(20));
      return;
    }
    Tensor t = ones({10});
    std::string message;
    try {
      pg->allreduce(t)->wait();
    } catch (const Error& e) {
      message = e.what();
    }
    rank_check(message.find("gloo allreduce #1: rank 0") != std::string::npos, "the timeout's error: " + message);
    message.clear();
    try {
      pg->barrier()->wait();
    } catch (const Error& e) {
      message = e.what();
    }
    rank_check(message.find("gloo barrier #2: rank 0") != std::string::npos &&
                   message.find("failed earlier") != std::string::npos,
               "a later op fails at once: " + message);
    store->set("rank0_done", "1");
  }, std::chrono::seconds(30));
  kiln::test::expect_all_ok(results);
}

// A gloo rank killed (SIGKILL) in the middle of all-reduces: every other rank fails promptly, long before its
// 15 s deadline, names the dead rank, and can destroy its group at once. Its ring neighbours see its
// connections close; the rank across the ring waits only on live neighbours, and learns it when they fail and
// close theirs (or from the store's report): the failure spreads as it does on tcp.
TEST(CrossBackend, GlooRankKilledMidAllreduceFailsTheOthersPromptlyNamingIt) {
  if (!has_backend("gloo")) GTEST_SKIP() << "this build has no gloo backend";
  const std::string path = collectives_store("gloo_kill");
  auto results = run_ranks(4, [&](int rank) {
    auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
    ProcessGroupOptions o;
    // Past the 10 s the survivors have to fail in (below), so that failing at the deadline would not pass, and
    // short, since a destruction can wait it out (the NOTE below).
    o.timeout = std::chrono::seconds(15);
    auto pg = new_group("gloo", store, rank, 4, o);
    Tensor t = zeros({200000}, kFloat32);
    pg->allreduce(t)->wait();
    if (rank == 2) {
      auto work = pg->allreduce(t);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      raise(SIGKILL);
    }
    auto last_ok = std::chrono::steady_clock::now();
    std::string message;
    for (int i = 0; i < 100000 && message.empty(); ++i) {
      try {
        pg->allreduce(t)->wait();
        last_ok = std::chrono::steady_clock::now();
      } catch (const Error& e) {
        message = e.what();
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_ok).count();
    const std::string me = "rank " + std::to_string(rank);
    rank_check(message.find("gloo allreduce #") != std::string::npos, me + ": " + message);
    rank_check(message.find("the connection to rank 2 had ended") != std::string::npos,
               me + "'s error does not name rank 2: " + message);
    rank_check(seconds < 10, me + " failed only " + std::to_string(seconds) + " s after its last all-reduce: " +
                                 message);
    // Gloo's own calls ended too (the connections were ended under them): each survivor destroys its group
    // without waiting them out, in turn, while the others still hold theirs open (a process that exits closes
    // its connections, which would end a call waiting on them anyway).
    const std::vector<int> survivors{0, 1, 3};
    store->set("failed/" + std::to_string(rank), "1");
    store->wait({"failed/0", "failed/1", "failed/3"}, std::chrono::seconds(20));
    const auto me_at = std::find(survivors.begin(), survivors.end(), rank);
    if (me_at != survivors.begin()) store->wait({"destroyed/" + std::to_string(*(me_at - 1))}, std::chrono::seconds(40));
    const auto destroying = std::chrono::steady_clock::now();
    pg.reset();
    const double destroyed = std::chrono::duration<double>(std::chrono::steady_clock::now() - destroying).count();
    store->set("destroyed/" + std::to_string(rank), "1");
    // NOTE: usually well under a second. But a Gloo call can be left waiting on a send to a survivor that has
    // stopped taking part, and Debian's Gloo (2022-05) does not always wake such a wait when kiln shuts the
    // connections down: its pending unbound sends are only failed by a pair's own error path, which is not
    // public. The call then ends at its deadline (o.timeout), and so does the destruction that joins it.
    // Seen 3 times in 40 runs with both cores busy (the closing note of 2026-12-02 has the recipe); the bound
    // here is that deadline, so that a destruction that waited longer than any op would still fail.
    rank_check(destroyed < 20, me + ": destroying the failed group took " + std::to_string(destroyed) + " s");
    store->wait({"destroyed/3"}, std::chrono::seconds(40));
  }, std::chrono::seconds(90));
  for (const auto& r : results) {
    if (r.rank == 2) EXPECT_TRUE(!r.exited && r.status == SIGKILL) << r.describe();
    else EXPECT_TRUE(r.ok()) << r.describe();
  }
}

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Point to point on gloo waits for each (peer, tag)'s completions on a thread of its own: 200 tags must not
// leave 400 threads behind. Idle ones end after half a second, and the group keeps working.
TEST(CrossBackend, GlooIdleCompletionThreadsEnd) {
  if (!has_backend("gloo")) GTEST_SKIP() << "this build has no gloo backend";
  const std::string path = collectives_store("gloo_threads");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_backend_group("gloo", path, rank, 2);
    const int before = thread_count();
    std::vector<std::shared_ptr<Work>> works;
    std::vector<Tensor> got;
    for (int tag = 0; tag < 200; ++tag) {
      got.push_back(empty({1}, kInt32));
      works.push_back(pg->recv(got.back(), 1 - rank, tag));
      works.push_back(pg->send(full({1}, static_cast<double>(tag), kInt32), 1 - rank, tag));
    }
    for (auto& w : works) w->wait();
    for (int tag = 0; tag < 200; ++tag)
      rank_check(got[tag].item<double>() == tag, "rank " + std::to_string(rank) + ": tag " + std::to_string(tag));
    const int busy = thread_count();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    Tensor t = ones({4});
    pg->allreduce(t)->wait();
    auto again = pg->send(full({1}, 5.0, kInt32), 1 - rank, 3);
    Tensor five = empty({1}, kInt32);
    pg->recv(five, 1 - rank, 3)->wait();
    again->wait();
    const int after = thread_count();
    rank_check(t.to_vector<double>() == std::vector<double>(4, 2.0) && five.item<double>() == 5.0,
               "rank " + std::to_string(rank) + ": the group after the idle threads ended");
    rank_check(after <= before + 4, "rank " + std::to_string(rank) + ": " + std::to_string(before) +
                                        " threads before, " + std::to_string(busy) + " with 200 tags in use, " +
                                        std::to_string(after) + " after they were idle");
  }, std::chrono::seconds(60));
  kiln::test::expect_all_ok(results);
}

}  // namespace
}  // namespace kiln::distributed
