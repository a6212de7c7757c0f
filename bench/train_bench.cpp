// Training-step time and peak memory (BENCHMARKS.md W2 and W3), kiln beside LibTorch.
//
//   W2 mlp: Linear(784,512)-ReLU-Linear(512,256)-ReLU-Linear(256,10), cross-entropy, SGD lr 0.01 momentum 0.9,
//           batch 128 of x ~ N(0,1) [128,784], y ~ U{0..9}; 20 warm-up + 200 timed steps
//   W3 cnn: conv(1->32,3x3,pad 1)+ReLU+maxpool2, conv(32->64,3x3,pad 1)+ReLU+maxpool2, flatten, Linear(3136,128)
//           +ReLU, Linear(128,10); cross-entropy; Adam lr 1e-3; batch [64,1,28,28]; 10 warm-up + 100 timed steps
// A step is zero_grad + forward + loss + backward + optimizer step, on one batch made before timing.
//   W4 epoch: one Fashion-MNIST epoch of the W3 CNN and optimizer, batches of 64 (938, the last of 32) shuffled
//           with a seeded generator; the images stay uint8 and each batch is prepared as it is taken
//           (x / 255, then (x - 0.2860) / 0.3530); the epoch's wall time without evaluation, then the test
//           accuracy on the 10k test images (batches of 64). Rounds of one kiln epoch then one LibTorch epoch.
//
// Time: both frameworks in one process, steps interleaved (kiln, torch, kiln, ...) so that they see the same
// machine; the median ms/step of each and the ratio kiln / torch. The machine is shared and noisy: medians.
// Peak memory cannot be told apart inside one process, so each framework also runs alone in a child process
// that reports its own peak RSS: kiln in train_bench_kiln (this file built without LibTorch, so
// that 500 MB of torch libraries are not mapped into kiln's figure), torch in this binary with --only torch.
//
//   train_bench [--threads N] [--workload mlp|cnn|epoch|all] [--only kiln|torch] [--rounds R] [--data DIR]
// (all: mlp and cnn; epoch reads Fashion-MNIST from DIR, by default /usr/share/datasets/fashion-mnist.)
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

kiln::nn::Sequential kiln_cnn() {
  return kiln::nn::Sequential(kiln::nn::Conv2d(1, 32, 3, kiln::nn::Conv2dOptions{.padding = 1}), kiln::nn::ReLU(),
                              kiln::nn::MaxPool2d(2),
                              kiln::nn::Conv2d(32, 64, 3, kiln::nn::Conv2dOptions{.padding = 1}), kiln::nn::ReLU(),
                              kiln::nn::MaxPool2d(2), kiln::nn::Flatten(), kiln::nn::Linear(3136, 128),
                              kiln::nn::ReLU(), kiln::nn::Linear(128, 10));
}

struct KilnCnn {
  kiln::nn::Sequential model = kiln_cnn();
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

// ---- W4: Fashion-MNIST ----
constexpr int64_t kEpochBatch = 64, kEvalBatch = 64;  // evaluation in training-size batches, as a DataLoader would

struct FashionMnist {
  kiln::Tensor x_train, y_train, x_test, y_test;  // x: (N, 784) uint8 as stored, y: (N) int64
};

FashionMnist load_fashion_mnist(const std::string& dir) {
  auto images = [&](const char* name) {
    kiln::Tensor t = kiln::data::read_idx(dir + "/" + name);
    return t.reshape({t.size(0), -1});
  };
  auto labels = [&](const char* name) { return kiln::data::read_idx(dir + "/" + name).to(kiln::kInt64); };
  return {images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
          images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz")};
}

struct KilnEpoch {
  const FashionMnist& d;
  kiln::nn::Sequential model = kiln_cnn();
  kiln::optim::Adam opt{model->parameters(), {.lr = 1e-3}};
  kiln::Generator gen{0};
  explicit KilnEpoch(const FashionMnist& data) : d(data) {}
  static kiln::Tensor prepare(const kiln::Tensor& raw) {
    return ((raw.to(kiln::kFloat32) / 255.0 - 0.2860) / 0.3530).view({-1, 1, 28, 28});
  }
  double epoch() {  // the mean training loss
    model->train();
    const int64_t n = d.x_train.size(0);
    kiln::Tensor order = kiln::randperm(n, kiln::kInt64, &gen);
    double sum = 0;
    int64_t batches = 0;
    for (int64_t start = 0; start < n; start += kEpochBatch, ++batches) {
      kiln::Tensor idx = order.narrow(0, start, std::min(kEpochBatch, n - start));
      kiln::Tensor loss = kiln::nn::F::cross_entropy(model(prepare(kiln::index_select(d.x_train, 0, idx))),
                                                     kiln::index_select(d.y_train, 0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
      sum += loss.item<double>();
    }
    return sum / static_cast<double>(batches);
  }
  double accuracy() {
    model->eval();
    kiln::NoGradGuard no_grad;
    int64_t correct = 0, n = d.x_test.size(0);
    for (int64_t start = 0; start < n; start += kEvalBatch) {
      int64_t b = std::min(kEvalBatch, n - start);
      kiln::Tensor logits = model(prepare(d.x_test.narrow(0, start, b)));
      correct += (kiln::argmax(logits, 1) == d.y_test.narrow(0, start, b)).sum().item<int64_t>();
    }
    return 100.0 * static_cast<double>(correct) / static_cast<double>(n);
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

tnn::Sequential torch_cnn() {
  return tnn::Sequential(tnn::Conv2d(tnn::Conv2dOptions(1, 32, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(2),
                         tnn::Conv2d(tnn::Conv2dOptions(32, 64, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(2),
                         tnn::Flatten(), tnn::Linear(3136, 128), tnn::ReLU(), tnn::Linear(128, 10));
}

struct TorchCnn {
  tnn::Sequential model = torch_cnn();
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

// The same data, copied into torch tensors.
torch::Tensor to_torch(const kiln::Tensor& t) {
  auto type = t.dtype() == kiln::kUInt8 ? torch::kUInt8 : torch::kInt64;
  return torch::from_blob(t.raw_data_ptr(), std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), type).clone();
}

struct TorchEpoch {
  torch::Tensor x_train, y_train, x_test, y_test;
  tnn::Sequential model = torch_cnn();
  torch::optim::Adam opt{model->parameters(), torch::optim::AdamOptions(1e-3)};
  torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(0);
  explicit TorchEpoch(const FashionMnist& d)
      : x_train(to_torch(d.x_train)), y_train(to_torch(d.y_train)), x_test(to_torch(d.x_test)),
        y_test(to_torch(d.y_test)) {}
  static torch::Tensor prepare(const torch::Tensor& raw) {
    return ((raw.to(torch::kFloat32) / 255.0 - 0.2860) / 0.3530).view({-1, 1, 28, 28});
  }
  double epoch() {
    model->train();
    const int64_t n = x_train.size(0);
    torch::Tensor order = torch::randperm(n, gen, torch::kInt64);
    double sum = 0;
    int64_t batches = 0;
    for (int64_t start = 0; start < n; start += kEpochBatch, ++batches) {
      torch::Tensor idx = order.narrow(0, start, std::min(kEpochBatch, n - start));
      torch::Tensor loss = tnn::functional::cross_entropy(model->forward(prepare(x_train.index_select(0, idx))),
                                                          y_train.index_select(0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
      sum += loss.item<double>();
    }
    return sum / static_cast<double>(batches);
  }
  double accuracy() {
    model->eval();
    torch::NoGradGuard no_grad;
    int64_t correct = 0, n = x_test.size(0);
    for (int64_t start = 0; start < n; start += kEvalBatch) {
      int64_t b = std::min(kEvalBatch, n - start);
      torch::Tensor logits = model->forward(prepare(x_test.narrow(0, start, b)));
      correct += (logits.argmax(1) == y_test.narrow(0, start, b)).sum().item<int64_t>();
    }
    return 100.0 * static_cast<double>(correct) / static_cast<double>(n);
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

// W4: `rounds` rounds of one epoch of each framework in turn. Per framework: the median epoch seconds, and the
// test accuracy after its first and its last epoch.
struct EpochFigures {
  double seconds = 0, first_accuracy = 0, last_accuracy = 0;
};
struct EpochRunner {
  const char* name;
  std::function<double()> epoch, accuracy;
};
std::vector<EpochFigures> run_epochs(int rounds, const std::vector<EpochRunner>& runners) {
  std::vector<std::vector<double>> seconds(runners.size());
  std::vector<EpochFigures> out(runners.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < runners.size(); ++i) {
      double t0 = kiln::bench::now_seconds();
      double loss = runners[i].epoch();
      seconds[i].push_back(kiln::bench::now_seconds() - t0);
      double acc = runners[i].accuracy();
      std::printf("epoch %s round %d: %.2f s, train loss %.4f, test accuracy %.2f%%\n", runners[i].name, r + 1,
                  seconds[i].back(), loss, acc);
      std::fflush(stdout);
      // A run that does not learn is not a benchmark (BENCHMARKS.md's anchor: 87.31% after one epoch).
      if (!(acc > 80.0)) {
        std::fprintf(stderr, "train_bench: %s epoch: test accuracy %.2f%% after epoch %d\n", runners[i].name, acc,
                     r + 1);
        std::exit(1);
      }
      if (r == 0) out[i].first_accuracy = acc;
      out[i].last_accuracy = acc;
    }
  for (size_t i = 0; i < runners.size(); ++i) out[i].seconds = kiln::bench::median(seconds[i]);
  return out;
}

// Runs one framework alone on one workload (the child of the peak-memory measurement).
int run_only(const std::string& who, const Workload& w, const std::string& data_dir) {
  std::vector<double> t;
  if (w.name == "epoch") {
    FashionMnist data = load_fashion_mnist(data_dir);
    std::vector<EpochFigures> f;
    if (who == "kiln") {
      KilnEpoch k(data);
      f = run_epochs(w.reps, {{"kiln", [&] { return k.epoch(); }, [&] { return k.accuracy(); }}});
#ifdef KILN_BENCH_WITH_TORCH
    } else if (who == "torch") {
      TorchEpoch tm(data);
      f = run_epochs(w.reps, {{"torch", [&] { return tm.epoch(); }, [&] { return tm.accuracy(); }}});
#endif
    } else {
      std::fprintf(stderr, "train_bench: --only %s is not available in this binary\n", who.c_str());
      return 2;
    }
    std::printf("%s epoch alone: %.2f s/epoch\n", who.c_str(), f[0].seconds);
    return 0;
  }
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
  int threads = 2, rounds = 2;
  std::string workload = "all", only, data_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--workload" && i + 1 < argc) workload = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--data" && i + 1 < argc) data_dir = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads N] [--workload mlp|cnn|epoch|all] [--only kiln|torch] [--rounds R] "
                   "[--data DIR]\n",
                   argv[0]);
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
  if (workload == "all" || workload == "epoch") workloads.push_back({"epoch", 0, rounds});
  if (workloads.empty()) {
    std::fprintf(stderr, "train_bench: unknown workload \"%s\" (mlp, cnn, epoch or all)\n", workload.c_str());
    return 2;
  }
  if (!only.empty()) {
    for (const auto& w : workloads)
      if (int rc = run_only(only, w, data_dir)) return rc;
    std::printf("peak_rss_mib %.1f\n", own_peak_mib());
    return 0;
  }

  std::printf("train_bench: %d threads; median ms/step over interleaved steps (shared machine: medians)\n", threads);
  for (const auto& w : workloads) {
    std::string args = " --workload " + w.name + " --threads " + std::to_string(threads);
    if (w.name == "epoch") {
      FashionMnist data = load_fashion_mnist(data_dir);
      KilnEpoch k(data);
      std::vector<EpochRunner> runners{{"kiln", [&] { return k.epoch(); }, [&] { return k.accuracy(); }}};
#ifdef KILN_BENCH_WITH_TORCH
      TorchEpoch tm(data);
      runners.push_back({"torch", [&] { return tm.epoch(); }, [&] { return tm.accuracy(); }});
#endif
      std::vector<EpochFigures> f = run_epochs(w.reps, runners);
      args += " --rounds 1 --data '" + data_dir + "'";
      double kiln_mib = child_peak_mib("'" + sibling(argv[0], "train_bench_kiln") + "' --only kiln" + args);
      std::printf("epoch kiln  %7.2f s/epoch (median of %d)  accuracy %.2f%% after epoch 1  peak RSS %7.1f MiB (alone)\n",
                  f[0].seconds, w.reps, f[0].first_accuracy, kiln_mib);
#ifdef KILN_BENCH_WITH_TORCH
      double torch_mib = child_peak_mib("'" + std::string(argv[0]) + "' --only torch" + args);
      std::printf("epoch torch %7.2f s/epoch (median of %d)  accuracy %.2f%% after epoch 1  peak RSS %7.1f MiB (alone)\n",
                  f[1].seconds, w.reps, f[1].first_accuracy, torch_mib);
      std::printf("epoch ratio kiln/torch: time %.2fx, peak RSS %.2fx\n", f[0].seconds / f[1].seconds,
                  kiln_mib > 0 && torch_mib > 0 ? kiln_mib / torch_mib : NAN);
#endif
      std::fflush(stdout);
      continue;
    }
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
