// The element-wise reductions the collectives apply to received data, and their naive reference.
//
// combine() is the one place an element is reduced: out = a (op) b, with `a` always the operand that covers
// the lower ranks. The algorithms call it in a fixed order per element, so the bits of a result depend only
// on that order, never on which rank computed it (see algorithms.h for how each algorithm fixes it).
//
// Semantics by dtype:
//   floating   sum, product, min, max (NaN propagates); avg is sum, then scale_by_inverse(size)
//   float16 / bfloat16   loaded into float, combined, rounded back once per combine (each ring or doubling step)
//   integers   sum and product wrap modulo 2^bits (no undefined overflow); avg is an error (floating only)
//   bool       sum and max are "or", product and min are "and"
#pragma once

#include <cstdint>

#include "kiln/distributed/process_group.h"
#include "kiln/tensor/dtype.h"

namespace kiln::distributed::tcp {

// a, b, out: n elements of `dtype`; out may alias a or b. Avg is combined as Sum.
void combine(void* out, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op);
// The reference: one element at a time, through double (floating) or int64 (integers), no templates.
void combine_reference(void* out, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op);

// data /= divisor, element-wise, for avg (floating dtypes; computed in the dtype's opmath type).
void divide_by(void* data, int64_t n, DType dtype, int64_t divisor);

// Avg on a non-floating dtype is a kiln::Error naming `what` (the op); every other combination is valid.
void check_reduce_op(ReduceOp op, DType dtype, const char* what);

}  // namespace kiln::distributed::tcp
