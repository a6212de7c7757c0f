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
// Guards nest and restore the previous state; the state is per thread, like grad mode.
//
// Casts of parameters are cached, as in PyTorch: inside the outermost enabled guard, a float32 leaf that requires
// grad is cast to the lower dtype once, and every op that uses it shares that cast (and its one node in the
// graph): tied weights, or a layer applied at every step of a loop, cost one cast. The cache empties when the
// outermost enabled guard ends. Unlike PyTorch's, it notices a parameter changed in place since its cast (an
// optimizer step inside the guard) and casts it again, and it caches nothing while grad mode is off, so a cast
// made under NoGradGuard never stands in for one that gradients must flow through.
#pragma once

#include <initializer_list>
#include <memory>

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
// How many casts this thread's cache holds (for tests and diagnostics).
size_t cached_casts();

// An empty cast cache for this thread while it lives, the previous one back afterwards: a stretch of code whose
// casts must be its own nodes (activation checkpointing reruns a segment, and each run must make the same
// graph, whatever was cast before it).
class OwnCastCache {
 public:
  OwnCastCache();
  ~OwnCastCache();
  OwnCastCache(const OwnCastCache&) = delete;
  OwnCastCache& operator=(const OwnCastCache&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

}  // namespace autocast
}  // namespace kiln
