// Small helpers the optimizers share to read and check their options (internal, not part of optim.h).
#pragma once

#include <cmath>
#include <map>
#include <string>

#include "kiln/tensor/error.h"

namespace kiln::optim {

// The option `key` of an optimizer named `op`; an error naming both when it is missing.
inline double option(const std::map<std::string, double>& m, const char* op, const char* key) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), op, ": option '", key, "' is missing");
  return it->second;
}

inline void check_non_negative(const char* op, const char* what, double v) {
  KILN_CHECK(v >= 0.0, op, ": invalid ", what, " ", v, " (must be >= 0)");
}

// 0 <= v < 1, as Adam's betas and RMSprop's alpha... must be.
inline void check_unit_interval(const char* op, const char* what, double v) {
  KILN_CHECK(v >= 0.0 && v < 1.0, op, ": invalid ", what, " ", v, " (must be in [0, 1))");
}

}  // namespace kiln::optim
