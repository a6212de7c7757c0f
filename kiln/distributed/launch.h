// Starting the ranks of a job on this machine: what `kiln launch --nproc N -- <command> [args...]` does (and
// what torchrun does for one node).
//
//   LaunchOptions o;
//   o.nproc = 4;
//   o.command = {"./train", "--config", "run.yaml"};
//   return launch(o);   // 0 when every rank succeeded, else the first failed rank's code
//
// Each rank is a child process running the command with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT (and KILN_PS_SERVERS for a parameter-server job) in its environment (read back
// by rank_info_from_env, env.h). The port is the given one or a free one found when the job starts, so two
// jobs on one machine do not collide.
//
// The launcher forwards every rank's stdout and stderr, line by line, as "[rank N] <line>" on its own stdout
// and stderr; a line is written with one write(), so the lines of different ranks never mix. When one rank
// fails (a non-zero exit, or a signal), the others get SIGTERM and, after the grace period, SIGKILL: a job
// whose rank died would otherwise wait in a collective until its timeout. SIGINT and SIGTERM sent to the
// launcher go to every rank the same way.
//
// POSIX only (fork, execvp, poll). One launch() at a time per process: while it runs it owns the process's
// SIGINT, SIGTERM and SIGPIPE handling (restored when it returns).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::distributed {

struct LaunchOptions {
  int nproc = 1;                     // ranks to start, >= 1
  // A parameter-server job (ps/parameter_server.h): the first `servers` of the nproc ranks are servers, the
  // rest workers. Each rank also gets KILN_PS_SERVERS, and its lines are prefixed "[server K]" / "[worker W]".
  int servers = 0;
  std::vector<std::string> command;  // the program (looked up in PATH) and its arguments
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 0;          // 0: a free port, found by binding port 0
  // How long a rank has between SIGTERM and SIGKILL once the job is stopping because a rank failed.
  std::chrono::milliseconds grace_period = std::chrono::seconds(5);
  // How long the ranks have after the launcher passed them a SIGINT or SIGTERM it was sent (time for a
  // Trainer to finish its step and write a checkpoint, TrainerOptions::handle_signals) before SIGKILL. A
  // second signal to the launcher kills them at once.
  std::chrono::milliseconds signal_grace_period = std::chrono::seconds(60);
  // Where the prefixed lines go: the ranks' stdout to out_fd, their stderr and the launcher's own messages
  // to err_fd.
  int out_fd = 1;
  int err_fd = 2;
};

// Runs the job to its end and returns its exit status: 0 when every rank exited 0; otherwise the first
// failed rank's exit code, or 128 + the signal that killed it; 128 + the signal when the launcher itself was
// sent SIGINT or SIGTERM; 127 when the command cannot be executed. Bad options (nproc < 1, no command) are a
// kiln::Error.
int launch(const LaunchOptions& options);

// A TCP port that was free a moment ago: bound as port 0 on all interfaces, read back, released. Another
// process can take it in between; for a launcher that starts its store right away, that window is small.
uint16_t find_free_port();

}  // namespace kiln::distributed
