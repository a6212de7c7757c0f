// CUDA kernels for copy (any dtypes, any strides, between any two devices), fill and arange.
//
// Copies within one GPU run as one element-wise kernel (a plain cudaMemcpyAsync when both sides are contiguous
// in one dtype). Copies between devices move contiguous bytes only, so the layout and dtype work happens on one
// side first: converted and made contiguous where the data is, moved, then scattered into the destination's
// strides where it lands. Copies to or from host memory synchronize the stream before returning (the caller
// may free or read the host memory at once), except copy_async's (Tensor::to / copy_ with non_blocking = true)
// when the host side is pinned memory and needs no work there (from the host, pinned bytes move as they are and
// are converted on the GPU): those are only queued on the GPU's current stream, and the pinned cache keeps
// kiln's pinned memory from reuse until they have run.
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/loops_cuda.cuh"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/elementwise_functors.h"

namespace kiln {
namespace {

cudaStream_t stream_of(Device d) { return cuda::current_stream(d.index).handle; }

// out and x on the same GPU.
void copy_on_device(const Tensor& out, const Tensor& x) {
  cuda::DeviceGuard guard(out.device().index);
  if (out.dtype() == x.dtype() && out.is_contiguous() && x.is_contiguous()) {
    if (out.nbytes() > 0 && out.raw_data_ptr() != x.raw_data_ptr())
      KILN_CUDA_CHECK(cudaMemcpyAsync(out.raw_data_ptr(), x.raw_data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice,
                                      stream_of(out.device())),
                      "copy");
    return;
  }
  visit_dtype(out.dtype(), "copy", [&]<typename O>() {
    visit_dtype(x.dtype(), "copy", [&]<typename I>() { cuda::cuda_kernel<O, I>("copy", out, functors::Identity{}, x); });
  });
}

// A contiguous tensor with x's shape and values in dtype `dtype`, on x's device (x itself when it already is).
Tensor contiguous_as(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype && x.is_contiguous()) return x;
  Tensor t = empty(x.sizes(), TensorOptions(dtype).device(x.device()));
  get_kernel<Op::copy>(x.device())(t, x);
  return t;
}

// Moves the bytes of a contiguous src to a contiguous dst of the same size on another device. `async`: when the
// host side is pinned memory, the copy is only queued on the GPU's current stream (the pinned cache keeps that
// memory from being handed out again until it has run); otherwise the stream is synchronized before returning.
void move_bytes(const Tensor& dst, const Tensor& src, bool async) {
  size_t nbytes = dst.nbytes();
  if (nbytes == 0) return;
  if (src.device().is_cuda() && dst.device().is_cuda()) {
    // Ordered after the work queued on both streams: the source's producer, the destination's consumers.
    // NOTE: the source's stream is synchronized under the source's device (Stream::synchronize guards it): the
    // default stream's handle, nullptr, means the *current* device's, which below is the destination.
    cuda::current_stream(src.device().index).synchronize();
    cuda::DeviceGuard guard(dst.device().index);
    KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data_ptr(), dst.device().index, src.raw_data_ptr(), src.device().index,
                                        nbytes, stream_of(dst.device())),
                    "copy");
    // The source's memory may be freed on return (a conversion's temporary, or the caller's tensor) and reused
    // by the source device's stream at once, while the copy on the destination's stream still reads it: wait.
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_of(dst.device())), "copy");
    return;
  }
  Device gpu = src.device().is_cuda() ? src.device() : dst.device();
  cuda::DeviceGuard guard(gpu.index);
  const cuda::Stream stream = cuda::current_stream(gpu.index);
  const void* host = src.device().is_cpu() ? src.raw_data_ptr() : dst.raw_data_ptr();
  const bool queue_only = async && cuda::is_pinned(host);
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data_ptr(), src.raw_data_ptr(), nbytes, cudaMemcpyDefault, stream.handle),
                  "copy");
  if (queue_only) {
    try {
      cuda::record_pinned_use(host, stream);
    } catch (...) {
      cudaStreamSynchronize(stream.handle);  // the copy is queued and nothing guards its memory: let it run
      throw;
    }
    return;
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream.handle), "copy");
}

// out and x have one shape; at least one is on a GPU. `async`: see move_bytes; only a copy whose host side
// needs no conversion or re-layout on the host can skip the wait.
void copy_between(const Tensor& out, const Tensor& x, bool async) {
  if (out.device() == x.device()) {
    copy_on_device(out, x);  // queued on the stream either way
    return;
  }
  // From pinned host memory without waiting: the bytes move as they are and any conversion happens on the GPU
  // (a conversion on the host would need a pageable temporary, and so a wait). uint8 images to float32, say.
  if (async && x.device().is_cpu() && x.is_contiguous() && cuda::is_pinned(x.raw_data_ptr()) &&
      !(out.dtype() == x.dtype() && out.is_contiguous())) {
    Tensor staged = empty(x.sizes(), TensorOptions(x.dtype()).device(out.device()));
    move_bytes(staged, x, true);
    get_kernel<Op::copy>(out.device())(out, staged);
    return;
  }
  // Convert (and compact) on the source side, move, then lay out on the destination side.
  Tensor src = contiguous_as(x, out.dtype());
  if (out.is_contiguous()) {
    move_bytes(out, src, async);
    return;
  }
  // Landing on the host and laid out there reads the landed bytes at once: that copy must have run.
  Tensor landed = empty(out.sizes(), TensorOptions(out.dtype()).device(out.device()));
  move_bytes(landed, src, async && out.device().is_cuda());
  get_kernel<Op::copy>(out.device())(out, landed);
}

void copy_cuda(const Tensor& out, const Tensor& x) { copy_between(out, x, false); }
void copy_async_cuda(const Tensor& out, const Tensor& x) { copy_between(out, x, true); }

template <typename T>
struct Constant {
  T value;
  KILN_INLINE T operator()() const { return value; }
};

void fill_cuda(const Tensor& out, const Scalar& value) {
  visit_dtype(out.dtype(), "fill", [&]<typename T>() { cuda::cuda_kernel<T>("fill", out, Constant<T>{value.to<T>()}); });
}

template <typename T>
__global__ void arange_int_kernel(T* out, int64_t n, int64_t start, int64_t step) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<T>(start + i * step);
}

template <typename T>
__global__ void arange_double_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<T>(static_cast<opmath_t<T>>(start + static_cast<double>(i) * step));
}

// out: contiguous (the frontend allocates it). The same arithmetic as arange_cpu, element by element.
void arange_cuda(const Tensor& out, const Scalar& start, const Scalar& step) {
  KILN_ASSERT(out.is_contiguous());
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(out.device().index);
  cudaStream_t stream = stream_of(out.device());
  unsigned blocks = cuda::grid_for(n, cuda::kBlockSize);
  visit_dtype<kNumericSet>(out.dtype(), "arange", [&]<typename T>() {
    T* p = static_cast<T*>(out.raw_data_ptr());
    if constexpr (std::is_integral_v<T>) {
      if (!start.is_floating() && !step.is_floating()) {
        arange_int_kernel<T><<<blocks, cuda::kBlockSize, 0, stream>>>(p, n, start.to_int(), step.to_int());
        KILN_CUDA_CHECK_LAUNCH("arange");
        return;
      }
    }
    arange_double_kernel<T><<<blocks, cuda::kBlockSize, 0, stream>>>(p, n, start.to_double(), step.to_double());
    KILN_CUDA_CHECK_LAUNCH("arange");
  });
}

}  // namespace

namespace detail {
void register_cuda_copy_kernels() {
  register_kernel<Op::copy>(DeviceType::CUDA, copy_cuda);
  register_kernel<Op::copy_async>(DeviceType::CUDA, copy_async_cuda);
  register_kernel<Op::fill>(DeviceType::CUDA, fill_cuda);
  register_kernel<Op::arange>(DeviceType::CUDA, arange_cuda);
}
}  // namespace detail
}  // namespace kiln
