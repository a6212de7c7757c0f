// Frontends of embedding_bag's fused kernels: checks, the outputs allocated, and the weight's device's kernel.
// nn::functional::embedding_bag checks the user's input (indices, offsets, padding) before it builds the layout.
#include "kiln/tensor/ops/embedding_bag.h"

#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/views.h"

namespace kiln {

BagLayout BagLayout::to(Device device) const {
  auto move = [&](const Tensor& t) { return t.defined() ? ops::to(t, device) : t; };
  BagLayout out = *this;
  for (Tensor* t : {&out.input, &out.row, &out.bag, &out.start})
    *t = move(*t);
  return out;
}

namespace ops {

namespace {

void check_layout(const char* op, const BagLayout& bags, Device device) {
  for (const Tensor* t : {&bags.input, &bags.row, &bags.bag, &bags.start})
    KILN_CHECK(t->defined() && t->dtype() == kInt64 && t->dim() == 1 && t->is_contiguous() && t->device() == device,
               op, ": the bag layout must be 1-d contiguous int64 tensors on ", device);
  KILN_CHECK(bags.start.numel() == bags.count + 1 && bags.row.numel() == bags.input.numel() &&
                 bags.bag.numel() == bags.input.numel(),
             op, ": a layout of ", bags.count, " bags needs ", bags.count + 1, " starts and one input, row and bag "
             "per entry, got ", bags.start.numel(), " starts and ", bags.input.numel(), ", ", bags.row.numel(),
             " and ", bags.bag.numel());
}

void check_weight(const char* op, const Tensor& weight) {
  KILN_CHECK(weight.defined() && weight.dim() == 2, op, ": weight must be (num_embeddings, dim)");
  KILN_CHECK(weight.dtype() == kFloat32 || weight.dtype() == kFloat64, op, ": the fused kernels take float32 or "
             "float64 tables, got ", weight.dtype());
}

// per_sample_weights, flattened and contiguous (undefined stays undefined), checked against weight and bags.
Tensor flat_psw(const char* op, const Tensor& psw, const Tensor& like, const BagLayout& bags) {
  if (!psw.defined()) return psw;
  KILN_CHECK(psw.numel() == bags.num_inputs && psw.dtype() == like.dtype() && psw.device() == like.device(), op,
             ": per_sample_weights must hold ", bags.num_inputs, " ", like.dtype(), " values on ", like.device(),
             ", got ", psw.numel(), " ", psw.dtype(), " on ", psw.device());
  return contiguous(reshape(psw, {-1}));
}

}  // namespace

RowGroups group_by_row(const BagLayout& bags, int64_t num_rows) {
  KILN_CHECK(bags.row.defined() && bags.row.dtype() == kInt64, "embedding_bag: group_by_row needs the entries' rows");
  const Device device = bags.row.device();
  const Tensor host_rows = contiguous(ops::to(bags.row, Device::cpu()));
  const int64_t entries = host_rows.numel();
  const int64_t* row = host_rows.data_ptr<int64_t>();
  std::vector<int64_t> count(static_cast<size_t>(num_rows) + 1, 0);
  for (int64_t j = 0; j < entries; ++j) {
    KILN_CHECK(row[j] >= 0 && row[j] < num_rows, "embedding_bag: entry ", j, " names row ", row[j], " of ", num_rows);
    ++count[static_cast<size_t>(row[j]) + 1];
  }
  // Prefix sums, and the rows named with where their entries start.
  std::vector<int64_t> named, starts;
  for (int64_t r = 0; r < num_rows; ++r) {
    if (count[r + 1] > 0) named.push_back(r), starts.push_back(count[r]);
    count[r + 1] += count[r];
  }
  starts.push_back(entries);
  Tensor order = empty({entries}, TensorOptions(kInt64));
  int64_t* o = order.data_ptr<int64_t>();
  for (int64_t j = 0; j < entries; ++j) o[count[row[j]]++] = j;  // stable: input order within a row
  RowGroups groups;
  groups.rows_named = ops::to(tensor(named, {static_cast<int64_t>(named.size())}, kInt64), device);
  groups.row_start = ops::to(tensor(starts, {static_cast<int64_t>(starts.size())}, kInt64), device);
  groups.order = ops::to(order, device);
  return groups;
}

EmbeddingBagForward embedding_bag_forward(const Tensor& weight, const Tensor& per_sample_weights,
                                          const BagLayout& bags, BagReduce mode) {
  constexpr const char* kOp = "embedding_bag";
  check_weight(kOp, weight);
  check_layout(kOp, bags, weight.device());
  KILN_CHECK(!per_sample_weights.defined() || mode == BagReduce::Sum, kOp, ": per_sample_weights need mode Sum");
  const Tensor psw = flat_psw(kOp, per_sample_weights, weight, bags);
  const TensorOptions o = TensorOptions(weight.dtype()).device(weight.device());
  EmbeddingBagForward f;
  f.out = empty({bags.count, weight.size(1)}, o);
  if (mode == BagReduce::Max) f.argmax = empty({bags.count, weight.size(1)}, o.dtype(kInt64));
  if (f.out.numel() == 0) return f;
  call_kernel<Op::embedding_bag>(weight.device(), f.out, f.argmax, contiguous(weight), psw, bags, mode);
  return f;
}

Tensor embedding_bag_backward_weight(const Tensor& grad_out, const Tensor& per_sample_weights, const Tensor& argmax,
                                     const BagLayout& bags, int64_t num_rows, BagReduce mode) {
  constexpr const char* kOp = "embedding_bag backward";
  KILN_CHECK(grad_out.defined() && grad_out.dim() == 2 && grad_out.size(0) == bags.count, kOp,
             ": the output's gradient must be (", bags.count, ", D)");
  KILN_CHECK(grad_out.dtype() == kFloat32 || grad_out.dtype() == kFloat64, kOp, ": float32 or float64 gradients only");
  check_layout(kOp, bags, grad_out.device());
  KILN_CHECK(mode != BagReduce::Max || (argmax.defined() && argmax.sizes() == grad_out.sizes()), kOp,
             ": Max needs the forward's argmax");
  const Tensor psw = flat_psw(kOp, per_sample_weights, grad_out, bags);
  Tensor grad_w = empty({num_rows, grad_out.size(1)}, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  if (grad_w.numel() == 0) return grad_w;
  call_kernel<Op::embedding_bag_backward>(grad_out.device(), grad_w, contiguous(grad_out), psw, argmax, bags, mode);
  return grad_w;
}

Tensor embedding_bag_backward_per_sample_weights(const Tensor& grad_out, const Tensor& weight, const BagLayout& bags) {
  constexpr const char* kOp = "embedding_bag backward (per_sample_weights)";
  check_weight(kOp, weight);
  check_layout(kOp, bags, weight.device());
  KILN_CHECK(grad_out.defined() && grad_out.sizes() == Shape({bags.count, weight.size(1)}) &&
                 grad_out.dtype() == weight.dtype() && grad_out.device() == weight.device(),
             kOp, ": the output's gradient must be (", bags.count, ", ", weight.size(1), ") ", weight.dtype(), " on ",
             weight.device());
  Tensor grad = empty({bags.num_inputs}, TensorOptions(weight.dtype()).device(weight.device()));
  if (grad.numel() == 0) return grad;
  call_kernel<Op::embedding_bag_psw_backward>(weight.device(), grad, contiguous(grad_out), contiguous(weight), bags);
  return grad;
}

}  // namespace ops
}  // namespace kiln
