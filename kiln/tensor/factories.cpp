#include "kiln/tensor/views.h"
#include "kiln/tensor/factories.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/tensor/dispatch.h"

namespace kiln {

Tensor empty(IntArrayRef shape, TensorOptions options) {
  DType dtype = options.dtype_or(default_dtype());
  for (int64_t s : shape) KILN_CHECK(s >= 0, "empty: negative size ", s, " in shape ", shape_str(shape));
  size_t nbytes = 0;
  KILN_CHECK(!__builtin_mul_overflow(static_cast<size_t>(shape_numel(shape)), dtype_size(dtype), &nbytes),
             "empty: a tensor of shape ", shape_str(shape), " and dtype ", dtype, " needs more bytes than size_t holds");
  auto storage = std::make_shared<StorageImpl>(nbytes, options.device());
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), dtype, shape.vec(), contiguous_strides(shape), 0));
}

Tensor full(IntArrayRef shape, const Scalar& value, TensorOptions options) {
  Tensor t = empty(shape, options.dtype(options.dtype_or(value.dtype())));
  return ops::fill_(t, value);
}

Tensor zeros(IntArrayRef shape, TensorOptions options) { return full(shape, 0, options.dtype(options.dtype_or(default_dtype()))); }
Tensor ones(IntArrayRef shape, TensorOptions options) { return full(shape, 1, options.dtype(options.dtype_or(default_dtype()))); }
Tensor scalar_tensor(const Scalar& value, TensorOptions options) { return full({}, value, options); }

Tensor arange(const Scalar& end, TensorOptions options) { return arange(0, end, 1, options); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options) {
  bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  DType dtype = options.dtype_or(all_int ? kInt64 : default_dtype());
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  KILN_CHECK(st != 0, "arange: step must be nonzero");
  KILN_CHECK(std::isfinite(s) && std::isfinite(e), "arange: start and end must be finite, got ", s, " and ", e);
  KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange: the range [", s, ", ", e, ") cannot be walked with step ", st);
  int64_t n;
  if (all_int) {  // exact: ceil((end - start) / step) in integers
    int64_t si = start.to_int(), ei = end.to_int(), sti = step.to_int();
    n = sti > 0 ? (ei - si + sti - 1) / sti : (si - ei + (-sti) - 1) / (-sti);
  } else {
    n = static_cast<int64_t>(std::ceil((e - s) / st));
  }
  Tensor out = empty({n}, options.dtype(dtype));
  if (n > 0) call_kernel<Op::arange>(out.device(), out, start, step);
  return out;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  KILN_CHECK(steps >= 0, "linspace: steps must be non-negative, got ", steps);
  Tensor out = empty({steps}, options.dtype(options.dtype_or(default_dtype())));
  if (steps == 0) return out;
  double step = steps == 1 ? 0.0 : (end - start) / static_cast<double>(steps - 1);
  // Like PyTorch: the first half counts up from start, the second down from end, so both ends are exact.
  int64_t half = steps / 2;
  call_kernel<Op::arange>(out.device(), out, Scalar(start), Scalar(step));
  if (steps > 1) {
    Tensor tail = empty({steps - half}, TensorOptions(out.dtype()).device(out.device()));
    call_kernel<Op::arange>(out.device(), tail, Scalar(end), Scalar(-step));  // end, end - step, ...
    ops::copy_(ops::narrow(out, 0, half, steps - half), ops::as_strided(tail, {steps - half}, {-1}, steps - half - 1));
  }
  return out;
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  KILN_CHECK(n >= 0 && m >= -1, "eye: sizes must be non-negative (m = -1 means m = n), got n = ", n, ", m = ", m);
  if (m < 0) m = n;
  Tensor out = zeros({n, m}, options);
  ops::fill_(ops::diagonal(out), 1);
  return out;
}

// ---- random ----

namespace {

Tensor& random_fill(Op op, Tensor& x, RandomDist dist, const Scalar& a, const Scalar& b, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  uint64_t int_range = dist == RandomDist::RandInt ? static_cast<uint64_t>(b.to_int()) - static_cast<uint64_t>(a.to_int()) : 0;
  int per_call = values_per_counter(dist, x.dtype() == kFloat64, int_range);
  auto counters = static_cast<uint64_t>((x.numel() + per_call - 1) / per_call);
  auto [seed, offset] = g.reserve(counters);
  if (x.numel() == 0) return x;
  // Kernels fill contiguous memory in row-major order; other layouts go through a temporary.
  Tensor target = x.is_contiguous() ? x : empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  switch (op) {
    case Op::uniform:
      call_kernel<Op::uniform>(x.device(), target, seed, offset, a, b);
      break;
    case Op::normal:
      call_kernel<Op::normal>(x.device(), target, seed, offset, a, b);
      break;
    case Op::randint:
      call_kernel<Op::randint>(x.device(), target, seed, offset, a, b);
      break;
    default:
      call_kernel<Op::bernoulli>(x.device(), target, seed, offset, a, b);
  }
  if (!x.is_contiguous()) ops::copy_(x, target);
  else x.bump_version(op_inplace_name(op));
  return x;
}

}  // namespace

Tensor& uniform_(Tensor& x, double from, double to, Generator* gen) {
  KILN_CHECK(is_floating(x.dtype()), "uniform_: expected a float tensor, got ", x.dtype());
  KILN_CHECK(from <= to, "uniform_: expected from <= to, got [", from, ", ", to, ")");
  return random_fill(Op::uniform, x, RandomDist::Uniform, from, to, gen);
}

Tensor& normal_(Tensor& x, double mean, double std, Generator* gen) {
  KILN_CHECK(is_floating(x.dtype()), "normal_: expected a float tensor, got ", x.dtype());
  KILN_CHECK(std >= 0, "normal_: std must be non-negative, got ", std);
  return random_fill(Op::normal, x, RandomDist::Normal, mean, std, gen);
}

Tensor& bernoulli_(Tensor& x, double p, Generator* gen) {
  KILN_CHECK(p >= 0 && p <= 1, "bernoulli_: p must be in [0, 1], got ", p);
  return random_fill(Op::bernoulli, x, RandomDist::Bernoulli, p, 0, gen);
}

Tensor rand(IntArrayRef shape, TensorOptions options, Generator* gen) {
  Tensor t = empty(shape, options);
  return uniform_(t, 0, 1, gen);
}

Tensor randn(IntArrayRef shape, TensorOptions options, Generator* gen) {
  Tensor t = empty(shape, options);
  return normal_(t, 0, 1, gen);
}

Tensor randint(int64_t low, int64_t high, IntArrayRef shape, TensorOptions options, Generator* gen) {
  KILN_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  DType dtype = options.dtype_or(kInt64);
  KILN_CHECK(dtype != kBool, "randint: dtype bool is not supported");
  visit_dtype<kNumericSet>(dtype, "randint", [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      KILN_CHECK(low >= static_cast<int64_t>(std::numeric_limits<T>::lowest()) &&
                     high - 1 <= static_cast<int64_t>(std::numeric_limits<T>::max()),
                 "randint: [", low, ", ", high, ") does not fit in dtype ", dtype);
    }
  });
  Tensor t = empty(shape, options.dtype(dtype));
  return random_fill(Op::randint, t, RandomDist::RandInt, Scalar(low), Scalar(high), gen);
}

Tensor randint(int64_t high, IntArrayRef shape, TensorOptions options, Generator* gen) {
  return randint(0, high, shape, options, gen);
}

Tensor randperm(int64_t n, TensorOptions options, Generator* gen) {
  KILN_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  DType dtype = options.dtype_or(kInt64);
  KILN_CHECK(dtype != kBool && (is_floating(dtype) || dtype == kInt64 || n - 1 <= (dtype == kInt32 ? INT32_MAX : 255)),
             "randperm: ", n, " values do not fit in dtype ", dtype);
  // Fisher-Yates driven by one batch of random 64-bit draws, so the permutation depends only on the generator.
  Tensor r = randint(0, std::numeric_limits<int64_t>::max(), {n}, kInt64, gen);
  std::vector<int64_t> draws = r.to_vector<int64_t>();
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[draws[i] % (i + 1)]);
  return ops::to(tensor(perm, {n}), options.device(), options.dtype_or(kInt64));
}

// ---- *_like ----

namespace {
TensorOptions like(const Tensor& x, TensorOptions o) {
  return TensorOptions(o.dtype_or(x.dtype())).device(o.device() == kCPU ? x.device() : o.device());
}
}  // namespace

Tensor empty_like(const Tensor& x, TensorOptions o) { return empty(x.sizes(), like(x, o)); }
Tensor zeros_like(const Tensor& x, TensorOptions o) { return zeros(x.sizes(), like(x, o)); }
Tensor ones_like(const Tensor& x, TensorOptions o) { return ones(x.sizes(), like(x, o)); }
Tensor full_like(const Tensor& x, const Scalar& v, TensorOptions o) { return full(x.sizes(), v, like(x, o)); }
Tensor rand_like(const Tensor& x, TensorOptions o, Generator* g) { return rand(x.sizes(), like(x, o), g); }
Tensor randn_like(const Tensor& x, TensorOptions o, Generator* g) { return randn(x.sizes(), like(x, o), g); }

// ---- from existing data ----

template <typename T>
Tensor tensor(const std::vector<T>& values, IntArrayRef shape, TensorOptions options) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape.vec();
  KILN_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
             " values do not fill shape ", shape_str(s));
  Tensor src = empty(s, dtype_of<T>);
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = src.data_ptr<bool>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  } else {
    if (!values.empty()) std::memcpy(src.raw_data_ptr(), values.data(), values.size() * sizeof(T));
  }
  return ops::to(src, options.device(), options.dtype_or(dtype_of<T>));
}
#define KILN_TENSOR_FROM_VECTOR(e, T, name, cat) \
  template Tensor tensor<T>(const std::vector<T>&, IntArrayRef, TensorOptions);
KILN_FORALL_DTYPES(KILN_TENSOR_FROM_VECTOR)
#undef KILN_TENSOR_FROM_VECTOR

Tensor tensor(std::initializer_list<double> values, TensorOptions options) {
  return tensor(std::vector<double>(values), {}, options.dtype(options.dtype_or(default_dtype())));
}

Tensor from_buffer(const void* data, IntArrayRef shape, DType dtype, TensorOptions options) {
  Tensor src = empty(shape, dtype);
  if (src.nbytes() > 0) {
    KILN_CHECK(data != nullptr, "from_buffer: data is null for a tensor of shape ", shape_str(shape));
    std::memcpy(src.raw_data_ptr(), data, src.nbytes());
  }
  return ops::to(src, options.device(), options.dtype_or(dtype));
}

Tensor from_blob(void* data, IntArrayRef shape, DType dtype, std::function<void(void*)> deleter, Device device) {
  Shape strides = contiguous_strides(shape);
  return from_blob(data, shape, strides, dtype, std::move(deleter), device);
}

Tensor from_blob(void* data, IntArrayRef shape, IntArrayRef strides, DType dtype, std::function<void(void*)> deleter,
                 Device device) {
  KILN_CHECK(shape.size() == strides.size(), "from_blob: shape ", shape_str(shape), " and strides ",
             shape_str(strides), " have different lengths");
  int64_t extent = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(strides[i] >= 0, "from_blob: negative strides are not supported, got ", shape_str(strides));
    if (shape[i] == 0) extent = 0;
    if (extent > 0) extent += (shape[i] - 1) * strides[i];
  }
  auto storage = std::make_shared<StorageImpl>(data, static_cast<size_t>(extent) * dtype_size(dtype), device,
                                               std::move(deleter));
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), dtype, shape.vec(), strides.vec(), 0));
}

}  // namespace kiln
