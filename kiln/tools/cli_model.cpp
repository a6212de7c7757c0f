// The commands that work on a model outside a training run: export (a checkpoint's network weights as
// safetensors for PyTorch or nn::load), bench (the configured run's training step, timed on this machine
// through the same Trainer kiln train runs), lr-find (the learning-rate range test on the configured run),
// scale-batch-size (the largest batch size whose training steps fit in memory) and generate (text from a gpt-mini
// or lstm-lm checkpoint).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>

#include "kiln/serialize/safetensors.h"
#include "kiln/tensor/allocator.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/profiler.h"
#include "kiln/tools/cli_common.h"
#include "kiln/tools/generate.h"
#include "kiln/tools/registry.h"
#include "kiln/trainer/batch_size_finder.h"
#include "kiln/trainer/lr_finder.h"

namespace kiln::tools::cli {

namespace {

constexpr const char* kExportHelp =
    "usage: kiln export --ckpt FILE [--output model.safetensors] [--dtype float32|float16|bfloat16]\n"
    "\n"
    "Writes the network's weights from a checkpoint of kiln train as a safetensors file, with PyTorch's key\n"
    "names (\"0.weight\", \"3.running_mean\", ...): safetensors.torch.load_file reads it into the same\n"
    "architecture in PyTorch, nn::load into kiln's (tools/models.h builds it from the config). The run's config\n"
    "goes into the file's metadata as \"kiln.config\". --dtype converts the floating-point tensors (default:\n"
    "as trained); integer buffers such as batch norm's num_batches_tracked stay as they are.\n";

constexpr const char* kBenchHelp =
    "usage: kiln bench [--config run.yaml] [--set key=value ...] [--steps N] [--warmup W] [--profile]\n"
    "\n"
    "Times the training step of the configured run on this machine: the model, data, optimizer, accelerator\n"
    "and precision that kiln train would use, through the same Trainer, for W warm-up batches and then N timed\n"
    "ones. A step runs from on_train_batch_start to on_train_batch_end (forward, loss, backward, and the\n"
    "optimizer step when one is due); the wait for the next batch is reported apart. On a GPU both ends wait\n"
    "for the device. Nothing is written: no logs, checkpoints or validation. The learning-rate schedule is left\n"
    "out (it is sized for the whole run).\n"
    "\n"
    "  --steps N   timed batches (default 20)\n"
    "  --warmup W  batches run first and not timed (default 5)\n"
    "  --profile   also print the profiler's table of the timed batches (every kernel and backward node)\n";

constexpr const char* kGenerateHelp =
    "usage: kiln generate --ckpt FILE [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
    "                     [--output FILE] [--set key=value ...]\n"
    "\n"
    "Continues a prompt with a language model trained by kiln train (model.name gpt-mini or lstm-lm on data.name\n"
    "text): one byte at a time, each drawn from the model's distribution given the last data.block_size bytes. Prints\n"
    "the prompt and what follows it (or writes them to --output). The training text is not needed.\n"
    "\n"
    "  --prompt TEXT      the text to continue (default: a newline)\n"
    "  --tokens N         bytes to generate (default 256)\n"
    "  --temperature T    divide the scores by T before the softmax (default 1; 0: always the most likely)\n"
    "  --top-k K          draw among the K most likely bytes only (default 0: all of them)\n"
    "  --seed S           the draws' seed (default 0): the same seed gives the same text\n";

// A non-negative decimal flag value; anything else is a usage error.
double parse_nonnegative_flag(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v) || v < 0) {
    usage_error(flag + " '" + value + "': expected a number >= 0");
  }
  return v;
}

// The network's own weights in a checkpoint of kiln train: the Classifier holds the network as "net", so its
// state_dict less that prefix. `command` names the caller in errors.
serialize::TensorMap network_weights(const trainer::Checkpoint& ckpt, const char* command) {
  const std::string prefix = "net.";
  serialize::TensorMap weights;
  for (const auto& [key, t] : ckpt.tensor_section("model")) {
    KILN_CHECK(key.rfind(prefix, 0) == 0, command, ": ", ckpt.path, ": model entry '", key, "' is not under '",
               prefix, "' (not a checkpoint of kiln train's classifier?)");
    weights[key.substr(prefix.size())] = t;
  }
  KILN_CHECK(!weights.empty(), command, ": ", ckpt.path, " holds no model weights");
  return weights;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The q-quantile of v (nearest rank), v not empty.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))];
}

// This process's peak resident set in MiB (VmHWM), 0 where /proc does not say.
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return 0;
}

// Times each training batch, after `warmup` of them, for `steps` of them. The profiler, when asked for, records
// from the end of the last warm-up batch to the start of the first batch after the timed ones, so that the
// Trainer's ranges around the timed batches (run_training_batch) are whole.
class BenchTimer : public trainer::Callback {
 public:
  BenchTimer(int64_t warmup, int64_t steps, bool profile) : warmup_(warmup), steps_(steps), profile_(profile) {}

  void on_train_start(trainer::Trainer&, trainer::TrainModule&) override {
    if (warmup_ == 0 && profile_) profiler_.emplace();
  }
  void on_train_batch_start(trainer::Trainer& t, trainer::TrainModule&, const data::Batch&, int64_t) override {
    if (seen_ == warmup_ + steps_ && profiler_) profiler_->stop();
    sync(t);
    const double now = seconds_now();
    if (timing() && seen_ > 0) waits_.push_back(now - last_end_);
    start_ = now;
  }
  void on_train_batch_end(trainer::Trainer& t, trainer::TrainModule&, const Tensor&, const data::Batch&,
                          int64_t) override {
    sync(t);
    last_end_ = seconds_now();
    if (timing()) step_times_.push_back(last_end_ - start_);
    ++seen_;
    if (seen_ == warmup_ && profile_) profiler_.emplace();
  }
  void on_train_end(trainer::Trainer&, trainer::TrainModule&) override {
    if (profiler_) profiler_->stop();
  }

  const std::vector<double>& step_times() const { return step_times_; }
  const std::vector<double>& waits() const { return waits_; }
  const profiler::Profiler* profile() const { return profiler_ ? &*profiler_ : nullptr; }

 private:
  bool timing() const { return seen_ >= warmup_ && seen_ < warmup_ + steps_; }
  static void sync(const trainer::Trainer& t) {
    if (t.device().is_cuda()) cuda::synchronize(t.device().index);
  }

  const int64_t warmup_, steps_;
  const bool profile_;
  int64_t seen_ = 0;
  double start_ = 0, last_end_ = 0;
  std::vector<double> step_times_, waits_;
  std::optional<profiler::Profiler> profiler_;
};

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
  const Flags a = parse_args(args, 1, {"--ckpt", "--output", "--dtype"});
  if (a.help) {
    std::printf("%s", kExportHelp);
    return 0;
  }
  if (a.ckpt.empty()) usage_error("--ckpt FILE is required");
  std::optional<DType> dtype;
  if (a.dtype == "float32") dtype = kFloat32;
  else if (a.dtype == "float16") dtype = kFloat16;
  else if (a.dtype == "bfloat16") dtype = kBFloat16;
  else if (!a.dtype.empty()) usage_error("--dtype '" + a.dtype + "': expected float32, float16 or bfloat16");
  const std::string output = a.output.empty() ? "model.safetensors" : a.output;

  const trainer::Checkpoint ckpt = trainer::load_checkpoint(a.ckpt);
  const RunConfig cfg = config_of_checkpoint(ckpt, {});  // a checkpoint of kiln train, and its config
  serialize::TensorMap weights = network_weights(ckpt, "export");
  if (dtype) {
    for (auto& [key, t] : weights) {
      if (is_floating(t.dtype())) t = t.to(*dtype);
    }
  }
  serialize::save_safetensors(output, weights, {{"format", "pt"}, {"kiln.config", ckpt.get("hparams.config")}});
  int64_t elements = 0;
  for (const auto& [key, t] : weights) elements += t.numel();
  std::printf("wrote %zu tensors (%lld values, model %s) to %s\n", weights.size(), static_cast<long long>(elements),
              cfg.model.name.c_str(), output.c_str());
  return 0;
}

int cmd_bench(const std::vector<std::string>& args) {
  const Flags a = parse_args(args, 1, {"--config", "--set", "--steps", "--warmup", "--profile"});
  if (a.help) {
    std::printf("%s", kBenchHelp);
    return 0;
  }
  const int steps = a.steps.empty() ? 20 : parse_int_flag("--steps", a.steps, 1, 1'000'000);
  const int warmup = a.warmup.empty() ? 5 : parse_int_flag("--warmup", a.warmup, 0, 1'000'000);
  RunConfig cfg =
      a.config.empty() ? load_run_config_text("", "(defaults)", a.sets) : load_run_config(a.config, a.sets);
  // No learning-rate schedule: its length is the whole run's, which a bench of a few batches is not (a
  // warmup_cosine longer than the bench would be refused), and stepping one costs nothing measurable.
  cfg.scheduler = RunConfig::Scheduler{};
  Run run = build_run(cfg);

  // Enough epochs of the training loader for every batch asked for (the config's limits do not apply).
  const int64_t total = warmup + steps, per_epoch = static_cast<int64_t>(run.train->size());
  KILN_CHECK(per_epoch > 0, "bench: the training data gives no batches");
  trainer::TrainerOptions o = trainer_options(cfg);
  o.handle_signals = false;  // a measurement: Ctrl-C just ends it
  o.max_epochs = (total + per_epoch - 1) / per_epoch;
  o.limit_train_batches = total <= per_epoch ? trainer::BatchLimit(total) : trainer::BatchLimit(1.0);
  o.max_steps = -1;
  o.max_time = 0;
  o.fast_dev_run = 0;
  o.num_sanity_val_steps = 0;
  o.profiler = "none";
  o.enable_progress_bar = o.enable_checkpointing = o.enable_model_summary = o.logger = false;
  auto timer = std::make_shared<BenchTimer>(warmup, steps, a.profile);
  o.callbacks = {timer};
  trainer::Trainer t(o);
  if (t.device().is_cuda()) cuda::reset_peak_memory_stats();
  t.fit(*run.module, *run.train);
  if (!t.is_global_zero()) return 0;

  const std::vector<double>& times = timer->step_times();
  KILN_CHECK(static_cast<int64_t>(times.size()) == steps, "bench: timed ", times.size(), " batches, expected ", steps);
  const double median = quantile(times, 0.5);
  std::printf("bench: model %s, batch %lld, %s, %d threads, precision %s: %d timed batches after %d warm-up\n",
              cfg.model.name.c_str(), static_cast<long long>(cfg.data.batch_size), t.device().str().c_str(),
              get_num_threads(), cfg.trainer.precision.c_str(), steps, warmup);
  std::printf("step:   median %.3f ms (p10 %.3f, p90 %.3f), %.0f examples/s\n", median * 1e3,
              quantile(times, 0.1) * 1e3, quantile(times, 0.9) * 1e3,
              static_cast<double>(cfg.data.batch_size) / median);
  if (!timer->waits().empty()) {
    std::printf("loader: median %.3f ms waited for each batch\n", quantile(timer->waits(), 0.5) * 1e3);
  }
  std::printf("memory: peak RSS %.1f MiB", peak_rss_mib());
  if (t.device().is_cuda()) {
    std::printf(", peak CUDA allocated %.1f MiB",
                static_cast<double>(cuda::memory_stats().peak_allocated_bytes) / (1024.0 * 1024.0));
  }
  std::printf("\n");
  if (const profiler::Profiler* prof = timer->profile()) std::printf("\n%s", prof->table(25).c_str());
  return 0;
}

constexpr const char* kLrFindHelp =
    "usage: kiln lr-find [--config run.yaml] [--set key=value ...] [--steps N] [--min-lr X] [--max-lr Y]\n"
    "                    [--output lr_find.csv]\n"
    "\n"
    "The learning-rate range test (Lightning's lr_find) on the configured run: N optimizer steps (default 100)\n"
    "at rates growing exponentially from X (default 1e-8) to Y (default 1), the smoothed training loss after\n"
    "each, and the rate where that loss falls fastest, a value for optimizer.lr. Stops early once the loss\n"
    "diverges (4 times its best). The learning-rate schedule is left out. Writes each step's rate and loss to\n"
    "the CSV file (default lr_find.csv); nothing else (no logs, checkpoints or validation).\n";

int cmd_lr_find(const std::vector<std::string>& args) {
  const Flags a = parse_args(args, 1, {"--config", "--set", "--steps", "--min-lr", "--max-lr", "--output"});
  if (a.help) {
    std::printf("%s", kLrFindHelp);
    return 0;
  }
  auto positive = [](const std::string& flag, const std::string& value, double fallback) {
    if (value.empty()) return fallback;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
      usage_error(flag + " '" + value + "': expected a positive number");
    return v;
  };
  trainer::LRFinderOptions f;
  // (the suggestion leaves out the first 10 steps and the last, and needs 2 more)
  f.num_training = a.steps.empty() ? 100 : parse_int_flag("--steps", a.steps, 13, 1'000'000);
  f.min_lr = positive("--min-lr", a.min_lr, f.min_lr);
  f.max_lr = positive("--max-lr", a.max_lr, f.max_lr);
  if (f.max_lr <= f.min_lr) usage_error("--max-lr must be larger than --min-lr");
  const std::string output = a.output.empty() ? "lr_find.csv" : a.output;
  RunConfig cfg =
      a.config.empty() ? load_run_config_text("", "(defaults)", a.sets) : load_run_config(a.config, a.sets);
  cfg.scheduler = RunConfig::Scheduler{};  // sized for the whole run; the test sets every step's rate itself
  Run run = build_run(cfg);
  trainer::TrainerOptions o = trainer_options(cfg);
  o.handle_signals = false;  // nothing to resume: Ctrl-C just ends it
  const trainer::LRFinderResult r = trainer::lr_find(*run.module, *run.train, o, f);

  std::ofstream csv(output);
  csv.precision(10);
  csv << "step,lr,loss\n";
  for (size_t i = 0; i < r.lrs.size(); ++i) csv << i << "," << r.lrs[i] << "," << r.losses[i] << "\n";
  KILN_CHECK(csv.good(), "lr-find: could not write ", output);
  const auto best = r.suggestion_index();
  std::printf("lr-find: model %s, %zu of %lld steps from %.3g to %.3g (smoothed training loss)\n",
              cfg.model.name.c_str(), r.lrs.size(), static_cast<long long>(f.num_training), f.min_lr, f.max_lr);
  const size_t every = std::max<size_t>(1, (r.lrs.size() + 11) / 12);
  for (size_t i = 0; i < r.lrs.size(); ++i) {
    if (i % every != 0 && i + 1 != r.lrs.size() && (!best || i != *best)) continue;
    std::printf("  step %4zu  lr %-10.3g loss %.5g%s\n", i, r.lrs[i], r.losses[i],
                best && i == *best ? "   <- steepest descent" : "");
  }
  std::printf("wrote %s\n", output.c_str());
  if (!best) {
    std::printf("no suggestion: too few finite losses after leaving out the first 10 steps and the last; run more "
                "steps (--steps)\n");
    return 1;
  }
  std::printf("suggested lr: %.3g (--set optimizer.lr=%.3g)\n", r.lrs[*best], r.lrs[*best]);
  return 0;
}

constexpr const char* kScaleBatchSizeHelp =
    "usage: kiln scale-batch-size [--config run.yaml] [--set key=value ...] [--mode power|binsearch]\n"
    "                             [--steps N] [--init N] [--max-trials N] [--memory-limit MB]\n"
    "\n"
    "The batch-size search (Lightning's scale_batch_size) on the configured run: N training steps (default 3)\n"
    "at each batch size tried, from --init (default 2), doubling until a size runs out of memory; with\n"
    "binsearch, then a binary search up to the largest size that fits. Validation batches of each size run too,\n"
    "unless data.val_batch_size is set. Prints each size tried, the most memory its steps held, and the answer,\n"
    "a value for data.batch_size. Writes nothing.\n"
    "\n"
    "  --memory-limit MB  the most tensors may hold in all, the dataset's included (on the CPU the system would\n"
    "                     sooner swap than refuse memory, so without a limit the search stops only at the\n"
    "                     dataset's size or --max-trials, default 25; on a GPU it caps what kiln reserves)\n";

int cmd_scale_batch_size(const std::vector<std::string>& args) {
  const Flags a = parse_args(args, 1, {"--config", "--set", "--mode", "--steps", "--init", "--max-trials",
                                      "--memory-limit"});
  if (a.help) {
    std::printf("%s", kScaleBatchSizeHelp);
    return 0;
  }
  trainer::BatchSizeFinderOptions f;
  if (!a.mode.empty()) {
    if (a.mode != "power" && a.mode != "binsearch") usage_error("--mode '" + a.mode + "': expected power or binsearch");
    f.mode = a.mode;
  }
  if (!a.steps.empty()) f.steps_per_trial = parse_int_flag("--steps", a.steps, 1, 1'000'000);
  if (!a.init.empty()) f.init_val = parse_int_flag("--init", a.init, 1, 1 << 30);
  if (!a.max_trials.empty()) f.max_trials = parse_int_flag("--max-trials", a.max_trials, 1, 62);
  const int64_t limit_mib =
      a.memory_limit.empty() ? 0 : parse_int_flag("--memory-limit", a.memory_limit, 1, 1 << 30);
  RunConfig cfg =
      a.config.empty() ? load_run_config_text("", "(defaults)", a.sets) : load_run_config(a.config, a.sets);
  cfg.scheduler = RunConfig::Scheduler{};  // a few steps: no schedule
  Run run = build_run(cfg);
  trainer::TrainerOptions o = trainer_options(cfg);
  o.handle_signals = false;  // nothing to resume: Ctrl-C just ends it
  const bool on_gpu = o.accelerator == "cuda" || (o.accelerator == "auto" && cuda::is_available());
  // The limit is the command's alone: lifted when it returns or throws (the CLI may run inside a program, or
  // a test, that goes on to run other commands).
  struct LiftLimit {
    bool gpu = false, set = false;
    size_t cpu_before = cpu_memory_stats().limit_bytes;
    ~LiftLimit() {
      if (!set) return;
      try {
        if (gpu) cuda::set_memory_limit(0);
        else set_cpu_memory_limit(cpu_before);
      } catch (...) {
        // nothing to lift on a device that is gone
      }
    }
  } lift{.gpu = on_gpu};
  if (limit_mib > 0) {
    const size_t bytes = static_cast<size_t>(limit_mib) << 20;
    lift.set = true;
    if (on_gpu) {
      cuda::set_memory_limit(bytes);
    } else {
      const size_t held = cpu_memory_stats().allocated_bytes;
      if (held >= bytes) {
        char text[96];
        std::snprintf(text, sizeof text, " MiB, but the data and model already hold %.2f MiB",
                      static_cast<double>(held) / double(1 << 20));
        detail::throw_error(detail::concat("scale-batch-size: --memory-limit ", limit_mib, text));
      }
      set_cpu_memory_limit(bytes);
    }
  }
  auto loader_like = [](const std::shared_ptr<data::Dataset>& dataset, const data::DataLoader& like) {
    return [dataset, options = like.options()](int64_t batch_size) mutable {
      options.batch_size = batch_size;
      return std::make_unique<data::DataLoader>(dataset, options);
    };
  };
  trainer::LoaderForBatchSize val;
  if (run.val && !cfg.data.val_batch_size) val = loader_like(run.data.val, *run.val);
  const trainer::BatchSizeResult r = trainer::scale_batch_size(*run.module, loader_like(run.data.train, *run.train),
                                                               o, f, val);
  std::printf("scale-batch-size: model %s, %s, %s mode, %lld steps a size%s\n", cfg.model.name.c_str(),
              on_gpu ? "cuda" : "cpu", f.mode.c_str(), static_cast<long long>(f.steps_per_trial),
              val ? " (and as many validation batches)" : "");
  std::printf("  %10s  %-5s  %s\n", "batch size", "fits", "peak MiB");
  for (const trainer::BatchSizeTrial& t : r.trials) {
    std::printf("  %10lld  %-5s  %.1f\n", static_cast<long long>(t.batch_size), t.fits ? "yes" : "no",
                static_cast<double>(t.peak_bytes) / double(1 << 20));
  }
  const char* why = r.stopped_by == "dataset"      ? "the dataset's size"
                    : r.stopped_by == "max_trials" ? "--max-trials"
                                                   : "memory";
  std::printf("largest batch size that fit: %lld, bounded by %s (--set data.batch_size=%lld)\n",
              static_cast<long long>(r.batch_size), why, static_cast<long long>(r.batch_size));
  return 0;
}

int cmd_generate(const std::vector<std::string>& args) {
  const Flags a = parse_args(args, 1, {"--ckpt", "--prompt", "--tokens", "--temperature", "--top-k", "--seed",
                                      "--output", "--set"});
  if (a.help) {
    std::printf("%s", kGenerateHelp);
    return 0;
  }
  if (a.ckpt.empty()) usage_error("--ckpt FILE is required");
  GenerateOptions g;
  if (!a.tokens.empty()) g.max_new_tokens = parse_int_flag("--tokens", a.tokens, 0, 100'000'000);
  if (!a.temperature.empty()) g.temperature = parse_nonnegative_flag("--temperature", a.temperature);
  if (!a.top_k.empty()) g.top_k = parse_int_flag("--top-k", a.top_k, 0, 1'000'000);
  if (!a.seed.empty()) g.seed = static_cast<uint64_t>(parse_int_flag("--seed", a.seed, 0, 2'000'000'000));
  const std::string prompt = a.prompt.empty() ? "\n" : a.prompt;
  std::ofstream file;
  if (!a.output.empty()) {  // opened first: a bad path fails before anything is generated
    file.open(a.output, std::ios::binary);
    KILN_CHECK(file.good(), "generate: cannot write ", a.output);
  }

  const trainer::Checkpoint ckpt = trainer::load_checkpoint(a.ckpt);
  const RunConfig cfg = config_of_checkpoint(ckpt, a.sets);
  KILN_CHECK(is_language_model(cfg.model.name) && cfg.data.name == "text", "generate: ", a.ckpt,
             " is a checkpoint of model ", cfg.model.name, " on data.name ", cfg.data.name,
             "; generate needs a language model (gpt-mini, lstm-lm or one registered as such) trained on bytes "
             "(data.name text)");
  // What the model needs to know of its data, without the data: byte tokens in windows of block_size.
  const DataInfo info{.input_shape = {cfg.data.block_size},
                      .num_classes = cfg.model.num_classes.value_or(256),
                      .tokens = true};
  auto model = std::dynamic_pointer_cast<LanguageModel>(make_model(cfg.model, info));
  KILN_ASSERT(model != nullptr, "make_model built no LanguageModel for ", cfg.model.name);
  model->load_state_dict(network_weights(ckpt, "generate"));
  const std::string& acc = cfg.trainer.accelerator;
  if (acc == "cuda" || (acc == "auto" && cuda::is_available())) model->to(Device::cuda(0));

  const std::string text = text_of(generate(*model, tokens_of(prompt), g));
  if (file.is_open()) {
    file << prompt << text;
    file.close();
    KILN_CHECK(file.good(), "generate: writing ", a.output, " failed");
    std::printf("wrote %zu bytes (%lld generated) to %s\n", prompt.size() + text.size(),
                static_cast<long long>(g.max_new_tokens), a.output.c_str());
  } else {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  }
  return 0;
}

}  // namespace kiln::tools::cli
