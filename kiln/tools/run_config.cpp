// The schema of `kiln train`: each RunConfig member bound to its key with a one-line doc, then the checks
// that span keys. Checks on one key alone (at_least) live on the key, so their errors name the file and line;
// the checks across keys run after the overrides and name every key involved.
#include "kiln/tools/run_config.h"

#include <cmath>
#include <sstream>

#include "kiln/tensor/error.h"
#include "kiln/tools/registry.h"

namespace kiln::tools {

namespace {

using trainer::Schema;
using R = RunConfig;

// "[0.5, 1.2]": a list of numbers as a config would spell it, for errors.
std::string number_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    std::ostringstream one;
    one << v[i];
    s += (i > 0 ? ", " : "") + one.str();
  }
  return s + "]";
}

void declare_trainer(Schema<R>& s) {
  auto t = s.section("trainer", &R::trainer, "the training loop (names as in Lightning's Trainer)");
  using T = R::Trainer;
  t.add("max_epochs", &T::max_epochs, "stop after this many epochs (-1: no epoch limit)").at_least(-1);
  t.add("min_epochs", &T::min_epochs, "run at least this many epochs, even if early stopping asks to stop").at_least(0);
  t.add("max_steps", &T::max_steps, "stop after this many optimizer steps (-1: no step limit)").at_least(-1);
  t.add_enum("accelerator", &T::accelerator, {"auto", "cpu", "cuda"}, "where to train (auto: cuda when a GPU is present)");
  t.add("devices", &T::devices, "how many devices of the accelerator to use").at_least(1);
  t.add_enum("strategy", &T::strategy, {"auto", "single", "ddp", "parameter_server"}, "how several devices share the work");
  t.add("ddp_backend", &T::ddp_backend, "the process-group backend under strategy ddp: tcp, or gloo or mpi when built");
  t.add("ddp_find_unused_parameters", &T::ddp_find_unused_parameters,
        "under ddp, let a step leave parameters without a gradient (else an error names them)");
  t.add("sync_batchnorm", &T::sync_batchnorm, "under ddp, batch norms use the statistics of every rank's batch");
  t.add_enum("precision", &T::precision, {"32", "16-mixed", "bf16-mixed"}, "float32, or mixed precision with float16/bfloat16");
  t.add("accumulate_grad_batches", &T::accumulate_grad_batches, "batches whose gradients add up before each optimizer step")
      .at_least(1);
  t.add("gradient_clip_val", &T::gradient_clip_val, "clip gradients at this value (0: no clipping)").at_least(0);
  t.add_enum("gradient_clip_algorithm", &T::gradient_clip_algorithm, {"norm", "value"},
             "clip the total 2-norm, or each element");
  t.add("val_check_interval", &T::val_check_interval,
        "validate every this many training batches, or this fraction of an epoch");
  t.add("check_val_every_n_epoch", &T::check_val_every_n_epoch, "validate every this many epochs").at_least(1);
  t.add("limit_train_batches", &T::limit_train_batches, "training batches per epoch: a count, or a fraction of the loader");
  t.add("overfit_batches", &T::overfit_batches,
        "train and validate on only these batches, in order (a count or a fraction; 0: off): a debugging check");
  t.add("limit_val_batches", &T::limit_val_batches, "validation batches per run: a count or a fraction");
  t.add("limit_test_batches", &T::limit_test_batches, "test batches: a count or a fraction");
  t.add("limit_predict_batches", &T::limit_predict_batches, "prediction batches: a count or a fraction");
  t.add("num_sanity_val_steps", &T::num_sanity_val_steps, "validation batches run before training (-1: all)").at_least(-1);
  t.add("log_every_n_steps", &T::log_every_n_steps, "send training metrics to the loggers every this many steps").at_least(1);
  t.add("deterministic", &T::deterministic,
        "CUDA: kernels that give the same bits on every run, and an error for ops that have none");
  t.add("seed", &T::seed, "seed of every random generator (null: not seeded)").at_least(0);
  t.add("default_root_dir", &T::default_root_dir, "folder for logs and checkpoints");
  t.add_duration("max_time", &T::max_time, "stop after this much wall-clock time (null: no limit)");
  t.add_enum("profiler", &T::profiler, {"none", "simple", "ops"},
             "time the loop's actions and hooks (simple), and every kernel and backward node too (ops)");
  t.add("enable_progress_bar", &T::enable_progress_bar, "show a progress bar");
  t.add("enable_checkpointing", &T::enable_checkpointing, "save checkpoints (as callbacks.checkpoint says)");
  t.add("enable_model_summary", &T::enable_model_summary, "print the model's layers and parameter counts");
  t.add("fast_dev_run", &T::fast_dev_run, "run this many batches of each loop, no logs or checkpoints (true: 1)")
      .accept_bool()
      .at_least(0);
  t.add("detect_anomaly", &T::detect_anomaly, "stop at the first NaN or Inf gradient, naming the op (slow; debugging)");
  t.add("handle_signals", &T::handle_signals, "the first Ctrl-C or SIGTERM stops training at the next optimizer step "
        "(with callbacks.on_exception_checkpoint, a checkpoint that resumes exactly); a second ends the process");
  t.add("ckpt_path", &T::ckpt_path, "resume from this checkpoint file, or \"last\" (null: start afresh)");
  auto ps = t.section("ps", &T::ps, "the parameter server, under strategy parameter_server");
  using P = T::PS;
  ps.add("servers", &P::servers, "how many of the job's processes are servers (0: as kiln launch --servers says)")
      .at_least(0);
  ps.add_enum("mode", &P::mode, {"sync", "async", "ssp"},
              "sync: mean of every worker's step; async: each push applied alone; ssp: async within a staleness bound");
  ps.add("staleness", &P::staleness, "ssp: how many steps a worker may run ahead of the slowest").at_least(0);
  ps.add_enum("optimizer", &P::optimizer, {"server", "worker"},
              "where the optimizer steps: on the servers (sharded), or on every worker (sync only)");
}

void declare_model(Schema<R>& s) {
  auto m = s.section("model", &R::model, "the network");
  using M = R::Model;
  m.add_enum("name", &M::name, builtin_models(), "the architecture").allow_more(registered_models, "a registered model");
  m.add("hidden", &M::hidden, "the MLP's hidden layer widths").at_least(1);
  m.add("channels", &M::channels, "the CNN's convolution widths, one 3x3 conv and 2x2 max-pool each").at_least(1);
  m.add("fc", &M::fc, "the CNN's hidden linear width").at_least(1);
  m.add("layers", &M::layers, "gpt-mini: transformer blocks; lstm-lm: LSTM layers").at_least(1);
  m.add("heads", &M::heads, "gpt-mini: attention heads per block").at_least(1);
  m.add("embed_dim", &M::embed_dim,
        "gpt-mini: width of the token vectors, a multiple of heads; lstm-lm: width of the token vectors and LSTMs")
      .at_least(1);
  m.add("dropout", &M::dropout,
        "dropout probability before each hidden linear layer (gpt-mini: in every block; lstm-lm: between layers)")
      .at_least(0);
  m.add("checkpoint_activations", &M::checkpoint_activations,
        "gpt-mini: keep only each block's input for backward and run the block again there (activation "
        "checkpointing): less memory for about one more forward");
  m.add("num_classes", &M::num_classes, "output classes (null: from the data)").at_least(1);
  m.add_mapping("args", &M::args, "a registered model's arguments (kiln/tools/registry.h)");
}

void declare_data(Schema<R>& s) {
  auto d = s.section("data", &R::data, "the dataset and its loaders");
  using D = R::Data;
  d.add_enum("name", &D::name, builtin_datasets(), "the dataset (text: a file's bytes, for language models)")
      .allow_more(registered_datasets, "a registered dataset");
  d.add("path", &D::path,
        "a folder (fashion-mnist, mnist, idx), a file (csv), a file or folder of files (text) (null: the dataset's "
        "standard place)");
  d.add("batch_size", &D::batch_size, "training batch size").at_least(1);
  d.add("val_batch_size", &D::val_batch_size, "validation and test batch size (null: batch_size)").at_least(1);
  d.add("num_workers", &D::num_workers, "loader threads (0: load in the training thread)").at_least(0);
  d.add("pin_memory", &D::pin_memory,
        "build batches in pinned host memory, so that copies to the GPU do not wait (only when training on cuda)");
  d.add("shuffle", &D::shuffle, "shuffle the training set every epoch");
  d.add("val_size", &D::val_size, "examples held out of the training set for validation").at_least(0);
  d.add("normalize", &D::normalize, "scale inputs to zero mean and unit variance");
  d.add("random_crop_padding", &D::random_crop_padding,
        "augment with random crops after padding this many pixels of 0 (black) around (0: off)")
      .at_least(0);
  d.add("horizontal_flip", &D::horizontal_flip, "augment with random horizontal flips");
  d.add("label_column", &D::label_column, "the CSV column holding the label (csv only)");
  d.add("num_samples", &D::num_samples, "examples to generate (synthetic only)").at_least(1);
  d.add("num_features", &D::num_features, "features per example (synthetic only)").at_least(1);
  d.add("num_classes", &D::num_classes, "classes (synthetic only)").at_least(2);
  d.add("block_size", &D::block_size, "tokens of context per example (text only)").at_least(1);
  d.add("seed", &D::seed, "seed of the validation split and the shuffling").at_least(0);
  d.add_mapping("args", &D::args, "a registered dataset's arguments (kiln/tools/registry.h)");
}

void declare_optimizer(Schema<R>& s) {
  auto o = s.section("optimizer", &R::optimizer, "the optimizer");
  using O = R::Optimizer;
  o.add_enum("name", &O::name,
             {"sgd", "adam", "adamw", "rmsprop", "adagrad", "adamax", "nadam", "radam", "adadelta", "rprop", "asgd"},
             "the algorithm");
  o.add("lr", &O::lr, "learning rate");
  o.add("momentum", &O::momentum, "momentum (sgd, rmsprop)").at_least(0);
  o.add("weight_decay", &O::weight_decay, "L2 penalty (adamw: decoupled weight decay; not rprop)").at_least(0);
  o.add("betas", &O::betas, "the two moment decay rates of adam, adamw, adamax, nadam and radam, each in [0, 1)");
  o.add("eps", &O::eps, "added to denominators for numerical stability; null: the optimizer's own default");
  o.add("nesterov", &O::nesterov, "Nesterov momentum (sgd)");
  o.add("amsgrad", &O::amsgrad, "the AMSGrad variant (adam, adamw)");
  o.add("alpha", &O::alpha, "rmsprop's smoothing constant (0.99) or asgd's power of the step's decay (0.75); "
        "null: that default").at_least(0);
  o.add("rho", &O::rho, "adadelta's decay rate of the running averages, in [0, 1]");
  o.add("etas", &O::etas, "rprop's factors [down, up] of the step size, 0 < down < 1 < up");
  o.add("step_sizes", &O::step_sizes, "rprop's bounds [min, max] of the step size");
  o.add("lambd", &O::lambd, "asgd's decay term").at_least(0);
  o.add("t0", &O::t0, "asgd's step at which averaging starts").at_least(0);
}

void declare_scheduler(Schema<R>& s) {
  auto c = s.section("scheduler", &R::scheduler, "the learning-rate schedule");
  using S = R::Scheduler;
  c.add_enum("name", &S::name,
             {"none", "step", "multistep", "exponential", "cosine", "linear", "onecycle", "plateau", "warmup_cosine",
              "cosine_restarts", "polynomial", "cyclic"},
             "the schedule");
  c.add_enum("interval", &S::interval, {"epoch", "step"}, "step the schedule after every epoch or every optimizer step");
  c.add("step_size", &S::step_size, "step: multiply by gamma every this many intervals").at_least(1);
  c.add("gamma", &S::gamma, "step, multistep, exponential: the factor; cyclic exp_range: the height's decay per step");
  c.add("milestones", &S::milestones, "multistep: the intervals at which to multiply by gamma").at_least(0);
  c.add("t_max", &S::t_max, "cosine, warmup_cosine: the schedule's length in intervals (null: the run's length)").at_least(1);
  c.add("eta_min", &S::eta_min, "cosine, warmup_cosine: the lowest learning rate").at_least(0);
  c.add("warmup", &S::warmup, "warmup_cosine: intervals of linear warmup").at_least(0);
  c.add("start_factor", &S::start_factor, "linear, warmup_cosine: the first interval's fraction of lr");
  c.add("max_lr", &S::max_lr, "onecycle, cyclic: the peak learning rate (null: 10 x optimizer.lr)");
  c.add("t_0", &S::t_0, "cosine_restarts: the first period, in intervals").at_least(1);
  c.add("t_mult", &S::t_mult, "cosine_restarts: each period is this many times the one before").at_least(1);
  c.add("power", &S::power, "polynomial: lr falls as (1 - t / t_max)^power").at_least(0);
  c.add("base_lr", &S::base_lr, "cyclic: the bottom of the cycle (null: optimizer.lr)");
  c.add("step_size_up", &S::step_size_up, "cyclic: optimizer steps from base_lr up to max_lr, and as many down "
        "(null: two epochs)").at_least(1);
  c.add_enum("cycle_mode", &S::cycle_mode, {"triangular", "triangular2", "exp_range"},
             "cyclic: a constant height, halved each cycle, or scaled by gamma^step");
  c.add("monitor", &S::monitor, "plateau: the metric to watch");
  c.add_enum("mode", &S::mode, {"min", "max"}, "plateau: whether the metric should fall or rise");
  c.add("factor", &S::factor, "plateau: multiply lr by this when the metric stalls");
  c.add("patience", &S::patience, "plateau: intervals without improvement before lowering lr").at_least(0);
}

void declare_callbacks(Schema<R>& s) {
  auto cb = s.section("callbacks", &R::callbacks, "the built-in callbacks");
  using C = R::Callbacks;
  auto ck = cb.section("checkpoint", &C::checkpoint, "ModelCheckpoint");
  using K = C::Checkpoint;
  ck.add("monitor", &K::monitor, "the metric that ranks checkpoints (null: keep the latest)");
  ck.add_enum("mode", &K::mode, {"min", "max"}, "whether lower or higher values of the metric are better");
  ck.add("save_top_k", &K::save_top_k, "keep this many best checkpoints (-1: all, 0: none)").at_least(-1);
  ck.add("save_last", &K::save_last, "also keep last.ckpt, the latest state, for resuming");
  ck.add("save_weights_only", &K::save_weights_only,
         "write the model's weights only: smaller files to evaluate or deploy, none to resume from");
  ck.add("every_n_epochs", &K::every_n_epochs, "save every this many epochs (0: not by epoch)").at_least(0);
  ck.add("every_n_train_steps", &K::every_n_train_steps, "save every this many steps (0: not by step)").at_least(0);
  ck.add("train_time_interval", &K::train_time_interval,
         "also save at the first step this many seconds after the last such save (0: not by time; set "
         "every_n_epochs: 0 to save by time alone)")
      .at_least(0);
  ck.add("filename", &K::filename, "file name pattern: {epoch}, {step} and metric names are filled in");
  ck.add("dirpath", &K::dirpath, "folder of the checkpoints (null: checkpoints/ in the run folder)");
  auto es = cb.section("early_stopping", &C::early_stopping, "EarlyStopping");
  using E = C::EarlyStopping;
  es.add("enabled", &E::enabled, "stop when the metric stops improving");
  es.add("monitor", &E::monitor, "the metric to watch");
  es.add_enum("mode", &E::mode, {"min", "max"}, "whether the metric should fall or rise");
  es.add("patience", &E::patience, "validation runs without improvement before stopping").at_least(0);
  es.add("min_delta", &E::min_delta, "the least change that counts as an improvement").at_least(0);
  es.add("stopping_threshold", &E::stopping_threshold, "stop as soon as the metric reaches this");
  es.add("divergence_threshold", &E::divergence_threshold, "stop as soon as the metric is worse than this");
  es.add("check_finite", &E::check_finite, "stop when the metric becomes NaN or infinite");
  cb.add("lr_monitor", &C::lr_monitor, "log each optimizer's learning rate");
  auto tp = cb.section("throughput_monitor", &C::throughput_monitor, "ThroughputMonitor");
  tp.add("enabled", &C::ThroughputMonitor::enabled, "log batches and samples per second (train/device/...)");
  tp.add("window_size", &C::ThroughputMonitor::window_size, "the rates are over this many batches").at_least(2);
  auto ds = cb.section("device_stats_monitor", &C::device_stats_monitor, "DeviceStatsMonitor");
  ds.add("enabled", &C::DeviceStatsMonitor::enabled, "log the device's memory (a GPU's) or the host's CPU and "
         "memory (the CPU) around training batches");
  ds.add("cpu_stats", &C::DeviceStatsMonitor::cpu_stats, "on a GPU, log the host's stats too");
  cb.add("accumulate_grad_schedule", &C::accumulate_grad_schedule, "gradient accumulation by epoch, [[first epoch, "
         "factor], ...] as Lightning's GradientAccumulationScheduler ([[0, 8], [4, 1]]: 8 batches a step in epochs 0-3, "
         "then 1); needs trainer.accumulate_grad_batches 1");
  cb.add("on_exception_checkpoint", &C::on_exception_checkpoint, "when training fails or is interrupted, save "
         "on_exception.ckpt beside the other checkpoints (needs trainer.enable_checkpointing)");
  auto tm = cb.section("timer", &C::timer, "Timer");
  tm.add_duration("duration", &C::Timer::duration, "stop training after this much time (null: no limit)");
  auto wa = cb.section("weight_averaging", &C::weight_averaging, "WeightAveraging");
  using W = C::WeightAveraging;
  wa.add("enabled", &W::enabled, "validate with, checkpoint and end with an average of the weights");
  wa.add("decay", &W::decay, "an EMA with this decay after every step (null: the equal mean at each epoch's end)")
      .at_least(0.0);
  wa.add("start_epoch", &W::start_epoch, "the first epoch whose weights go into the average").at_least(0);
  wa.add("use_buffers", &W::use_buffers, "average batch norm's running statistics too");
}

void declare_logger(Schema<R>& s) {
  auto l = s.section("logger", &R::logger, "where metrics go: <default_root_dir>/<name>/version_<N>");
  using L = R::Logger;
  l.add("csv", &L::csv, "write metrics.csv");
  l.add("tensorboard", &L::tensorboard, "write TensorBoard event files");
  l.add("name", &L::name, "the experiment's folder name");
  l.add("version", &L::version, "the run's version number (null: one more than the highest there)").at_least(0);
  l.add("histogram_every_n_steps", &L::histogram_every_n_steps,
        "log every parameter's histogram to TensorBoard every n optimizer steps (0: never)")
      .at_least(0);
}

}  // namespace

void check_run_config(const RunConfig& c) {
  const auto& wa = c.callbacks.weight_averaging;
  KILN_CHECK(!wa.decay || *wa.decay <= 1.0, "callbacks.weight_averaging.decay must be in [0, 1], got ", *wa.decay);
  const auto& t = c.trainer;
  KILN_CHECK(t.max_epochs == -1 || t.min_epochs <= t.max_epochs, "trainer.min_epochs (", t.min_epochs,
             ") must not exceed trainer.max_epochs (", t.max_epochs, ")");
  KILN_CHECK(t.ps.optimizer == "server" || t.ps.mode == "sync", "trainer.ps.optimizer: 'worker' needs ",
             "trainer.ps.mode sync, found '", t.ps.mode, "' (the servers apply each asynchronous push themselves)");
  KILN_CHECK(t.devices == 1 || t.strategy == "ddp" || t.strategy == "parameter_server", "trainer.devices: ",
             t.devices, " devices need trainer.strategy ddp or parameter_server, found '", t.strategy, "'");
  if (!t.val_check_interval.is_count) {
    KILN_CHECK(t.val_check_interval.fraction > 0, "trainer.val_check_interval: a fraction must be > 0, found ",
               t.val_check_interval.fraction);
  } else {
    KILN_CHECK(t.val_check_interval.count > 0, "trainer.val_check_interval: a number of batches must be >= 1, found 0");
  }

  const auto& o = c.optimizer;
  KILN_CHECK(o.lr > 0 && std::isfinite(o.lr), "optimizer.lr must be > 0, found ", o.lr);
  KILN_CHECK(!o.eps || *o.eps > 0, "optimizer.eps must be > 0, found ", o.eps.value_or(0));
  KILN_CHECK(o.rho >= 0 && o.rho <= 1, "optimizer.rho must be in [0, 1], found ", o.rho);
  KILN_CHECK(o.etas.size() == 2 && o.etas[0] > 0 && o.etas[0] < 1 && o.etas[1] > 1,
             "optimizer.etas: expected [down, up] with 0 < down < 1 < up, found ", number_list(o.etas));
  KILN_CHECK(o.step_sizes.size() == 2 && o.step_sizes[0] >= 0 && o.step_sizes[0] <= o.step_sizes[1],
             "optimizer.step_sizes: expected [min, max] with 0 <= min <= max, found ", number_list(o.step_sizes));
  KILN_CHECK(o.name != "rprop" || o.weight_decay == 0, "optimizer.weight_decay: rprop takes none (as torch.optim.Rprop), "
             "found ", o.weight_decay);
  KILN_CHECK(o.betas.size() == 2, "optimizer.betas: expected two numbers, found ", o.betas.size());
  for (size_t i = 0; i < o.betas.size(); ++i) {
    KILN_CHECK(o.betas[i] >= 0 && o.betas[i] < 1, "optimizer.betas[", i, "] must be in [0, 1), found ", o.betas[i]);
  }
  KILN_CHECK(!o.nesterov || (o.name == "sgd" && o.momentum > 0),
             "optimizer.nesterov needs optimizer.name sgd with momentum > 0, found ", o.name, " with momentum ", o.momentum);
  KILN_CHECK(!o.amsgrad || o.name == "adam" || o.name == "adamw",
             "optimizer.amsgrad needs optimizer.name adam or adamw, found ", o.name);

  const auto& s = c.scheduler;
  KILN_CHECK(s.gamma > 0, "scheduler.gamma must be > 0, found ", s.gamma);
  KILN_CHECK(s.factor > 0 && s.factor < 1, "scheduler.factor must be in (0, 1), found ", s.factor);
  KILN_CHECK(s.start_factor > 0 && s.start_factor <= 1, "scheduler.start_factor must be in (0, 1], found ", s.start_factor);
  KILN_CHECK(s.name != "multistep" || !s.milestones.empty(), "scheduler.name multistep needs scheduler.milestones, found []");
  for (size_t i = 1; i < s.milestones.size(); ++i) {
    KILN_CHECK(s.milestones[i - 1] < s.milestones[i], "scheduler.milestones must increase, found ", s.milestones[i - 1],
               " then ", s.milestones[i]);
  }
  KILN_CHECK(!s.max_lr || *s.max_lr > 0, "scheduler.max_lr must be > 0, found ", s.max_lr.value_or(0));

  const auto& m = c.model;
  KILN_CHECK(m.dropout >= 0 && m.dropout < 1, "model.dropout must be in [0, 1), found ", m.dropout);
  KILN_CHECK(m.name != "cnn" || !m.channels.empty(), "model.name cnn needs at least one entry in model.channels");
  KILN_CHECK(m.name != "gpt-mini" || m.embed_dim % m.heads == 0, "model.embed_dim (", m.embed_dim,
             ") must be a multiple of model.heads (", m.heads, ") for gpt-mini");
  const auto& d = c.data;
  const bool builtin_model = find_registered_model(m.name) == nullptr;
  const bool builtin_data = find_registered_dataset(d.name) == nullptr;
  KILN_CHECK(!builtin_model || m.args.size() == 0, "model.args: model.name ", m.name,
             " is built in and takes no arguments there (its keys are model.hidden, model.channels, ...); found ",
             trainer::yaml::emit_inline(m.args));
  KILN_CHECK(!builtin_data || d.args.size() == 0, "data.args: data.name ", d.name,
             " is built in and takes no arguments there (its keys are data.path, data.val_size, ...); found ",
             trainer::yaml::emit_inline(d.args));
  // The built-in models' and datasets' own keys mean nothing to a registered one: a value other than the
  // default there would be ignored without a word, so it is refused, pointing at the args.
  const auto not_for_registered = [](bool at_default, const std::string& key, const std::string& what) {
    const std::string kind = what.substr(0, what.find(' '));  // "model" or "dataset"
    KILN_CHECK(at_default, key, ": a key of the built-in ", kind, "s; ", what, " takes its own arguments under ",
               key.substr(0, key.find('.')), ".args");
  };
  if (!builtin_model) {
    const RunConfig::Model d;
    const std::string what = "model " + m.name;
    not_for_registered(m.hidden == d.hidden, "model.hidden", what);
    not_for_registered(m.channels == d.channels, "model.channels", what);
    not_for_registered(m.fc == d.fc, "model.fc", what);
    not_for_registered(m.layers == d.layers, "model.layers", what);
    not_for_registered(m.heads == d.heads, "model.heads", what);
    not_for_registered(m.embed_dim == d.embed_dim, "model.embed_dim", what);
    not_for_registered(m.dropout == d.dropout, "model.dropout", what);
    not_for_registered(m.checkpoint_activations == d.checkpoint_activations, "model.checkpoint_activations", what);
  }
  if (!builtin_data) {
    const RunConfig::Data d;
    not_for_registered(c.data.random_crop_padding == d.random_crop_padding, "data.random_crop_padding", "dataset " + c.data.name);
    not_for_registered(c.data.horizontal_flip == d.horizontal_flip, "data.horizontal_flip", "dataset " + c.data.name);
    not_for_registered(c.data.label_column == d.label_column, "data.label_column", "dataset " + c.data.name);
    not_for_registered(c.data.num_samples == d.num_samples, "data.num_samples", "dataset " + c.data.name);
    not_for_registered(c.data.num_features == d.num_features, "data.num_features", "dataset " + c.data.name);
    not_for_registered(c.data.num_classes == d.num_classes, "data.num_classes", "dataset " + c.data.name);
    not_for_registered(c.data.block_size == d.block_size, "data.block_size", "dataset " + c.data.name);
  }
  // A registered dataset says whether it holds tokens only once built (DataInfo::tokens): build_run checks it.
  if (builtin_data) {
    const bool language_model = is_language_model(m.name);
    KILN_CHECK(language_model == (d.name == "text"), "model.name ", m.name, " and data.name ", d.name,
               ": gpt-mini and lstm-lm are the models for text (token sequences), and text data needs one of them",
               builtin_model ? ""
               : language_model ? " (model " + m.name + " was registered as a language model)"
                                : " (or a model registered with language_model = true)");
  }

  KILN_CHECK(!(d.name == "idx" || d.name == "csv" || d.name == "text") || d.path, "data.name ", d.name,
             " needs data.path (a ", d.name == "idx" ? "folder" : d.name == "csv" ? "file" : "file or folder", ")");
  KILN_CHECK(d.name != "synthetic" || d.val_size < d.num_samples, "data.val_size (", d.val_size,
             ") must be less than data.num_samples (", d.num_samples, ") for synthetic data");

  const auto& k = c.callbacks.checkpoint;
  KILN_CHECK(k.monitor || k.save_top_k == -1 || k.save_top_k <= 1, "callbacks.checkpoint.save_top_k ", k.save_top_k,
             " needs callbacks.checkpoint.monitor: without a metric only the latest checkpoint can be kept");
  KILN_CHECK(!k.filename.empty(), "callbacks.checkpoint.filename must not be empty");
  const auto& schedule = c.callbacks.accumulate_grad_schedule;
  for (size_t i = 0; i < schedule.size(); ++i) {
    const std::string at = "callbacks.accumulate_grad_schedule[" + std::to_string(i) + "]";
    KILN_CHECK(schedule[i].size() == 2, at, ": expected [first epoch, factor], found ", schedule[i].size(), " numbers");
    KILN_CHECK(schedule[i][0] >= 0 && schedule[i][1] >= 1, at, ": expected an epoch >= 0 and a factor >= 1, found [",
               schedule[i][0], ", ", schedule[i][1], "]");
    KILN_CHECK(i == 0 || schedule[i - 1][0] < schedule[i][0], at, ": the epochs must increase, found ",
               schedule[i - 1][0], " then ", schedule[i][0]);
  }
  KILN_CHECK(schedule.empty() || c.trainer.accumulate_grad_batches == 1, "callbacks.accumulate_grad_schedule needs "
             "trainer.accumulate_grad_batches 1 (the schedule sets it), found ", c.trainer.accumulate_grad_batches);
  KILN_CHECK(c.logger.tensorboard || c.logger.histogram_every_n_steps == 0, "logger.histogram_every_n_steps (",
             c.logger.histogram_every_n_steps, ") needs logger.tensorboard: only TensorBoard draws histograms");
  KILN_CHECK(c.logger.csv || c.logger.tensorboard || !c.callbacks.lr_monitor,
             "callbacks.lr_monitor needs a logger (logger.csv or logger.tensorboard)");
  KILN_CHECK(c.logger.csv || c.logger.tensorboard || !c.callbacks.throughput_monitor.enabled,
             "callbacks.throughput_monitor.enabled needs a logger (logger.csv or logger.tensorboard)");
  KILN_CHECK(c.logger.csv || c.logger.tensorboard || !c.callbacks.device_stats_monitor.enabled,
             "callbacks.device_stats_monitor.enabled needs a logger (logger.csv or logger.tensorboard)");
}

const trainer::Schema<RunConfig>& run_config_schema() {
  static const Schema<R> schema = [] {
    Schema<R> s;
    declare_trainer(s);
    declare_model(s);
    declare_data(s);
    declare_optimizer(s);
    declare_scheduler(s);
    declare_callbacks(s);
    declare_logger(s);
    s.add_check(check_run_config);
    return s;
  }();
  return schema;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return run_config_schema().load_file(path, overrides);
}

RunConfig load_run_config_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides) {
  return run_config_schema().load_text(text, source, overrides);
}

std::string dump(const RunConfig& config) { return run_config_schema().dump(config); }

std::string run_config_help() { return run_config_schema().help(); }

std::string data_path(const RunConfig::Data& data) {
  if (data.path) return *data.path;
  if (data.name == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  KILN_CHECK(data.name == "synthetic", "data.path: data.name ", data.name, " has no standard place; set data.path");
  return "";
}

}  // namespace kiln::tools
