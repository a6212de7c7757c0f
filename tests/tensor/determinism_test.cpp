// use_deterministic_algorithms: off by default, one setting for the whole process, put back by its guard; the
// alert of a kernel with no deterministic form is an error, naming the op and the device, only while it is on.
// (What the setting changes in the CUDA kernels is tested on the GPU: tests/cuda/determinism_test.cpp.)
#include <gtest/gtest.h>

#include <thread>

#include "kiln/tensor/determinism.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

TEST(Determinism, OffByDefaultAndScopedByTheGuard) {
  EXPECT_FALSE(are_deterministic_algorithms_enabled());
  {
    DeterministicAlgorithmsGuard on(true);
    EXPECT_TRUE(are_deterministic_algorithms_enabled());
    {
      DeterministicAlgorithmsGuard off(false);
      EXPECT_FALSE(are_deterministic_algorithms_enabled());
    }
    EXPECT_TRUE(are_deterministic_algorithms_enabled());
    // One setting for every thread, as PyTorch's: a data loader's workers see it too.
    bool seen = false;
    std::thread([&] { seen = are_deterministic_algorithms_enabled(); }).join();
    EXPECT_TRUE(seen);
  }
  EXPECT_FALSE(are_deterministic_algorithms_enabled());
  use_deterministic_algorithms(true);
  EXPECT_TRUE(are_deterministic_algorithms_enabled());
  use_deterministic_algorithms(false);
}

TEST(Determinism, TheAlertIsAnErrorOnlyWhileOn) {
  EXPECT_NO_THROW(detail::alert_not_deterministic("scatter_add", Device::cuda(1)));
  DeterministicAlgorithmsGuard on(true);
  test::expect_error([] { detail::alert_not_deterministic("scatter_add", Device::cuda(1)); },
                     {"scatter_add on cuda:1", "no deterministic kernel", "deterministic algorithms are on"});
}

}  // namespace
}  // namespace kiln
