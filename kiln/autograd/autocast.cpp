#include "kiln/autograd/autocast.h"

#include <map>
#include <utility>

#include "kiln/autograd/grad_mode.h"
#include "kiln/tensor/error.h"

namespace kiln {

namespace {
thread_local AutocastState state;

bool is_16bit(DType d) { return d == kFloat16 || d == kBFloat16; }

// The cast cache (see autocast.h): the lower-precision casts of float32 parameters made while grad mode was on,
// until the outermost enabled guard ends. An entry keeps its parameter alive (so no other tensor can take its
// address) and the version it was cast at (so a parameter changed in place since is cast again).
struct CachedCast {
  Tensor source, cast;
  // The parameter's data when cast, held (a detached view of it) so that its address cannot be handed out
  // again: moving the parameter (Module::to) swaps its storage, and the new data must not match the old.
  Tensor data;
  uint64_t version = 0;
};
thread_local std::map<std::pair<const void*, DType>, CachedCast> cast_cache;
thread_local int enabled_guards = 0;  // enabled guards alive on this thread; the cache lives while any is

// Casts worth keeping: a float32 leaf that requires grad (a parameter), not a view, with grad mode on (a cast
// made without grad has no node to share, and must not stand in for one that has).
bool cacheable(const Tensor& x) {
  return x.dtype() == kFloat32 && x.requires_grad() && x.is_leaf() && !x.impl()->is_view &&
         autograd::GradMode::is_enabled();
}

// Whether the policy casts x to `to`: a floating tensor on autocast's device, not float64, not already `to`.
bool castable(const Tensor& x, DType to) {
  return state.enabled && x.defined() && x.device().type == state.device && is_floating(x.dtype()) &&
         x.dtype() != kFloat64 && x.dtype() != to;
}
}  // namespace

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled) : saved_(state) {
  KILN_CHECK(is_16bit(dtype), "AutocastGuard: dtype must be float16 or bfloat16, got ", dtype);
  state = {enabled, device, dtype};
  if (enabled) ++enabled_guards;
}

AutocastGuard::~AutocastGuard() {
  if (state.enabled && --enabled_guards == 0) cast_cache.clear();  // the outermost enabled guard ended
  state = saved_;
}

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

Tensor lower(const Tensor& x) {
  if (!castable(x, state.dtype)) return x;
  if (!cacheable(x)) return x.to(state.dtype);
  const std::pair<const void*, DType> key{x.impl(), state.dtype};
  auto it = cast_cache.find(key);
  if (it != cast_cache.end() && it->second.data.raw_data_ptr() == x.raw_data_ptr() &&
      it->second.version == x.version())
    return it->second.cast;
  Tensor cast = x.to(state.dtype);  // first, so that a cast that throws leaves no entry
  cast_cache[key] = {x, cast, x.detach(), x.version()};
  return cast;
}

size_t cached_casts() { return cast_cache.size(); }

struct OwnCastCache::Saved {
  std::map<std::pair<const void*, DType>, CachedCast> cache;
};

OwnCastCache::OwnCastCache() : saved_(std::make_unique<Saved>()) { saved_->cache.swap(cast_cache); }
OwnCastCache::~OwnCastCache() { cast_cache.swap(saved_->cache); }

Tensor float32(const Tensor& x) { return castable(x, kFloat32) && is_16bit(x.dtype()) ? x.to(kFloat32) : x; }

}  // namespace autocast
}  // namespace kiln
