// The CPU bmm kernel: out (B, M, N) = beta * out + alpha * a (B, M, K) @ b (B, K, N).
//
// float32/float64 go to the CPU's one GEMM (gemm_cpu.h: OpenBLAS or Eigen), which reads operands in place when
// each matrix has one unit stride (row- or column-major, i.e. plain or transposed), so x.t() costs nothing.
// Other layouts are made contiguous first. float16/bfloat16 compute in float32 (converted once, rounded once).
// Integer types use the naive loop below, which is also the readable reference of what every variant computes.
#include <algorithm>

#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/gemm_cpu.h"
#include "kiln/tensor/ops/register.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/views.h"

namespace kiln {

namespace {

// How one matrix (rows x cols, strides sr, sc in elements) can be handed to GEMM without copying.
struct MatLayout {
  bool ok = false;         // false: needs a contiguous copy
  bool transposed = false;  // column-major in memory
  int64_t ld = 0;          // leading dimension
};

MatLayout layout_of(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  // NOTE: the stride of a size-1 dim is never used, so it can be anything (a 1x1 slice may have strides
  // (4, 4)); normalise it first, or such a matrix would match no layout and reach BLAS with ld = 0.
  if (cols == 1) sc = 1;
  if (rows == 1) sr = std::max<int64_t>(cols, 1);
  if (sc == 1 && (rows == 1 || sr >= std::max<int64_t>(1, cols))) return {true, false, std::max<int64_t>({sr, cols, 1})};
  if (sr == 1 && (cols == 1 || sc >= std::max<int64_t>(1, rows))) return {true, true, std::max<int64_t>({sc, rows, 1})};
  return {};
}

// out[m][n] = beta * out[m][n] + alpha * sum_k a[m][k] b[k][n], for one matrix, any strides. The reference.
template <typename T>
void gemm_naive(int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t sam, int64_t sak, const T* b,
                int64_t sbk, int64_t sbn, T beta, T* c, int64_t scm, int64_t scn) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += a[m * sam + k * sak] * b[k * sbk + n * sbn];
      T& o = c[m * scm + n * scn];
      o = beta == T(0) ? alpha * acc : beta * o + alpha * acc;
    }
}

// One row-major output matrix with leading dimension ldc; a and b as described by their layouts.
template <typename T>
void gemm_fast(int64_t M, int64_t N, int64_t K, T alpha, const T* a, MatLayout la, const T* b, MatLayout lb, T beta,
               T* c, int64_t ldc) {
  detail::cpu_gemm<T>(la.transposed, lb.transposed, M, N, K, alpha, a, la.ld, b, lb.ld, beta, c, ldc);
}

// A 3-D operand whose every matrix GEMM can read in place (copied to contiguous if not).
Tensor gemm_ready(const Tensor& x, MatLayout& layout) {
  layout = layout_of(x.size(1), x.size(2), x.stride(1), x.stride(2));
  if (layout.ok) return x;
  Tensor c = ops::contiguous(x);
  layout = layout_of(c.size(1), c.size(2), c.stride(1), c.stride(2));
  KILN_ASSERT(layout.ok, "a contiguous matrix of shape ", shape_str(c.sizes()), " has no GEMM layout");
  return c;
}

template <typename T>
void bmm_float(const Tensor& out, const Tensor& a_in, const Tensor& b_in, double beta, double alpha) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a_in.size(2);
  MatLayout la, lb;
  Tensor a = gemm_ready(a_in, la), b = gemm_ready(b_in, lb);
  // The output must be row-major with unit column stride; otherwise compute into a temporary.
  bool out_ok = out.stride(2) == 1 && out.stride(1) >= std::max<int64_t>(N, 1);
  Tensor c = out_ok ? out : ops::contiguous(out);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = c.data_ptr<T>();
  const int64_t sa = a.stride(0), sb = b.stride(0), sc = c.stride(0), ldc = c.stride(1);
  auto one = [&](int64_t i) {
    gemm_fast<T>(M, N, K, static_cast<T>(alpha), pa + i * sa, la, pb + i * sb, lb, static_cast<T>(beta), pc + i * sc,
                 std::max<int64_t>(ldc, 1));
  };
  // Small matrices in a batch: one whole GEMM per thread. Large ones: one at a time, threaded inside GEMM.
  // The grain keeps a thread's share at ~kDefaultGrain multiply-adds: waking a second thread costs more than a
  // handful of tiny products.
  if (B > 1 && M * N * K < (1 << 18)) {
    int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(M * N * K, 1));
    parallel_for(0, B, grain, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < B; ++i) one(i);
  }
  if (!out_ok) ops::copy_(out, c);
}

void bmm_cpu(const Tensor& out, const Tensor& a, const Tensor& b, double beta, double alpha) {
  switch (out.dtype()) {
    case kFloat32:
      return bmm_float<float>(out, a, b, beta, alpha);
    case kFloat64:
      return bmm_float<double>(out, a, b, beta, alpha);
    case kFloat16:
    case kBFloat16: {
      // Compute in float32: convert the operands once, round the result once.
      Tensor o32 = beta != 0.0 ? ops::to(out, kFloat32) : empty(out.sizes(), kFloat32);
      bmm_float<float>(o32, ops::to(a, kFloat32), ops::to(b, kFloat32), beta, alpha);
      ops::copy_(out, o32);
      return;
    }
    default:
      break;
  }
  visit_dtype<kIntegralSet>(out.dtype(), "bmm", [&]<typename T>() {
    const T* pa = a.data_ptr<T>();
    const T* pb = b.data_ptr<T>();
    T* pc = out.data_ptr<T>();
    int64_t work = std::max<int64_t>(out.size(1) * out.size(2) * a.size(2), 1);
    parallel_for(0, out.size(0), std::max<int64_t>(1, kDefaultGrain / work), [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        gemm_naive<T>(out.size(1), out.size(2), a.size(2), static_cast<T>(alpha), pa + i * a.stride(0), a.stride(1),
                      a.stride(2), pb + i * b.stride(0), b.stride(1), b.stride(2), static_cast<T>(beta),
                      pc + i * out.stride(0), out.stride(1), out.stride(2));
    });
  });
}

}  // namespace

namespace detail {
void register_linalg_cpu_kernels() { register_kernel<Op::bmm>(DeviceType::CPU, bmm_cpu); }
}  // namespace detail
}  // namespace kiln
