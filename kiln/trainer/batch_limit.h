// BatchLimit: a number of batches, or a fraction of a loader's batches, as Lightning's limit_train_batches
// and val_check_interval take them. An integer is a count and a floating-point value a fraction, in C++ and in
// a config file alike: BatchLimit(10) / `10` is ten batches, BatchLimit(0.25) / `0.25` a quarter of the
// loader, and `1` is one batch where `1.0` is all of them.
#pragma once

#include <cstdint>

namespace kiln::trainer {

struct BatchLimit {
  bool is_count = false;
  int64_t count = 0;
  double fraction = 1.0;

  BatchLimit() = default;
  BatchLimit(int64_t batches) : is_count(true), count(batches), fraction(0.0) {}  // NOLINT: implicit
  BatchLimit(int batches) : BatchLimit(static_cast<int64_t>(batches)) {}        // NOLINT: implicit
  BatchLimit(double f) : fraction(f) {}                                         // NOLINT: implicit
  static BatchLimit of_count(int64_t n) { return BatchLimit(n); }
  static BatchLimit of_fraction(double f) { return BatchLimit(f); }

  // How many of `available` batches this limit allows: the count (at most `available`), or the fraction of
  // them rounded down, but at least one when the fraction and `available` are positive. available = -1 (a
  // loader over a stream, of unknown length): the count, or -1 (all of them) for any fraction; the Trainer
  // refuses fractions other than 1.0 there.
  int64_t resolve(int64_t available) const;
  bool operator==(const BatchLimit&) const = default;
};

}  // namespace kiln::trainer
