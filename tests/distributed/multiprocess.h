// Running one test body in N processes, as N ranks of a job on this machine.
//
//   auto results = run_ranks(4, [&](int rank) { ... EXPECT/throw as usual ... });
//   expect_all_ok(results);
//
// Each rank is a fork() of the test process that runs body(rank) and exits: 0 when it returned, 1 when it
// threw (the message travels back through a pipe), or a signal's status when it died. The parent waits for all
// of them up to `timeout`, then SIGKILLs the rest and reports them as timed out, so a hung collective fails the
// test instead of hanging it. A child runs single-threaded (set_num_threads(1)): OpenMP's thread pool does not
// survive fork.
//
// GoogleTest assertions inside a child do not reach the parent: the body reports failure by throwing (use
// rank_check below, or let kiln::Error through).
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/tensor/parallel.h"

namespace kiln::test {

struct RankResult {
  int rank = 0;
  bool exited = false;     // exited normally (status below), else killed by a signal
  int status = 0;          // exit status, or the signal number
  bool timed_out = false;  // killed by run_ranks after the timeout
  std::string message;     // what the body threw
  bool ok() const { return exited && status == 0 && !timed_out; }
  std::string describe() const {
    if (timed_out) return "rank " + std::to_string(rank) + " timed out";
    if (!exited) return "rank " + std::to_string(rank) + " died of signal " + std::to_string(status);
    if (status != 0) return "rank " + std::to_string(rank) + " failed: " + message;
    return "rank " + std::to_string(rank) + " ok";
  }
};

// Whether `part` occurs in `text` (what the fault tests ask of error messages).
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A path in the test temp directory for a FileStore or a result file, with nothing at it. Its name carries this
// process's id and a counter, and whatever an earlier process of the same id left there is removed first:
// process ids are reused (often within one CI run, pid_max being 32768), and a store left behind would hand
// its old keys (addresses, a failure report) to the new job.
inline std::string fresh_temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  const std::string path =
      testing::TempDir() + "kiln_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  return path;
}

// The variables `kiln launch` gives rank `rank` of `world` local ranks whose store is at 127.0.0.1:port.
inline void set_rank_env(int rank, int world, uint16_t port) {
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
}

// Throws std::runtime_error(what) when cond is false: a failed check in a child.
inline void rank_check(bool cond, const std::string& what) {
  if (!cond) throw std::runtime_error(what);
}

// `pids_out`, when given, receives the children's pids as soon as they exist (for fault tests that signal a
// rank from the parent while the others run).
inline std::vector<RankResult> run_ranks(int world, const std::function<void(int)>& body,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                         std::vector<pid_t>* pids_out = nullptr,
                                         const std::function<void(const std::vector<pid_t>&)>& while_running = nullptr) {
  std::vector<pid_t> pids(world);
  std::vector<int> pipes(world);
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("run_ranks: pipe failed");
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("run_ranks: fork failed");
    if (pid == 0) {
      close(fds[0]);
      kiln::set_num_threads(1);
      int code = 0;
      std::string message;
      try {
        body(r);
      } catch (const std::exception& e) {
        code = 1, message = e.what();
      } catch (...) {
        code = 1, message = "an exception that is not a std::exception";
      }
      if (!message.empty()) {
        ssize_t ignored = write(fds[1], message.data(), message.size());
        (void)ignored;
      }
      close(fds[1]);
      _exit(code);  // no atexit handlers, no gtest teardown in the child
    }
    close(fds[1]);
    pids[r] = pid, pipes[r] = fds[0];
  }
  if (pids_out != nullptr) *pids_out = pids;
  if (while_running) while_running(pids);

  std::vector<RankResult> results(world);
  std::vector<bool> done(world, false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int remaining = world;
  while (remaining > 0) {
    for (int r = 0; r < world; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true, --remaining;
        results[r].rank = r;
        results[r].exited = WIFEXITED(status);
        results[r].status = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r) {
        if (done[r]) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        results[r].rank = r, results[r].timed_out = true;
        done[r] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < world; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = read(pipes[r], buf, sizeof buf)) > 0) results[r].message.append(buf, static_cast<size_t>(n));
    close(pipes[r]);
  }
  return results;
}

inline void expect_all_ok(const std::vector<RankResult>& results) {
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << r.describe();
}

}  // namespace kiln::test
