// CPU kernels of padding by copies (op_list.h: PadKernel, PadBackwardKernel; pad.h gives the positions), over
// (B, D, H, W). Forward: each output row (b, od, oh) reads one input row, its inside a memcpy and its border
// through a table of source positions. Backward: each input row (b, d, h) sums the output rows that read it
// (padding::readers along D and H), each by its inside and then its border outputs added at their sources along
// W. A task owns whole input rows, so no two threads write one element and the sums come out in one order.
// float16 and bfloat16 gradients sum in float32 and are rounded once.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/pad.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"

namespace kiln {
namespace {

struct Dims {
  int64_t B, D, H, W, OD, OH, OW;
};
Dims dims_of(const Tensor& in, const Tensor& padded) {
  return {in.size(0), in.size(1), in.size(2), in.size(3), padded.size(1), padded.size(2), padded.size(3)};
}

std::vector<int64_t> sources(const PadParams& p, int dim, int64_t n, int64_t out) {
  std::vector<int64_t> s(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) s[static_cast<size_t>(o)] = padding::source(p.mode, o, n, p.before[dim]);
  return s;
}

void forward(const Tensor& out, const Tensor& x, const PadParams& p) {
  const Dims s = dims_of(x, out);
  const std::vector<int64_t> sd = sources(p, 0, s.D, s.OD), sh = sources(p, 1, s.H, s.OH);
  const std::vector<int64_t> sw = sources(p, 2, s.W, s.OW);
  const int64_t bw = p.before[2], lo = std::clamp<int64_t>(bw, 0, s.OW), hi = std::clamp<int64_t>(bw + s.W, 0, s.OW);
  const size_t esize = x.element_size();
  const char* px = static_cast<const char*>(x.raw_data_ptr());
  char* po = static_cast<char*>(out.raw_data_ptr());
  visit_dtype(x.dtype(), "pad", [&]<typename T>() {
    parallel_for(0, s.B * s.OD * s.OH, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, s.OW)),
                 [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t oh = r % s.OH, od = r / s.OH % s.OD, b = r / (s.OH * s.OD);
        const T* src = reinterpret_cast<const T*>(px) + ((b * s.D + sd[od]) * s.H + sh[oh]) * s.W;
        T* dst = reinterpret_cast<T*>(po) + r * s.OW;
        if (hi > lo) std::memcpy(dst + lo, src + (lo - bw), static_cast<size_t>(hi - lo) * esize);
        for (int64_t ow = 0; ow < lo; ++ow) dst[ow] = src[sw[ow]];
        for (int64_t ow = hi; ow < s.OW; ++ow) dst[ow] = src[sw[ow]];
      }
    });
  });
}

template <typename T>
void backward(const Tensor& grad_x, const Tensor& grad_out, const PadParams& p) {
  const Dims s = dims_of(grad_x, grad_out);
  const std::vector<int64_t> sw = sources(p, 2, s.W, s.OW);
  const int64_t bw = p.before[2], lo = std::clamp<int64_t>(bw, 0, s.OW), hi = std::clamp<int64_t>(bw + s.W, 0, s.OW);
  const T* pg = grad_out.data_ptr<T>();
  T* px = grad_x.data_ptr<T>();
  parallel_for(0, s.B * s.D * s.H, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, 2 * s.OW)),
               [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = r % s.H, d = r / s.H % s.D, b = r / (s.H * s.D);
      T* __restrict dst = px + r * s.W;
      std::fill(dst, dst + s.W, T(0));
      int64_t dlo[3], dhi[3], hlo[3], hhi[3];
      const int nd = padding::readers(p.mode, d, s.D, p.before[0], s.OD, dlo, dhi);
      const int nh = padding::readers(p.mode, h, s.H, p.before[1], s.OH, hlo, hhi);
      for (int i = 0; i < nd; ++i)
        for (int64_t od = dlo[i]; od < dhi[i]; ++od)
          for (int j = 0; j < nh; ++j)
            for (int64_t oh = hlo[j]; oh < hhi[j]; ++oh) {
              const T* __restrict g = pg + ((b * s.OD + od) * s.OH + oh) * s.OW;
              for (int64_t ow = lo; ow < hi; ++ow) dst[ow - bw] += g[ow];  // the inside, a plain add
              for (int64_t ow = 0; ow < lo; ++ow) dst[sw[ow]] += g[ow];
              for (int64_t ow = hi; ow < s.OW; ++ow) dst[sw[ow]] += g[ow];
            }
    }
  });
}

void pad_cpu(const Tensor& out, const Tensor& x, const PadParams& p) { forward(out, x, p); }

void pad_backward_cpu(const Tensor& grad_x, const Tensor& grad_out, const PadParams& p) {
  switch (grad_x.dtype()) {
    case kFloat32:
      return backward<float>(grad_x, grad_out, p);
    case kFloat64:
      return backward<double>(grad_x, grad_out, p);
    case kFloat16:
    case kBFloat16: {
      Tensor g32 = empty(grad_x.sizes(), kFloat32);
      backward<float>(g32, ops::to(grad_out, kFloat32), p);
      ops::copy_(grad_x, g32);
      return;
    }
    default:
      KILN_CHECK(false, "pad_backward: expected a floating-point gradient, got ", grad_x.dtype());
  }
}

}  // namespace

namespace detail {
void register_pad_cpu_kernels() {
  register_kernel<Op::pad>(DeviceType::CPU, pad_cpu);
  register_kernel<Op::pad_backward>(DeviceType::CPU, pad_backward_cpu);
}
}  // namespace detail
}  // namespace kiln
