// CPU loops for element-wise ops: any strides, any dtype, parallel, and vectorizable when contiguous.
//
// StridedIter walks N operands of one shape (the output first, inputs already expanded to that shape, so a
// broadcast dim has stride 0). It first merges dims that are contiguous with each other in every operand, so
// a contiguous tensor of any rank becomes one long run, and a transposed one a few. Each run is handed to a
// "inner loop" taking (pointers, byte strides, n); cpu_kernel builds that inner loop from a functor and picks
// a plain indexed loop the compiler vectorizes when every operand is contiguous (or a broadcast scalar).
#pragma once

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor/dtype.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"

namespace kiln::cpu {

template <int N>
class StridedIter {
 public:
  // operands[0] is the output; all must have one shape (inputs expanded by the caller).
  explicit StridedIter(const std::array<const Tensor*, N>& operands) {
    const Shape& shape = operands[0]->sizes();
    for (int k = 0; k < N; ++k) {
      KILN_ASSERT(operands[k]->sizes() == shape, "operand ", k, " has shape ", shape_str(operands[k]->sizes()),
                  ", expected ", shape_str(shape));
      base_[k] = static_cast<char*>(operands[k]->raw_data_ptr());
    }
    numel_ = shape_numel(shape);
    // Keep non-trivial dims, outermost first, with byte strides.
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      shape_.push_back(shape[d]);
      for (int k = 0; k < N; ++k)
        strides_[k].push_back(operands[k]->stride(static_cast<int64_t>(d)) *
                              static_cast<int64_t>(operands[k]->element_size()));
    }
    coalesce();
    prefer_long_runs();
    if (shape_.empty()) {  // a single element
      shape_.push_back(1);
      for (int k = 0; k < N; ++k) strides_[k].push_back(0);
    }
  }

  int64_t numel() const { return numel_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t inner_size() const { return shape_.back(); }
  int64_t inner_stride(int k) const { return strides_[k].back(); }

  // Calls loop(char* ptrs[N], const int64_t inner_strides[N], int64_t n) for each run of consecutive
  // elements in [begin, end): row-major order, but for the one dim prefer_long_runs may move innermost.
  template <typename Loop>
  void for_each_run(int64_t begin, int64_t end, Loop&& loop) const {
    const int nd = ndim();
    std::vector<int64_t> counter(nd);
    int64_t rest = begin;
    for (int d = nd - 1; d >= 0; --d) {
      counter[d] = rest % shape_[d];
      rest /= shape_[d];
    }
    std::array<int64_t, N> inner;
    for (int k = 0; k < N; ++k) inner[k] = strides_[k][nd - 1];
    int64_t pos = begin;
    while (pos < end) {
      std::array<char*, N> ptrs;
      for (int k = 0; k < N; ++k) {
        int64_t off = 0;
        for (int d = 0; d < nd; ++d) off += counter[d] * strides_[k][d];
        ptrs[k] = base_[k] + off;
      }
      int64_t n = std::min(shape_[nd - 1] - counter[nd - 1], end - pos);
      loop(ptrs.data(), inner.data(), n);
      pos += n;
      counter[nd - 1] += n;
      for (int d = nd - 1; d > 0 && counter[d] == shape_[d]; --d) {
        counter[d] = 0;
        ++counter[d - 1];
      }
    }
  }

  // Runs the whole iteration, split across threads in chunks of at least `grain` elements.
  template <typename Loop>
  void run(Loop&& loop, int64_t grain = kDefaultGrain) const {
    parallel_for(0, numel_, grain, [&](int64_t b, int64_t e) { for_each_run(b, e, loop); });
  }

 private:
  // Merges dim d into d+1 when, for every operand, stepping d once equals stepping d+1 through its extent.
  void coalesce() {
    if (shape_.size() < 2) return;
    std::vector<int64_t> shape{shape_.back()};
    std::array<std::vector<int64_t>, N> strides;
    for (int k = 0; k < N; ++k) strides[k].push_back(strides_[k].back());
    for (int d = static_cast<int>(shape_.size()) - 2; d >= 0; --d) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) mergeable &= strides_[k][d] == strides[k].back() * shape.back();
      if (mergeable) {
        shape.back() *= shape_[d];
      } else {
        shape.push_back(shape_[d]);
        for (int k = 0; k < N; ++k) strides[k].push_back(strides_[k][d]);
      }
    }
    // Built innermost first; put outermost first again.
    shape_.assign(shape.rbegin(), shape.rend());
    for (int k = 0; k < N; ++k) strides_[k].assign(strides[k].rbegin(), strides[k].rend());
  }

  // A short innermost dim (the 3 channels of an NCHW to NHWC copy, the 2 of a pixel shuffle) would make every
  // run a few elements long, each paying for its offsets and a call: 5x LibTorch's time on such copies. Then the
  // dim the operands step through most closely (the smallest largest stride), if much longer, goes innermost
  // instead. Only the order of the visits changes: each element is still visited once.
  void prefer_long_runs() {
    constexpr int64_t kShortRun = 8;
    const int nd = static_cast<int>(shape_.size());
    if (nd < 2 || shape_.back() >= kShortRun) return;
    int best = -1;
    int64_t best_stride = 0;
    for (int d = 0; d < nd - 1; ++d) {
      if (shape_[d] < 4 * shape_.back()) continue;
      int64_t widest = 0;
      for (int k = 0; k < N; ++k) widest = std::max(widest, std::abs(strides_[k][d]));
      if (best < 0 || widest < best_stride) best = d, best_stride = widest;
    }
    if (best < 0) return;
    auto to_back = [best](std::vector<int64_t>& v) {
      const int64_t moved = v[static_cast<size_t>(best)];
      v.erase(v.begin() + best);
      v.push_back(moved);
    };
    to_back(shape_);
    for (int k = 0; k < N; ++k) to_back(strides_[k]);
  }

  std::array<char*, N> base_{};
  std::vector<int64_t> shape_;
  std::array<std::vector<int64_t>, N> strides_;
  int64_t numel_ = 0;
};

namespace detail {

template <typename T>
struct AsTensorRef {
  using type = const Tensor&;
};

template <typename T>
KILN_INLINE opmath_t<T> load(const char* p) {
  return static_cast<opmath_t<T>>(*reinterpret_cast<const T*>(p));
}

// The type an input is read through: bool as its byte, since GCC does not vectorize loads of bool (a select
// on a bool mask, as where does, stays a scalar branch), and kiln's bools are stored as bytes 0 and 1.
template <typename T>
using LoadAs = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

// Applies f to n elements: out[i] = f(in_k[i]...), every operand unit-stride except the inputs that `scalar`
// marks as broadcast scalars (stride 0). Each case is a unit-stride loop the compiler vectorizes; operands
// with other strides take strided_loop below.
template <typename Out, typename... In, typename F, size_t... I>
KILN_INLINE void contiguous_loop(char** ptrs, int64_t n, const F& f, const std::array<bool, sizeof...(In)>& scalar,
                                 std::index_sequence<I...>) {
  Out* out = reinterpret_cast<Out*>(ptrs[0]);
  std::tuple<const LoadAs<In>*...> in{reinterpret_cast<const LoadAs<In>*>(ptrs[I + 1])...};
  bool any_scalar = (scalar[I] || ...);
  if (!any_scalar) {
    for (int64_t i = 0; i < n; ++i) out[i] = convert<Out>(f(static_cast<opmath_t<In>>(std::get<I>(in)[i])...));
    return;
  }
  // Hoist broadcast scalars out of the loop. For two inputs, write the three cases out so each is a unit-stride
  // loop.
  if constexpr (sizeof...(In) == 2) {
    using A = std::tuple_element_t<0, std::tuple<In...>>;
    using B = std::tuple_element_t<1, std::tuple<In...>>;
    const LoadAs<A>* a = std::get<0>(in);
    const LoadAs<B>* b = std::get<1>(in);
    if (scalar[0] && !scalar[1]) {
      const opmath_t<A> av = static_cast<opmath_t<A>>(a[0]);
      for (int64_t i = 0; i < n; ++i) out[i] = convert<Out>(f(av, static_cast<opmath_t<B>>(b[i])));
      return;
    }
    if (!scalar[0] && scalar[1]) {
      const opmath_t<B> bv = static_cast<opmath_t<B>>(b[0]);
      for (int64_t i = 0; i < n; ++i) out[i] = convert<Out>(f(static_cast<opmath_t<A>>(a[i]), bv));
      return;
    }
  }
  // Otherwise (three inputs, as where and lerp have), copy each scalar into a short buffer and run the
  // unit-stride loop chunk by chunk: indexing with 0/1 steps does not vectorize, and a select such as where's
  // then becomes a branch that random data mispredicts half the time (~3 ns an element instead of ~0.1).
  constexpr int64_t kChunk = 256;
  std::tuple<std::array<LoadAs<In>, kChunk>...> splat;
  const int64_t fill = std::min(kChunk, n);  // a short run (an inner dim of 2) fills only what it reads
  ((scalar[I] ? void(std::fill_n(std::get<I>(splat).begin(), fill, std::get<I>(in)[0])) : void()), ...);
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    const std::tuple<const LoadAs<In>*...> p{(scalar[I] ? std::get<I>(splat).data() : std::get<I>(in) + i0)...};
    Out* o = out + i0;
    for (int64_t i = 0; i < m; ++i) o[i] = convert<Out>(f(static_cast<opmath_t<In>>(std::get<I>(p)[i])...));
  }
}

template <typename Out, typename... In, typename F, size_t... I>
void strided_loop(char** ptrs, const int64_t* strides, int64_t n, const F& f, std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(ptrs[0] + i * strides[0]) =
        convert<Out>(f(load<In>(ptrs[I + 1] + i * strides[I + 1])...));
  }
}

}  // namespace detail

// out = f(inputs...) element-wise. Out and In... are the storage types of the operands; f works on op-math
// types (float for the 16-bit floats) and its result is converted to Out.
template <typename Out, typename... In, typename F>
void cpu_kernel(const Tensor& out, const F& f, typename detail::AsTensorRef<In>::type... inputs) {
  constexpr int N = 1 + sizeof...(In);
  StridedIter<N> iter({&out, &inputs...});
  if (iter.numel() == 0) return;
  auto seq = std::index_sequence_for<In...>{};
  constexpr std::array<int64_t, N> sizes{static_cast<int64_t>(sizeof(Out)), static_cast<int64_t>(sizeof(In))...};
  iter.run([&](char** ptrs, const int64_t* strides, int64_t n) {
    bool unit = strides[0] == sizes[0];
    std::array<bool, N - 1> scalar{};
    for (int k = 1; k < N && unit; ++k) {
      scalar[k - 1] = strides[k] == 0;
      unit = strides[k] == sizes[k] || strides[k] == 0;
    }
    if (unit) detail::contiguous_loop<Out, In...>(ptrs, n, f, scalar, seq);
    else detail::strided_loop<Out, In...>(ptrs, strides, n, f, seq);
  });
}

}  // namespace kiln::cpu
