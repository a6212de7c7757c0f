#include "kiln/tensor/kernel_lab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kiln/tensor/allocator.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/rng.h"
#include "kiln/tensor/views.h"

namespace kiln::lab {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Keeps a computed value from being optimized away.
void keep(float v) {
  static volatile float sink;
  sink = v;
  (void)sink;  // GCC 12 calls a volatile that is only written "set but not used"
}

const char* device_name(DeviceType device) { return device == DeviceType::CUDA ? "cuda" : "cpu"; }

// The variant in the table while it lives (or the reference, as asked), the reference back at its end, however
// it ends.
class Installed {
 public:
  Installed(const detail::Install& install, bool variant) : install_(install) { install_(variant); }
  ~Installed() { install_(false); }
  Installed(const Installed&) = delete;
  Installed& operator=(const Installed&) = delete;

 private:
  const detail::Install& install_;
};

// Poisons new CPU and CUDA allocations while it lives.
class Poisoned {
 public:
  Poisoned() : cpu_(cpu_poison_allocations()), cuda_(cuda::poison_allocations()) {
    set_cpu_poison_allocations(true);
    cuda::set_poison_allocations(true);
  }
  ~Poisoned() {
    set_cpu_poison_allocations(cpu_);
    cuda::set_poison_allocations(cuda_);
  }
  Poisoned(const Poisoned&) = delete;
  Poisoned& operator=(const Poisoned&) = delete;

 private:
  bool cpu_, cuda_;
};

Tolerance defaults_for(DType dtype, Tolerance t) {
  double rtol = 0, atol = 0;
  switch (dtype) {
    case kFloat64: rtol = 1e-12, atol = 1e-12; break;
    case kFloat32: rtol = 1e-5, atol = 1e-6; break;
    case kFloat16: rtol = 1e-3, atol = 1e-3; break;
    case kBFloat16: rtol = 1.6e-2, atol = 1e-2; break;
    default: break;  // integers and bool: exact
  }
  return {t.rtol < 0 ? rtol : t.rtol, t.atol < 0 ? atol : t.atol};
}

// t on the CPU in dtype, contiguous (the tensor layer's own copies: this file sits below autograd).
Tensor host(const Tensor& t, DType dtype) { return ops::contiguous(ops::to(t, kCPU, dtype)); }

std::string where(int64_t flat, const Shape& shape) {
  Shape at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(at);
}

// Compares one returned tensor; appends a line to the report, updates the maxima, returns whether it passed.
bool compare(size_t i, const Tensor& ref, const Tensor& var, Tolerance tolerance, Check& check) {
  std::string& r = check.report;
  const std::string name = kiln::detail::concat("output ", i);
  if (!ref.defined() || !var.defined()) {
    if (ref.defined() != var.defined()) {
      r += kiln::detail::concat(name, ": ", ref.defined() ? "undefined" : "defined", " with the variant, ",
                                ref.defined() ? "defined" : "undefined", " with the reference: FAIL\n");
      return false;
    }
    r += name + ": undefined in both\n";
    return true;
  }
  const std::string what = kiln::detail::concat(name, " (", shape_str(ref.sizes()), " ", ref.dtype(), ")");
  if (ref.sizes() != var.sizes() || ref.dtype() != var.dtype() || ref.device() != var.device()) {
    r += kiln::detail::concat(what, ": the variant's is ", shape_str(var.sizes()), " ", var.dtype(), " on ",
                              var.device().str(), ", the reference's on ", ref.device().str(), ": FAIL\n");
    return false;
  }
  const int64_t n = ref.numel();
  if (!is_floating(ref.dtype())) {
    const Tensor a = host(ref, kInt64), b = host(var, kInt64);
    const int64_t* pa = a.data_ptr<int64_t>();
    const int64_t* pb = b.data_ptr<int64_t>();
    for (int64_t k = 0; k < n; ++k)
      if (pa[k] != pb[k]) {
        r += kiln::detail::concat(what, ": differs at ", where(k, ref.sizes()), ": reference ", pa[k], ", variant ",
                                  pb[k], " (integers must match exactly): FAIL\n");
        return false;
      }
    r += what + ": equal\n";
    return true;
  }
  const Tolerance tol = defaults_for(ref.dtype(), tolerance);
  const Tensor a = host(ref, kFloat64), b = host(var, kFloat64);
  const double* pa = a.data_ptr<double>();
  const double* pb = b.data_ptr<double>();
  double max_abs = 0, max_rel = 0;
  int64_t worst = -1, first_bad = -1;
  double worst_excess = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double x = pa[k], y = pb[k];
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) {
      const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (!same && first_bad < 0) first_bad = k;
      continue;
    }
    const double err = std::abs(y - x);
    max_abs = std::max(max_abs, err);
    if (x != 0) max_rel = std::max(max_rel, err / std::abs(x));
    const double excess = err - (tol.atol + tol.rtol * std::abs(x));
    if (worst < 0 || excess > worst_excess) worst = k, worst_excess = excess;
  }
  check.max_abs_error = std::max(check.max_abs_error, max_abs);
  check.max_rel_error = std::max(check.max_rel_error, max_rel);
  const std::string errors = kiln::detail::concat("max abs error ", max_abs, ", max rel error ", max_rel,
                                                  " (rtol ", tol.rtol, ", atol ", tol.atol, ")");
  if (first_bad >= 0) {
    const double y = pb[first_bad];
    r += kiln::detail::concat(what, ": at ", where(first_bad, ref.sizes()), " the reference has ", pa[first_bad],
                              " and the variant ", y,
                              std::isnan(y) ? " (NaN: computed so, or an element the variant never wrote: new "
                                              "memory was poisoned with NaN)"
                                            : "",
                              "; ", errors, ": FAIL\n");
    return false;
  }
  if (worst >= 0 && worst_excess > 0) {
    r += kiln::detail::concat(what, ": ", errors, "; worst at ", where(worst, ref.sizes()), ": reference ", pa[worst],
                              ", variant ", pb[worst], ": FAIL\n");
    return false;
  }
  r += kiln::detail::concat(what, ": ", errors, ": ok\n");
  return true;
}

void synchronize_if_cuda(DeviceType device) {
  if (device == DeviceType::CUDA) cuda::synchronize();
}

}  // namespace

namespace detail {

Check check_variant(Op op, DeviceType device, const Install& install, const std::function<int64_t()>& calls,
                    const Work& work, Tolerance tolerance) {
  KILN_CHECK(work != nullptr, "check_variant: no work given");
  Check check;
  check.report = kiln::detail::concat("check of a variant of ", op_name(op), " on ", device_name(device), "\n");
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();

  std::vector<Tensor> reference;
  {
    Installed in_table(install, false);
    Poisoned poisoned;
    reference = work();
    synchronize_if_cuda(device);
  }
  std::vector<Tensor> variant;
  gen.set_state(seed, offset);  // the same random inputs again
  {
    Installed in_table(install, true);
    Poisoned poisoned;
    variant = work();
    synchronize_if_cuda(device);
    check.variant_calls = calls();
  }

  bool ok = true;
  if (check.variant_calls == 0) {
    check.report += kiln::detail::concat("the variant was never called: work does not reach ", op_name(op), " on ",
                                         device_name(device), ": FAIL\n");
    ok = false;
  }
  if (reference.size() != variant.size()) {
    check.report += kiln::detail::concat("work returned ", reference.size(), " tensors with the reference and ",
                                         variant.size(), " with the variant: FAIL\n");
    ok = false;
  } else {
    for (size_t i = 0; i < reference.size(); ++i) ok &= compare(i, reference[i], variant[i], tolerance, check);
  }
  check.ok = ok;
  check.report += kiln::detail::concat(check.variant_calls, " call(s) of the variant; ", ok ? "PASS" : "FAIL", "\n");
  return check;
}

Timing time_variant(Op op, DeviceType device, const Install& install, const Work& work, const TimingOptions& options) {
  KILN_CHECK(work != nullptr, "time_variant: no work given");
  KILN_CHECK(options.reps >= 1 && options.warmup >= 0, "time_variant: reps must be at least 1 and warmup at least 0, "
             "got ", options.reps, " and ", options.warmup);
  std::vector<double> times[2];
  for (int r = 0; r < options.warmup + options.reps; ++r) {
    for (int v = 0; v < 2; ++v) {
      Installed in_table(install, v == 1);
      synchronize_if_cuda(device);
      const double t0 = now_seconds();
      const std::vector<Tensor> out = work();
      synchronize_if_cuda(device);
      const double t = now_seconds() - t0;
      if (r >= options.warmup) times[v].push_back(t);
    }
  }
  Timing timing;
  timing.reference_seconds = median(times[0]);
  timing.variant_seconds = median(times[1]);
  timing.speedup = timing.variant_seconds > 0 ? timing.reference_seconds / timing.variant_seconds : 0;

  const double bound = std::max(options.peaks.gflops > 0 ? options.flops / (options.peaks.gflops * 1e9) : 0.0,
                                options.peaks.gbps > 0 ? options.bytes / (options.peaks.gbps * 1e9) : 0.0);
  std::string& r = timing.report;
  r = kiln::detail::concat(op_name(op), " on ", device_name(device), ": median of ", options.reps,
                           " interleaved runs of the work\n");
  char line[160];
  std::snprintf(line, sizeof line, "%-10s %10s %10s %10s %10s\n", "kernel", "ms", "GFLOP/s", "GB/s", "roofline");
  r += line;
  const char* names[2] = {"reference", "variant"};
  const double secs[2] = {timing.reference_seconds, timing.variant_seconds};
  for (int v = 0; v < 2; ++v) {
    auto figure = [&](double x) { return x > 0 && secs[v] > 0; };
    char gf[16] = "-", gb[16] = "-", roof[16] = "-";
    if (figure(options.flops)) std::snprintf(gf, sizeof gf, "%.2f", options.flops / secs[v] / 1e9);
    if (figure(options.bytes)) std::snprintf(gb, sizeof gb, "%.2f", options.bytes / secs[v] / 1e9);
    if (figure(bound)) std::snprintf(roof, sizeof roof, "%.3f", bound / secs[v]);
    std::snprintf(line, sizeof line, "%-10s %10.4f %10s %10s %10s\n", names[v], secs[v] * 1e3, gf, gb, roof);
    r += line;
  }
  std::snprintf(line, sizeof line, "variant / reference time: %.3f (speedup %.3fx)\n",
                timing.reference_seconds > 0 ? timing.variant_seconds / timing.reference_seconds : 0.0,
                timing.speedup);
  r += line;
  return timing;
}

}  // namespace detail

// ---- the machine's ceilings ----

double fma_peak_gflops(int threads) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int kLanes = 16;
#define KILN_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define KILN_SET1(x) _mm512_set1_ps(x)
#elif defined(__AVX2__) && defined(__FMA__)
  using V = __m256;
  constexpr int kLanes = 8;
#define KILN_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define KILN_SET1(x) _mm256_set1_ps(x)
#else
  (void)threads;
  return 0;  // no FMA vectors in this build
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  // Twelve independent chains per thread cover the FMA units' latency times their count.
  constexpr int kChains = 12;
  const long iters = 20'000'000;
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {
    const double t0 = now_seconds();
    float sink = 0;
    int ran = 1;  // the threads OpenMP gave the region, which may be fewer than asked for
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
#ifdef _OPENMP
#pragma omp single
      ran = omp_get_num_threads();
#endif
      V acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = KILN_SET1(1.0f + c * 1e-7f);
      const V mul = KILN_SET1(0.9999999f), add = KILN_SET1(1e-7f);
      for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = KILN_FMA(acc[c], mul, add);
      float s = 0;
      alignas(64) float lanes[kLanes];
      for (int c = 0; c < kChains; ++c) {
        std::memcpy(lanes, &acc[c], sizeof lanes);
        s += lanes[0];
      }
      sink += s;
    }
    const double t = now_seconds() - t0;
    keep(sink);
    best = std::max(best, 2.0 * kLanes * kChains * double(iters) * ran / t / 1e9);
  }
  return best;
#undef KILN_FMA
#undef KILN_SET1
#endif
}

// Traffic is counted as each loop names it: a store to a line not read first also reads it (write-allocate)
// uncounted, which is why the copy and the triad count less than they move; the update (a += b) has no such
// hidden traffic.
double stream_bandwidth_gbs(int threads, size_t buffer_bytes, int reps) {
#ifndef _OPENMP
  threads = 1;
#endif
  const size_t n = std::max<size_t>(buffer_bytes / sizeof(float), 1);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
  const long ln = static_cast<long>(n);
  auto best_of = [&](auto&& loop, double bytes) {
    double best = 0;
    for (int r = 0; r < reps; ++r) {
      const double t0 = now_seconds();
      loop();
      best = std::max(best, bytes / (now_seconds() - t0) / 1e9);
    }
    return best;
  };
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  const double read = best_of(
      [&] {
        float s = 0;
#pragma omp parallel for simd num_threads(threads) reduction(+ : s)
        for (long i = 0; i < ln; ++i) s += pb[i];
        keep(s);
      },
      4.0 * n);
  const double copy = best_of(
      [&] {
#pragma omp parallel for simd num_threads(threads)
        for (long i = 0; i < ln; ++i) pa[i] = pb[i];
        keep(pa[n / 2]);
      },
      8.0 * n);
  const double triad = best_of(
      [&] {
#pragma omp parallel for simd num_threads(threads)
        for (long i = 0; i < ln; ++i) pa[i] = pb[i] + 0.5f * pc[i];
        keep(pa[n / 2]);
      },
      12.0 * n);
  const double update = best_of(
      [&] {
#pragma omp parallel for simd num_threads(threads)
        for (long i = 0; i < ln; ++i) pa[i] += pb[i];
        keep(pa[n / 2]);
      },
      12.0 * n);
  return std::max({read, copy, triad, update});
}

Peaks measure_cpu_peaks(int threads, size_t buffer_bytes) {
  const int t = threads > 0 ? threads : get_num_threads();
  return {fma_peak_gflops(t), stream_bandwidth_gbs(t, buffer_bytes)};
}

}  // namespace kiln::lab
