#include "kiln/autograd/autocast.h"

#include "kiln/tensor/error.h"

namespace kiln {

namespace {
thread_local AutocastState state;

bool is_16bit(DType d) { return d == kFloat16 || d == kBFloat16; }

// Whether the policy casts x to `to`: a floating tensor on autocast's device, not float64, not already `to`.
bool castable(const Tensor& x, DType to) {
  return state.enabled && x.defined() && x.device().type == state.device && is_floating(x.dtype()) &&
         x.dtype() != kFloat64 && x.dtype() != to;
}
}  // namespace

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled) : saved_(state) {
  KILN_CHECK(is_16bit(dtype), "AutocastGuard: dtype must be float16 or bfloat16, got ", dtype);
  state = {enabled, device, dtype};
}

AutocastGuard::~AutocastGuard() { state = saved_; }

AutocastState autocast_state() { return state; }

namespace autocast {

bool wants_lower(std::initializer_list<const Tensor*> inputs) {
  if (!state.enabled) return false;
  for (const Tensor* t : inputs)
    if (castable(*t, state.dtype)) return true;
  return false;
}

bool wants_float32(std::initializer_list<const Tensor*> inputs) {
  if (!state.enabled) return false;
  for (const Tensor* t : inputs)
    if (castable(*t, kFloat32) && is_16bit(t->dtype())) return true;
  return false;
}

Tensor lower(const Tensor& x) { return castable(x, state.dtype) ? x.to(state.dtype) : x; }

Tensor float32(const Tensor& x) { return castable(x, kFloat32) && is_16bit(x.dtype()) ? x.to(kFloat32) : x; }

}  // namespace autocast
}  // namespace kiln
