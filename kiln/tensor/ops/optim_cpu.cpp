// The CPU kernels of the fused optimizer updates (fused_optim.h): one parallel loop per parameter applying the
// per-element math of optim_functors.h.
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/optim_functors.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

template <typename T>
void sgd_step_typed(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                    const SgdStepParams& s) {
  const functors::SgdUpdate<T> update(s);
  for (size_t k = 0; k < params.size(); ++k) {
    T* p = params[k].data_ptr<T>();
    const T* g = grads[k].data_ptr<T>();
    T* buf = bufs.empty() ? nullptr : bufs[k].data_ptr<T>();
    parallel_for(0, params[k].numel(), kDefaultGrain, [=](int64_t b, int64_t e) {
      // Local copies and distinct pointers (see adam_step_typed), so the loop vectorizes.
      const functors::SgdUpdate<T> u = update;
      T* __restrict pp = p;
      const T* __restrict gg = g;
      T* __restrict bb = buf;
      if (bb != nullptr) {
        for (int64_t i = b; i < e; ++i) u(pp[i], gg[i], bb[i]);
      } else {
        for (int64_t i = b; i < e; ++i) {
          T unused = 0;  // without momentum, buf is not touched
          u(pp[i], gg[i], unused);
        }
      }
    });
  }
}

template <typename T>
void adam_step_typed(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                     std::span<const Tensor> exp_avg_sqs, std::span<const double> steps, const AdamStepParams& s) {
  const functors::AdamUpdate<T> update(s);
  for (size_t k = 0; k < params.size(); ++k) {
    T* p = params[k].data_ptr<T>();
    const T* g = grads[k].data_ptr<T>();
    T* m = exp_avgs[k].data_ptr<T>();
    T* v = exp_avg_sqs[k].data_ptr<T>();
    const functors::AdamBiasCorrection<T> bc(s, steps[k]);
    parallel_for(0, params[k].numel(), kDefaultGrain, [=](int64_t b, int64_t e) {
      // The constants as locals and the four arrays as distinct: otherwise a store to p, m or v might change a
      // constant (they are all T), the compiler reloads them every element, and the loop stays scalar.
      const functors::AdamUpdate<T> u = update;
      const functors::AdamBiasCorrection<T> c = bc;
      T* __restrict pp = p;
      const T* __restrict gg = g;
      T* __restrict mm = m;
      T* __restrict vv = v;
      for (int64_t i = b; i < e; ++i) u(pp[i], gg[i], mm[i], vv[i], c);
    });
  }
}

void sgd_step_cpu(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                  const SgdStepParams& s) {
  if (params[0].dtype() == kFloat32) sgd_step_typed<float>(params, grads, bufs, s);
  else sgd_step_typed<double>(params, grads, bufs, s);
}

void adam_step_cpu(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                   std::span<const Tensor> exp_avg_sqs, std::span<const double> steps, const AdamStepParams& s) {
  if (params[0].dtype() == kFloat32) adam_step_typed<float>(params, grads, exp_avgs, exp_avg_sqs, steps, s);
  else adam_step_typed<double>(params, grads, exp_avgs, exp_avg_sqs, steps, s);
}

}  // namespace

namespace detail {
void register_optim_cpu_kernels() {
  register_kernel<Op::sgd_step>(DeviceType::CPU, sgd_step_cpu);
  register_kernel<Op::adam_step>(DeviceType::CPU, adam_step_cpu);
}
}  // namespace detail
}  // namespace kiln
