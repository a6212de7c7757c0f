// The per-element math of the fused optimizer updates (fused_optim.h), written once for the CPU loops
// (optim_cpu.cpp) and the CUDA kernels (cuda/optim_cuda.cu).
//
// Each line is one op of the chain the optimizers otherwise run (kiln/optim/sgd.cpp, adam.cpp), with that op's
// functor where it has one and the chain's scalars converted to T as its kernels convert them. So the fused
// update does what the chain does, element by element. The bits can still differ in the last place: a compiler
// may fuse a multiply and an add into one FMA (C++ and CUDA both allow it) where the chain has them in two
// kernels. tests/optim/optimizers_test.cpp holds the fused update and the chain together.
#pragma once

#include <cmath>

#include "kiln/tensor/macros.h"
#include "kiln/tensor/ops/elementwise_functors.h"
#include "kiln/tensor/ops/op_list.h"

namespace kiln::functors {

template <class T>
struct SgdUpdate {
  T weight_decay, momentum, keep, neg_lr;  // keep = 1 - dampening
  bool maximize, nesterov, first, has_decay, has_momentum;  // the flags test the doubles, as the chain does

  explicit SgdUpdate(const SgdStepParams& s)
      : weight_decay(T(s.weight_decay)), momentum(T(s.momentum)), keep(T(1.0 - s.dampening)), neg_lr(T(-s.lr)),
        maximize(s.maximize), nesterov(s.nesterov), first(s.first), has_decay(s.weight_decay != 0),
        has_momentum(s.momentum != 0) {}

  // buf is touched only with momentum.
  KILN_INLINE void operator()(T& p, T grad, T& buf) const {
    T g = maximize ? -grad : grad;                          // g = maximize ? neg(grad) : grad
    if (has_decay) g = g + weight_decay * p;                // g = add(g, p, weight_decay)
    if (has_momentum) {
      const T m = first ? g : buf * momentum + keep * g;    // buf = g.clone(), or buf.mul_(momentum).add_(g, 1 - dampening)
      buf = m;
      g = nesterov ? g + momentum * m : m;                  // g = nesterov ? add(g, buf, momentum) : buf
    }
    p = p + neg_lr * g;                                     // p.add_(g, -lr)
  }
};

// What Adam's update needs of one parameter's step count t: sqrt(1 - beta2^t) and -lr / (1 - beta1^t).
template <class T>
struct AdamBiasCorrection {
  T sqrt_bc2, neg_step_size;

  AdamBiasCorrection() = default;
  AdamBiasCorrection(const AdamStepParams& s, double step)
      : sqrt_bc2(T(std::sqrt(1.0 - std::pow(s.beta2, step)))),
        neg_step_size(T(-(s.lr / (1.0 - std::pow(s.beta1, step))))) {}
};

template <class T>
struct AdamUpdate {
  T one_minus_beta1, beta2, one_minus_beta2, weight_decay, decay, eps;  // decay = 1 - lr * weight_decay
  bool maximize, decay_grad, decay_param;

  explicit AdamUpdate(const AdamStepParams& s)
      : one_minus_beta1(T(1.0 - s.beta1)), beta2(T(s.beta2)), one_minus_beta2(T(1.0 - s.beta2)),
        weight_decay(T(s.weight_decay)), decay(T(1.0 - s.lr * s.weight_decay)), eps(T(s.eps)),
        maximize(s.maximize), decay_grad(s.weight_decay != 0 && !s.decoupled),
        decay_param(s.weight_decay != 0 && s.decoupled) {}

  KILN_INLINE void operator()(T& p, T grad, T& m, T& v, const AdamBiasCorrection<T>& bc) const {
    T g = maximize ? -grad : grad;                           // g = maximize ? neg(grad) : grad
    T x = p;
    if (decay_param) x = x * decay;                          // p.mul_(1 - lr * weight_decay)
    if (decay_grad) g = g + weight_decay * x;                // g = add(g, p, weight_decay)
    const T mi = Lerp{}(m, g, one_minus_beta1);              // exp_avg.copy_(lerp(exp_avg, g, 1 - beta1))
    const T vi = v * beta2 + one_minus_beta2 * (g * g);      // exp_avg_sq.mul_(beta2).add_(mul(g, g), 1 - beta2)
    const T denom = Sqrt{}(vi) / bc.sqrt_bc2 + eps;          // add(div(sqrt(exp_avg_sq), bc2), eps)
    m = mi, v = vi;
    p = x + bc.neg_step_size * (mi / denom);                 // p.add_(div(exp_avg, denom), -step_size)
  }
};

}  // namespace kiln::functors
