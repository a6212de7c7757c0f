// OpWorker's failure sharing (op_worker.h), in one process over a FileStore: another rank's report fails the
// ops in flight and those queued behind them within about a second, even while the engine's call goes on, and
// ends the connections; this rank's own failure is explained, reported to the store before the connections
// end, and ends them once.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <thread>

#include "distributed/multiprocess.h"
#include "kiln/distributed/op_worker.h"
#include "kiln/distributed/store.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed {
namespace {

using Clock = std::chrono::steady_clock;

std::string worker_store(const std::string& name) {
  const std::string path = testing::TempDir() + "kiln_op_worker_" + name + "_" + std::to_string(getpid());
  std::remove(path.c_str());
  return path;
}

// The message wait() throws ("" when the Work succeeded).
std::string failure_of(Work& work, Duration timeout) {
  try {
    work.wait(timeout);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

using kiln::test::contains;

TEST(OpWorkerFailures, AnotherRanksReportFailsTheOpsInFlightAndQueuedWithinASecond) {
  const std::string path = worker_store("report");
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(5));
  std::atomic<int> closes{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  {
    FailureSharing sharing;
    sharing.reports = std::make_shared<GroupFailure>(store, "g/error", 0);
    sharing.close = [&] { ++closes; };
    OpWorker worker("fake", 0, std::move(sharing));
    // An engine call that nothing interrupts: it returns only when the test lets it.
    auto stuck = worker.enqueue("allreduce", "", "", [released](const std::string&) -> Completion {
      released.wait_for(std::chrono::seconds(20));
      return {};
    });
    auto queued = worker.enqueue("broadcast", "", " from rank 1", [](const std::string&) -> Completion {
      ADD_FAILURE() << "an op queued behind a failure ran";
      return {};
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(700));  // the watcher has read the store: no report
    EXPECT_FALSE(stuck->is_completed());

    const auto reported = Clock::now();
    GroupFailure(store, "g/error", 1).report("gloo allreduce #0", "gloo allreduce #0: Connection reset");
    const std::string first = failure_of(*stuck, Duration(5000));
    const double seconds = std::chrono::duration<double>(Clock::now() - reported).count();
    EXPECT_EQ(first, "fake allreduce #0: rank 0 stopped because rank 1 failed: gloo allreduce #0: Connection reset");
    EXPECT_LT(seconds, 2.0) << "the report was read only after " << seconds << " s";
    EXPECT_EQ(failure_of(*queued, Duration(1000)),
              "fake broadcast #1 from rank 1: rank 0 stopped because rank 1 failed: gloo allreduce #0: "
              "Connection reset");
    auto later = worker.enqueue("barrier", "", "", [](const std::string&) -> Completion {
      ADD_FAILURE() << "an op issued after a failure ran";
      return {};
    });
    EXPECT_TRUE(contains(failure_of(*later, Duration(5000)), "failed earlier")) << failure_of(*later, Duration(0));
    // The watcher ends the connections just after it failed the Works.
    for (auto until = Clock::now() + std::chrono::seconds(5); closes.load() == 0 && Clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(closes.load(), 1) << "the connections end, so the peers waiting on this rank fail too";
    release.set_value();
  }  // the destructor waits for the stuck call, which now returns
  std::remove(path.c_str());
}

TEST(OpWorkerFailures, OwnFailureIsExplainedReportedThenClosesTheConnectionsOnce) {
  const std::string path = worker_store("own");
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(5));
  std::atomic<int> closes{0};
  std::atomic<bool> reported_before_close{false};
  {
    FailureSharing sharing;
    sharing.reports = std::make_shared<GroupFailure>(store, "g/error", 2);
    sharing.close = [&] {
      reported_before_close = store->check({"g/error"});
      ++closes;
    };
    sharing.explain = [](const std::string& what) { return what + " (that is rank 3)"; };
    OpWorker worker("fake", 2, std::move(sharing));
    auto failing = worker.enqueue("send", "send 3", " to rank 3 (tag 0)", [](const std::string&) -> Completion {
      return [] { KILN_CHECK(false, "Connection closed by peer"); };
    });
    EXPECT_EQ(failure_of(*failing, Duration(5000)),
              "fake send #0 to rank 3 (tag 0): rank 2: Connection closed by peer (that is rank 3)");
    EXPECT_EQ(store->get_string("g/error"),
              "rank 2 failed: fake send #0 to rank 3 (tag 0): Connection closed by peer (that is rank 3)");
    EXPECT_TRUE(reported_before_close.load()) << "the connections closed before the report was in the store";
    auto next = worker.enqueue("allreduce", "", "", [](const std::string&) -> Completion {
      KILN_CHECK(false, "must not run");
      return {};
    });
    EXPECT_TRUE(contains(failure_of(*next, Duration(5000)), "failed earlier"));
    EXPECT_EQ(closes.load(), 1);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::distributed
