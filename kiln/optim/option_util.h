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

// 0 <= v < 1, as Adam's betas and RMSprop's alpha must be.
inline void check_unit_interval(const char* op, const char* what, double v) {
  KILN_CHECK(v >= 0.0 && v < 1.0, op, ": invalid ", what, " ", v, " (must be in [0, 1))");
}

// The options Adam and its variants (AdamW, Adamax, NAdam, RAdam) share: lr, betas (as "beta1"/"beta2"), eps,
// weight_decay and maximize. Each optimizer adds its own keys to the map and reads them back.
template <typename Options>
std::map<std::string, double> adam_like_map(const Options& o) {
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

template <typename Options>
Options adam_like_options(const std::map<std::string, double>& m, const char* op) {
  Options o;
  o.lr = option(m, op, "lr");
  o.betas = {option(m, op, "beta1"), option(m, op, "beta2")};
  o.eps = option(m, op, "eps");
  o.weight_decay = option(m, op, "weight_decay");
  o.maximize = option(m, op, "maximize") != 0.0;
  return o;
}

template <typename Options>
void check_adam_like(const Options& o, const char* op) {
  check_non_negative(op, "lr", o.lr);
  check_non_negative(op, "eps", o.eps);
  check_unit_interval(op, "beta1", o.betas.first);
  check_unit_interval(op, "beta2", o.betas.second);
  check_non_negative(op, "weight_decay", o.weight_decay);
}

}  // namespace kiln::optim
