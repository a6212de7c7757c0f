// The checks in front of the fused optimizer kernels; the kernels are in optim_cpu.cpp and cuda/optim_cuda.cu.
#include "kiln/tensor/ops/fused_optim.h"

#include <vector>

#include "kiln/tensor/dispatch.h"

namespace kiln::ops {

bool fused_step_applies(const Tensor& p, std::initializer_list<const Tensor*> others) {
  if ((p.dtype() != kFloat32 && p.dtype() != kFloat64) || !p.is_contiguous() ||
      !has_kernel<Op::adam_step>(p.device().type) || !has_kernel<Op::sgd_step>(p.device().type))
    return false;
  for (const Tensor* t : others)
    if (!t->defined() || t->device() != p.device() || t->dtype() != p.dtype() || !t->is_contiguous() ||
        t->sizes() != p.sizes() || t->may_overlap(p))
      return false;
  for (auto a = others.begin(); a != others.end(); ++a)
    for (auto b = a + 1; b != others.end(); ++b)
      if ((*a)->may_overlap(**b)) return false;  // the chain copes with shared memory; the fused loop does not
  return true;
}

namespace {

// Every list has params' length, and every tensor matches params[i] as fused_step_applies asks, on params[0]'s
// device and dtype.
void check_lists(const char* op, std::span<const Tensor> params,
                 std::initializer_list<std::pair<const char*, std::span<const Tensor>>> lists) {
  for (const auto& [name, list] : lists)
    KILN_CHECK(list.size() == params.size(), op, ": ", params.size(), " parameters but ", list.size(), " ", name);
  const Tensor& first = params[0];
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    KILN_CHECK(p.defined(), op, ": parameter ", i, " is undefined");
    KILN_CHECK(p.device() == first.device() && p.dtype() == first.dtype(), op, ": parameter ", i, " is ",
               p.dtype(), " on ", p.device(), ", parameter 0 ", first.dtype(), " on ", first.device(),
               "; one call takes one device and dtype");
    KILN_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, op, ": parameter ", i, " is ", p.dtype(),
               "; the fused update takes float32 and float64");
    KILN_CHECK(p.is_contiguous(), op, ": parameter ", i, " is not contiguous");
    for (const auto& [name, list] : lists) {
      const Tensor& t = list[i];
      KILN_CHECK(t.defined() && t.device() == p.device() && t.dtype() == p.dtype() && t.is_contiguous() &&
                     t.sizes() == p.sizes(),
                 op, ": ", name, " ", i, " must be a contiguous ", p.dtype(), " tensor of size ", shape_str(p.sizes()), " on ",
                 p.device(), " (its parameter's), got ",
                 t.defined() ? detail::concat(t.dtype(), " of size ", shape_str(t.sizes()), " on ", t.device(),
                                      t.is_contiguous() ? "" : ", not contiguous")
                             : std::string("an undefined tensor"));
    }
    // The kernels read and write the tensors of one parameter as distinct arrays.
    std::vector<std::pair<const char*, const Tensor*>> mine{{"the parameter", &p}};
    for (const auto& [name, list] : lists) mine.emplace_back(name, &list[i]);
    for (size_t a = 0; a < mine.size(); ++a)
      for (size_t b = a + 1; b < mine.size(); ++b)
        KILN_CHECK(!mine[a].second->may_overlap(*mine[b].second), op, ": parameter ", i, ": ", mine[a].first,
                   " and ", mine[b].first, " share memory; the fused update needs them apart");
  }
}

}  // namespace

void fused_sgd_step_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                     const SgdStepParams& s) {
  if (params.empty()) return;
  if (s.momentum != 0) check_lists("SGD.step", params, {{"gradients", grads}, {"momentum buffers", bufs}});
  else check_lists("SGD.step", params, {{"gradients", grads}});
  const Device device = params[0].device();
  get_kernel<Op::sgd_step>(device);  // no kernel for the device: an error before anything is written
  // Every check has passed: from here the step writes. (The versions go first, as the chain's in-place ops
  // bump theirs.)
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].bump_version("SGD.step");
    if (s.momentum != 0) bufs[i].bump_version("SGD.step");
  }
  call_kernel<Op::sgd_step>(device, params, grads, s.momentum != 0 ? bufs : std::span<const Tensor>{}, s);
}

void fused_adam_step_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                      std::span<const Tensor> exp_avg_sqs, std::span<const double> steps, const AdamStepParams& s) {
  if (params.empty()) return;
  check_lists("Adam.step", params, {{"gradients", grads}, {"exp_avg", exp_avgs}, {"exp_avg_sq", exp_avg_sqs}});
  KILN_CHECK(steps.size() == params.size(), "Adam.step: ", params.size(), " parameters but ", steps.size(),
             " step counts");
  for (size_t i = 0; i < params.size(); ++i)
    KILN_CHECK(steps[i] >= 1, "Adam.step: parameter ", i, "'s step count is ", steps[i], "; counts start at 1");
  const Device device = params[0].device();
  get_kernel<Op::adam_step>(device);
  for (size_t i = 0; i < params.size(); ++i) {  // every check has passed: from here the step writes
    params[i].bump_version("Adam.step");
    exp_avgs[i].bump_version("Adam.step");
    exp_avg_sqs[i].bump_version("Adam.step");
  }
  call_kernel<Op::adam_step>(device, params, grads, exp_avgs, exp_avg_sqs, steps, s);
}

}  // namespace kiln::ops
