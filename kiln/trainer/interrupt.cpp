#include "kiln/trainer/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <mutex>

namespace kiln::trainer {

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

namespace {

// Written by the handler, read by the training loop: lock-free atomics are safe to touch in a handler.
std::atomic<int> g_pending{0};
std::atomic<int64_t> g_first_ns{0};   // when the first one came (CLOCK_MONOTONIC)
std::atomic<bool> g_consumed{false};  // the Trainer stopped for it (threw Interrupted)
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

// A second copy of the first signal within this long is the same event seen twice (a job's whole process
// group signalled, and the launcher passing it on as well), not a user asking again.
constexpr int64_t kRepeatNs = 1'000'000'000;

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

extern "C" void on_interrupt(int signal) {
  const int first = g_pending.load();
  if (first == 0) {
    g_first_ns.store(now_ns());
    g_pending.store(signal);
    return;
  }
  if (signal == first && now_ns() - g_first_ns.load() < kRepeatNs) return;
  // Asked again: the default action now (for SIGINT and SIGTERM, the process ends).
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

std::mutex g_mutex;  // guards the depth and the saved handlers
int g_depth = 0;
struct sigaction g_old_int {}, g_old_term {};

// Installs the handler for `signal` unless the process was started with it ignored (`nohup`, a job started in
// the background of a non-interactive shell): then it stays ignored.
void install(int signal, struct sigaction* old) {
  sigaction(signal, nullptr, old);
  if (old->sa_handler == SIG_IGN) return;
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the loop reads the flag between batches; a read or write in flight just goes on
  sigaction(signal, &sa, nullptr);
}

}  // namespace

InterruptScope::InterruptScope() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_depth++ > 0) return;
  g_pending.store(0);
  g_consumed.store(false);
  install(SIGINT, &g_old_int);
  install(SIGTERM, &g_old_term);
}

InterruptScope::~InterruptScope() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_depth > 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  // A signal the Trainer did not stop for (it came as fit() was ending): deliver it as it would have been.
  if (const int signal = g_pending.load(); signal != 0 && !g_consumed.load()) {
    g_pending.store(0);
    std::raise(signal);
  }
}

int pending_interrupt() { return g_pending.load(); }

void consume_interrupt() { g_consumed.store(true); }

}  // namespace kiln::trainer
