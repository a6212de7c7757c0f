// Training-step time and peak memory (BENCHMARKS.md W2 and W3), kiln beside LibTorch.
//
//   W2 mlp: Linear(784,512)-ReLU-Linear(512,256)-ReLU-Linear(256,10), cross-entropy, SGD lr 0.01 momentum 0.9,
//           batch 128 of x ~ N(0,1) [128,784], y ~ U{0..9}; 20 warm-up + 200 timed steps
//   W3 cnn: conv(1->32,3x3,pad 1)+ReLU+maxpool2, conv(32->64,3x3,pad 1)+ReLU+maxpool2, flatten, Linear(3136,128)
//           +ReLU, Linear(128,10); cross-entropy; Adam lr 1e-3; batch [64,1,28,28]; 10 warm-up + 100 timed steps
// A step is zero_grad + forward + loss + backward + optimizer step, on one batch made before timing.
//
// Time: both frameworks in one process, steps interleaved (kiln, torch, kiln, ...) so that they see the same
// machine; the median ms/step of each and the ratio kiln / torch. The machine is shared and noisy: medians.
// Peak memory cannot be told apart inside one process, so each framework also runs alone in a child process
// that reports its own peak RSS: kiln in train_bench_kiln (this file built without LibTorch, so
// that 500 MB of torch libraries are not mapped into kiln's figure), torch in this binary with --only torch.
//
//   train_bench [--threads N] [--workload mlp|cnn|all] [--only kiln|torch]
#include <kiln/kiln.h>
#include <kiln/optim/optim.h>


#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#ifdef KILN_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include "bench_util.h"

namespace {

struct Workload {
  std::string name;
  int warmup, reps;
};

// ---- kiln ----
struct KilnMlp {
  kiln::nn::Sequential model{kiln::nn::Linear(784, 512), kiln::nn::ReLU(), kiln::nn::Linear(512, 256),
                             kiln::nn::ReLU(), kiln::nn::Linear(256, 10)};
  kiln::optim::SGD opt{model->parameters(), {.lr = 0.01, .momentum = 0.9}};
  kiln::Tensor x, y;
  KilnMlp() {
    kiln::Generator g(1);
    x = kiln::randn({128, 784}, kiln::kFloat32, &g);
    y = kiln::randint(10, {128}, kiln::kInt64, &g);
  }
  double step() {
    opt.zero_grad();
    kiln::Tensor loss = kiln::nn::F::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    return loss.item<double>();
  }
};

struct KilnCnn {
  kiln::nn::Sequential model{kiln::nn::Conv2d(1, 32, 3, kiln::nn::Conv2dOptions{.padding = 1}), kiln::nn::ReLU(),
                             kiln::nn::MaxPool2d(2),
                             kiln::nn::Conv2d(32, 64, 3, kiln::nn::Conv2dOptions{.padding = 1}), kiln::nn::ReLU(),
                             kiln::nn::MaxPool2d(2), kiln::nn::Flatten(), kiln::nn::Linear(3136, 128),
                             kiln::nn::ReLU(), kiln::nn::Linear(128, 10)};
  kiln::optim::Adam opt{model->parameters(), {.lr = 1e-3}};
  kiln::Tensor x, y;
  KilnCnn() {
    kiln::Generator g(2);
    x = kiln::randn({64, 1, 28, 28}, kiln::kFloat32, &g);
    y = kiln::randint(10, {64}, kiln::kInt64, &g);
  }
  double step() {
    opt.zero_grad();
    kiln::Tensor loss = kiln::nn::F::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    return loss.item<double>();
  }
};

// ---- LibTorch ----
#ifdef KILN_BENCH_WITH_TORCH
namespace tnn = torch::nn;

struct TorchMlp {
  tnn::Sequential model{tnn::Linear(784, 512), tnn::ReLU(), tnn::Linear(512, 256), tnn::ReLU(), tnn::Linear(256, 10)};
  torch::optim::SGD opt{model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)};
  torch::Tensor x = torch::randn({128, 784}), y = torch::randint(10, {128}, torch::kInt64);
  double step() {
    opt.zero_grad();
    torch::Tensor loss = tnn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss.item<double>();
  }
};

struct TorchCnn {
  tnn::Sequential model{tnn::Conv2d(tnn::Conv2dOptions(1, 32, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(2),
                        tnn::Conv2d(tnn::Conv2dOptions(32, 64, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(2),
                        tnn::Flatten(), tnn::Linear(3136, 128), tnn::ReLU(), tnn::Linear(128, 10)};
  torch::optim::Adam opt{model->parameters(), torch::optim::AdamOptions(1e-3)};
  torch::Tensor x = torch::randn({64, 1, 28, 28}), y = torch::randint(10, {64}, torch::kInt64);
  double step() {
    opt.zero_grad();
    torch::Tensor loss = tnn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss.item<double>();
  }
};
#endif

// A training run that does not learn is not a benchmark: the loss on the fixed batch must fall.
void check_learning(const char* who, const std::string& w, double first, double last) {
  if (!std::isfinite(last) || !(last < first)) {
    std::fprintf(stderr, "train_bench: %s %s: loss went from %g to %g over the run\n", who, w.c_str(), first, last);
    std::exit(1);
  }
}

// Times `steps` (one per framework) interleaved; returns the median seconds of each.
std::vector<double> run_timed(const Workload& w, const std::vector<const char*>& names,
                              const std::vector<std::function<double()>>& steps) {
  std::vector<double> first(steps.size()), last(steps.size());
  std::vector<std::function<void()>> variants;
  for (size_t i = 0; i < steps.size(); ++i)
    variants.push_back([&, i] {
      double l = steps[i]();
      if (first[i] == 0) first[i] = l;
      last[i] = l;
    });
  std::vector<double> med = kiln::bench::time_interleaved(variants, w.reps, w.warmup);
  for (size_t i = 0; i < steps.size(); ++i) check_learning(names[i], w.name, first[i], last[i]);
  return med;
}

// Runs one framework alone on one workload (the child of the peak-memory measurement).
int run_only(const std::string& who, const Workload& w) {
  std::vector<double> t;
  if (who == "kiln") {
    if (w.name == "mlp") {
      KilnMlp m;
      t = run_timed(w, {"kiln"}, {[&] { return m.step(); }});
    } else {
      KilnCnn m;
      t = run_timed(w, {"kiln"}, {[&] { return m.step(); }});
    }
#ifdef KILN_BENCH_WITH_TORCH
  } else if (who == "torch") {
    if (w.name == "mlp") {
      TorchMlp m;
      t = run_timed(w, {"torch"}, {[&] { return m.step(); }});
    } else {
      TorchCnn m;
      t = run_timed(w, {"torch"}, {[&] { return m.step(); }});
    }
#endif
  } else {
    std::fprintf(stderr, "train_bench: --only %s is not available in this binary\n", who.c_str());
    return 2;
  }
  std::printf("%s %s alone: %.3f ms/step\n", who.c_str(), w.name.c_str(), t[0] * 1e3);
  return 0;
}

// This process's peak resident set (VmHWM) in MiB. NOTE: not getrusage/wait4's ru_maxrss: a child started by
// posix_spawn (vfork) inherits its parent's high-water mark across exec, so that figure would be the parent's.
double own_peak_mib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) kib = std::atof(line + 6);
  std::fclose(f);
  return kib / 1024.0;
}

// Runs `cmd` (a framework alone) in a shell and reads the peak RSS it reports; -1 on failure.
double child_peak_mib(const std::string& cmd) {
  std::fflush(stdout);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[512];
  double mib = -1;
  while (std::fgets(line, sizeof line, p)) {
    if (std::strncmp(line, "peak_rss_mib ", 13) == 0) mib = std::atof(line + 13);
    else std::fputs(line, stdout);
  }
  return pclose(p) == 0 ? mib : -1;
}

std::string sibling(const char* argv0, const char* name) {
  std::string self = argv0;
  size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string("./") : self.substr(0, slash + 1)) + name;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::string workload = "all", only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--workload" && i + 1 < argc) workload = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--workload mlp|cnn|all] [--only kiln|torch]\n", argv[0]);
      return 2;
    }
  }
  kiln::set_num_threads(threads);
#ifdef KILN_BENCH_WITH_TORCH
  torch::set_num_threads(threads);
  torch::manual_seed(0);
#endif
  std::vector<Workload> workloads;
  if (workload == "all" || workload == "mlp") workloads.push_back({"mlp", 20, 200});
  if (workload == "all" || workload == "cnn") workloads.push_back({"cnn", 10, 100});
  if (!only.empty()) {
    for (const auto& w : workloads)
      if (int rc = run_only(only, w)) return rc;
    std::printf("peak_rss_mib %.1f\n", own_peak_mib());
    return 0;
  }

  std::printf("train_bench: %d threads; median ms/step over interleaved steps (shared machine: medians)\n", threads);
  for (const auto& w : workloads) {
    std::vector<double> t;
#ifdef KILN_BENCH_WITH_TORCH
    if (w.name == "mlp") {
      KilnMlp k;
      TorchMlp tm;
      t = run_timed(w, {"kiln", "torch"}, {[&] { return k.step(); }, [&] { return tm.step(); }});
    } else {
      KilnCnn k;
      TorchCnn tm;
      t = run_timed(w, {"kiln", "torch"}, {[&] { return k.step(); }, [&] { return tm.step(); }});
    }
#else
    if (w.name == "mlp") {
      KilnMlp k;
      t = run_timed(w, {"kiln"}, {[&] { return k.step(); }});
    } else {
      KilnCnn k;
      t = run_timed(w, {"kiln"}, {[&] { return k.step(); }});
    }
#endif
    std::string th = std::to_string(threads);
    std::string args = " --workload " + w.name + " --threads " + th;
    double kiln_mib = child_peak_mib("'" + sibling(argv[0], "train_bench_kiln") + "' --only kiln" + args);
    std::printf("%s  kiln  %8.3f ms/step  peak RSS %7.1f MiB (alone)\n", w.name.c_str(), t[0] * 1e3, kiln_mib);
#ifdef KILN_BENCH_WITH_TORCH
    double torch_mib = child_peak_mib("'" + std::string(argv[0]) + "' --only torch" + args);
    std::printf("%s  torch %8.3f ms/step  peak RSS %7.1f MiB (alone)\n", w.name.c_str(), t[1] * 1e3, torch_mib);
    std::printf("%s  ratio kiln/torch: time %.2fx, peak RSS %.2fx\n", w.name.c_str(), t[0] / t[1],
                kiln_mib > 0 && torch_mib > 0 ? kiln_mib / torch_mib : NAN);
#endif
    std::fflush(stdout);
  }
  return 0;
}
