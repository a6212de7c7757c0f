// CUDA kernels of 2-d convolution, NCHW, every tensor contiguous, through cuDNN: the device twins of
// ops/conv_cpu.cpp, whose loops are the reference they match (max pooling's are in max_pool_cuda.cu).
//
// Convolution goes to cuDNN's legacy API when kiln is built with it (KILN_WITH_CUDNN; without it nothing is
// registered here, and nn's composite convolution runs on the GPU instead):
//   conv2d                  cudnnConvolutionForward; with a bias, out is first filled with it and blended in
//                           with beta = 1, so a 16-bit output is rounded once, as on the CPU
//   conv2d_backward_input   cudnnConvolutionBackwardData
//   conv2d_backward_weight  cudnnConvolutionBackwardFilter (overwrites: beta = 0)
// The dtypes, in cuDNN's terms: float64 in double (DOUBLE_CONFIG); float32 in float (FLOAT_CONFIG), with
// CUDNN_FMA_MATH unless cuda::allow_tf32() (the default math would let Ampere and later use TF32);
// float16 and bfloat16 stored as such, computed in float (PSEUDO_HALF_CONFIG, PSEUDO_BFLOAT16_CONFIG; bfloat16
// needs sm_80 or later) on tensor cores. Algorithms that convert the data to a narrower type
// (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) are never used.
// Algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7; every algorithm in turn if they offer none), not
// from timing runs. The ranked list is asked for once per (pass, device, shapes, params, dtype, TF32) and kept; a
// call runs the first algorithm cuDNN accepts whose workspace can be allocated, and that one moves to the front
// of the list. Workspaces are uint8 tensors from kiln's caching allocator on the current stream, so their blocks
// are reused call after call.
// Some backward algorithms sum with atomics, so gradients may differ in the last bits from run to run; under
// deterministic algorithms only the ones cuDNN reports as deterministic are used (and, where its heuristics
// offer none, every algorithm but the atomic ones its documentation names: backward data 0, backward filter 0
// and 3).
// cuDNN handles are per (device, thread), made on first use (never destroyed: at exit the CUDA context may be
// gone; a finished thread's handles go to a pool for the next thread) and bound to the current stream per call.
#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/grid_stride.cuh"
#include "kiln/tensor/cuda/operand_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/determinism.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/tensor.h"
#ifdef KILN_WITH_CUDNN
#include "kiln/tensor/cuda/cudnn_check.h"
#endif

namespace kiln {
namespace {
#ifdef KILN_WITH_CUDNN

using cuda::check_operand;

using namespace cuda::grid_stride;  // kThreads, blocks_for, first_index, grid_step

// ---- convolution through cuDNN ----

// out (N, O, HW) = bias (O) broadcast: the value the forward convolution then adds to (beta = 1).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    fill_bias_kernel(T* __restrict__ out, const T* __restrict__ bias, int64_t total, int64_t O, int64_t HW) {
  for (int64_t i = first_index(); i < total; i += grid_step()) out[i] = bias[(i / HW) % O];
}

void fill_bias(const Tensor& out, const Tensor& bias, cudaStream_t stream) {
  visit_dtype<kFloatingSet>(out.dtype(), "conv2d (CUDA)", [&]<typename T>() {
    const int64_t total = out.numel();
    fill_bias_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<T*>(out.raw_data_ptr()), static_cast<const T*>(bias.raw_data_ptr()), total, out.size(1),
        out.size(2) * out.size(3));
    KILN_CUDA_CHECK_LAUNCH("conv2d");
  });
}

void fill_zeros(const Tensor& t, cudaStream_t stream, const char* op) {
  KILN_CUDA_CHECK(cudaMemsetAsync(t.raw_data_ptr(), 0, t.nbytes(), stream), op);  // +0.0 in every float dtype
}

// ---- handles ----

constexpr int kMaxDevices = 64;

struct HandlePool {
  std::mutex mutex;
  std::array<std::vector<cudnnHandle_t>, kMaxDevices> free;
};
// Never destroyed, so threads ending during static destruction can still give their handles back.
HandlePool& handle_pool() {
  static HandlePool* p = new HandlePool;
  return *p;
}

struct ThreadHandles {
  std::array<cudnnHandle_t, kMaxDevices> handles{};
  ~ThreadHandles() {
    std::lock_guard<std::mutex> lock(handle_pool().mutex);
    for (int d = 0; d < kMaxDevices; ++d)
      if (handles[d] != nullptr) handle_pool().free[d].push_back(handles[d]);
  }
};
thread_local ThreadHandles tls_handles;

// The calling thread's handle for `device` (the current device), bound to `stream`.
cudnnHandle_t handle_for(const char* op, int device, cudaStream_t stream) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, op, ": device ", device, " is beyond the ", kMaxDevices,
             " kiln supports");
  cudnnHandle_t& h = tls_handles.handles[device];
  if (h == nullptr) {
    std::lock_guard<std::mutex> lock(handle_pool().mutex);
    auto& free = handle_pool().free[device];
    if (!free.empty()) {
      h = free.back();
      free.pop_back();
    }
  }
  if (h == nullptr) KILN_CUDNN_CHECK(cudnnCreate(&h), op);
  KILN_CUDNN_CHECK(cudnnSetStream(h, stream), op);
  return h;
}

// ---- descriptors ----

template <typename D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
class Descriptor {
 public:
  Descriptor() { KILN_CUDNN_CHECK(Create(&desc_), "conv2d (cuDNN descriptor)"); }
  ~Descriptor() { Destroy(desc_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  D get() const { return desc_; }

 private:
  D desc_ = nullptr;
};
using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

// One convolution as a cuDNN call sees it: n images (the batch, or a slice of it), the geometry, dtype and math.
struct ConvProblem {
  int64_t n, C, H, W, O, KH, KW, OH, OW;
  Conv2dParams p;
  DType dtype;
  bool tf32;           // float32 only: TF32 tensor cores allowed
  bool deterministic;  // only algorithms whose results are the same on every run
};

// x (N, C, H, W), weight (O, C / G, KH, KW), y (N, O, OH, OW): checked against each other and against cuDNN's int
// arguments.
ConvProblem conv_problem(const char* op, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  const ConvProblem s{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), y.size(2),
                      y.size(3), p,         x.dtype(), x.dtype() == kFloat32 && cuda::allow_tf32(),
                      are_deterministic_algorithms_enabled()};
  const int64_t G = p.groups;
  KILN_CHECK(G >= 1 && s.C % G == 0 && s.O % G == 0 && w.size(1) * G == s.C && y.size(0) == s.n && y.size(1) == s.O,
             op, ": x ", shape_str(x.sizes()), ", weight ", shape_str(w.sizes()), " and output ",
             shape_str(y.sizes()), " do not fit ", G, " groups");
  for (int d = 0; d < 2; ++d) {
    const int64_t in = d == 0 ? s.H : s.W, k = d == 0 ? s.KH : s.KW, out = d == 0 ? s.OH : s.OW;
    const int64_t span = in + 2 * p.padding[d] - p.dilation[d] * (k - 1) - 1;
    KILN_CHECK(p.stride[d] >= 1 && p.dilation[d] >= 1 && p.padding[d] >= 0 &&
                   out == (span < 0 ? 0 : span / p.stride[d] + 1),
               op, ": output size ", out, " along spatial dim ", d, " does not follow from input ", in, ", kernel ", k,
               ", stride ", p.stride[d], ", padding ", p.padding[d], ", dilation ", p.dilation[d]);
  }
  for (int64_t v : {s.C, s.H, s.W, s.O, s.KH, s.KW, s.OH, s.OW, p.stride[0], p.stride[1], p.padding[0],
                    p.padding[1], p.dilation[0], p.dilation[1], G})
    KILN_CHECK(v <= INT_MAX, op, ": cuDNN takes sizes up to ", INT_MAX, ", got ", v, " (x ", shape_str(x.sizes()),
               ", weight ", shape_str(w.sizes()), ")");
  return s;
}

std::string describe(const ConvProblem& s) {
  return detail::concat("x (", s.n, ", ", s.C, ", ", s.H, ", ", s.W, "), weight (", s.O, ", ", s.C / s.p.groups,
                        ", ", s.KH, ", ", s.KW, "), stride (", s.p.stride[0], ", ", s.p.stride[1], "), padding (",
                        s.p.padding[0], ", ", s.p.padding[1], "), dilation (", s.p.dilation[0], ", ",
                        s.p.dilation[1], "), groups ", s.p.groups, ", ", dtype_name(s.dtype),
                        s.tf32 ? " (TF32 allowed)" : "", s.deterministic ? " (deterministic algorithms)" : "");
}

cudnnDataType_t cudnn_dtype(DType d) {
  switch (d) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: throw_unsupported_dtype("conv2d (CUDA)", d);
  }
}

// The math asked of cuDNN for a dtype (see the top of the file).
cudnnMathType_t requested_math(const ConvProblem& s) {
  if (s.dtype == kFloat64) return CUDNN_DEFAULT_MATH;
  if (s.dtype == kFloat32 && !s.tf32) return CUDNN_FMA_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

int to_int(int64_t v) { return static_cast<int>(v); }  // conv_problem checked that every size fits

struct ConvDescriptors {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;

  explicit ConvDescriptors(const ConvProblem& s) {
    const char* op = "conv2d (cuDNN descriptors)";
    const cudnnDataType_t data = cudnn_dtype(s.dtype);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(x.get(), data, to_int(s.n), to_int(s.C), to_int(s.H), to_int(s.W),
                                                  to_int(s.C * s.H * s.W), to_int(s.H * s.W), to_int(s.W), 1),
                     op);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(y.get(), data, to_int(s.n), to_int(s.O), to_int(s.OH), to_int(s.OW),
                                                  to_int(s.O * s.OH * s.OW), to_int(s.OH * s.OW), to_int(s.OW), 1),
                     op);
    KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w.get(), data, CUDNN_TENSOR_NCHW, to_int(s.O),
                                                to_int(s.C / s.p.groups), to_int(s.KH), to_int(s.KW)),
                     op);
    // kiln's conv2d is a cross-correlation (the kernel is not flipped), as in every deep-learning framework.
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv.get(), to_int(s.p.padding[0]), to_int(s.p.padding[1]),
                                                     to_int(s.p.stride[0]), to_int(s.p.stride[1]),
                                                     to_int(s.p.dilation[0]), to_int(s.p.dilation[1]),
                                                     CUDNN_CROSS_CORRELATION,
                                                     s.dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
                     op);
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv.get(), to_int(s.p.groups)), op);
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), requested_math(s)), op);
  }
};

// alpha and beta, in host memory, of the type cuDNN reads them as: double for float64 data, float otherwise.
struct Scale {
  float f;
  double d;
  bool is_double;
  Scale(DType dtype, double v) : f(static_cast<float>(v)), d(v), is_double(dtype == kFloat64) {}
  const void* ptr() const { return is_double ? static_cast<const void*>(&d) : &f; }
};

// ---- algorithms ----

enum Pass : int64_t { kForward, kBackwardData, kBackwardFilter };

struct Candidate {
  int algo;
  cudnnMathType_t math;
};

using AlgoKey = std::array<int64_t, 21>;

AlgoKey algo_key(Pass pass, int device, const ConvProblem& s) {
  return {pass,        device,      static_cast<int64_t>(s.dtype), s.tf32,         s.deterministic, s.n, s.C,
          s.H,         s.W,         s.O,                           s.KH,           s.KW,          s.OH,
          s.OW,        s.p.stride[0], s.p.stride[1],               s.p.padding[0], s.p.padding[1], s.p.dilation[0],
          s.p.dilation[1], s.p.groups};
}

struct AlgoCache {
  std::mutex mutex;
  std::map<AlgoKey, std::vector<Candidate>> lists;
};
AlgoCache& algo_cache() {
  static AlgoCache* c = new AlgoCache;
  return *c;
}

// The algorithms of a heuristics answer that kiln may run, best first. `atomic(algo)`: whether cuDNN's
// documentation names the algorithm as summing with atomics, for the list tried when the heuristics offer none.
template <typename Perf, typename Atomic>
std::vector<Candidate> usable(const std::vector<Perf>& perf, int returned, const ConvProblem& s, Atomic atomic) {
  std::vector<Candidate> out;
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[static_cast<size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS) continue;
    if (s.deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
    // Converting the inputs to float16 would lose float32's and bfloat16's precision and range.
    if (r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (s.dtype == kFloat32 && !s.tf32 && r.mathType == CUDNN_TENSOR_OP_MATH) continue;
    out.push_back({static_cast<int>(r.algo), r.mathType});
  }
  // With no advice, every algorithm is tried in turn: the ones that cannot run answer NOT_SUPPORTED.
  // Under deterministic algorithms, every other algorithm but the atomic ones follows (they answer NOT_SUPPORTED
  // where they cannot run): the filtered advice may be a single algorithm whose workspace does not fit.
  if (out.empty() || s.deterministic)
    for (int a = 0; a < static_cast<int>(perf.size()); ++a) {
      const bool listed = std::any_of(out.begin(), out.end(), [&](const Candidate& c) { return c.algo == a; });
      if (!listed && (!s.deterministic || !atomic(a))) out.push_back({a, requested_math(s)});
    }
  return out;
}

std::vector<Candidate> rank_forward(cudnnHandle_t h, const ConvDescriptors& d, const ConvProblem& s) {
  int count = 0, returned = 0;
  KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count), "conv2d");
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(count, 1)));
  KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), count,
                                                          &returned, perf.data()),
                   "conv2d");
  return usable(perf, returned, s, [](int) { return false; });
}

std::vector<Candidate> rank_backward_data(cudnnHandle_t h, const ConvDescriptors& d, const ConvProblem& s) {
  int count = 0, returned = 0;
  KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count), "conv2d_backward_input");
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(count, 1)));
  KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), count,
                                                               &returned, perf.data()),
                   "conv2d_backward_input");
  return usable(perf, returned, s, [](int a) { return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0; });
}

std::vector<Candidate> rank_backward_filter(cudnnHandle_t h, const ConvDescriptors& d, const ConvProblem& s) {
  int count = 0, returned = 0;
  KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count), "conv2d_backward_weight");
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(count, 1)));
  KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                                 count, &returned, perf.data()),
                   "conv2d_backward_weight");
  return usable(perf, returned, s, [](int a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  });
}

// The cached list for `key`, asking `rank()` (outside the lock: it may take a while) the first time.
template <typename Rank>
std::vector<Candidate> candidates(const AlgoKey& key, Rank rank) {
  AlgoCache& cache = algo_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.lists.find(key);
    if (it != cache.lists.end()) return it->second;
  }
  std::vector<Candidate> ranked = rank();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.lists.emplace(key, std::move(ranked)).first->second;  // another thread's list, if it was first
}

// The algorithm that ran goes first, so later calls try it first.
void promote(const AlgoKey& key, Candidate c) {
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::vector<Candidate>& list = cache.lists[key];
  auto it = std::find_if(list.begin(), list.end(),
                         [&](const Candidate& o) { return o.algo == c.algo && o.math == c.math; });
  if (it != list.end()) std::rotate(list.begin(), it, it + 1);
}

// Runs one cuDNN call with the first candidate that works here: `workspace(algo, &bytes)` asks the workspace it
// needs, `call(algo, workspace, bytes)` runs it. NOT_SUPPORTED, and a workspace that cannot be allocated, move on
// to the next candidate; any other failure throws.
template <typename Rank, typename Workspace, typename Call>
void run_conv(const char* op, const char* call_name, const AlgoKey& key, const ConvDescriptors& d,
              const ConvProblem& s, Device device, Rank rank, Workspace workspace, Call call) {
  const std::vector<Candidate> list = candidates(key, rank);
  std::string why = "cuDNN's heuristics offered no algorithm";
  for (size_t k = 0; k < list.size(); ++k) {
    const Candidate c = list[k];
    // float32 without TF32 stays on FMA whatever math the heuristics reported.
    const cudnnMathType_t math = s.dtype == kFloat32 && !s.tf32 ? CUDNN_FMA_MATH : c.math;
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), math), op);
    size_t bytes = 0;
    const char* stage = "the workspace query";
    cudnnStatus_t status = workspace(c.algo, &bytes);
    if (status == CUDNN_STATUS_SUCCESS) {
      stage = call_name;
      Tensor ws;
      if (bytes > 0) {
        try {
          ws = empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(device));
        } catch (const Error& e) {
          why = detail::concat("algorithm ", c.algo, " needs ", bytes, " bytes of workspace: ", e.what());
          continue;
        }
      }
      status = call(c.algo, bytes > 0 ? ws.raw_data_ptr() : nullptr, bytes);
      if (status == CUDNN_STATUS_SUCCESS) {
        if (k > 0) promote(key, c);
        return;
      }
    }
    const std::string text = cuda::detail::cudnn_error_text(status);
    KILN_CHECK(status == CUDNN_STATUS_NOT_SUPPORTED, op, ": ", stage, " failed with algorithm ", c.algo, " for ",
               describe(s), ": ", text);
    why = detail::concat("algorithm ", c.algo, ", ", stage, ": ", text);
  }
  detail::throw_error(detail::concat(op, ": no cuDNN algorithm runs ", describe(s), " (", list.size(),
                                     " tried; the last: ", why, ")"));
}

// Images per cuDNN call: its legacy API counts a tensor's elements in int, so a batch whose x or y reaches 2^31
// elements goes in slices.
int64_t images_per_call(const char* op, const ConvProblem& s) {
  const int64_t per = std::max<int64_t>({s.C * s.H * s.W, s.O * s.OH * s.OW, 1});
  KILN_CHECK(per <= INT_MAX, op, ": one image of ", describe(s), " has more than ", INT_MAX,
             " elements, more than cuDNN takes");
  return std::clamp<int64_t>(INT_MAX / per, 1, std::max<int64_t>(s.n, 1));
}

// Calls body(s, d, x_offset, y_offset) for each slice of the batch that one cuDNN call takes: s is the slice's
// problem, d its descriptors, and the offsets (in bytes, for elements of es bytes) are where the slice starts in
// x-shaped (N, C, H, W) and y-shaped (N, O, OH, OW) tensors.
template <typename Body>
void for_each_batch_slice(const char* op, const ConvProblem& whole, int64_t es, Body&& body) {
  const int64_t step = images_per_call(op, whole);
  const int64_t x_image = whole.C * whole.H * whole.W * es, y_image = whole.O * whole.OH * whole.OW * es;
  for (int64_t n0 = 0; n0 < whole.n; n0 += step) {
    ConvProblem s = whole;
    s.n = std::min(step, whole.n - n0);
    const ConvDescriptors d(s);
    body(s, d, n0 * x_image, n0 * y_image);
  }
}

// ---- the three passes ----

// out (N, O, OH, OW) = x (N, C, H, W) conv weight (O, C / G, KH, KW) + bias (O; undefined: none).
void conv2d_cuda(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const char* op = "conv2d";
  check_operand(op, "out", out, out, out.dtype(), 4);
  check_operand(op, "x", x, out, out.dtype(), 4);
  check_operand(op, "weight", weight, out, out.dtype(), 4);
  if (bias.defined()) {
    check_operand(op, "bias", bias, out, out.dtype(), 1);
    KILN_CHECK(bias.size(0) == out.size(1), op, ": bias of shape ", shape_str(bias.sizes()), " for ", out.size(1),
               " output channels");
  }
  const ConvProblem whole = conv_problem(op, x, weight, out, p);
  if (out.numel() == 0) return;
  const int dev = out.device().index;
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::current_stream(dev).handle;
  if (bias.defined()) fill_bias(out, bias, stream);
  if (x.numel() == 0 || weight.numel() == 0) {  // nothing to convolve: cuDNN refuses empty tensors
    if (!bias.defined()) fill_zeros(out, stream, op);
    return;
  }
  cudnnHandle_t h = handle_for(op, dev, stream);
  const Scale one(out.dtype(), 1.0), beta(out.dtype(), bias.defined() ? 1.0 : 0.0);
  for_each_batch_slice(op, whole, out.element_size(), [&](const ConvProblem& s, const ConvDescriptors& d,
                                                         int64_t x_off, int64_t y_off) {
    const char* xp = static_cast<const char*>(x.raw_data_ptr()) + x_off;
    char* yp = static_cast<char*>(out.raw_data_ptr()) + y_off;
    run_conv(
        op, "cudnnConvolutionForward", algo_key(kForward, dev, s), d, s, out.device(),
        [&] { return rank_forward(h, d, s); },
        [&](int algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                         static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
        },
        [&](int algo, void* ws, size_t bytes) {
          return cudnnConvolutionForward(h, one.ptr(), d.x.get(), xp, d.w.get(), weight.raw_data_ptr(), d.conv.get(),
                                         static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, beta.ptr(),
                                         d.y.get(), yp);
        });
  });
}

// grad_x (N, C, H, W) from grad_out (N, O, OH, OW) and weight (O, C / G, KH, KW).
void conv2d_backward_input_cuda(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                const Conv2dParams& p) {
  const char* op = "conv2d_backward_input";
  check_operand(op, "grad_x", grad_x, grad_x, grad_x.dtype(), 4);
  check_operand(op, "grad_out", grad_out, grad_x, grad_x.dtype(), 4);
  check_operand(op, "weight", weight, grad_x, grad_x.dtype(), 4);
  const ConvProblem whole = conv_problem(op, grad_x, weight, grad_out, p);
  if (grad_x.numel() == 0) return;
  const int dev = grad_x.device().index;
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::current_stream(dev).handle;
  if (grad_out.numel() == 0 || weight.numel() == 0) return fill_zeros(grad_x, stream, op);
  cudnnHandle_t h = handle_for(op, dev, stream);
  const Scale one(grad_x.dtype(), 1.0), zero(grad_x.dtype(), 0.0);
  for_each_batch_slice(op, whole, grad_x.element_size(), [&](const ConvProblem& s, const ConvDescriptors& d,
                                                            int64_t x_off, int64_t y_off) {
    char* dxp = static_cast<char*>(grad_x.raw_data_ptr()) + x_off;
    const char* dyp = static_cast<const char*>(grad_out.raw_data_ptr()) + y_off;
    run_conv(
        op, "cudnnConvolutionBackwardData", algo_key(kBackwardData, dev, s), d, s, grad_x.device(),
        [&] { return rank_backward_data(h, d, s); },
        [&](int algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
        },
        [&](int algo, void* ws, size_t bytes) {
          return cudnnConvolutionBackwardData(h, one.ptr(), d.w.get(), weight.raw_data_ptr(), d.y.get(), dyp,
                                              d.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws,
                                              bytes, zero.ptr(), d.x.get(), dxp);
        });
  });
}

// grad_weight (O, C / G, KH, KW) from grad_out (N, O, OH, OW) and x (N, C, H, W), overwritten. Slices of a huge
// batch after the first add to it (beta = 1).
void conv2d_backward_weight_cuda(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                 const Conv2dParams& p) {
  const char* op = "conv2d_backward_weight";
  check_operand(op, "grad_weight", grad_weight, grad_weight, grad_weight.dtype(), 4);
  check_operand(op, "grad_out", grad_out, grad_weight, grad_weight.dtype(), 4);
  check_operand(op, "x", x, grad_weight, grad_weight.dtype(), 4);
  const ConvProblem whole = conv_problem(op, x, grad_weight, grad_out, p);
  if (grad_weight.numel() == 0) return;
  const int dev = grad_weight.device().index;
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::current_stream(dev).handle;
  if (grad_out.numel() == 0 || x.numel() == 0) return fill_zeros(grad_weight, stream, op);
  cudnnHandle_t h = handle_for(op, dev, stream);
  const Scale one(grad_weight.dtype(), 1.0), zero(grad_weight.dtype(), 0.0);
  for_each_batch_slice(op, whole, grad_weight.element_size(), [&](const ConvProblem& s, const ConvDescriptors& d,
                                                                 int64_t x_off, int64_t y_off) {
    const char* xp = static_cast<const char*>(x.raw_data_ptr()) + x_off;
    const char* dyp = static_cast<const char*>(grad_out.raw_data_ptr()) + y_off;
    const Scale& beta = x_off == 0 ? zero : one;  // later slices add to the first's sum
    run_conv(
        op, "cudnnConvolutionBackwardFilter", algo_key(kBackwardFilter, dev, s), d, s, grad_weight.device(),
        [&] { return rank_backward_filter(h, d, s); },
        [&](int algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(
              h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
              bytes);
        },
        [&](int algo, void* ws, size_t bytes) {
          return cudnnConvolutionBackwardFilter(h, one.ptr(), d.x.get(), xp, d.y.get(), dyp, d.conv.get(),
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes,
                                                beta.ptr(), d.w.get(), grad_weight.raw_data_ptr());
        });
  });
}
#endif  // KILN_WITH_CUDNN

}  // namespace

namespace cuda {
int cudnn_version() {
#ifdef KILN_WITH_CUDNN
  return static_cast<int>(cudnnGetVersion());
#else
  return 0;
#endif
}
}  // namespace cuda

namespace detail {
void register_cuda_conv_kernels() {
#ifdef KILN_WITH_CUDNN
  register_kernel<Op::conv2d>(DeviceType::CUDA, conv2d_cuda);
  register_kernel<Op::conv2d_backward_input>(DeviceType::CUDA, conv2d_backward_input_cuda);
  register_kernel<Op::conv2d_backward_weight>(DeviceType::CUDA, conv2d_backward_weight_cuda);
#endif
}
}  // namespace detail
}  // namespace kiln
