#include "kiln/tensor/determinism.h"

#include <atomic>

#include "kiln/tensor/error.h"

namespace kiln {
namespace {
std::atomic<bool> g_deterministic{false};
}  // namespace

void use_deterministic_algorithms(bool on) { g_deterministic.store(on, std::memory_order_relaxed); }

bool are_deterministic_algorithms_enabled() { return g_deterministic.load(std::memory_order_relaxed); }

namespace detail {
void alert_not_deterministic(const char* op, Device device) {
  KILN_CHECK(!are_deterministic_algorithms_enabled(), op, " on ", device, " adds floating-point values with ",
             "atomics, in an order that varies from run to run, and kiln has no deterministic kernel for it; ",
             "deterministic algorithms are on (the Trainer's `deterministic`, or use_deterministic_algorithms): ",
             "run this op on the CPU, or turn them off");
}
}  // namespace detail

}  // namespace kiln
