// The fused cross-entropy, layer norm, batch norm and gelu, forward + backward through autograd, against the same
// math as composites of kiln's differentiable ops (what nn::F ran before the fused ops) and, when the benchmark
// is built against LibTorch (KILN_BENCH_WITH_TORCH), against torch's cross_entropy, layer_norm and batch_norm
// on the CPU.
// Interleaved in one process, medians; ratios are kiln fused / anchor (below 1: faster).
//
// Shapes: cross-entropy at W3's (64, 10) and W2's (128, 10) batches, a 1000-class (4096, 1000) one and a
// 32000-class (256, 32000) one; layer norm at (64, 10) and transformer widths (8192, 768), (4096, 1024);
// batch norm (training) after W3's first convolution, (64, 32, 28, 28), and after a linear layer, (128, 512);
// gelu (exact: one kernel forward, one backward, against x/2 (1 + erf(x / sqrt 2)) composed) at gpt-mini's
// feed-forward width, (2048, 512), and a wider one, (4096, 3072); the same for gelu's tanh form (gelu_tanh).
// The CTC loss (its own table) against LibTorch's only.
// On the CPU a last table times kiln's float erf kernel against a loop of std::erf on the same 16M values (one
// thread each).
// On a GPU (`fused_bench cuda`, run by scripts/gpu_check.sh) the same rows on the device, each step timed
// with a synchronize, against the composite only.
//
//   fused_bench [cpu|cuda] [reps] [cross_entropy|layer_norm|batch_norm|gelu|gelu_tanh|ctc_loss|erf]
//   (the last argument: those rows only)
#include <kiln/kiln.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifdef KILN_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include "bench_util.h"

namespace {

using kiln::Tensor;

// The composites: cross-entropy as log_softmax, the target's entry and a mean; layer norm from mean, var,
// rsqrt and the affine parameters. Both compute what the fused ops compute for these inputs.
Tensor ce_composite(const Tensor& z, const Tensor& t) {
  return -kiln::gather(kiln::log_softmax(z, 1), 1, t.unsqueeze(1)).mean();
}
Tensor ln_composite(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor c = x - x.mean({1}, true);
  return c * kiln::rsqrt((c * c).mean({1}, true) + 1e-5) * w + b;
}
// x: (N, C, ...); the batch statistics over every dim but 1 (no running statistics).
Tensor gelu_composite(const Tensor& x) { return x * 0.5 * (kiln::erf(x * 0.70710678118654752440) + 1.0); }
Tensor gelu_tanh_composite(const Tensor& x) {
  return x * 0.5 * (kiln::tanh((x + x * x * x * 0.044715) * 0.79788456080286535588) + 1.0);
}
Tensor bn_composite(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  kiln::Shape stat(static_cast<size_t>(x.dim()), 1);
  stat[1] = x.size(1);
  Tensor c = x - x.mean(dims, true);
  return c * kiln::rsqrt((c * c).mean(dims, true) + 1e-5) * w.view(stat) + b.view(stat);
}

void sync(kiln::Device d) {
  if (d.is_cuda()) kiln::cuda::synchronize();
}

// Checks two losses agree before timing them: a fast wrong answer is not a figure.
void check(const char* what, double a, double b) {
  if (std::abs(a - b) > 1e-3 * std::max(1.0, std::abs(b))) {
    std::fprintf(stderr, "fused_bench: %s: %g against %g\n", what, a, b);
    std::exit(1);
  }
}

void print_row(const char* op, const std::string& shape, const std::vector<double>& t, bool torch) {
  std::printf("| %s | %s | %.1f | %.1f | %.2f |", op, shape.c_str(), t[0] * 1e6, t[1] * 1e6, t[0] / t[1]);
  if (torch) std::printf(" %.1f | %.2f |", t[2] * 1e6, t[0] / t[2]);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const bool gpu = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 30;
  const std::string only = argc > 3 ? argv[3] : "";
  auto wanted = [&](const char* op) { return only.empty() || only == op; };
  if (gpu && !kiln::cuda::is_available()) {
    std::printf("fused_bench: no CUDA device\n");
    return 0;
  }
  const kiln::Device dev = gpu ? kiln::Device::cuda() : kiln::Device(kiln::kCPU);
  bool torch = false;
#ifdef KILN_BENCH_WITH_TORCH
  torch = !gpu;
  torch::set_num_threads(kiln::get_num_threads());
#endif
  std::printf("fused_bench on %s, %d threads, medians of %d interleaved runs, us per forward + backward\n\n",
              gpu ? "cuda" : "cpu", kiln::get_num_threads(), reps);
  std::printf("| op | shape | fused | composite | fused / composite |%s\n",
              torch ? " LibTorch | fused / LibTorch |" : "");
  std::printf("|---|---|---|---|---|%s\n", torch ? "---|---|" : "");

  const std::vector<std::pair<int64_t, int64_t>> ce_shapes = {{64, 10}, {128, 10}, {4096, 1000}, {256, 32000}};
  for (auto [n, c] : ce_shapes) {
    if (!wanted("cross_entropy")) break;
    Tensor z = kiln::randn({n, c}).to(dev).requires_grad_();
    Tensor t = kiln::randint(0, c, {n}).to(dev);
    check("cross_entropy", kiln::nn::F::cross_entropy(z, t).item<double>(), ce_composite(z, t).item<double>());
    std::vector<std::function<void()>> variants = {
        [&] {
          z.set_grad(Tensor());
          kiln::nn::F::cross_entropy(z, t).backward();
          sync(dev);
        },
        [&] {
          z.set_grad(Tensor());
          ce_composite(z, t).backward();
          sync(dev);
        }};
#ifdef KILN_BENCH_WITH_TORCH
    torch::Tensor tz, tt;
    if (torch) {
      tz = torch::from_blob(z.detach().data_ptr<float>(), {n, c}).clone().requires_grad_();
      tt = torch::from_blob(t.data_ptr<int64_t>(), {n}, torch::kInt64).clone();
      check("torch cross_entropy", torch::nn::functional::cross_entropy(tz, tt).item<double>(),
            ce_composite(z, t).item<double>());
      variants.push_back([&] {
        tz.mutable_grad() = torch::Tensor();
        torch::nn::functional::cross_entropy(tz, tt).backward();
      });
    }
#endif
    print_row("cross_entropy", "(" + std::to_string(n) + ", " + std::to_string(c) + ")",
              kiln::bench::time_interleaved(variants, reps), torch);
  }

  // The normalizations: loss = sum(op(x, w, b) * r), r a fixed weighting so that the gradient is not
  // trivially structured; x (shape) and w, b (features) require grad. LibTorch's twin is picked by op.
  auto norm_row = [&](const char* op, const kiln::Shape& shape, int64_t features,
                      const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& fused,
                      const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& composite) {
    Tensor x = kiln::randn(shape).to(dev).requires_grad_();
    Tensor w = (kiln::randn({features}) * 0.1 + 1.0).to(dev).requires_grad_();
    Tensor b = kiln::randn({features}).to(dev).requires_grad_();
    Tensor r = kiln::randn(shape).to(dev);
    check(op, (fused(x, w, b) * r).sum().item<double>(), (composite(x, w, b) * r).sum().item<double>());
    auto step = [&](const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f) {
      return [&, f] {
        for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
        (f(x, w, b) * r).sum().backward();
        sync(dev);
      };
    };
    std::vector<std::function<void()>> variants = {step(fused), step(composite)};
#ifdef KILN_BENCH_WITH_TORCH
    torch::Tensor tx, tw, tb, tr;
    if (torch) {
      auto copy = [](const Tensor& k) {
        return torch::from_blob(k.detach().data_ptr<float>(), std::vector<int64_t>(k.sizes().begin(), k.sizes().end()))
            .clone();
      };
      tx = copy(x).requires_grad_();
      tw = copy(w).requires_grad_();
      tb = copy(b).requires_grad_();
      tr = copy(r);
      variants.push_back([&] {
        for (torch::Tensor* t : {&tx, &tw, &tb}) t->mutable_grad() = torch::Tensor();
        torch::Tensor y = std::string(op) == "layer_norm"
                              ? torch::layer_norm(tx, {features}, tw, tb, 1e-5)
                              : torch::batch_norm(tx, tw, tb, {}, {}, true, 0.1, 1e-5, false);
        (y * tr).sum().backward();
      });
    }
#endif
    print_row(op, kiln::shape_str(shape), kiln::bench::time_interleaved(variants, reps), torch);
  };

  for (kiln::Shape shape : std::vector<kiln::Shape>{{64, 10}, {8192, 768}, {4096, 1024}}) {
    if (!wanted("layer_norm")) break;
    const int64_t d = shape[1];
    norm_row(
        "layer_norm", shape, d, [d](const Tensor& x, const Tensor& w, const Tensor& b) {
          return kiln::nn::F::layer_norm(x, {d}, w, b, 1e-5);
        },
        ln_composite);
  }
  for (kiln::Shape shape : std::vector<kiln::Shape>{{64, 32, 28, 28}, {128, 512}}) {
    if (!wanted("batch_norm")) break;
    norm_row(
        "batch_norm", shape, shape[1], [](const Tensor& x, const Tensor& w, const Tensor& b) {
          return kiln::nn::F::batch_norm(x, {}, {}, w, b, true, 0.1, 1e-5);
        },
        bn_composite);
  }
  for (const char* form : {"none", "tanh"}) {
    const std::string name = std::strcmp(form, "none") == 0 ? "gelu" : "gelu_tanh";
    if (!wanted(name.c_str())) continue;
    Tensor (*composite)(const Tensor&) = name == "gelu" ? gelu_composite : gelu_tanh_composite;
    for (kiln::Shape shape : std::vector<kiln::Shape>{{2048, 512}, {4096, 3072}}) {
      Tensor x = kiln::randn(shape).to(dev).requires_grad_();
      Tensor r = kiln::randn(shape).to(dev);
      check(name.c_str(), (kiln::gelu(x, form) * r).sum().item<double>(), (composite(x) * r).sum().item<double>());
      auto step = [&](std::function<Tensor(const Tensor&)> f) {
        return [&, f] {
          x.set_grad(Tensor());
          (f(x) * r).sum().backward();
          sync(dev);
        };
      };
      std::vector<std::function<void()>> variants = {step([form](const Tensor& t) { return kiln::gelu(t, form); }),
                                                     step(composite)};
#ifdef KILN_BENCH_WITH_TORCH
      torch::Tensor tx, tr;
      if (torch) {
        tx = torch::from_blob(x.detach().data_ptr<float>(), {shape[0], shape[1]}).clone().requires_grad_();
        tr = torch::from_blob(r.data_ptr<float>(), {shape[0], shape[1]}).clone();
        variants.push_back([&, form] {
          tx.mutable_grad() = torch::Tensor();
          (torch::gelu(tx, form) * tr).sum().backward();
        });
      }
#endif
      print_row(name.c_str(), kiln::shape_str(shape), kiln::bench::time_interleaved(variants, reps), torch);
    }
  }

  // The CTC loss of log_softmax(z), mean reduction, forward + backward to z: a speech-like batch (200 frames, 30
  // classes, 50 labels) and a line-of-text one (50 frames, 80 classes, 20 labels), lengths varying across it.
  // Against LibTorch's ctc_loss only: kiln has no composite of it.
  if (wanted("ctc_loss")) {
    std::printf("\n| op | (T, N, C, S) | kiln |%s\n|---|---|---|%s\n", torch ? " LibTorch | kiln / LibTorch |" : "",
                torch ? "---|---|" : "");
    for (auto [T, N, C, S] : std::vector<std::array<int64_t, 4>>{{200, 32, 30, 50}, {50, 64, 80, 20}}) {
      Tensor z = kiln::randn({T, N, C}).to(dev).requires_grad_();
      Tensor targets = kiln::randint(1, C, {N, S});
      std::vector<int64_t> in(static_cast<size_t>(N)), tl(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; ++n) {
        in[n] = T - n % (T / 5);  // never too short for its labels, repeats and all
        tl[n] = S - n % (S / 4);
      }
      auto loss = [&] { return kiln::nn::F::ctc_loss(kiln::log_softmax(z, 2), targets, in, tl); };
      std::vector<std::function<void()>> variants = {[&] {
        z.set_grad(Tensor());
        loss().backward();
        sync(dev);
      }};
#ifdef KILN_BENCH_WITH_TORCH
      namespace tf = torch::nn::functional;
      torch::Tensor tz, tt, tin, ttl;
      if (torch) {
        tz = torch::from_blob(z.detach().data_ptr<float>(), {T, N, C}).clone().requires_grad_();
        tt = torch::from_blob(targets.data_ptr<int64_t>(), {N, S}, torch::kInt64).clone();
        tin = torch::tensor(in, torch::kInt64);
        ttl = torch::tensor(tl, torch::kInt64);
        check("ctc_loss", loss().item<double>(), tf::ctc_loss(torch::log_softmax(tz, 2), tt, tin, ttl).item<double>());
        variants.push_back([&] {
          tz.mutable_grad() = torch::Tensor();
          tf::ctc_loss(torch::log_softmax(tz, 2), tt, tin, ttl).backward();
        });
      }
#endif
      const std::vector<double> t = kiln::bench::time_interleaved(variants, reps);
      std::printf("| ctc_loss | (%lld, %lld, %lld, %lld) | %.1f |", static_cast<long long>(T), static_cast<long long>(N),
                  static_cast<long long>(C), static_cast<long long>(S), t[0] * 1e6);
      if (torch) std::printf(" %.1f | %.2f |", t[1] * 1e6, t[0] / t[1]);
      std::printf("\n");
    }
  }

  if (!gpu && wanted("erf")) {
    // The erf kernel (fast_math::erf, vectorized) against the math library's erf, one thread each, 16M floats.
    const int threads = kiln::get_num_threads();
    kiln::set_num_threads(1);
    const int64_t n = 16 * 1024 * 1024;
    Tensor x = kiln::randn({n}) * 2.0, y = kiln::empty({n});
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    Tensor out;
    std::vector<double> t = kiln::bench::time_interleaved(
        {[&] { out = kiln::erf(x); },
         [&] {
           for (int64_t i = 0; i < n; ++i) yp[i] = std::erf(xp[i]);
           kiln::bench::do_not_optimize(yp[n - 1]);
         }},
        std::max(3, reps / 5));
    check("erf", out.sum().item<double>(), y.sum().item<double>());
    std::printf("\n| op (1 thread) | values | kiln erf, ns per value | std::erf loop | kiln / std::erf |\n|---|---|---|---|---|\n");
    std::printf("| erf | %lld | %.2f | %.2f | %.3f |\n", static_cast<long long>(n), t[0] / n * 1e9, t[1] / n * 1e9,
                t[0] / t[1]);
    kiln::set_num_threads(threads);
  }
  return 0;
}
