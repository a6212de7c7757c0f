// The fused kernels of embedding_bag (nn::functional::embedding_bag): sums, means or maxes of bags of rows of
// a table (V, D), and their gradients, for float32 and float64 tables on every device with the kernels.
//
// The caller (nn) turns the input into a BagLayout on the host: the entries that stay in their bags (padding
// rows leave), in input order, so bag by bag. For the table's gradient of Sum and Mean (and of Max on the GPU)
// the same entries are grouped by row (group_by_row), so that each named row's gradient is one thread's (or
// one CUDA thread's per column) sum over its entries, in input order; the CPU's Max splits the columns between
// threads and walks the bags in order, from the forward's argmax. No two writers meet, and the result has the
// same bits for any thread count and on every run. The GPU's kernels read the same layout, moved to the
// device.
#pragma once

#include <cstdint>

#include "kiln/tensor/tensor.h"

namespace kiln {

// The reduction over a bag (nn's BagMode, below the nn layer).
enum class BagReduce : uint8_t { Sum, Mean, Max };

// The bags as index tensors (int64, contiguous, on one device). E entries, B bags.
struct BagLayout {
  int64_t count = 0;       // B
  int64_t num_inputs = 0;  // the flattened input's numel (per_sample_weights has as many)
  Tensor input;            // (E): each entry's position in the flattened input
  Tensor row;              // (E): its row of the table
  Tensor bag;              // (E): its bag
  Tensor start;            // (B + 1): bag b's entries are [start[b], start[b + 1])

  // The same layout on `device` (a copy of each tensor; itself when already there).
  BagLayout to(Device device) const;
};

// The entries grouped by row, for the table's gradient. R distinct rows named.
struct RowGroups {
  Tensor rows_named;  // (R): the rows named, in increasing order
  Tensor row_start;   // (R + 1): where each one's entries start in `order`
  Tensor order;       // (E): the entries row by row, in input order within a row
};

namespace ops {

// The layout's entries grouped by row (a counting sort over the num_rows rows, stable, on the host: a layout on
// a GPU has its rows copied over), on the layout's device. The kernels that need it call it.
RowGroups group_by_row(const BagLayout& bags, int64_t num_rows);

struct EmbeddingBagForward {
  Tensor out;     // (B, D), weight's dtype
  Tensor argmax;  // Max only: (B, D) int64, each output element's row (-1 in an empty bag)
};

// weight (V, D) float32 or float64; per_sample_weights (the input's numel, any shape; Sum only) in weight's
// dtype, or undefined; bags on weight's device. An empty bag gives zeros.
EmbeddingBagForward embedding_bag_forward(const Tensor& weight, const Tensor& per_sample_weights,
                                          const BagLayout& bags, BagReduce mode);
// The table's gradient (V, D) from grad_out (B, D): row r gets, over the entries that name it, the entry's
// scale (its per-sample weight, 1 / its bag's size for Mean, else 1) times its bag's gradient; for Max each
// output element's gradient goes to the row argmax names.
Tensor embedding_bag_backward_weight(const Tensor& grad_out, const Tensor& per_sample_weights, const Tensor& argmax,
                                     const BagLayout& bags, int64_t num_rows, BagReduce mode);
// per_sample_weights' gradient (the flattened input's numel): each entry's bag's gradient dotted with its
// row of weight; 0 for the entries that left their bags.
Tensor embedding_bag_backward_per_sample_weights(const Tensor& grad_out, const Tensor& weight, const BagLayout& bags);

}  // namespace ops
}  // namespace kiln
