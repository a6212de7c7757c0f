// Helpers shared by the nn tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kiln/kiln.h"
#include "kiln/nn/module.h"

namespace kiln::test {

// A float64 tensor of standard normal values, reproducible from `seed`.
inline Tensor randn64(IntArrayRef shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, kFloat64, &g);
}

// A module's own parameter or buffer called name (not a child's); a test failure when there is none.
inline Tensor own_tensor(const nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters(false))
    if (n == name) return t;
  for (const auto& [n, t] : m.named_buffers(false))
    if (n == name) return t;
  ADD_FAILURE() << m.type_name() << " has no parameter or buffer " << name;
  return {};
}

}  // namespace kiln::test
