// GPU benchmarks (issue 6): kiln beside the library call it should match, on the same device buffers, in one
// process, printed as a markdown table of ratios (kiln / anchor).
//   - GEMM, C = A B square N in {4096, 8192}, TFLOP/s = 2 N^3 / t: kiln's matmul against cublasGemmEx with the
//     same types and compute type (fp32, TF32, bf16 and fp16 with fp32 accumulation). Target: >= 0.95.
//   - add of two 256 MiB float32 tensors (a + b, allocating its result; c.add_(b), into existing memory) and
//     sum of one, in GB/s of memory traffic (add: 2 reads + 1 write; sum: 1 read), against
//     cudaMemcpyDeviceToDevice of 256 MiB (1 read + 1 write). Target: >= 0.8.
//   - the fused Adam step (multi-tensor kernel) over a model-shaped list, 64 weights of 2^18 and 64 biases of 512
//     float32 elements, in GB/s of memory traffic (parameter, gradient and two moments read, three written),
//     against the same copy.
//   - host to device copies of 64 MiB: from kiln's pinned memory with non_blocking, and from ordinary memory,
//     against cudaMemcpyAsync from pinned memory; and pinning a batch buffer through kiln's cache against
//     cudaHostAlloc + cudaFreeHost.
// Times come from CUDA events on the current stream: after warm-up, each timed run queues `inner` calls back to
// back (so the GPU never waits on the host between them), and the figure is the median over >= 10 runs;
// variants alternate run by run so both see the same clocks and temperature. A kiln op that fails prints
// "n/a (error)" and the benchmark goes on.
//
//   gpu_bench [runs]     (runs >= 10, default 15)
#include <cublas_v2.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/ops/fused_optim.h"

namespace {

using namespace kiln;

#define BENCH_CHECK(expr)                                                                              \
  do {                                                                                                 \
    auto bench_status_ = (expr);                                                                       \
    if (bench_status_ != decltype(bench_status_)(0)) {                                                 \
      std::fprintf(stderr, "%s failed at %s:%d: %d\n", #expr, __FILE__, __LINE__, int(bench_status_)); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

// Milliseconds of GPU time per call of each variant (median over `runs` runs), or NaN for a variant that threw.
std::vector<double> time_variants(const std::vector<std::function<void()>>& variants, int runs) {
  const size_t nv = variants.size();
  std::vector<bool> ok(nv, true);
  std::vector<int> inner(nv, 1);
  cuda::Event start(true), end(true);
  // Warm-up (first calls make cuBLAS handles, workspaces, cached blocks), then one timed call to choose how many
  // calls a run needs to last ~5 ms.
  for (size_t v = 0; v < nv; ++v) {
    try {
      variants[v]();
      variants[v]();
      start.record();
      variants[v]();
      end.record();
      end.synchronize();
      double ms = std::max(1e-3, static_cast<double>(start.elapsed_ms(end)));
      inner[v] = static_cast<int>(std::clamp(std::ceil(5.0 / ms), 1.0, 200.0));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "variant %zu failed: %s\n", v, e.what());
      ok[v] = false;
    }
  }
  cuda::synchronize();
  std::vector<std::vector<double>> times(nv);
  for (int r = 0; r < runs; ++r) {
    for (size_t v = 0; v < nv; ++v) {
      if (!ok[v]) continue;
      try {
        start.record();
        for (int i = 0; i < inner[v]; ++i) variants[v]();
        end.record();
        end.synchronize();
        times[v].push_back(static_cast<double>(start.elapsed_ms(end)) / inner[v]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "variant %zu failed: %s\n", v, e.what());
        ok[v] = false;
      }
    }
  }
  std::vector<double> med(nv, std::nan(""));
  for (size_t v = 0; v < nv; ++v)
    if (ok[v]) med[v] = bench::median(times[v]);
  return med;
}

std::string figure(double x) {
  if (std::isnan(x)) return "n/a (error)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

void row(const std::string& workload, double kiln_value, const std::string& anchor, double anchor_value) {
  char ratio[32] = "n/a";
  if (!std::isnan(kiln_value) && !std::isnan(anchor_value) && anchor_value > 0)
    std::snprintf(ratio, sizeof ratio, "%.3f", kiln_value / anchor_value);
  std::printf("| %s | %s | %s | %s | %s |\n", workload.c_str(), figure(kiln_value).c_str(), anchor.c_str(),
              figure(anchor_value).c_str(), ratio);
  std::fflush(stdout);
}

struct GemmConfig {
  const char* name;
  DType dtype;
  cudaDataType cuda_type;
  cublasComputeType_t compute;
  bool tf32;
};

void bench_gemm(cublasHandle_t handle, int runs) {
  const GemmConfig configs[] = {
      {"fp32", kFloat32, CUDA_R_32F, CUBLAS_COMPUTE_32F, false},
      {"tf32", kFloat32, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, true},
      {"bf16", kBFloat16, CUDA_R_16BF, CUBLAS_COMPUTE_32F, false},
      {"fp16", kFloat16, CUDA_R_16F, CUBLAS_COMPUTE_32F, false},
  };
  Generator gen(6);
  for (int64_t n : {4096, 8192}) {
    // Random operands made once on the CPU (the GPU RNG is not what is measured), converted per dtype.
    Tensor a32 = randn({n, n}, {}, &gen), b32 = randn({n, n}, {}, &gen);
    for (const GemmConfig& cfg : configs) {
      Tensor a = a32.to(Device::cuda(), cfg.dtype), b = b32.to(Device::cuda(), cfg.dtype);
      Tensor c = empty({n, n}, TensorOptions(cfg.dtype).device(Device::cuda()));
      const float alpha = 1.0f, beta = 0.0f;
      const int ni = static_cast<int>(n);
      Tensor result;
      // Row-major C = A B is column-major C^T = B^T A^T: b first, no transposes.
      auto direct = [&] {
        BENCH_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, b.raw_data_ptr(), cfg.cuda_type,
                                 ni, a.raw_data_ptr(), cfg.cuda_type, ni, &beta, c.raw_data_ptr(), cfg.cuda_type, ni,
                                 cfg.compute, CUBLAS_GEMM_DEFAULT));
      };
      auto with_kiln = [&] { result = matmul(a, b); };
      cuda::set_allow_tf32(cfg.tf32);
      std::vector<double> ms = time_variants({with_kiln, direct}, runs);
      cuda::set_allow_tf32(false);
      const double tflop = 2.0 * static_cast<double>(n) * n * n / 1e12;
      row(std::string("GEMM ") + cfg.name + " " + std::to_string(n) + " (TFLOP/s)", tflop / (ms[0] / 1e3),
          "cublasGemmEx", tflop / (ms[1] / 1e3));
    }
  }
}

void bench_memory(int runs) {
  const int64_t n = int64_t{64} << 20;  // 256 MiB of float32
  const double bytes = static_cast<double>(n) * 4;
  TensorOptions opts = TensorOptions(kFloat32).device(Device::cuda());
  Tensor a = full({n}, 1.0, opts), b = full({n}, 2.0, opts), c = full({n}, 0.0, opts);
  Tensor src = full({n}, 3.0, opts), dst = empty({n}, opts);
  Tensor out, total;
  auto copy = [&] {
    BENCH_CHECK(cudaMemcpyAsync(dst.raw_data_ptr(), src.raw_data_ptr(), static_cast<size_t>(bytes),
                                cudaMemcpyDeviceToDevice, cuda::current_stream().handle));
  };
  std::vector<double> ms =
      time_variants({copy, [&] { out = a + b; }, [&] { c.add_(b); }, [&] { total = a.sum(); }}, runs);
  auto gbs = [](double traffic, double t_ms) { return traffic / (t_ms / 1e3) / 1e9; };
  const double copy_gbs = gbs(2 * bytes, ms[0]);
  row("add a + b, 256 MiB f32 (GB/s)", gbs(3 * bytes, ms[1]), "cudaMemcpy D2D", copy_gbs);
  row("add_ c += b, 256 MiB f32 (GB/s)", gbs(3 * bytes, ms[2]), "cudaMemcpy D2D", copy_gbs);
  row("sum, 256 MiB f32 (GB/s)", gbs(bytes, ms[3]), "cudaMemcpy D2D", copy_gbs);
}

void bench_optimizer(int runs) {
  TensorOptions opts = TensorOptions(kFloat32).device(Device::cuda());
  std::vector<Tensor> p, g, m, v;
  int64_t n = 0;
  for (int i = 0; i < 128; ++i) {
    const int64_t size = i % 2 == 0 ? int64_t{1} << 18 : 512;
    p.push_back(full({size}, 0.5, opts));
    g.push_back(full({size}, 0.01, opts));
    m.push_back(full({size}, 0.0, opts));
    v.push_back(full({size}, 0.0, opts));
    n += size;
  }
  const double bytes = static_cast<double>(n) * 4;
  Tensor src = full({n}, 3.0, opts), dst = empty({n}, opts);
  auto copy = [&] {
    BENCH_CHECK(cudaMemcpyAsync(dst.raw_data_ptr(), src.raw_data_ptr(), static_cast<size_t>(bytes),
                                cudaMemcpyDeviceToDevice, cuda::current_stream().handle));
  };
  std::vector<double> steps(p.size(), 1.0);
  auto adam = [&] {
    ops::fused_adam_step_(p, g, m, v, steps, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
  };
  std::vector<double> ms = time_variants({copy, adam}, runs);
  auto gbs = [](double traffic, double t_ms) { return traffic / (t_ms / 1e3) / 1e9; };
  row("fused Adam step, 128 tensors, 16.8 M f32 (GB/s)", gbs(7 * bytes, ms[1]), "cudaMemcpy D2D",
      gbs(2 * bytes, ms[0]));
}

// Host to device copies of a 64 MiB float32 tensor: kiln's copy from its pinned memory with non_blocking
// (only queued, as the Trainer copies a pinned loader's batches) and from ordinary memory (staged by the
// driver and waited for), against cudaMemcpyAsync from a cudaHostAlloc'd buffer. Then pinning a batch buffer
// (128 x 28 x 28 float32, 392 KiB) and freeing it: kiln's cache against cudaHostAlloc + cudaFreeHost, in
// wall-clock microseconds (lower is better).
void bench_host_copies(int runs) {
  const int64_t n = int64_t{16} << 20;
  const size_t bytes = static_cast<size_t>(n) * 4;
  Tensor dev = empty({n}, TensorOptions(kFloat32).device(Device::cuda()));
  Tensor pinned = cuda::empty_pinned({n}, kFloat32);
  pinned.fill_(1.0);
  Tensor pageable = full({n}, 1.0);
  void* raw = nullptr;
  BENCH_CHECK(cudaHostAlloc(&raw, bytes, cudaHostAllocPortable));
  std::memset(raw, 0, bytes);
  auto anchor = [&] {
    BENCH_CHECK(cudaMemcpyAsync(dev.raw_data_ptr(), raw, bytes, cudaMemcpyHostToDevice, cuda::current_stream().handle));
  };
  std::vector<double> ms = time_variants(
      {anchor, [&] { dev.copy_(pinned, /*non_blocking=*/true); }, [&] { dev.copy_(pageable); }}, runs);
  cuda::synchronize();
  BENCH_CHECK(cudaFreeHost(raw));
  auto gbs = [&](double t_ms) { return static_cast<double>(bytes) / (t_ms / 1e3) / 1e9; };
  row("H2D copy 64 MiB f32 from kiln's pinned memory, non_blocking (GB/s)", gbs(ms[1]), "cudaMemcpyAsync H2D, pinned",
      gbs(ms[0]));
  row("H2D copy 64 MiB f32 from ordinary memory (GB/s)", gbs(ms[2]), "cudaMemcpyAsync H2D, pinned", gbs(ms[0]));

  const int64_t batch = 128 * 28 * 28;
  std::vector<double> kiln_us, cuda_us;
  for (int r = 0; r < runs; ++r) {
    double t0 = bench::now_seconds();
    for (int i = 0; i < 20; ++i) Tensor b = cuda::empty_pinned({batch}, kFloat32);
    kiln_us.push_back((bench::now_seconds() - t0) / 20 * 1e6);
    t0 = bench::now_seconds();
    for (int i = 0; i < 20; ++i) {
      void* p = nullptr;
      BENCH_CHECK(cudaHostAlloc(&p, static_cast<size_t>(batch) * 4, cudaHostAllocPortable));
      BENCH_CHECK(cudaFreeHost(p));
    }
    cuda_us.push_back((bench::now_seconds() - t0) / 20 * 1e6);
  }
  row("pin and free a 392 KiB batch buffer (us, lower is better)", bench::median(kiln_us),
      "cudaHostAlloc + cudaFreeHost", bench::median(cuda_us));
}

}  // namespace

int main(int argc, char** argv) {
  if (!kiln::cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  std::printf("%s\n", kiln::cuda::runtime_info().c_str());
  const int runs = std::max(10, argc > 1 ? std::atoi(argv[1]) : 15);
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, cuBLAS %d; medians of %d runs (CUDA events); ratio = kiln / anchor\n\n", prop.name,
              kiln::cuda::cublas_version(), runs);
  std::printf("| workload | kiln | anchor | anchor's | ratio |\n|---|---|---|---|---|\n");
  cublasHandle_t handle = nullptr;
  BENCH_CHECK(cublasCreate(&handle));
  BENCH_CHECK(cublasSetStream(handle, kiln::cuda::current_stream().handle));
  double t0 = kiln::bench::now_seconds();
  try {
    bench_gemm(handle, runs);
  } catch (const std::exception& e) {
    std::printf("| GEMM | n/a (error) | | | |\n");
    std::fprintf(stderr, "GEMM: %s\n", e.what());
  }
  try {
    bench_memory(runs);
  } catch (const std::exception& e) {
    std::printf("| add, sum | n/a (error) | | | |\n");
    std::fprintf(stderr, "memory: %s\n", e.what());
  }
  try {
    bench_optimizer(runs);
  } catch (const std::exception& e) {
    std::printf("| fused Adam | n/a (error) | | | |\n");
    std::fprintf(stderr, "optimizer: %s\n", e.what());
  }
  try {
    bench_host_copies(runs);
  } catch (const std::exception& e) {
    std::printf("| host copies | n/a (error) | | | |\n");
    std::fprintf(stderr, "host copies: %s\n", e.what());
  }
  BENCH_CHECK(cublasDestroy(handle));
  std::printf("\n# %.1f s\n", kiln::bench::now_seconds() - t0);
  return 0;
}
