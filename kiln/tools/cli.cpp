// The `kiln` command line. train, eval and predict turn their arguments into a RunConfig (from --config and
// --set, or from the config a checkpoint carries), build the data, model and Trainer from it, and run.
// build_run() is the one place that maps config keys onto kiln objects. launch hands over to
// kiln::distributed::launch; info prints the build. export and bench are in cli_model.cpp.
#include "kiln/tools/cli.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "kiln/distributed/launch.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tools/classifier.h"
#include "kiln/tools/cli_common.h"
#include "kiln/tools/datasets.h"
#include "kiln/tools/models.h"
#include "kiln/tools/registry.h"
#include "kiln/trainer/callbacks.h"
#include "kiln/trainer/csv_logger.h"
#include "kiln/trainer/tensorboard_logger.h"
#include "kiln/trainer/trainer.h"

namespace kiln::tools {

namespace cli {

void usage_error(const std::string& message) { throw std::invalid_argument(message); }

Flags parse_args(const std::vector<std::string>& args, size_t first, const std::vector<std::string>& allowed) {
  Flags a;
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") {
      a.help = true;
      continue;
    }
    const bool known = std::find(allowed.begin(), allowed.end(), flag) != allowed.end();
    if (known && flag == "--profile") {  // the one flag without a value
      a.profile = true;
      continue;
    }
    if (!known) {
      std::string list;
      for (const auto& f : allowed) list += " " + f;
      usage_error("unknown option '" + flag + "' (options:" + list + " --help)");
    }
    if (i + 1 >= args.size()) usage_error(flag + " needs a value");
    const std::string& value = args[++i];
    if (flag == "--config") a.config = value;
    if (flag == "--ckpt") a.ckpt = value;
    if (flag == "--set") a.sets.push_back(value);
    if (flag == "--split") a.split = value;
    if (flag == "--output") a.output = value;
    if (flag == "--dtype") a.dtype = value;
    if (flag == "--steps") a.steps = value;
    if (flag == "--warmup") a.warmup = value;
    if (flag == "--prompt") a.prompt = value;
    if (flag == "--tokens") a.tokens = value;
    if (flag == "--temperature") a.temperature = value;
    if (flag == "--top-k") a.top_k = value;
    if (flag == "--seed") a.seed = value;
    if (flag == "--min-lr") a.min_lr = value;
    if (flag == "--max-lr") a.max_lr = value;
    if (flag == "--mode") a.mode = value;
    if (flag == "--init") a.init = value;
    if (flag == "--max-trials") a.max_trials = value;
    if (flag == "--memory-limit") a.memory_limit = value;
  }
  if (a.split != "test" && a.split != "val") usage_error("--split '" + a.split + "': expected test or val");
  return a;
}

Run build_run(const RunConfig& cfg) {
  if (cfg.trainer.seed) manual_seed(static_cast<uint64_t>(*cfg.trainer.seed));
  Run run;
  run.data = make_data(cfg.data);
  // The blocks loading freed (raw images, the standardizer's scratch) are of sizes training never asks for:
  // back to the system with them, rather than holding ~100 MB of the CPU cache until it fills.
  cpu_empty_cache();
  DataInfo info = run.data.info;
  if (cfg.model.num_classes) {
    KILN_CHECK(*cfg.model.num_classes >= info.num_classes, "model.num_classes = ", *cfg.model.num_classes,
               ", but the data has labels up to ", info.num_classes - 1);
    info.num_classes = *cfg.model.num_classes;
  }
  run.module = std::make_shared<Classifier>(make_model(cfg.model, info), cfg);
  // Evaluation in training-size batches by default, so that it needs no more memory than a training step.
  const int64_t eval_batch = cfg.data.val_batch_size.value_or(cfg.data.batch_size);
  const int workers = static_cast<int>(cfg.data.num_workers);
  // Pinned batches only help copies to a GPU; on the CPU they would cost a copy each.
  const std::string& accelerator = cfg.trainer.accelerator;
  const bool pin = cfg.data.pin_memory && (accelerator == "cuda" || (accelerator == "auto" && cuda::is_available()));
  const data::CollateFn collate = run.data.collate();  // uint8 images become the model's input batch by batch
  run.train = std::make_unique<data::DataLoader>(
      run.data.train,
      data::DataLoaderOptions{.batch_size = cfg.data.batch_size, .shuffle = cfg.data.shuffle, .num_workers = workers,
                              .seed = static_cast<uint64_t>(cfg.data.seed), .collate = collate, .pin_memory = pin});
  const data::DataLoaderOptions eval{.batch_size = eval_batch, .num_workers = workers, .collate = collate,
                                     .pin_memory = pin};
  if (run.data.val) run.val = std::make_unique<data::DataLoader>(run.data.val, eval);
  if (run.data.test) run.test = std::make_unique<data::DataLoader>(run.data.test, eval);  // a registered one may have none
  return run;
}

trainer::TrainerOptions trainer_options(const RunConfig& cfg) {
  const auto& t = cfg.trainer;
  trainer::TrainerOptions o;
  o.max_epochs = t.max_epochs;
  o.min_epochs = t.min_epochs;
  o.max_steps = t.max_steps;
  o.max_time = t.max_time.value_or(0);
  o.accelerator = t.accelerator;
  o.devices = t.devices;
  o.strategy = t.strategy;
  o.ddp_backend = t.ddp_backend;
  o.ddp_find_unused_parameters = t.ddp_find_unused_parameters;
  o.sync_batchnorm = t.sync_batchnorm;
  o.ps.servers = static_cast<int>(t.ps.servers);
  o.ps.mode = t.ps.mode;
  o.ps.staleness = static_cast<int>(t.ps.staleness);
  o.ps.optimizer = t.ps.optimizer;
  o.precision = t.precision;
  o.accumulate_grad_batches = t.accumulate_grad_batches;
  o.gradient_clip_val = t.gradient_clip_val;
  o.gradient_clip_algorithm = t.gradient_clip_algorithm;
  o.val_check_interval = t.val_check_interval;
  o.check_val_every_n_epoch = t.check_val_every_n_epoch;
  o.limit_train_batches = t.limit_train_batches;
  o.limit_val_batches = t.limit_val_batches;
  o.overfit_batches = t.overfit_batches;
  o.limit_test_batches = t.limit_test_batches;
  o.limit_predict_batches = t.limit_predict_batches;
  o.num_sanity_val_steps = t.num_sanity_val_steps;
  o.log_every_n_steps = t.log_every_n_steps;
  o.deterministic = t.deterministic;
  if (t.seed) o.seed = static_cast<uint64_t>(*t.seed);
  o.default_root_dir = t.default_root_dir;
  o.fast_dev_run = t.fast_dev_run;
  o.detect_anomaly = t.detect_anomaly;
  o.handle_signals = t.handle_signals;
  o.profiler = t.profiler;
  o.enable_progress_bar = t.enable_progress_bar;
  o.enable_checkpointing = t.enable_checkpointing;
  o.enable_model_summary = t.enable_model_summary;
  return o;
}

std::string format_metrics(const std::map<std::string, double>& metrics) {
  std::string out;
  char buf[64];
  for (const auto& [k, v] : metrics) {
    std::snprintf(buf, sizeof buf, "%.4f", v);
    out += (out.empty() ? "" : "  ") + k + " " + buf;
  }
  return out;
}

RunConfig config_of_checkpoint(const trainer::Checkpoint& c, const std::vector<std::string>& sets) {
  KILN_CHECK(c.has("hparams.config"), "checkpoint ", c.path,
             " carries no run config (hparams.config): was it written by kiln train?");
  return load_run_config_text(c.get("hparams.config"), c.path + " (its hparams.config)", sets);
}

int parse_int_flag(const std::string& flag, const std::string& value, int min, int max) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !std::isdigit(static_cast<unsigned char>(value[0])) || v < min ||
      v > max) {
    usage_error(flag + " '" + value + "': expected an integer in " + std::to_string(min) + ".." + std::to_string(max));
  }
  return static_cast<int>(v);
}

}  // namespace cli

namespace {

using namespace cli;


constexpr const char* kUsage =
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  train    train a model:     kiln train --config run.yaml [--set key=value ...] [--ckpt FILE|last]\n"
    "  eval     test a checkpoint: kiln eval --ckpt FILE [--split test|val] [--set key=value ...]\n"
    "  predict  class predictions: kiln predict --ckpt FILE [--output predictions.csv] [--split test|val]\n"
    "  launch   run N local ranks: kiln launch --nproc N [--master-addr A] [--master-port P] -- COMMAND [ARGS...]\n"
    "           or a parameter server: kiln launch --servers S --workers W -- COMMAND [ARGS...]\n"
    "  export   weights for PyTorch: kiln export --ckpt FILE [--output model.safetensors] [--dtype DTYPE]\n"
    "  bench    time the training step: kiln bench [--config run.yaml] [--set ...] [--steps N] [--profile]\n"
    "  lr-find  the learning-rate range test: kiln lr-find [--config run.yaml] [--set ...] [--steps N]\n"
    "  scale-batch-size  the largest batch size that fits: kiln scale-batch-size [--config run.yaml] [--set ...]\n"
    "           [--memory-limit MB] [--mode power|binsearch]\n"
    "  generate text from a language model's checkpoint: kiln generate --ckpt FILE [--prompt TEXT] [--tokens N]\n"
    "  info     version and build features\n"
    "\n"
    "kiln <command> --help shows the command's options; kiln train --help also lists every config key.\n";

constexpr const char* kTrainHelp =
    "usage: kiln train [--config run.yaml] [--set key=value ...] [--ckpt FILE|last]\n"
    "\n"
    "Trains the configured model, validating each epoch, then tests it (the best checkpoint when\n"
    "callbacks.checkpoint.monitor is set, else the final weights). Logs, checkpoints and the resolved config\n"
    "go to <trainer.default_root_dir>/<logger.name>/version_<N>/.\n"
    "\n"
    "  --config FILE    a YAML file of the keys below (any key left out keeps its default)\n"
    "  --set key=value  override one key (repeatable), e.g. --set trainer.max_epochs=5 --set model.hidden=[256,128]\n"
    "  --ckpt FILE|last resume from a checkpoint (same as --set trainer.ckpt_path=...)\n"
    "\n"
    "config keys:\n";

constexpr const char* kEvalHelp =
    "usage: kiln eval --ckpt FILE [--split test|val] [--set key=value ...]\n"
    "\n"
    "Tests a checkpoint written by kiln train on the split of its own data (the run's config travels in the\n"
    "checkpoint); --set changes keys of that config (e.g. data.path, trainer.accelerator).\n";

constexpr const char* kPredictHelp =
    "usage: kiln predict --ckpt FILE [--output predictions.csv] [--split test|val] [--set key=value ...]\n"
    "\n"
    "Writes one CSV row per example of the split: index, predicted class, true label, the predicted class's\n"
    "probability (for a language model, gpt-mini or lstm-lm, one row per position: index, position, predicted next token,\n"
    "true next token, probability). Prints the accuracy.\n";

constexpr const char* kLaunchHelp =
    "usage: kiln launch --nproc N [--master-addr A] [--master-port P] -- COMMAND [ARGS...]\n"
    "       kiln launch --servers S --workers W [--master-addr A] [--master-port P] -- COMMAND [ARGS...]\n"
    "\n"
    "Starts N processes of COMMAND on this machine as the ranks of one job, each with RANK, WORLD_SIZE,\n"
    "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (and OMP_NUM_THREADS = cores / N unless\n"
    "already set). Their output comes out line by line as \"[rank R] ...\". When a rank fails, the others get\n"
    "SIGTERM, then SIGKILL 5 s later; Ctrl-C (SIGINT) and SIGTERM are passed on to every rank.\n"
    "\n"
    "  --nproc N          ranks to start (required, unless --servers and --workers are given)\n"
    "  --servers S        a parameter-server job: ranks 0..S-1 are servers (KILN_PS_SERVERS=S is set in\n"
    "                     every rank; lines come out as \"[server K]\" and \"[worker W]\")\n"
    "  --workers W        ... and ranks S..S+W-1 workers\n"
    "  --master-addr A    the address ranks reach rank 0's store at (default 127.0.0.1)\n"
    "  --master-port P    its port (default: a free port found at start)\n"
    "  --                 ends the options: the rest is the command (optional when COMMAND is not an option)\n"
    "\n"
    "exit status: 0 when every rank succeeded; else the first failed rank's exit code (128 + signal when a\n"
    "signal killed it); 127 when COMMAND cannot be run.\n";

// The run folder's version: the one a resumed checkpoint was written in (so its logs continue there), the
// configured one, or the next free one.
int64_t logger_version(const RunConfig& cfg, const std::string& ckpt_path) {
  if (cfg.logger.version) return *cfg.logger.version;
  const std::string& root = cfg.trainer.default_root_dir;
  std::string path = ckpt_path == "last" ? trainer::find_last_checkpoint(root) : ckpt_path;
  if (!path.empty() && std::filesystem::exists(path)) {
    const trainer::Checkpoint c = trainer::load_checkpoint(path);
    if (c.has("trainer.log_dir")) {
      const std::filesystem::path dir(c.get("trainer.log_dir"));
      const std::string leaf = dir.filename().string();
      const std::filesystem::path expected_parent = std::filesystem::path(root) / cfg.logger.name;
      // The same folder however it is spelled ("runs", "./runs", "runs/", absolute): paths compare lexically.
      std::error_code ec1, ec2;
      const std::filesystem::path parent = std::filesystem::weakly_canonical(dir.parent_path(), ec1);
      const std::filesystem::path expected = std::filesystem::weakly_canonical(expected_parent, ec2);
      if (leaf.rfind("version_", 0) == 0 && !ec1 && !ec2 && parent == expected) {
        try {
          return std::stoll(leaf.substr(8));
        } catch (...) {
        }
      }
    }
  }
  return trainer::next_version(root, cfg.logger.name);
}

void add_callbacks(const RunConfig& cfg, trainer::TrainerOptions& o) {
  const auto& c = cfg.callbacks;
  if (c.weight_averaging.enabled) {
    const auto& w = c.weight_averaging;
    o.callbacks.push_back(std::make_shared<trainer::WeightAveraging>(trainer::WeightAveragingOptions{
        .decay = w.decay, .start_epoch = w.start_epoch, .use_buffers = w.use_buffers}));
  }
  if (o.enable_checkpointing) {
    trainer::ModelCheckpointOptions mc;
    mc.dirpath = c.checkpoint.dirpath.value_or("");
    mc.filename = c.checkpoint.filename;
    mc.monitor = c.checkpoint.monitor.value_or("");
    mc.mode = c.checkpoint.mode;
    mc.save_top_k = c.checkpoint.save_top_k;
    mc.save_last = c.checkpoint.save_last;
    mc.save_weights_only = c.checkpoint.save_weights_only;
    mc.every_n_epochs = c.checkpoint.every_n_epochs;
    mc.every_n_train_steps = c.checkpoint.every_n_train_steps;
    mc.train_time_interval = c.checkpoint.train_time_interval;
    o.callbacks.push_back(std::make_shared<trainer::ModelCheckpoint>(mc));
    if (c.on_exception_checkpoint) {
      o.callbacks.push_back(std::make_shared<trainer::OnExceptionCheckpoint>(
          trainer::OnExceptionCheckpointOptions{.dirpath = c.checkpoint.dirpath.value_or("")}));
    }
  }
  if (c.early_stopping.enabled) {
    trainer::EarlyStoppingOptions es;
    es.monitor = c.early_stopping.monitor;
    es.mode = c.early_stopping.mode;
    es.patience = c.early_stopping.patience;
    es.min_delta = c.early_stopping.min_delta;
    es.stopping_threshold = c.early_stopping.stopping_threshold;
    es.divergence_threshold = c.early_stopping.divergence_threshold;
    es.check_finite = c.early_stopping.check_finite;
    es.verbose = true;
    o.callbacks.push_back(std::make_shared<trainer::EarlyStopping>(es));
  }
  if (c.lr_monitor) o.callbacks.push_back(std::make_shared<trainer::LearningRateMonitor>());
  if (c.throughput_monitor.enabled) {
    o.callbacks.push_back(std::make_shared<trainer::ThroughputMonitor>(
        trainer::ThroughputMonitorOptions{.window_size = c.throughput_monitor.window_size}));
  }
  if (c.device_stats_monitor.enabled) {
    o.callbacks.push_back(std::make_shared<trainer::DeviceStatsMonitor>(
        trainer::DeviceStatsMonitorOptions{.cpu_stats = c.device_stats_monitor.cpu_stats}));
  }
  if (!c.accumulate_grad_schedule.empty()) {
    std::map<int64_t, int64_t> scheduling;
    for (const auto& entry : c.accumulate_grad_schedule) scheduling[entry.at(0)] = entry.at(1);
    o.callbacks.push_back(std::make_shared<trainer::GradientAccumulationScheduler>(std::move(scheduling)));
  }
  if (c.timer.duration) {
    o.callbacks.push_back(std::make_shared<trainer::Timer>(trainer::TimerOptions{.duration = *c.timer.duration}));
  }
}

// The models and datasets this program registered (kiln/tools/registry.h), for train --help; empty for none.
std::string registered_help() {
  std::string out;
  const auto list = [&](const char* what, const std::vector<std::string>& names, const auto& find) {
    if (names.empty()) return;
    out += std::string("\nregistered ") + what + " (this program's own):\n";
    for (const std::string& name : names) out += "  " + name + (find(name)->doc.empty() ? "" : ": " + find(name)->doc) + "\n";
  };
  list("models", registered_models(), find_registered_model);
  list("datasets", registered_datasets(), find_registered_dataset);
  return out;
}

int cmd_train(const std::vector<std::string>& args) {
  const Flags a = parse_args(args, 1, {"--config", "--set", "--ckpt"});
  if (a.help) {
    std::printf("%s%s%s", kTrainHelp, run_config_help().c_str(), registered_help().c_str());
    return 0;
  }
  RunConfig cfg = a.config.empty() ? load_run_config_text("", "(defaults)", a.sets) : load_run_config(a.config, a.sets);
  if (!a.ckpt.empty()) cfg.trainer.ckpt_path = a.ckpt;
  std::string ckpt = cfg.trainer.ckpt_path.value_or("");
  if (ckpt == "last") {
    // The newest last.ckpt of this experiment (<root>/<logger.name>), not of any run under the root.
    const std::string dir = (std::filesystem::path(cfg.trainer.default_root_dir) / cfg.logger.name).string();
    std::string weights_only;
    ckpt = trainer::find_last_checkpoint(dir, &weights_only);
    KILN_CHECK(!ckpt.empty() || weights_only.empty(), "kiln train --ckpt last: the last.ckpt under ", dir, " (",
               weights_only, ") holds the weights only (callbacks.checkpoint.save_weights_only), which training ",
               "cannot resume from; leave --ckpt out to start afresh");
    if (ckpt.empty()) std::printf("no last.ckpt under %s: starting from scratch\n", dir.c_str());
  }

  Run run = build_run(cfg);
  trainer::TrainerOptions o = trainer_options(cfg);
  if (o.fast_dev_run == 0) {
    const int64_t version = logger_version(cfg, ckpt);
    const std::string& root = cfg.trainer.default_root_dir;
    if (cfg.logger.csv) o.loggers.push_back(std::make_shared<trainer::CSVLogger>(root, cfg.logger.name, version));
    if (cfg.logger.tensorboard) {
      o.loggers.push_back(std::make_shared<trainer::TensorBoardLogger>(root, cfg.logger.name, version));
    }
  }
  o.logger = false;  // exactly the loggers the config asks for
  add_callbacks(cfg, o);
  trainer::Trainer t(o);
  if (!t.loggers().empty()) {
    const std::filesystem::path dir(t.log_dir());
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.yaml") << dump(cfg);
    std::printf("run folder: %s\n", dir.string().c_str());
  }
  std::fflush(stdout);
  try {
    t.fit(*run.module, *run.train, run.val.get(), ckpt);
  } catch (const trainer::Interrupted& e) {
    // Stopped from outside: not a failure of the run. Say where it stopped and how to go on.
    std::fflush(stdout);
    std::string saved;
    for (const auto& cb : t.callbacks()) {
      if (auto* oc = dynamic_cast<trainer::OnExceptionCheckpoint*>(cb.get())) saved = oc->saved_path();
    }
    if (t.is_global_zero()) {
      std::fprintf(stderr, "kiln train: %s\n", e.what());
      if (!saved.empty()) {
        std::fprintf(stderr, "kiln train: to go on from there, run the same command with --ckpt %s\n", saved.c_str());
      }
    }
    return 128 + e.signal();
  }
  if (t.strategy().is_server()) return 0;  // a parameter server's server has served the fit; workers test

  std::string best;
  for (const auto& cb : t.callbacks()) {
    if (auto* mc = dynamic_cast<trainer::ModelCheckpoint*>(cb.get())) {
      if (!mc->options().monitor.empty() && !mc->best_model_path().empty()) best = mc->best_model_path();
    }
  }
  if (!run.test) {
    if (t.is_global_zero()) std::printf("no test: data.name %s has no test split\n", cfg.data.name.c_str());
    return 0;
  }
  const auto metrics = t.test(*run.module, *run.test, best);
  if (!t.is_global_zero()) return 0;  // under ddp, rank 0 reports for all
  std::printf("test (%s): %s\n", best.empty() ? "final weights" : best.c_str(), format_metrics(metrics).c_str());
  if (auto it = metrics.find("test/acc"); it != metrics.end()) {
    std::printf("final test accuracy: %.2f%%\n", 100.0 * it->second);
  }
  return 0;
}

int cmd_eval(const std::vector<std::string>& args, bool predict) {
  const Flags a = parse_args(args, 1, predict ? std::vector<std::string>{"--ckpt", "--set", "--split", "--output"}
                                             : std::vector<std::string>{"--ckpt", "--set", "--split"});
  if (a.help) {
    std::printf("%s", predict ? kPredictHelp : kEvalHelp);
    return 0;
  }
  if (a.ckpt.empty()) usage_error("--ckpt FILE is required");
  const trainer::Checkpoint ckpt = trainer::load_checkpoint(a.ckpt);
  RunConfig cfg = config_of_checkpoint(ckpt, a.sets);
  Run run = build_run(cfg);
  run.module->load_state_dict(ckpt.tensor_section("model"));
  trainer::TrainerOptions o = trainer_options(cfg);
  o.logger = false;
  o.enable_checkpointing = false;
  o.enable_model_summary = false;
  o.fast_dev_run = 0;
  trainer::Trainer t(o);
  data::DataLoader* loader = a.split == "val" ? run.val.get() : run.test.get();
  const bool registered = find_registered_dataset(cfg.data.name) != nullptr;
  KILN_CHECK(loader != nullptr, "--split ", a.split, ": the run's data (data.name ", cfg.data.name, ") has no ",
             a.split == "val" ? "validation split" : "test split",
             a.split == "val" && !registered ? " (data.val_size 0)" : registered ? " (the dataset gave none)" : "");
  if (!predict) {
    const auto metrics = a.split == "val" ? t.validate(*run.module, *loader) : t.test(*run.module, *loader);
    std::printf("%s (%s): %s\n", a.split.c_str(), a.ckpt.c_str(), format_metrics(metrics).c_str());
    return 0;
  }
  const std::string output = a.output.empty() ? "predictions.csv" : a.output;
  std::ofstream out(output);  // opened first: a bad path fails before the predictions are computed
  KILN_CHECK(out.good(), "predict: cannot write ", output);
  const std::vector<Tensor> probs = t.predict(*run.module, *loader);
  const data::Dataset& ds = *loader->dataset();
  const bool sequences = !probs.empty() && probs[0].dim() == 3;  // (B, S, K): a row per position
  out << (sequences ? "index,position,prediction,label,probability\n" : "index,prediction,label,probability\n");
  int64_t index = 0, rows = 0, correct = 0;
  for (const Tensor& batch_probs : probs) {  // (B, K) or (B, S, K)
    const Tensor p = batch_probs.to(kCPU).to(kFloat64).contiguous();
    const int64_t B = p.size(0), S = sequences ? p.size(1) : 1, K = p.size(p.dim() - 1);
    const Tensor cls = p.argmax(p.dim() - 1).reshape({B, S}).contiguous();
    const double* pp = p.data_ptr<double>();
    const int64_t* cp = cls.data_ptr<int64_t>();
    for (int64_t i = 0; i < B; ++i, ++index) {
      const Tensor labels = ds.get(index)[1].to(kInt64).reshape({S}).contiguous();
      for (int64_t s = 0; s < S; ++s, ++rows) {
        const int64_t c = cp[i * S + s], label = labels.data_ptr<int64_t>()[s];
        correct += c == label;
        out << index << ",";
        if (sequences) out << s << ",";
        out << c << "," << label << "," << pp[(i * S + s) * K + c] << "\n";
      }
    }
  }
  KILN_CHECK(out.good(), "predict: writing ", output, " failed");
  std::printf("wrote %lld predictions to %s; accuracy %.2f%%\n", static_cast<long long>(rows), output.c_str(),
              rows > 0 ? 100.0 * static_cast<double>(correct) / static_cast<double>(rows) : 0.0);
  return 0;
}

// kiln launch has its own parser: everything after "--" (or from the first word that is not an option)
// belongs to the command, whose options must not be read as kiln's.
int cmd_launch(const std::vector<std::string>& args) {
  distributed::LaunchOptions o;
  bool have_nproc = false;
  int servers = 0, workers = 0;
  size_t i = 1;
  for (; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (flag == "--help" || flag == "-h") {
      std::printf("%s", kLaunchHelp);
      return 0;
    }
    if (flag.rfind("-", 0) != 0) break;  // the command
    if (flag != "--nproc" && flag != "--master-addr" && flag != "--master-port" && flag != "--servers" &&
        flag != "--workers") {
      usage_error("unknown option '" + flag +
                  "' (options: --nproc --servers --workers --master-addr --master-port --help)");
    }
    if (i + 1 >= args.size()) usage_error(flag + " needs a value");
    const std::string& value = args[++i];
    if (flag == "--nproc") {
      o.nproc = parse_int_flag(flag, value, 1, 4096);
      have_nproc = true;
    }
    if (flag == "--master-addr") {
      if (value.empty()) usage_error("--master-addr needs a non-empty address");
      o.master_addr = value;
    }
    if (flag == "--servers") servers = parse_int_flag(flag, value, 1, 4096);
    if (flag == "--workers") workers = parse_int_flag(flag, value, 1, 4096);
    if (flag == "--master-port") o.master_port = static_cast<uint16_t>(parse_int_flag(flag, value, 1, 65535));
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i, args.size())), args.end());
  if ((servers > 0) != (workers > 0)) usage_error("--servers and --workers go together");
  if (servers > 0) {
    if (have_nproc && o.nproc != servers + workers) {
      usage_error("--nproc " + std::to_string(o.nproc) + " is not --servers + --workers = " +
                  std::to_string(servers + workers));
    }
    o.nproc = servers + workers;
    o.servers = servers;
    have_nproc = true;
  }
  if (!have_nproc) usage_error("--nproc N (or --servers S --workers W) is required");
  if (o.command.empty()) usage_error("no command to run: kiln launch --nproc N -- COMMAND [ARGS...]");
  std::fflush(stdout);  // the ranks' lines are written straight to file descriptors 1 and 2
  std::fflush(stderr);
  return distributed::launch(o);
}

int cmd_info() {
  std::printf("kiln %s\n", KILN_INFO_VERSION);
  std::printf("build:    C++20, %s, built with %s\n", KILN_INFO_COMPILER, KILN_INFO_BLAS);
  const CpuGemmBackend gemm = cpu_gemm_backend();
  std::printf("GEMM:     %s (%s)\n", gemm.name.c_str(), gemm.why.c_str());
  std::printf("threads:  %d (set OMP_NUM_THREADS to change)\n", get_num_threads());
#ifdef KILN_WITH_CUDA
  std::printf("CUDA:     built in\n");
#else
  std::printf("CUDA:     not built in\n");
#endif
  std::printf("cuDNN:    %s\n", cuda::cudnn_version() > 0 ? std::to_string(cuda::cudnn_version()).c_str() : "no");
  std::string groups;
  for (const auto& name : distributed::backends()) groups += (groups.empty() ? "" : ", ") + name;
  std::printf("process groups: %s (those this build has)\n", groups.empty() ? "none" : groups.c_str());
  std::printf("devices:\n%s\n", cuda::runtime_info().c_str());
  return 0;
}

}  // namespace

int run_cli(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::string& command = args[0];
  try {
    if (command == "--version") {
      std::printf("kiln %s\n", KILN_INFO_VERSION);
      return 0;
    }
    if (command == "train") return cmd_train(args);
    if (command == "eval") return cmd_eval(args, false);
    if (command == "predict") return cmd_eval(args, true);
    if (command == "info") return cmd_info();
    if (command == "export") return cmd_export(args);
    if (command == "bench") return cmd_bench(args);
    if (command == "lr-find") return cmd_lr_find(args);
    if (command == "scale-batch-size") return cmd_scale_batch_size(args);
    if (command == "generate") return cmd_generate(args);
    if (command == "launch") return cmd_launch(args);
    std::fprintf(stderr, "kiln: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "kiln %s: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kiln %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}

}  // namespace kiln::tools
