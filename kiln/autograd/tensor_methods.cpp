// Tensor's math methods, its operators and its autograd methods. The math methods and operators forward to the
// differentiable functions of functions.h; the autograd methods read and write the tensor's AutogradMeta.
#include "kiln/autograd/linalg.h"
#include "kiln/autograd/engine.h"
#include "kiln/autograd/record.h"

namespace kiln {

Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::sign() const { return kiln::sign(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::sin() const { return kiln::sin(*this); }
Tensor Tensor::cos() const { return kiln::cos(*this); }
Tensor Tensor::tan() const { return kiln::tan(*this); }
Tensor Tensor::asin() const { return kiln::asin(*this); }
Tensor Tensor::acos() const { return kiln::acos(*this); }
Tensor Tensor::roll(IntArrayRef shifts, IntArrayRef dims) const { return kiln::roll(*this, shifts, dims); }
Tensor Tensor::atan() const { return kiln::atan(*this); }
Tensor Tensor::sinh() const { return kiln::sinh(*this); }
Tensor Tensor::cosh() const { return kiln::cosh(*this); }
Tensor Tensor::asinh() const { return kiln::asinh(*this); }
Tensor Tensor::acosh() const { return kiln::acosh(*this); }
Tensor Tensor::atanh() const { return kiln::atanh(*this); }
Tensor Tensor::log2() const { return kiln::log2(*this); }
Tensor Tensor::log10() const { return kiln::log10(*this); }
Tensor Tensor::reciprocal() const { return kiln::reciprocal(*this); }
Tensor Tensor::floor() const { return kiln::floor(*this); }
Tensor Tensor::ceil() const { return kiln::ceil(*this); }
Tensor Tensor::round() const { return kiln::round(*this); }
Tensor Tensor::trunc() const { return kiln::trunc(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::log1p() const { return kiln::log1p(*this); }
Tensor Tensor::expm1() const { return kiln::expm1(*this); }
Tensor Tensor::erf() const { return kiln::erf(*this); }
Tensor Tensor::silu() const { return kiln::silu(*this); }
Tensor Tensor::square() const { return kiln::mul(*this, *this); }
// The free in-place functions take Tensor&; the handle is shared, so a copy of it writes the same data.
#define KILN_INPLACE_METHOD(name)     \
  const Tensor& Tensor::name() const { \
    Tensor t = *this;                  \
    kiln::name(t);                     \
    return *this;                      \
  }
KILN_INPLACE_METHOD(neg_)
KILN_INPLACE_METHOD(abs_)
KILN_INPLACE_METHOD(exp_)
KILN_INPLACE_METHOD(log_)
KILN_INPLACE_METHOD(sqrt_)
KILN_INPLACE_METHOD(tanh_)
KILN_INPLACE_METHOD(sigmoid_)
KILN_INPLACE_METHOD(relu_)
KILN_INPLACE_METHOD(floor_)
KILN_INPLACE_METHOD(round_)
#undef KILN_INPLACE_METHOD
const Tensor& Tensor::pow_(const Scalar& e) const { Tensor t = *this; kiln::pow_(t, e); return *this; }
const Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) const {
  Tensor t = *this;
  kiln::clamp_(t, lo, hi);
  return *this;
}
Tensor Tensor::pow(const Scalar& e) const { return kiln::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return kiln::pow(*this, e); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return kiln::clamp(*this, lo, hi); }
Tensor Tensor::add(const Tensor& o, const Scalar& alpha) const { return kiln::add(*this, o, alpha); }
Tensor Tensor::sub(const Tensor& o, const Scalar& alpha) const { return kiln::sub(*this, o, alpha); }
Tensor Tensor::mul(const Tensor& o) const { return kiln::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return kiln::div(*this, o); }
Tensor Tensor::maximum(const Tensor& o) const { return kiln::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return kiln::minimum(*this, o); }
Tensor Tensor::atan2(const Tensor& o) const { return kiln::atan2(*this, o); }
Tensor Tensor::fmod(const Tensor& o) const { return kiln::fmod(*this, o); }
Tensor Tensor::remainder(const Tensor& o) const { return kiln::remainder(*this, o); }
const Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) const { Tensor t = *this; kiln::add_(t, o, alpha); return *this; }
const Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) const { Tensor t = *this; kiln::sub_(t, o, alpha); return *this; }
const Tensor& Tensor::mul_(const Tensor& o) const { Tensor t = *this; kiln::mul_(t, o); return *this; }
const Tensor& Tensor::div_(const Tensor& o) const { Tensor t = *this; kiln::div_(t, o); return *this; }
const Tensor& Tensor::add_(const Scalar& o) const { Tensor t = *this; kiln::add_(t, o); return *this; }
const Tensor& Tensor::mul_(const Scalar& o) const { Tensor t = *this; kiln::mul_(t, o); return *this; }
Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& v) const { return kiln::masked_fill(*this, mask, v); }
Tensor Tensor::masked_select(const Tensor& mask) const { return kiln::masked_select(*this, mask); }
Tensor Tensor::nonzero() const { return kiln::nonzero(*this); }
const Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& v) const { Tensor t = *this; kiln::masked_fill_(t, mask, v); return *this; }
Tensor Tensor::operator[](const Tensor& i) const { return kiln::index(*this, {i}); }
const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) const {
  Tensor t = *this;
  kiln::index_put_(t, indices, values, accumulate);
  return *this;
}
const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Scalar& value) const {
  return index_put_(indices, full({}, value, TensorOptions(dtype()).device(device())));
}
Tensor Tensor::index_put(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) const {
  return kiln::index_put(*this, indices, values, accumulate);
}

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(IntArrayRef dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(IntArrayRef dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
std::pair<Tensor, Tensor> Tensor::max(int64_t d, bool keepdim) const { return kiln::max(*this, d, keepdim); }
std::pair<Tensor, Tensor> Tensor::min(int64_t d, bool keepdim) const { return kiln::min(*this, d, keepdim); }
Tensor Tensor::prod(IntArrayRef dims, bool keepdim) const { return kiln::prod(*this, dims, keepdim); }
Tensor Tensor::amax(IntArrayRef dims, bool keepdim) const { return kiln::amax(*this, dims, keepdim); }
Tensor Tensor::amin(IntArrayRef dims, bool keepdim) const { return kiln::amin(*this, dims, keepdim); }
Tensor Tensor::var(IntArrayRef dims, double correction, bool keepdim) const {
  return kiln::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(IntArrayRef dims, double correction, bool keepdim) const {
  return kiln::std(*this, dims, correction, keepdim);
}
Tensor Tensor::norm(double p, IntArrayRef dims, bool keepdim) const { return kiln::norm(*this, p, dims, keepdim); }
Tensor Tensor::logsumexp(IntArrayRef dims, bool keepdim) const { return kiln::logsumexp(*this, dims, keepdim); }
Tensor Tensor::softmax(int64_t d) const { return kiln::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return kiln::log_softmax(*this, d); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool keepdim) const { return kiln::argmax(*this, d, keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> d, bool keepdim) const { return kiln::argmin(*this, d, keepdim); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return kiln::mm(*this, o); }
Tensor Tensor::cumsum(int64_t d, std::optional<DType> dtype) const { return kiln::cumsum(*this, d, dtype); }
std::pair<Tensor, Tensor> Tensor::sort(int64_t d, bool descending) const { return kiln::sort(*this, d, descending); }
Tensor Tensor::argsort(int64_t d, bool descending) const { return kiln::argsort(*this, d, descending); }
std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t d, bool largest) const {
  return kiln::topk(*this, k, d, largest);
}
std::pair<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t d, bool keepdim) const {
  return kiln::kthvalue(*this, k, d, keepdim);
}
Tensor Tensor::median() const { return kiln::median(*this); }
std::pair<Tensor, Tensor> Tensor::median(int64_t d, bool keepdim) const { return kiln::median(*this, d, keepdim); }
Tensor Tensor::nanmedian() const { return kiln::nanmedian(*this); }
std::pair<Tensor, Tensor> Tensor::nanmedian(int64_t d, bool keepdim) const {
  return kiln::nanmedian(*this, d, keepdim);
}
Tensor Tensor::quantile(double q, std::optional<int64_t> d, bool keepdim, std::string_view interpolation) const {
  return kiln::quantile(*this, q, d, keepdim, interpolation);
}
Tensor Tensor::nanquantile(double q, std::optional<int64_t> d, bool keepdim, std::string_view interpolation) const {
  return kiln::nanquantile(*this, q, d, keepdim, interpolation);
}
Tensor Tensor::nansum(IntArrayRef dims, bool keepdim) const { return kiln::nansum(*this, dims, keepdim); }
Tensor Tensor::nanmean(IntArrayRef dims, bool keepdim) const { return kiln::nanmean(*this, dims, keepdim); }
Tensor Tensor::det() const { return linalg::det(*this); }
Tensor Tensor::inverse() const { return linalg::inv(*this); }
Tensor Tensor::pinverse(double rcond) const { return linalg::pinv(*this, 0.0, rcond); }
Tensor Tensor::matrix_power(int64_t k) const { return linalg::matrix_power(*this, k); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return kiln::index_select(*this, d, i); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return kiln::gather(*this, d, i); }
Tensor Tensor::scatter(int64_t d, const Tensor& i, const Tensor& s) const { return kiln::scatter(*this, d, i, s); }
Tensor Tensor::scatter_add(int64_t d, const Tensor& i, const Tensor& s) const {
  return kiln::scatter_add(*this, d, i, s);
}
Tensor Tensor::index_add(int64_t d, const Tensor& i, const Tensor& s, const Scalar& alpha) const {
  return kiln::index_add(*this, d, i, s, alpha);
}
const Tensor& Tensor::scatter_(int64_t d, const Tensor& i, const Tensor& s) const {
  Tensor t = *this;
  kiln::scatter_(t, d, i, s);
  return *this;
}
const Tensor& Tensor::scatter_add_(int64_t d, const Tensor& i, const Tensor& s) const {
  Tensor t = *this;
  kiln::scatter_add_(t, d, i, s);
  return *this;
}
const Tensor& Tensor::index_add_(int64_t d, const Tensor& i, const Tensor& s, const Scalar& alpha) const {
  Tensor t = *this;
  kiln::index_add_(t, d, i, s, alpha);
  return *this;
}
Tensor Tensor::repeat(IntArrayRef repeats) const { return kiln::repeat(*this, repeats); }
Tensor Tensor::flip(IntArrayRef dims) const { return kiln::flip(*this, dims); }
Tensor Tensor::tril(int64_t k) const { return kiln::tril(*this, k); }
Tensor Tensor::triu(int64_t k) const { return kiln::triu(*this, k); }
std::vector<Tensor> Tensor::split(int64_t size, int64_t d) const { return kiln::split(*this, size, d); }
std::vector<Tensor> Tensor::split(IntArrayRef sizes, int64_t d) const { return kiln::split(*this, sizes, d); }
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const { return kiln::chunk(*this, chunks, d); }
std::vector<Tensor> Tensor::unbind(int64_t d) const { return kiln::unbind(*this, d); }
bool Tensor::allclose(const Tensor& o, double rtol, double atol, bool equal_nan) const {
  return kiln::allclose(*this, o, rtol, atol, equal_nan);
}
bool Tensor::equal(const Tensor& o) const { return kiln::equal(*this, o); }

Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(scalar_to_tensor(a), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(scalar_to_tensor(a), b); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }
Tensor& operator+=(Tensor& a, const Scalar& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Scalar& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Scalar& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Scalar& b) { return div_(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }


// ---- autograd ----

using autograd::AutogradMeta;
using autograd::ensure_meta;
using autograd::meta_of;

bool Tensor::requires_grad() const { return autograd::requires_grad(*this); }

const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  autograd::refresh_if_stale(*this);  // a view whose base was written since it was made is no longer a leaf
  AutogradMeta* m = meta_of(*this);
  KILN_CHECK(!(m && m->grad_fn), "requires_grad_: only leaves can be told to require grad; this tensor (shape ",
             shape_str(sizes()), ") was computed by ", m && m->grad_fn ? m->grad_fn->name() : "",
             ": use detach() to make a leaf of it");
  KILN_CHECK(!requires_grad || is_floating_point(), "requires_grad_: only floating-point tensors can require grad, got ",
             dtype());
  if (!requires_grad && m == nullptr) return *this;
  ensure_meta(*this).requires_grad = requires_grad;
  if (requires_grad && impl()->is_view) {
    if (const Tensor base = autograd::view_base_of(*this); base.defined()) {
      auto& leaf_views = ensure_meta(base).leaf_views;
      std::erase_if(leaf_views, [](const std::weak_ptr<TensorImpl>& v) { return v.expired(); });
      leaf_views.push_back(impl_ptr());
    }
  }
  return *this;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  AutogradMeta* m = meta_of(*this);
  return m ? m->grad : undefined;
}

void Tensor::set_grad(const Tensor& grad) const {
  KILN_CHECK(!grad.defined() || grad.sizes() == sizes(), "set_grad: the gradient has shape ", shape_str(grad.sizes()),
             ", the tensor has shape ", shape_str(sizes()));
  KILN_CHECK(!grad.defined() || (grad.dtype() == dtype() && grad.device() == device()), "set_grad: the gradient is ",
             grad.dtype(), " on ", grad.device().str(), ", the tensor is ", dtype(), " on ", device().str());
  if (!grad.defined() && meta_of(*this) == nullptr) return;
  ensure_meta(*this).grad = grad;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  autograd::refresh_if_stale(*this);
  AutogradMeta* m = meta_of(*this);
  return m ? m->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

// Not a view for autograd's purposes (is_view is for in-place checks): writing into a detached tensor is fine.
Tensor Tensor::detach() const {
  Tensor out = ops::alias(*this);
  out.impl()->is_view = false;
  out.impl()->view_base.reset();
  return out;
}

const Tensor& Tensor::detach_() const {
  KILN_CHECK(!impl()->is_view || grad_fn() == nullptr, "detach_: cannot detach a view in place; use detach()");
  if (AutogradMeta* m = meta_of(*this)) {
    m->grad_fn = nullptr;
    m->output_nr = 0;
    m->requires_grad = false;
  }
  impl()->view_base.reset();  // out of the graph for good: a later write into its base must not pull it back
  return *this;
}

const Tensor& Tensor::retain_grad() const {
  autograd::refresh_if_stale(*this);
  AutogradMeta* m = meta_of(*this);
  KILN_CHECK(m && (m->requires_grad || m->grad_fn), "retain_grad: the tensor (shape ", shape_str(sizes()),
             ") does not require grad");
  if (!m->grad_fn || m->retains_grad) return *this;  // a leaf keeps its grad anyway
  m->retains_grad = true;
  m->grad_fn->retain_hooks.push_back({m->output_nr, impl_ptr()});
  return *this;
}

bool Tensor::retains_grad() const {
  AutogradMeta* m = meta_of(*this);
  return m && m->retains_grad;
}

unsigned Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  autograd::refresh_if_stale(*this);
  AutogradMeta* m = meta_of(*this);
  KILN_CHECK(m && (m->requires_grad || m->grad_fn), "register_hook: the tensor (shape ", shape_str(sizes()),
             ") does not require grad, so backward never computes its gradient");
  unsigned id = autograd::next_hook_id();
  if (m->grad_fn) m->grad_fn->pre_hooks.push_back({id, m->output_nr, std::move(hook)});
  else m->hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_hook(unsigned handle) const {
  AutogradMeta* m = meta_of(*this);
  if (!m) return;
  std::erase_if(m->hooks, [&](const auto& h) { return h.first == handle; });
  std::erase_if(m->post_accumulate_hooks, [&](const auto& h) { return h.first == handle; });
  if (m->grad_fn) std::erase_if(m->grad_fn->pre_hooks, [&](const auto& h) { return h.id == handle; });
}

unsigned Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  AutogradMeta* m = meta_of(*this);
  KILN_CHECK(m && m->requires_grad && !m->grad_fn, "register_post_accumulate_grad_hook: only leaves that require "
             "grad accumulate a gradient; this tensor (shape ", shape_str(sizes()), ") is not one");
  unsigned id = autograd::next_hook_id();
  m->post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

}  // namespace kiln
