// The CUDA kernels of the fused optimizer updates (fused_optim.h): multi-tensor kernels that update many
// parameters per launch.
//
// A model's parameters are many tensors, most of them small (biases, norms), so one launch per tensor and op
// would leave the GPU idle between launches. Instead each launch takes a Batch: the addresses of up to
// kMaxTensors tensors (parameter, gradient, state) and a table that gives each of up to kMaxBlocks blocks one
// tensor and one chunk of kChunk elements of it. The host walks the parameter list filling batches and launches
// one whenever its tensor slots or its block table fill up; a tensor whose chunks straddle two launches carries
// over into the next batch's first slot. The batch travels as the kernel's argument, by value, so the host can
// refill it as soon as a launch is queued and no device memory is needed for the tables.
//
// Each element goes through the functors of optim_functors.h, the CPU's per-element math.
#include <array>
#include <span>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/ops/optim_functors.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr int kMaxTensors = 32;
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunk = 65536;  // elements of one tensor that one block updates
constexpr int kThreads = 512;

struct NoExtra {};

// One launch's work. Depth tensors per parameter (parameter, gradient, state...); Extra: per-parameter
// constants (Adam's bias corrections).
template <int Depth, typename Extra>
struct Batch {
  void* ptrs[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  Extra extra[kMaxTensors];
  int32_t chunk_of_block[kMaxBlocks];
  uint8_t tensor_of_block[kMaxBlocks];
};
// Kernel arguments may take 4 KiB on every device and CUDA version kiln supports.
static_assert(sizeof(Batch<4, functors::AdamBiasCorrection<double>>) <= 4000, "a Batch must fit a kernel's arguments");

template <typename T, int Depth, typename Extra, typename F>
__global__ void __launch_bounds__(kThreads) multi_tensor_kernel(Batch<Depth, Extra> batch, F f) {
  const int t = batch.tensor_of_block[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.chunk_of_block[blockIdx.x]) * kChunk;
  const int64_t end = min(begin + kChunk, batch.numel[t]);
  T* ptr[Depth];
#pragma unroll
  for (int d = 0; d < Depth; ++d) ptr[d] = static_cast<T*>(batch.ptrs[d][t]);
  const Extra extra = batch.extra[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) f(ptr, i, extra);
}

// Applies f to every element of every parameter: lists[d][k] is parameter k's tensor d (lists[0] the
// parameters; an empty list passes nullptr, for state the update does not use), extra(k) its constants.
template <typename T, int Depth, typename Extra, typename F, typename ExtraOf>
void multi_tensor_apply(const char* what, const std::array<std::span<const Tensor>, Depth>& lists,
                        const ExtraOf& extra_of, const F& f) {
  const std::span<const Tensor> params = lists[0];
  const int device = params[0].device().index;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device).handle;

  Batch<Depth, Extra> batch;
  int blocks = 0;
  auto launch = [&] {
    if (blocks == 0) return;
    multi_tensor_kernel<T, Depth, Extra, F><<<blocks, kThreads, 0, stream>>>(batch, f);
    KILN_CUDA_CHECK_LAUNCH(what);
    blocks = 0;
  };
  int slot = 0;  // the slot the next parameter takes
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t numel = params[k].numel();
    if (numel == 0) continue;
    if (slot == kMaxTensors) {
      launch();
      slot = 0;
    }
    for (int d = 0; d < Depth; ++d)
      batch.ptrs[d][slot] = lists[d].empty() ? nullptr : lists[d][k].raw_data_ptr();
    batch.numel[slot] = numel;
    batch.extra[slot] = extra_of(k);
    const int64_t chunks = (numel + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (blocks == kMaxBlocks) {
        launch();
        if (slot != 0) {  // this parameter's remaining chunks go in the next launch: it moves to slot 0
          for (int d = 0; d < Depth; ++d) batch.ptrs[d][0] = batch.ptrs[d][slot];
          batch.numel[0] = batch.numel[slot];
          batch.extra[0] = batch.extra[slot];
          slot = 0;
        }
      }
      batch.tensor_of_block[blocks] = static_cast<uint8_t>(slot);
      batch.chunk_of_block[blocks] = static_cast<int32_t>(c);
      ++blocks;
    }
    ++slot;
  }
  launch();
}

template <typename T>
struct SgdElement {
  functors::SgdUpdate<T> update;
  __device__ __forceinline__ void operator()(T* const* ptr, int64_t i, NoExtra) const {
    if (update.has_momentum) {
      update(ptr[0][i], ptr[1][i], ptr[2][i]);
    } else {
      T unused = 0;
      update(ptr[0][i], ptr[1][i], unused);
    }
  }
};

template <typename T>
struct AdamElement {
  functors::AdamUpdate<T> update;
  __device__ __forceinline__ void operator()(T* const* ptr, int64_t i, const functors::AdamBiasCorrection<T>& bc) const {
    update(ptr[0][i], ptr[1][i], ptr[2][i], ptr[3][i], bc);
  }
};

template <typename T>
void sgd_step_typed(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                    const SgdStepParams& s) {
  multi_tensor_apply<T, 3, NoExtra>("SGD.step", {params, grads, bufs}, [](size_t) { return NoExtra{}; },
                                    SgdElement<T>{functors::SgdUpdate<T>(s)});
}

template <typename T>
void adam_step_typed(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                     std::span<const Tensor> exp_avg_sqs, std::span<const double> steps, const AdamStepParams& s) {
  multi_tensor_apply<T, 4, functors::AdamBiasCorrection<T>>(
      "Adam.step", {params, grads, exp_avgs, exp_avg_sqs},
      [&](size_t k) { return functors::AdamBiasCorrection<T>(s, steps[k]); },
      AdamElement<T>{functors::AdamUpdate<T>(s)});
}

void sgd_step_cuda(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                   const SgdStepParams& s) {
  if (params[0].dtype() == kFloat32) sgd_step_typed<float>(params, grads, bufs, s);
  else sgd_step_typed<double>(params, grads, bufs, s);
}

void adam_step_cuda(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                    std::span<const Tensor> exp_avg_sqs, std::span<const double> steps, const AdamStepParams& s) {
  if (params[0].dtype() == kFloat32) adam_step_typed<float>(params, grads, exp_avgs, exp_avg_sqs, steps, s);
  else adam_step_typed<double>(params, grads, exp_avgs, exp_avg_sqs, steps, s);
}

}  // namespace

namespace detail {
void register_cuda_optim_kernels() {
  register_kernel<Op::sgd_step>(DeviceType::CUDA, sgd_step_cuda);
  register_kernel<Op::adam_step>(DeviceType::CUDA, adam_step_cuda);
}
}  // namespace detail
}  // namespace kiln
