// launch() (launch.h): one thread watches everything. It starts the ranks, then loops on poll() over the
// ranks' stdout and stderr pipes with a short timeout, forwarding complete lines and reaping exited ranks with
// waitpid(WNOHANG) on each turn; a signal sent to the launcher only sets a flag the loop reads. No threads and
// no SIGCHLD handler: the 50 ms poll bounds how late an exit or a signal is noticed, which is nothing next to
// a grace period.
//
// Each rank runs in a process group of its own and is signalled as a group, so what a rank started (a shell's
// children, data-loader workers) stops with it; otherwise a `sh -c '...; sleep 60'` rank would leave its sleep
// holding the output pipe. The cost: a rank is not in the terminal's foreground group, so it cannot read the
// terminal (Ctrl-C still reaches it, through the launcher): a rank that tried would be stopped by SIGTTIN and
// hang the job, so when stdin is a terminal the ranks get /dev/null instead (a read sees end of file).
#include "kiln/distributed/launch.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "kiln/tensor/error.h"

extern char** environ;

namespace kiln::distributed {

namespace {

using Clock = std::chrono::steady_clock;

// The variables launch() sets in each rank; copies of them in the launcher's own environment are dropped.
constexpr const char* kRankVariables[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",     "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT", "KILN_PS_SERVERS"};
// A line longer than this without a newline is forwarded in pieces, so a rank that never ends its line cannot
// grow the launcher's memory without bound.
constexpr size_t kMaxLine = size_t{64} << 10;
constexpr int kPollMs = 50;
// After the last rank exits, how long its pipes may stay open (held by something the rank left behind).
constexpr auto kDrainTime = std::chrono::seconds(1);

volatile std::sig_atomic_t g_signal = 0;  // the last SIGINT/SIGTERM the launcher got, 0 when none pending
extern "C" void on_signal(int sig) { g_signal = sig; }

// Catches SIGINT and SIGTERM (without SA_RESTART, so poll() wakes up) and ignores SIGPIPE (a closed stdout
// must not kill the launcher while ranks run) for its lifetime; restores what was there before.
class SignalScope {
 public:
  SignalScope() {
    g_signal = 0;
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    struct sigaction ignore{};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  struct sigaction old_int_{}, old_term_{}, old_pipe_{};
};

// Writes all of `text` to `fd` in as few write()s as the kernel allows; gives up quietly on a closed output.
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGPIPE: return "SIGPIPE";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(sig);
  }
}

// One output pipe of one rank, and the part of a line read from it but not yet forwarded.
struct Stream {
  int fd = -1;  // read end; -1 once closed
  int out_fd = -1;
  std::string prefix;
  std::string pending;

  // Reads what is available and forwards its complete lines (all in one write); false at end of file.
  bool read_some() {
    char buf[16384];
    ssize_t n;
    do {
      n = ::read(fd, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    pending.append(buf, static_cast<size_t>(n));
    std::string lines;
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      lines += prefix;
      lines.append(pending, start, nl + 1 - start);
    }
    pending.erase(0, start);
    while (pending.size() >= kMaxLine) {
      lines += prefix + pending.substr(0, kMaxLine) + "\n";
      pending.erase(0, kMaxLine);
    }
    if (!lines.empty()) write_all(out_fd, lines);
    return true;
  }

  // Forwards a last line that had no newline, and closes the pipe.
  void finish() {
    if (!pending.empty()) write_all(out_fd, prefix + pending + "\n");
    pending.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Rank {
  pid_t pid = -1;  // also its process group
  bool running = false;
  Stream out, err;
};

void make_pipe(int fds[2], const char* what) {
  KILN_CHECK(::pipe(fds) == 0, "kiln launch: cannot create the pipe for ", what, ": ", std::strerror(errno));
  // Close-on-exec: a rank must hold no other rank's pipe, or that pipe would never reach end of file.
  ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
}

// The launcher's environment without the variables launch() sets, then those for `rank`.
std::vector<std::string> rank_environment(const LaunchOptions& o, int rank, uint16_t port) {
  std::vector<std::string> env;
  bool has_omp_threads = false;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(std::begin(kRankVariables), std::end(kRankVariables), name) != std::end(kRankVariables)) continue;
    has_omp_threads |= name == "OMP_NUM_THREADS";
    env.push_back(entry);
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(o.nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o.nproc));
  env.push_back("MASTER_ADDR=" + o.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  if (o.servers > 0) env.push_back("KILN_PS_SERVERS=" + std::to_string(o.servers));
  // N ranks each starting an OpenMP thread per core would run N times more threads than cores; split the
  // cores among them unless the user chose.
  if (!has_omp_threads && o.nproc > 1) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nproc))));
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> ptrs;
  for (auto& s : strings) ptrs.push_back(s.data());
  ptrs.push_back(nullptr);
  return ptrs;
}

// Starts one rank. Returns the errno of a failed exec (the child is reaped then), or nullopt once the command
// runs: a close-on-exec pipe tells the two apart, closed by a successful exec, written to by a failed one.
std::optional<int> start_rank(const LaunchOptions& o, int rank, uint16_t port, int stdin_fd, Rank& r) {
  std::vector<std::string> env = rank_environment(o, rank, port);
  std::vector<std::string> args = o.command;
  // Prepared before fork(): between fork and exec only async-signal-safe calls are allowed (the launcher may
  // have threads), so no allocation there.
  std::vector<char*> envp = c_strings(env), argv = c_strings(args);
  int out[2], err[2], exec_status[2];
  make_pipe(out, "a rank's stdout");
  make_pipe(err, "a rank's stderr");
  make_pipe(exec_status, "exec errors");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1], exec_status[0], exec_status[1]}) ::close(fd);
    KILN_CHECK(false, "kiln launch: cannot start rank ", rank, ": fork failed: ", std::strerror(e));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
#ifdef __linux__
    // A launcher killed outright (SIGKILL) cannot stop its ranks; the kernel does it instead.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
#endif
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (stdin_fd >= 0) ::dup2(stdin_fd, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    environ = envp.data();  // execvp searches PATH and passes `environ` on
    ::execvp(argv[0], argv.data());
    const int e = errno;
    ssize_t ignored = ::write(exec_status[1], &e, sizeof e);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before the parent signals it (whichever runs first)
  ::close(out[1]);
  ::close(err[1]);
  ::close(exec_status[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_status[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(exec_status[0]);
  r.pid = pid;
  const std::string prefix = o.servers == 0       ? "[rank " + std::to_string(rank) + "] "
                             : rank < o.servers ? "[server " + std::to_string(rank) + "] "
                                                : "[worker " + std::to_string(rank - o.servers) + "] ";
  r.out = Stream{out[0], o.out_fd, prefix, ""};
  r.err = Stream{err[0], o.err_fd, prefix, ""};
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    r.out.finish();
    r.err.finish();
    return exec_errno;
  }
  r.running = true;
  return std::nullopt;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  return "was killed by " + signal_name(WTERMSIG(status));
}

}  // namespace

uint16_t find_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  KILN_CHECK(fd >= 0, "find_free_port: socket() failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int e = errno;
  ::close(fd);
  KILN_CHECK(ok, "find_free_port: binding a socket to port 0 failed: ", std::strerror(e));
  return ntohs(addr.sin_port);
}

int launch(const LaunchOptions& o) {
  KILN_CHECK(o.nproc >= 1, "kiln launch: --nproc ", o.nproc, ": expected at least 1 rank");
  KILN_CHECK(o.servers >= 0 && (o.servers == 0 || o.servers < o.nproc), "kiln launch: ", o.servers,
             " servers among ", o.nproc, " ranks leave no worker");
  KILN_CHECK(!o.command.empty() && !o.command[0].empty(), "kiln launch: no command to run");
  const uint16_t port = o.master_port != 0 ? o.master_port : find_free_port();
  const std::string prog = o.command[0];
  const SignalScope signals;
  const int null_stdin = ::isatty(STDIN_FILENO) ? ::open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
  struct CloseOnReturn {
    int fd;
    ~CloseOnReturn() {
      if (fd >= 0) ::close(fd);
    }
  } close_null_stdin{null_stdin};

  const std::string what = o.servers == 0 ? std::to_string(o.nproc) + " rank" + (o.nproc == 1 ? "" : "s")
                                          : std::to_string(o.servers) + " server" + (o.servers == 1 ? "" : "s") +
                                                " and " + std::to_string(o.nproc - o.servers) + " worker" +
                                                (o.nproc - o.servers == 1 ? "" : "s");
  write_all(o.err_fd, "kiln launch: starting " + what + " of " + prog + " (MASTER_ADDR=" + o.master_addr +
                          " MASTER_PORT=" + std::to_string(port) + ")\n");
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  int result = 0;
  bool stopping = false, killed = false;
  Clock::time_point kill_at;
  const auto signal_running = [&](int sig) {
    for (const Rank& r : ranks) {
      if (r.running) ::kill(-r.pid, sig);
    }
  };
  std::chrono::milliseconds grace = o.grace_period;
  const auto stop = [&](int sig, std::chrono::milliseconds grace_here) {
    stopping = true;
    grace = grace_here;
    kill_at = Clock::now() + grace_here;
    signal_running(sig);
  };

  try {
    for (int i = 0; i < o.nproc && !stopping; ++i) {
      if (const std::optional<int> exec_errno = start_rank(o, i, port, null_stdin, ranks[static_cast<size_t>(i)])) {
        write_all(o.err_fd, "kiln launch: cannot run '" + prog + "' (rank " + std::to_string(i) +
                                "): " + std::strerror(*exec_errno) + "\n");
        result = 127;
        stop(SIGTERM, o.grace_period);
      }
    }
  } catch (...) {  // out of processes or file descriptors: no rank may outlive the error
    signal_running(SIGKILL);
    for (Rank& r : ranks) {
      if (r.running) ::waitpid(r.pid, nullptr, 0);
      r.out.finish();
      r.err.finish();
    }
    throw;
  }

  int running = static_cast<int>(std::count_if(ranks.begin(), ranks.end(), [](const Rank& r) { return r.running; }));
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;
  const auto poll_streams = [&](int timeout_ms) {
    fds.clear();
    streams.clear();
    for (Rank& r : ranks) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back(pollfd{s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    if (fds.empty()) return false;
    if (::poll(fds.data(), fds.size(), timeout_ms) > 0) {
      for (size_t k = 0; k < fds.size(); ++k) {
        if (fds[k].revents != 0 && !streams[k]->read_some()) streams[k]->finish();
      }
    }
    return true;
  };

  while (running > 0) {
    if (!poll_streams(kPollMs)) ::poll(nullptr, 0, kPollMs);
    if (const int sig = g_signal; sig != 0) {
      g_signal = 0;
      if (!stopping) {
        write_all(o.err_fd, "kiln launch: got " + signal_name(sig) + ": passing it to the ranks\n");
        result = 128 + sig;
        stop(sig, o.signal_grace_period);
      } else if (!killed) {  // a second Ctrl-C: the user does not want to wait out the grace period
        write_all(o.err_fd, "kiln launch: got " + signal_name(sig) + " again: killing the ranks\n");
        signal_running(SIGKILL);
        killed = true;
      }
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& r = ranks[i];
      int status = 0;
      if (!r.running || ::waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      --running;
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (failed && !stopping) {
        result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        write_all(o.err_fd, "kiln launch: rank " + std::to_string(i) + " " + describe_exit(status) +
                                (running > 0 ? ": stopping the other ranks" : "") + "\n");
        stop(SIGTERM, o.grace_period);
      }
    }
    if (stopping && !killed && running > 0 && Clock::now() >= kill_at) {
      std::string late;
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (ranks[i].running) late += (late.empty() ? "" : ", ") + std::to_string(i);
      }
      write_all(o.err_fd, "kiln launch: rank(s) " + late + " still running " +
                              std::to_string(grace.count()) + " ms after being told to stop: SIGKILL\n");
      signal_running(SIGKILL);
      killed = true;
    }
  }

  // Every rank has exited; what they wrote last may still be in the pipes.
  const Clock::time_point drain_end = Clock::now() + kDrainTime;
  while (Clock::now() < drain_end && poll_streams(kPollMs)) {
  }
  for (Rank& r : ranks) {
    r.out.finish();
    r.err.finish();
  }
  return result;
}

}  // namespace kiln::distributed
