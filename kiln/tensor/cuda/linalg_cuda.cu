// The CUDA bmm kernel: out (B, M, N) = beta * out + alpha * a (B, M, K) @ b (B, K, N), the device twin of
// linalg_cpu.cpp (whose naive loop is the reference of what every path computes).
//
// Floating dtypes go to cublasGemmStridedBatchedEx. cuBLAS is column-major and kiln row-major; a row-major
// matrix read column-major is its transpose, so kiln's C = A B is handed over as C^T = B^T A^T: b becomes
// cuBLAS's first operand, a its second, m and n swap, and nothing is copied. An operand goes in place when
// each of its matrices has one unit stride (plain or transposed, any batch stride, 0 for a broadcast batch);
// others are made contiguous first. out is written in place when its matrices are row-major and its batches do
// not overlap; otherwise into a temporary that is copied back.
//   float32: float32 math, or TF32 tensor cores when set_allow_tf32(true);
//   float64: float64 math;
//   float16, bfloat16: float32 accumulation, the output rounded once (as the CPU kernel does).
// Integer dtypes, and every dtype when K == 0 (an empty sum: out = beta * out), use bmm_tiled_kernel below.
//
// cuBLAS handles are per (device, thread), made on first use and given back to a pool when their thread ends
// (never destroyed: at process exit the CUDA context may already be gone). Workspaces are per (device, stream):
// work on one stream runs in order, so every thread's calls on that stream can share one.
#include <array>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kiln/tensor/cuda/cublas_check.h"
#include "kiln/tensor/cuda/cublas_loader.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/views.h"

namespace kiln {
namespace {

constexpr int kTile = 16;

// One kTile x kTile tile of out per block and step, both operands staged through shared memory; any strides
// (in elements) for a, b and out. Acc: float for the 16-bit floats, the type itself otherwise, so integer
// products wrap exactly as the CPU's loop does. The loops' bounds are the same for every thread of a block,
// so every thread reaches every __syncthreads.
template <typename T, typename Acc>
__global__ void bmm_tiled_kernel(int64_t B, int64_t M, int64_t N, int64_t K, Acc alpha, Acc beta, const T* a,
                                 int64_t sab, int64_t sam, int64_t sak, const T* b, int64_t sbb, int64_t sbk,
                                 int64_t sbn, T* c, int64_t scb, int64_t scm, int64_t scn) {
  __shared__ Acc tile_a[kTile][kTile];
  __shared__ Acc tile_b[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles_n = (N + kTile - 1) / kTile, tiles = tiles_n * ((M + kTile - 1) / kTile);
  for (int64_t z = blockIdx.z; z < B; z += gridDim.z) {
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int64_t row = (t / tiles_n) * kTile + ty, col = (t % tiles_n) * kTile + tx;
      Acc acc = 0;
      for (int64_t k0 = 0; k0 < K; k0 += kTile) {
        tile_a[ty][tx] = row < M && k0 + tx < K ? static_cast<Acc>(a[z * sab + row * sam + (k0 + tx) * sak]) : Acc(0);
        tile_b[ty][tx] = k0 + ty < K && col < N ? static_cast<Acc>(b[z * sbb + (k0 + ty) * sbk + col * sbn]) : Acc(0);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kTile; ++k) acc += tile_a[ty][k] * tile_b[k][tx];
        __syncthreads();
      }
      if (row < M && col < N) {
        T& o = c[z * scb + row * scm + col * scn];
        // NOTE: beta == 0 must not read out (it may hold NaN, and NaN * 0 is NaN).
        o = static_cast<T>(beta == Acc(0) ? alpha * acc : beta * static_cast<Acc>(o) + alpha * acc);
      }
    }
  }
}

// out, a, b: (B, M, N), (B, M, K), (B, K, N), any strides, on the current device.
void bmm_tiled(const Tensor& out, const Tensor& a, const Tensor& b, double beta, double alpha, cudaStream_t stream) {
  visit_dtype<kNumericSet>(out.dtype(), "bmm", [&]<typename T>() {
    using Acc = opmath_t<T>;
    const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
    const int64_t tiles = ((M + kTile - 1) / kTile) * ((N + kTile - 1) / kTile);
    dim3 grid(static_cast<unsigned>(std::min<int64_t>(tiles, INT_MAX)), 1,
              static_cast<unsigned>(std::min<int64_t>(B, 65535)));
    bmm_tiled_kernel<T, Acc><<<grid, dim3(kTile, kTile), 0, stream>>>(
        B, M, N, K, static_cast<Acc>(alpha), static_cast<Acc>(beta), static_cast<const T*>(a.raw_data_ptr()),
        a.stride(0), a.stride(1), a.stride(2), static_cast<const T*>(b.raw_data_ptr()), b.stride(0), b.stride(1),
        b.stride(2), static_cast<T*>(out.raw_data_ptr()), out.stride(0), out.stride(1), out.stride(2));
    KILN_CUDA_CHECK_LAUNCH("bmm");
  });
}

// ---- cuBLAS handles and workspaces ----

constexpr int kMaxDevices = 64;
// cuBLAS's recommended workspace on Hopper; smaller GPUs need less but lose nothing by having it.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct HandlePool {
  std::mutex mutex;
  std::array<std::vector<cublasHandle_t>, kMaxDevices> free;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
};
// Never destroyed, so threads ending during static destruction can still give their handles back.
HandlePool& pool() {
  static HandlePool* p = new HandlePool;
  return *p;
}

struct ThreadHandles {
  std::array<cublasHandle_t, kMaxDevices> handles{};
  ~ThreadHandles() {
    std::lock_guard<std::mutex> lock(pool().mutex);
    for (int d = 0; d < kMaxDevices; ++d)
      if (handles[d] != nullptr) pool().free[d].push_back(handles[d]);
  }
};
thread_local ThreadHandles tls_handles;

// The calling thread's handle for `device` (the current device), bound to `stream` and its workspace.
cublasHandle_t handle_for(int device, cudaStream_t stream) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "bmm: device ", device, " is beyond the ", kMaxDevices,
             " kiln supports");
  cublasHandle_t& h = tls_handles.handles[device];
  void* workspace = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool().mutex);
    if (h == nullptr && !pool().free[device].empty()) {
      h = pool().free[device].back();
      pool().free[device].pop_back();
    }
    void*& ws = pool().workspaces[{device, stream}];
    if (ws == nullptr) {
      // Outside the caching allocator: it is held for the program's life, and the allocator's statistics count
      // tensors. What the allocator caches is given back once if the device seems full.
      void* p = nullptr;
      if (cudaMalloc(&p, kWorkspaceBytes) != cudaSuccess) {
        cudaGetLastError();
        cuda::empty_cache();
        KILN_CUDA_CHECK(cudaMalloc(&p, kWorkspaceBytes), "bmm (cuBLAS workspace)");
      }
      ws = p;
    }
    workspace = ws;
  }
  if (h == nullptr) {
    KILN_CUBLAS_CHECK(cuda::cublas().create(&h), "bmm");
    // Split-K partial sums of float16/bfloat16 products stay in float32, as on the CPU.
    KILN_CUBLAS_CHECK(cuda::cublas().set_math_mode(h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                               CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                      "bmm");
  }
  KILN_CUBLAS_CHECK(cuda::cublas().set_stream(h, stream), "bmm");
  // NOTE: setting the stream resets the workspace to cuBLAS's default pool, so it is set after, every time.
  KILN_CUBLAS_CHECK(cuda::cublas().set_workspace(h, workspace, kWorkspaceBytes), "bmm");
  return h;
}

// ---- the cuBLAS path ----

// How one matrix (rows x cols, strides sr, sc in elements) can be handed to cuBLAS without copying.
struct MatLayout {
  bool ok = false;          // false: needs a contiguous copy
  bool transposed = false;  // column-major in memory
  int64_t ld = 0;           // leading dimension
};

MatLayout layout_of(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  // NOTE: the stride of a size-1 dim is never used, so it can be anything; normalise it first, or such a
  // matrix would match no layout and reach cuBLAS with an invalid ld.
  if (cols == 1) sc = 1;
  if (rows == 1) sr = std::max<int64_t>(cols, 1);
  MatLayout l;
  if (sc == 1 && (rows == 1 || sr >= std::max<int64_t>(1, cols)))
    l = {true, false, std::max<int64_t>({sr, cols, 1})};
  else if (sr == 1 && (cols == 1 || sc >= std::max<int64_t>(1, rows)))
    l = {true, true, std::max<int64_t>({sc, rows, 1})};
  if (l.ld > INT_MAX) l.ok = false;  // cuBLAS's leading dimensions are int
  return l;
}

// A 3-D operand whose every matrix cuBLAS can read in place (a contiguous copy if not).
Tensor gemm_ready(const Tensor& x, MatLayout& layout) {
  layout = layout_of(x.size(1), x.size(2), x.stride(1), x.stride(2));
  if (layout.ok) return x;
  Tensor c = ops::contiguous(x);
  layout = layout_of(c.size(1), c.size(2), c.stride(1), c.stride(2));
  KILN_CHECK(layout.ok, "bmm: a matrix of shape ", shape_str(c.sizes()), " is too wide for cuBLAS");
  return c;
}

struct GemmTypes {
  cudaDataType data;
  cublasComputeType_t compute;
};

GemmTypes gemm_types(DType d) {
  switch (d) {
    case kFloat32:
      return {CUDA_R_32F, cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case kFloat64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case kFloat16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case kBFloat16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default:
      throw_unsupported_dtype("bmm (cuBLAS)", d);
  }
}

// c: (B, M, N) with row-major matrices (leading dimension ldc) that do not overlap; a, b as their layouts say.
void bmm_cublas(const Tensor& c, int64_t ldc, const Tensor& a, MatLayout la, const Tensor& b, MatLayout lb, double beta,
                double alpha, cudaStream_t stream) {
  const int64_t B = c.size(0), M = c.size(1), N = c.size(2), K = a.size(2);
  KILN_CHECK(N <= INT_MAX && K <= INT_MAX, "bmm: cuBLAS takes at most ", INT_MAX, " columns, got N = ", N,
             " and K = ", K);
  const GemmTypes types = gemm_types(c.dtype());
  const int64_t elem = static_cast<int64_t>(c.element_size());
  // Scalars in the compute type's precision (float for every 32F compute type).
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  const void* alpha_p = f64 ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = f64 ? static_cast<const void*>(&beta) : &beta_f;
  // C^T (N x M) = op(b)^T-view (N x K) x op(a)^T-view (K x M), all column-major.
  const cublasOperation_t op_b = lb.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = la.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Elements from one row of a matrix to the next, for splitting M.
  const int64_t row_a = la.transposed ? 1 : la.ld, row_c = ldc;
  const char* pa = static_cast<const char*>(a.raw_data_ptr());
  const char* pb = static_cast<const char*>(b.raw_data_ptr());
  char* pc = static_cast<char*>(c.raw_data_ptr());
  cublasHandle_t h = handle_for(c.device().index, stream);
  // NOTE: batch counts and row counts are split so that each call's fit cuBLAS's int arguments (and the
  // 65535 grid limit some of its batched kernels have).
  constexpr int64_t kMaxBatch = 65535, kMaxRows = INT_MAX;
  for (int64_t b0 = 0; b0 < B; b0 += kMaxBatch) {
    const int64_t nb = std::min(kMaxBatch, B - b0);
    for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
      const int64_t nm = std::min(kMaxRows, M - m0);
      const char* a0 = pa + (b0 * a.stride(0) + m0 * row_a) * elem;
      const char* bb0 = pb + b0 * b.stride(0) * elem;
      char* c0 = pc + (b0 * c.stride(0) + m0 * row_c) * elem;
      KILN_CUBLAS_CHECK(
          cuda::cublas().gemm_strided_batched_ex(
              h, op_b, op_a, static_cast<int>(N), static_cast<int>(nm), static_cast<int>(K), alpha_p, bb0, types.data,
              static_cast<int>(lb.ld), b.stride(0), a0, types.data, static_cast<int>(la.ld), a.stride(0), beta_p, c0,
              types.data, static_cast<int>(ldc), c.stride(0), static_cast<int>(nb), types.compute, CUBLAS_GEMM_DEFAULT),
          "bmm");
    }
  }
}

// out: (B, M, N), a: (B, M, K), b: (B, K, N), all of out's dtype and on its device.
void bmm_cuda(const Tensor& out, const Tensor& a_in, const Tensor& b_in, double beta, double alpha) {
  if (out.numel() == 0) return;
  KILN_CHECK(a_in.device() == out.device() && b_in.device() == out.device(), "bmm: operands on ", a_in.device(),
             " and ", b_in.device(), ", output on ", out.device());
  KILN_CHECK(a_in.dtype() == out.dtype() && b_in.dtype() == out.dtype(), "bmm: operands of dtypes ", a_in.dtype(),
             " and ", b_in.dtype(), " for an output of ", out.dtype());
  cuda::DeviceGuard guard(out.device().index);
  cudaStream_t stream = cuda::current_stream(out.device().index).handle;
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a_in.size(2);
  if (!is_floating(out.dtype()) || K == 0) return bmm_tiled(out, a_in, b_in, beta, alpha, stream);

  MatLayout la, lb;
  Tensor a = gemm_ready(a_in, la), b = gemm_ready(b_in, lb);
  MatLayout lc = layout_of(M, N, out.stride(1), out.stride(2));
  // Row-major matrices whose batches do not overlap can be written in place.
  bool out_ok = lc.ok && !lc.transposed && (B == 1 || out.stride(0) >= (M - 1) * lc.ld + N);
  Tensor c = out;
  if (!out_ok) {
    // The old values matter only when beta != 0.
    c = beta != 0.0 ? ops::contiguous(out) : empty(out.sizes(), TensorOptions(out.dtype()).device(out.device()));
    lc = layout_of(M, N, c.stride(1), c.stride(2));
  }
  bmm_cublas(c, lc.ld, a, la, b, lb, beta, alpha, stream);
  if (!out_ok) ops::copy_(out, c);
}

std::atomic<bool> g_allow_tf32{false};

}  // namespace

namespace cuda {

void set_allow_tf32(bool on) { g_allow_tf32 = on; }
bool allow_tf32() { return g_allow_tf32; }

int cublas_version() {
  const CublasApi* api = nullptr;
  try {
    api = &cublas();  // opens the library: asking for its version is a reason to
  } catch (const Error&) {
    return 0;  // not found here
  }
  int major = 0, minor = 0, patch = 0;
  KILN_CUBLAS_CHECK(api->get_property(MAJOR_VERSION, &major), "cublas_version");
  KILN_CUBLAS_CHECK(api->get_property(MINOR_VERSION, &minor), "cublas_version");
  KILN_CUBLAS_CHECK(api->get_property(PATCH_LEVEL, &patch), "cublas_version");
  return major * 10000 + minor * 100 + patch;
}

}  // namespace cuda

namespace detail {
void register_cuda_linalg_kernels() { register_kernel<Op::bmm>(DeviceType::CUDA, bmm_cuda); }
}  // namespace detail
}  // namespace kiln
