// The fused loops of fused_cpu.h. Each line below is one op of the chain in sgd.cpp / adam.cpp, with the chain's
// functor where it has one, and the chain's scalars converted to T as its kernels convert them.
#include "kiln/optim/fused_cpu.h"

#include <cmath>

#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/parallel.h"

namespace kiln::optim::fused {

bool applies(const Tensor& p, std::initializer_list<const Tensor*> others) {
  if (!p.device().is_cpu() || (p.dtype() != kFloat32 && p.dtype() != kFloat64) || !p.is_contiguous()) return false;
  for (const Tensor* t : others)
    if (!t->defined() || !t->device().is_cpu() || t->dtype() != p.dtype() || !t->is_contiguous() ||
        t->sizes() != p.sizes())
      return false;
  return true;
}

namespace {

template <typename T>
void sgd_loop(T* p, const T* grad, T* buf, int64_t n, const SgdStep& s) {
  const T wd = T(s.weight_decay), mom = T(s.momentum), damp = T(1.0 - s.dampening), neg_lr = T(-s.lr);
  parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T g = s.maximize ? -grad[i] : grad[i];              // g = maximize ? neg(grad) : grad
      if (s.weight_decay != 0) g = g + wd * p[i];          // g = add(g, p, weight_decay)
      if (s.momentum != 0) {
        const T m = s.first ? g : buf[i] * mom + damp * g;  // buf = g.clone(), or buf.mul_(momentum).add_(g, 1 - dampening)
        buf[i] = m;
        g = s.nesterov ? g + mom * m : m;                  // g = nesterov ? add(g, buf, momentum) : buf
      }
      p[i] = p[i] + neg_lr * g;                            // p.add_(g, -lr)
    }
  });
}

template <typename T>
void adam_loop(T* p, const T* grad, T* m, T* v, int64_t n, const AdamStep& s) {
  const double bias_correction1 = 1.0 - std::pow(s.beta1, s.step);
  const T w1 = T(1.0 - s.beta1), b2 = T(s.beta2), a2 = T(1.0 - s.beta2), wd = T(s.weight_decay),
          decay = T(1.0 - s.lr * s.weight_decay), bc2 = T(std::sqrt(1.0 - std::pow(s.beta2, s.step))),
          eps = T(s.eps), neg_step = T(-(s.lr / bias_correction1));
  const bool decay_grad = s.weight_decay != 0 && !s.decoupled, decay_param = s.weight_decay != 0 && s.decoupled;
  parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T g = s.maximize ? -grad[i] : grad[i];                  // g = maximize ? neg(grad) : grad
      T x = p[i];
      if (decay_param) x = x * decay;                          // p.mul_(1 - lr * weight_decay)
      if (decay_grad) g = g + wd * x;                          // g = add(g, p, weight_decay)
      const T mi = functors::Lerp{}(m[i], g, w1);              // exp_avg.copy_(lerp(exp_avg, g, 1 - beta1))
      const T vi = v[i] * b2 + a2 * (g * g);                   // exp_avg_sq.mul_(beta2).add_(mul(g, g), 1 - beta2)
      const T denom = functors::Sqrt{}(vi) / bc2 + eps;        // add(div(sqrt(exp_avg_sq), bc2), eps)
      m[i] = mi, v[i] = vi;
      p[i] = x + neg_step * (mi / denom);                      // p.add_(div(exp_avg, denom), -step_size)
    }
  });
}

}  // namespace

// The loops write through raw pointers: the versions are bumped here, as the in-place ops of the chain bump
// them, so that autograd still refuses a graph that saved a parameter the step then changed.
void sgd(const Tensor& p, const Tensor& grad, const Tensor& buf, const SgdStep& s) {
  const int64_t n = p.numel();
  p.bump_version("SGD.step");
  if (s.momentum != 0) buf.bump_version("SGD.step");
  if (p.dtype() == kFloat32)
    sgd_loop(p.data_ptr<float>(), grad.data_ptr<float>(), s.momentum != 0 ? buf.data_ptr<float>() : nullptr, n, s);
  else
    sgd_loop(p.data_ptr<double>(), grad.data_ptr<double>(), s.momentum != 0 ? buf.data_ptr<double>() : nullptr, n,
             s);
}

void adam(const Tensor& p, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamStep& s) {
  const int64_t n = p.numel();
  p.bump_version("Adam.step");
  exp_avg.bump_version("Adam.step");
  exp_avg_sq.bump_version("Adam.step");
  if (p.dtype() == kFloat32)
    adam_loop(p.data_ptr<float>(), grad.data_ptr<float>(), exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>(),
              n, s);
  else
    adam_loop(p.data_ptr<double>(), grad.data_ptr<double>(), exp_avg.data_ptr<double>(),
              exp_avg_sq.data_ptr<double>(), n, s);
}

}  // namespace kiln::optim::fused
