#include "kiln/trainer/interrupt.h"

#include <atomic>
#include <csignal>
#include <mutex>

namespace kiln::trainer {

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

namespace {

// Written by the handler, read by the training loop: a lock-free atomic is safe to touch in a handler.
std::atomic<int> g_pending{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_interrupt(int signal) {
  if (g_pending.load() != 0) {
    // The second one: the default action now (for SIGINT and SIGTERM, the process ends).
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_pending.store(signal);
}

std::mutex g_mutex;  // guards the depth and the saved handlers
int g_depth = 0;
struct sigaction g_old_int {}, g_old_term {};

}  // namespace

InterruptScope::InterruptScope() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_depth++ > 0) return;
  g_pending.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the loop reads the flag between batches; a read or write in flight just goes on
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptScope::~InterruptScope() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_depth > 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int pending_interrupt() { return g_pending.load(); }

}  // namespace kiln::trainer
