// Forked ranks for the benchmarks that start their own processes (allreduce_bench, ddp_bench, p2p_bench).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

namespace kiln::bench {

// Runs body(rank) for ranks 0..n-1, each in a forked child, and waits for all of them; true when every child
// exited with status 0 (body's return value; an exception is printed as "<who>: rank R of N: <what>" and
// gives 1). Fork with no other thread running: a child inherits only the forking one.
inline bool run_forked_ranks(int n, const char* who, const std::function<int(int rank)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror(who);
      break;
    }
    if (pid == 0) {
      int rc = 1;
      try {
        rc = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: rank %d of %d: %s\n", who, r, n, e.what());
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  bool ok = static_cast<int>(pids.size()) == n;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

}  // namespace kiln::bench
