// Automatic mixed precision: inside an AutocastGuard, the ops that gain most from a 16-bit float run in it, and
// the ops that need float32's range or accuracy run in float32, for tensors on the guard's device type:
//
//   { AutocastGuard ac(DeviceType::CUDA, kFloat16); loss = F::cross_entropy(model(x), y); }  // forward
//   scaler.scale(loss).backward();                                                          // outside
//
// The policy (PyTorch's, for the ops kiln has):
//   - lower precision (the guard's dtype, float16 or bfloat16): mm, bmm, matmul, addmm, baddbmm, conv2d, and so
//     linear, conv1d and attention's products;
//   - float32: softmax, log_softmax, the losses (cross_entropy, nll_loss, mse, l1, smooth_l1, huber,
//     binary_cross_entropy[_with_logits], kl_div), layer_norm, group_norm and batch_norm (whose output then
//     stays float32, where PyTorch's cuDNN batch norm returns the input's dtype);
//   - everything else runs in its inputs' dtype, as outside a guard (mixed inputs promote as always).
// A cast touches floating tensors on the guard's device that are not float64 and not already in the target
// dtype; others pass as they are. The casts are ordinary recorded ops (Tensor::to), so gradients flow back in
// each input's own dtype: float32 parameters get float32 gradients. Use it for the forward pass and the loss;
// backward needs no guard (it replays the dtypes forward chose).
//
// Guards nest and restore the previous state; the state is per thread, like grad mode. NOTE: unlike PyTorch,
// casts of the same float32 weight are not cached within a guard: a weight used by several ops is cast once
// per use.
#pragma once

#include <initializer_list>

#include "kiln/tensor/tensor.h"

namespace kiln {

struct AutocastState {
  bool enabled = false;
  DeviceType device = DeviceType::CPU;
  DType dtype = kBFloat16;
};

class AutocastGuard {
 public:
  // dtype: float16 or bfloat16. enabled = false switches autocast off inside (for a region that must run as
  // written).
  explicit AutocastGuard(DeviceType device, DType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState saved_;
};

// This thread's state.
AutocastState autocast_state();

namespace autocast {

// Whether autocast would cast any of these tensors to its lower dtype (an op of the lower-precision list).
bool wants_lower(std::initializer_list<const Tensor*> inputs);
// Whether autocast would cast any of these tensors to float32 (an op of the float32 list).
bool wants_float32(std::initializer_list<const Tensor*> inputs);
// The casts themselves; a tensor the policy does not touch (or undefined) comes back as it is.
Tensor lower(const Tensor& x);
Tensor float32(const Tensor& x);

}  // namespace autocast
}  // namespace kiln
