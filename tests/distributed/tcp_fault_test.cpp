// The "tcp" process group when things go wrong, each case bounded in time: a rank killed mid-allreduce, a rank
// stopped (SIGSTOP), a rank that never joins, and ranks that call mismatched collectives. The surviving ranks
// must fail promptly with an error that names the culprit, never hang.
#include <gtest/gtest.h>

#include <csignal>

#include "distributed/multiprocess.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/factories.h"

namespace kiln::distributed {
namespace {

using kiln::test::rank_check;
using kiln::test::run_ranks;
using Clock = std::chrono::steady_clock;

std::string fault_store(const std::string& name) { return kiln::test::fresh_temp_path("tcp_fault_" + name); }

std::shared_ptr<ProcessGroup> make_fault_group(const std::string& path, int rank, int world, Duration timeout) {
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
  ProcessGroupOptions o;
  o.timeout = timeout;
  return new_group("tcp", store, rank, world, o);
}

using kiln::test::contains;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs allreduces until one fails; returns its message and how long after the last success it came.
std::pair<std::string, double> allreduce_until_failure(ProcessGroup& pg, int64_t count) {
  Tensor t = zeros({count}, kFloat32);
  auto last_ok = Clock::now();
  for (int i = 0; i < 100000; ++i) {
    try {
      pg.allreduce(t)->wait();
      last_ok = Clock::now();
    } catch (const Error& e) {
      return {e.what(), seconds_since(last_ok)};
    }
  }
  return {"", 0};
}

TEST(TcpFaults, RankKilledMidAllreduceFailsTheOthersPromptlyNamingIt) {
  const std::string path = fault_store("kill");
  auto results = run_ranks(4, [&](int rank) {
    // A long deadline: the others must fail from the lost connection, not by waiting it out.
    auto pg = make_fault_group(path, rank, 4, std::chrono::seconds(30));
    Tensor t = zeros({200000}, kFloat32);  // the ring, in several messages
    pg->allreduce(t)->wait();
    if (rank == 2) {
      auto work = pg->allreduce(t);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      raise(SIGKILL);
    }
    auto [message, seconds] = allreduce_until_failure(*pg, 200000);
    rank_check(contains(message, "connection to rank 2"), "rank " + std::to_string(rank) +
                                                              " got an error that does not name rank 2: " + message);
    rank_check(seconds < 15, "rank " + std::to_string(rank) + " failed only after " + std::to_string(seconds) + " s");
  }, std::chrono::seconds(30));
  for (const auto& r : results) {
    if (r.rank == 2) EXPECT_TRUE(!r.exited && r.status == SIGKILL) << r.describe();
    else EXPECT_TRUE(r.ok()) << r.describe();
  }
}

TEST(TcpFaults, StoppedRankFailsTheOthersByTheDeadline) {
  const std::string path = fault_store("stop");
  auto results = run_ranks(3, [&](int rank) {
    auto pg = make_fault_group(path, rank, 3, std::chrono::seconds(2));
    pg->allreduce(zeros({1000}))->wait();
    FileStore(path).set("ready/" + std::to_string(rank), "1");  // the parent stops rank 1 once all are here
    auto [message, seconds] = allreduce_until_failure(*pg, 1000);
    rank_check(contains(message, "timed out"), "rank " + std::to_string(rank) + " got: " + message);
    rank_check(seconds < 12, "rank " + std::to_string(rank) + " failed only after " + std::to_string(seconds) + " s");
  }, std::chrono::seconds(30), nullptr, [&](const std::vector<pid_t>& pids) {
    try {
      FileStore(path).wait({"ready/0", "ready/1", "ready/2"}, std::chrono::seconds(20));
    } catch (const Error&) {
      // a rank failed early: the results say which
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // allreduces running
    kill(pids[1], SIGSTOP);
    // Kill the stopped rank once the others have exited (WNOWAIT: run_ranks still reaps them), 8 s at most.
    const auto until = Clock::now() + std::chrono::seconds(8);
    const auto exited = [](pid_t pid) {
      siginfo_t info{};
      return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
    };
    while (Clock::now() < until && !(exited(pids[0]) && exited(pids[2])))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill(pids[1], SIGKILL);
  });
  for (const auto& r : results) {
    if (r.rank == 1) EXPECT_TRUE(!r.exited && r.status == SIGKILL) << r.describe();
    else EXPECT_TRUE(r.ok()) << r.describe();
  }
}

// wait(timeout) bounds only the wait: the op goes on and completes once the late rank joins. A group that
// failed stays failed: its later ops fail at once with the first error; a new group of the same name works.
TEST(TcpFaults, WaitTimeoutAndAFailedGroupStaysFailed) {
  const std::string path = fault_store("wait");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_fault_group(path, rank, 2, std::chrono::seconds(10));
    Tensor t = ones({10}, kFloat32);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
    auto work = pg->allreduce(t);
    if (rank == 0) {
      try {
        work->wait(Duration(100));
        rank_check(false, "wait(100 ms) returned before rank 1 joined");
      } catch (const Error& e) {
        rank_check(contains(e.what(), "allreduce #0 is still running"), std::string("unexpected: ") + e.what());
      }
      rank_check(!work->is_completed(), "completed too early");
    }
    work->wait();
    rank_check(t.to_vector<double>() == std::vector<double>(10, 2.0), "wrong sum");
    // A mismatch breaks the group; the next op fails at once, naming the first error.
    try {
      pg->allreduce(zeros({rank == 0 ? 5 : 6}))->wait();
    } catch (const Error&) {
    }
    const auto start = Clock::now();
    try {
      pg->barrier()->wait();
      rank_check(false, "a barrier on a failed group succeeded");
    } catch (const Error& e) {
      rank_check(contains(e.what(), "failed earlier") && contains(e.what(), "sum of 6 float32"),
                 std::string("unexpected: ") + e.what());
    }
    rank_check(seconds_since(start) < 3, "the op on a failed group took " + std::to_string(seconds_since(start)) + " s");
    // A new group of the same name on the same store starts clean: fresh addresses, no failure report.
    pg.reset();
    auto again = make_fault_group(path, rank, 2, std::chrono::seconds(10));
    Tensor u = full({100000}, static_cast<double>(rank + 1), kFloat32);
    again->allreduce(u)->wait();
    rank_check(u.to_vector<double>() == std::vector<double>(100000, 3.0), "the new group's sum is wrong");
  }, std::chrono::seconds(20));
  kiln::test::expect_all_ok(results);
}

TEST(TcpFaults, RankThatNeverJoinsFailsSetupNamingIt) {
  const std::string path = fault_store("absent");
  auto results = run_ranks(3, [&](int rank) {
    if (rank == 2) return;  // never creates its group
    const auto start = Clock::now();
    try {
      make_fault_group(path, rank, 3, std::chrono::seconds(1));
      rank_check(false, "setup succeeded without rank 2");
    } catch (const Error& e) {
      rank_check(contains(e.what(), "rank 2 never joined"), std::string("unexpected error: ") + e.what());
    }
    rank_check(seconds_since(start) < 12, "setup failed only after " + std::to_string(seconds_since(start)) + " s");
  }, std::chrono::seconds(20));
  kiln::test::expect_all_ok(results);
}

// Rank 2 fails during setup (it cannot listen on the address it was given): the others, waiting for it, fail at
// once with its report instead of at their deadline.
TEST(TcpFaults, RankThatFailsDuringSetupFailsTheOthersAtOnce) {
  const std::string path = fault_store("setup");
  auto results = run_ranks(3, [&](int rank) {
    // (The store waits for all three: rank 2 must not come and go, taking the store's file with it, before
    // the others have opened it.)
    auto store = std::make_shared<FileStore>(path, 3, std::chrono::seconds(30));
    const auto start = Clock::now();
    ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(30);
    if (rank == 2) o.host = "256.0.0.1";  // not an address
    try {
      new_group("tcp", store, rank, 3, o);
      rank_check(false, "setup succeeded");
    } catch (const Error& e) {
      if (rank != 2) {
        rank_check(contains(e.what(), "rank 2 failed to join"), std::string("unexpected error: ") + e.what());
      }
    }
    rank_check(seconds_since(start) < 10, "setup failed only after " + std::to_string(seconds_since(start)) + " s");
  }, std::chrono::seconds(40));
  kiln::test::expect_all_ok(results);
}

// Rank 1 calls something else than the others; every rank must fail with both sides named.
void check_mismatch(int world, int64_t count, DType dtype, ReduceOp op, int64_t count1, DType dtype1, ReduceOp op1,
                    const std::string& side0, const std::string& side1) {
  const std::string path = fault_store("mismatch");
  auto results = run_ranks(world, [&](int rank) {
    auto pg = make_fault_group(path, rank, world, std::chrono::seconds(10));
    pg->barrier()->wait();
    Tensor t = rank == 1 ? zeros({count1}, dtype1) : zeros({count}, dtype);
    try {
      pg->allreduce(t, rank == 1 ? op1 : op)->wait();
      rank_check(false, "rank " + std::to_string(rank) + ": the mismatched allreduce succeeded");
    } catch (const Error& e) {
      rank_check(contains(e.what(), side0) && contains(e.what(), side1),
                 "rank " + std::to_string(rank) + ": the error does not name both sides: " + e.what());
    }
  }, std::chrono::seconds(20));
  kiln::test::expect_all_ok(results);
}

TEST(TcpFaults, MismatchedOpCountAndDtypeNameBothSides) {
  check_mismatch(2, 1000, kFloat32, ReduceOp::Sum, 1000, kFloat32, ReduceOp::Max, "sum of 1000 float32",
                 "max of 1000 float32");
  check_mismatch(3, 1000, kFloat32, ReduceOp::Sum, 999, kFloat32, ReduceOp::Sum, "sum of 1000 float32",
                 "sum of 999 float32");
  check_mismatch(3, 1000, kFloat32, ReduceOp::Sum, 1000, kFloat64, ReduceOp::Sum, "sum of 1000 float32",
                 "sum of 1000 float64");
  check_mismatch(4, 100000, kFloat32, ReduceOp::Sum, 100001, kFloat32, ReduceOp::Sum, "sum of 100000 float32",
                 "sum of 100001 float32");  // the ring
}

// Point to point fails like a collective: a recv whose message has another count names both sides, and the
// sender, whose send completed, learns it from the store at its next op.
TEST(TcpFaults, PointToPointMismatchNamesBothSidesAndFailsTheGroup) {
  const std::string path = fault_store("p2p_mismatch");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_fault_group(path, rank, 2, std::chrono::seconds(10));
    if (rank == 0) {
      pg->send(zeros({100}, kFloat32), 1, 3)->wait();
    } else {
      try {
        pg->recv(zeros({50}, kFloat32), 0, 3)->wait();
        rank_check(false, "rank 1: the mismatched recv succeeded");
      } catch (const Error& e) {
        rank_check(contains(e.what(), "recv #0 from rank 0 (tag 3)") &&
                       contains(e.what(), "rank 0 sent 100 float32 with tag 3") &&
                       contains(e.what(), "rank 1 expects 50 float32 with tag 3"),
                   std::string("rank 1: ") + e.what());
      }
    }
    const auto start = Clock::now();
    try {
      pg->barrier()->wait();
      rank_check(false, "rank " + std::to_string(rank) + ": the barrier after the failure succeeded");
    } catch (const Error& e) {
      rank_check(contains(e.what(), "rank 1 expects 50 float32"), "rank " + std::to_string(rank) + ": " + e.what());
    }
    rank_check(seconds_since(start) < 5, "rank " + std::to_string(rank) + " learned of the failure only after " +
                                             std::to_string(seconds_since(start)) + " s");
  }, std::chrono::seconds(30));
  kiln::test::expect_all_ok(results);
}

// A recv from a rank that dies (SIGKILL) without sending fails promptly, naming the op and the rank, though the
// deadline is far; a recv whose sender is alive but never sends fails by the deadline; both fail the group.
TEST(TcpFaults, PointToPointRecvFromADeadOrSilentRank) {
  const std::string path = fault_store("p2p_dead");
  auto results = run_ranks(3, [&](int rank) {
    auto pg = make_fault_group(path, rank, 3, std::chrono::seconds(30));
    pg->barrier()->wait();
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0's recv is posted by then
      raise(SIGKILL);
    }
    if (rank == 0) {
      const auto start = Clock::now();
      try {
        pg->recv(zeros({10}, kFloat32), 1, 0)->wait();
        rank_check(false, "rank 0: the recv from a dead rank succeeded");
      } catch (const Error& e) {
        rank_check(contains(e.what(), "recv #0 from rank 1 (tag 0)") && contains(e.what(), "rank 1"),
                   std::string("rank 0: ") + e.what());
      }
      rank_check(seconds_since(start) < 10, "rank 0 failed only after " + std::to_string(seconds_since(start)) + " s");
    }
    if (rank == 2) {
      // The group fails once rank 0 reports: a later op says why.
      FileStore(path).wait({"rank0_done"}, std::chrono::seconds(20));
      try {
        pg->send(zeros({1}), 0, 0)->wait();
        pg->barrier()->wait();
        rank_check(false, "rank 2: the group still works");
      } catch (const Error& e) {
        rank_check(contains(e.what(), "rank 0 failed"), std::string("rank 2: ") + e.what());
      }
    } else {
      FileStore(path).set("rank0_done", "1");
    }
  }, std::chrono::seconds(40));
  for (const auto& r : results) {
    if (r.rank == 1) EXPECT_TRUE(!r.exited && r.status == SIGKILL) << r.describe();
    else EXPECT_TRUE(r.ok()) << r.describe();
  }

  const std::string path2 = fault_store("p2p_silent");
  auto silent = run_ranks(2, [&](int rank) {
    auto pg = make_fault_group(path2, rank, 2, std::chrono::seconds(3));  // also bounds the group's setup
    if (rank == 0) {
      try {
        pg->recv(zeros({10}, kFloat32), 1, 4)->wait();
        rank_check(false, "rank 0: the recv of a message never sent succeeded");
      } catch (const Error& e) {
        rank_check(contains(e.what(), "recv #0 from rank 1 (tag 4)") && contains(e.what(), "timed out"),
                   std::string("rank 0: ") + e.what());
      }
      FileStore(path2).set("done", "1");
    } else {
      FileStore(path2).wait({"done"}, std::chrono::seconds(20));
    }
  }, std::chrono::seconds(30));
  kiln::test::expect_all_ok(silent);
}

// A rank that died while this one had nothing pending with it: a later recv from it fails within seconds, not
// at the deadline. And a collective's failure fails the recvs still pending.
TEST(TcpFaults, PointToPointAfterADeathSeenWhileIdleAndAfterACollectiveFailure) {
  const std::string path = fault_store("p2p_idle_death");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_fault_group(path, rank, 2, std::chrono::seconds(30));
    if (rank == 1) {
      pg->barrier()->wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0's send has been read
      raise(SIGKILL);
    }
    pg->send(zeros({10}, kFloat32), 1, 0)->wait();
    pg->barrier()->wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(800));  // rank 1 is dead, and rank 0 has seen it
    const auto start = Clock::now();
    try {
      pg->recv(zeros({10}, kFloat32), 1, 0)->wait();
      rank_check(false, "rank 0: the recv from a dead rank succeeded");
    } catch (const Error& e) {
      rank_check(contains(e.what(), "recv #0 from rank 1 (tag 0)") && contains(e.what(), "rank 1 has left"),
                 std::string("rank 0: ") + e.what());
    }
    rank_check(seconds_since(start) < 5, "rank 0 failed only after " + std::to_string(seconds_since(start)) + " s");
  }, std::chrono::seconds(40));
  EXPECT_TRUE(results[0].ok()) << results[0].describe();
  EXPECT_TRUE(!results[1].exited && results[1].status == SIGKILL) << results[1].describe();

  const std::string path2 = fault_store("p2p_collective_failure");
  auto after = run_ranks(2, [&](int rank) {
    auto pg = make_fault_group(path2, rank, 2, std::chrono::seconds(30));
    auto pending = pg->recv(zeros({4}, kFloat32), 1 - rank, 5);  // never sent
    try {
      pg->allreduce(zeros({rank == 0 ? 5 : 6}))->wait();
    } catch (const Error&) {
      // expected: the mismatch
    }
    const auto start = Clock::now();
    try {
      pending->wait();
      rank_check(false, "rank " + std::to_string(rank) + ": the pending recv succeeded");
    } catch (const Error& e) {
      // Either this rank's collective failed first, or the peer's did and its EOF came first: both name it.
      rank_check(contains(e.what(), "recv #0 from rank " + std::to_string(1 - rank) + " (tag 5)") &&
                     contains(e.what(), "allreduce #0") && contains(e.what(), "expects sum of"),
                 "rank " + std::to_string(rank) + ": " + e.what());
    }
    rank_check(seconds_since(start) < 5, "rank " + std::to_string(rank) + ": the pending recv failed late");
  }, std::chrono::seconds(40));
  kiln::test::expect_all_ok(after);
}

}  // namespace
}  // namespace kiln::distributed
