// The Trainer's loops. One fit: setup -> (resume) -> sanity validation -> epochs of batches, with optimizer steps
// every accumulate_grad_batches backward passes, validation at the cadence asked, and the epoch's end
// (schedulers, epoch metrics, hooks) -> teardown. Checkpoints are taken only between batches, after an
// optimizer step, so that nothing in flight (accumulated grads) is lost; what they hold is listed in
// checkpoint.h and written and read back in trainer_checkpoint.cpp. Validation, test and predict loops are in
// trainer_eval.cpp; the loaders a fit iterates and their limits in trainer_loaders.cpp; logging in
// trainer_logging.cpp; manual optimization in manual_optimization.cpp; the profiler option's start and report
// in trainer_profile.cpp.
#include "kiln/trainer/trainer.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "kiln/autograd/grad_mode.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/rng.h"
#include "kiln/trainer/busy_cores.h"
#include "kiln/trainer/callbacks.h"
#include "kiln/trainer/csv_logger.h"

namespace kiln::trainer {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::Fit: return "fit";
    case Stage::Validate: return "validate";
    case Stage::Test: return "test";
    case Stage::Predict: return "predict";
  }
  return "?";
}

int64_t BatchLimit::resolve(int64_t available) const {
  if (available < 0) return is_count ? count : -1;
  if (is_count) return std::min(count, available);
  const auto n = static_cast<int64_t>(std::floor(fraction * static_cast<double>(available)));
  return (fraction > 0 && n == 0 && available > 0) ? 1 : n;  // a positive fraction runs at least one batch
}

namespace {

void check_limit(const BatchLimit& limit, const char* name) {
  if (limit.is_count) {
    KILN_CHECK(limit.count >= 0, "Trainer: ", name, " = ", limit.count, ": a number of batches must be >= 0");
  } else {
    KILN_CHECK(limit.fraction >= 0 && limit.fraction <= 1, "Trainer: ", name, " = ", limit.fraction,
               ": a fraction must be in [0, 1] (an integer means a number of batches)");
  }
}

std::string join_keys(const std::map<std::string, double>& m) {
  std::string out;
  for (const auto& [k, v] : m) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "(none)" : out;
}

}  // namespace

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {
  auto& o = options_;
  KILN_CHECK(o.max_epochs >= -1, "Trainer: max_epochs = ", o.max_epochs, ": expected -1 (no limit) or >= 0");
  KILN_CHECK(o.max_steps >= -1, "Trainer: max_steps = ", o.max_steps, ": expected -1 (no limit) or >= 0");
  KILN_CHECK(o.min_epochs >= 0, "Trainer: min_epochs = ", o.min_epochs, ": expected >= 0");
  KILN_CHECK(o.reload_dataloaders_every_n_epochs >= 0, "Trainer: reload_dataloaders_every_n_epochs = ",
             o.reload_dataloaders_every_n_epochs, ": expected >= 0 (0: never)");
  KILN_CHECK(o.max_time >= 0, "Trainer: max_time = ", o.max_time, " s: expected >= 0 (0: no limit)");
  KILN_CHECK(o.accelerator == "auto" || o.accelerator == "cpu" || o.accelerator == "cuda",
             "Trainer: accelerator '", o.accelerator, "': expected 'cpu', 'cuda' or 'auto'");
  KILN_CHECK(o.strategy == "auto" || o.strategy == "single" || o.strategy == "ddp" ||
                 o.strategy == "parameter_server",
             "Trainer: strategy '", o.strategy, "': expected 'auto', 'single', 'ddp' or 'parameter_server'");
  KILN_CHECK(o.process_group_timeout > 0, "Trainer: process_group_timeout = ", o.process_group_timeout,
             " s: expected > 0");
  KILN_CHECK(o.devices == 1, "Trainer: devices = ", o.devices,
             ": a Trainer drives 1 device; for more, run one process per device with strategy 'ddp' under "
             "`kiln launch --nproc N`");
  KILN_CHECK(o.precision == "32" || o.precision == "32-true" || o.precision == "16-mixed" ||
                 o.precision == "bf16-mixed",
             "Trainer: precision '", o.precision, "': expected '32', '16-mixed' or 'bf16-mixed'");
  KILN_CHECK(o.precision != "16-mixed" || o.strategy != "parameter_server", "Trainer: precision '16-mixed' ",
             "with strategy 'parameter_server': the loss scaler skips the steps whose gradients overflow, and "
             "the servers, which step, cannot see that; use 'bf16-mixed' (no scaler needed) or '32'");
  KILN_CHECK(o.profiler == "none" || o.profiler.empty() || o.profiler == "simple" || o.profiler == "ops",
             "Trainer: profiler '", o.profiler, "': expected 'none', 'simple' or 'ops'");
  KILN_CHECK(o.accumulate_grad_batches >= 1, "Trainer: accumulate_grad_batches = ", o.accumulate_grad_batches,
             ": expected >= 1");
  KILN_CHECK(o.gradient_clip_val >= 0, "Trainer: gradient_clip_val = ", o.gradient_clip_val,
             ": expected >= 0 (0: no clipping)");
  KILN_CHECK(o.gradient_clip_algorithm == "norm" || o.gradient_clip_algorithm == "value",
             "Trainer: gradient_clip_algorithm '", o.gradient_clip_algorithm, "': expected 'norm' or 'value'");
  KILN_CHECK(o.check_val_every_n_epoch >= 1, "Trainer: check_val_every_n_epoch = ", o.check_val_every_n_epoch,
             ": expected >= 1");
  KILN_CHECK(o.num_sanity_val_steps >= -1, "Trainer: num_sanity_val_steps = ", o.num_sanity_val_steps,
             ": expected -1 (all) or >= 0");
  KILN_CHECK(o.log_every_n_steps >= 1, "Trainer: log_every_n_steps = ", o.log_every_n_steps, ": expected >= 1");
  KILN_CHECK(o.fast_dev_run >= 0, "Trainer: fast_dev_run = ", o.fast_dev_run, ": expected >= 0");
  check_limit(o.limit_train_batches, "limit_train_batches");
  check_limit(o.limit_val_batches, "limit_val_batches");
  check_limit(o.limit_test_batches, "limit_test_batches");
  check_limit(o.limit_predict_batches, "limit_predict_batches");
  check_limit(o.val_check_interval, "val_check_interval");
  check_limit(o.overfit_batches, "overfit_batches");
  if (o.overfit_batches.is_count ? o.overfit_batches.count > 0 : o.overfit_batches.fraction > 0) {
    o.limit_train_batches = o.limit_val_batches = o.overfit_batches;
  } else {
    o.overfit_batches = 0.0;  // off, however it was written
  }
  KILN_CHECK(o.val_check_interval.is_count ? o.val_check_interval.count > 0 : o.val_check_interval.fraction > 0,
             "Trainer: val_check_interval must be positive");

  if (o.fast_dev_run > 0) {
    // A smoke test of every loop: n batches each, one epoch, nothing written.
    const int64_t n = o.fast_dev_run;
    o.limit_train_batches = o.limit_val_batches = o.limit_test_batches = o.limit_predict_batches = BatchLimit(n);
    o.max_epochs = 1;
    o.max_steps = n;
    o.val_check_interval = 1.0;
    o.num_sanity_val_steps = 0;
    o.enable_checkpointing = false;
    o.logger = false;
    o.loggers.clear();
  }
  if (o.max_epochs == -1 && o.max_steps == -1) o.max_epochs = 1000;

  strategy_ = make_strategy(o);
  // Only rank 0 logs (and checkpoints, and prints): the other ranks' metrics are reduced into its own.
  if (strategy_->is_global_zero()) {
    loggers_ = o.loggers;
    if (loggers_.empty() && o.logger) loggers_.push_back(std::make_shared<CSVLogger>(o.default_root_dir));
  }
  callbacks_ = o.callbacks;
  add_default_callbacks(o, callbacks_);
}

Trainer::~Trainer() = default;

std::string Trainer::log_dir() const {
  if (!log_dir_.empty()) return log_dir_;
  return loggers_.empty() ? options_.default_root_dir : loggers_.front()->log_dir();
}

bool Trainer::any_rank(bool flag) { return strategy_->any(flag); }

double Trainer::elapsed_seconds() const {
  return elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
}

void Trainer::set_accumulate_grad_batches(int64_t n) {
  KILN_CHECK(n >= 1, "Trainer: accumulate_grad_batches = ", n, ": expected >= 1");
  KILN_CHECK(accumulated_ == 0, "Trainer: set_accumulate_grad_batches(", n, ") with ", accumulated_,
             " backward passes accumulated towards the next step; change it between steps (at an epoch's start)");
  KILN_CHECK(n == 1 || module_ == nullptr || module_->automatic_optimization(), "Trainer: accumulate_grad_batches = ",
             n, " under manual optimization; accumulate in training_step instead");
  accumulate_ = n;
}

void Trainer::attach(TrainModule& module, Stage stage) {
  KILN_CHECK(module_ == nullptr, "Trainer: ", stage_name(stage), "() called while ", stage_name(stage_),
             "() is running (from a hook?)");
  KILN_CHECK(module.trainer_ == nullptr || module.trainer_ == this, "Trainer: ", stage_name(stage),
             "(): the module is already being run by another Trainer");
  module_ = &module;
  module.trainer_ = this;
  stage_ = stage;
  if (options_.deterministic) deterministic_.emplace(true);
  try {
    resolve_device();
    module.to(device_);  // may run out of device memory (a batch-size search's trial)
    start_profiler();
  } catch (...) {
    detach();  // the module stays free for another run
    throw;
  }
}

void Trainer::detach() {
  // The loaders this run used, and the shards the strategy made of them (which hold the datasets and any
  // worker threads), go with it: a DataModule's teardown then frees what it read.
  train_loader_ = nullptr;
  val_loaders_.clear();
  overfit_train_.reset();
  strategy_->forget_loaders();
  profiler_.reset();  // a stage that failed: no report
  deterministic_.reset();
  if (module_ != nullptr) module_->trainer_ = nullptr;
  module_ = nullptr;
  log_context_ = LogContext::None;
}

void Trainer::resolve_device() {
  const std::string& a = options_.accelerator;
  if (a == "cpu" || (a == "auto" && !cuda::is_available())) {
    device_ = kCPU;
    return;
  }
  KILN_CHECK(cuda::is_available(), "Trainer: accelerator 'cuda', but no CUDA device is present (or this kiln ",
             "was built without CUDA); use 'cpu' or 'auto'");
  device_ = Device::cuda(0);
}

data::Batch Trainer::to_device(const data::Batch& batch) const {
  // To a GPU without waiting where the loader pinned the batch (DataLoaderOptions::pin_memory): the step's
  // kernels queue behind the copy on the same stream, and the pinned cache keeps the batch's memory until the
  // copy has run. Batches in ordinary memory are copied as before, waiting.
  const bool non_blocking = device_.is_cuda();
  data::Batch out;
  out.reserve(batch.size());
  profiler::Range range("batch_to_device");
  for (const Tensor& t : batch) out.push_back(t.defined() ? t.to(device_, non_blocking) : t);
  return out;
}

const Error& Trainer::foreign_exception() {
  static const Error error("Trainer: the run failed with an exception not derived from std::exception");
  return error;
}

void Trainer::notify_exception(const std::exception& error) {
  // A hook that throws while hearing of an error must not hide that error.
  call_hooks("on_exception", [&](Callback& c) {
    try {
      c.on_exception(*this, *module_, error);
    } catch (...) {
    }
  });
}

void Trainer::load_weights(TrainModule& module, const std::string& ckpt_path) {
  if (ckpt_path.empty()) return;
  const std::string path = resolve_ckpt_path(ckpt_path);
  KILN_CHECK(!path.empty(), "Trainer: ", stage_name(stage_), "(ckpt_path = \"", ckpt_path, "\"): no checkpoint found");
  module.load_state_dict(load_checkpoint(path).tensor_section("model"));
}

int64_t Trainer::batch_size_of(const data::Batch& batch) {
  if (batch.empty() || !batch[0].defined() || batch[0].dim() == 0) return 1;
  return batch[0].size(0);
}

// ---- fit ----

void Trainer::fit(TrainModule& module, data::DataLoader& train, data::DataLoader* val, const std::string& ckpt_path) {
  fit(module, train, val != nullptr ? std::vector<data::DataLoader*>{val} : std::vector<data::DataLoader*>{},
      ckpt_path);
}

void Trainer::fit(TrainModule& module, data::DataLoader& user_train, const std::vector<data::DataLoader*>& user_vals,
                  const std::string& ckpt_path) {
  for (size_t k = 0; k < user_vals.size(); ++k) {
    KILN_CHECK(user_vals[k] != nullptr, "Trainer: fit(): validation loader ", k, " is null");
  }
  std::optional<autograd::DetectAnomalyGuard> anomaly;  // Lightning's detect_anomaly: for the whole fit
  if (options_.detect_anomaly) anomaly.emplace(true);
  attach(module, Stage::Fit);
  try {
    KILN_CHECK(options_.reload_dataloaders_every_n_epochs == 0 || reload_loaders_, "Trainer: ",
               "reload_dataloaders_every_n_epochs = ", options_.reload_dataloaders_every_n_epochs, " rebuilds the ",
               "loaders of a DataModule, but this fit() was given loaders: pass a DataModule");
    use_loaders(user_train, user_vals);
    start_time_ = std::chrono::steady_clock::now();
    elapsed_before_ = 0;
    epoch_ = global_step_ = batch_in_epoch_ = accumulated_ = 0;
    accumulate_ = options_.accumulate_grad_batches;
    should_stop_ = epoch_finished_ = false;
    interrupt_ = 0;
    callback_metrics_.clear(), logged_metrics_.clear(), progress_bar_metrics_.clear();
    train_epoch_means_.clear(), eval_means_.clear(), pending_step_logs_.clear();
  } catch (...) {
    // A bad limit or loader: nothing ran yet, and the module is free for the next fit.
    detach();
    throw;
  }
  std::optional<InterruptScope> signals;
  catch_signals_ = options_.handle_signals && strategy_->name() != "parameter_server";
  if (catch_signals_) signals.emplace();
  try {
    if (options_.seed) manual_seed(*options_.seed);
    if (device_.is_cpu()) {
      static std::once_flag said;
      std::call_once(said, [] {
        if (const std::string w = busy_cores_warning(); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
      });
    }
    // Before the callbacks' setup: DDP buckets what requires grad now, and a callback that freezes parameters
    // in setup (BackboneFinetuning) relies on them being bucketed, to be averaged once it unfreezes them.
    strategy_->setup(module);
    // Every rank agrees on rank 0's run folder (ModelCheckpoint puts its files there, and only rank 0 logs).
    log_dir_.clear();
    log_dir_ = strategy_->broadcast_from_zero(log_dir());
    call_hooks("setup", [&](Callback& c) { c.setup(*this, module, Stage::Fit); });

    OptimizerSetup setup = module.configure_optimizers();
    KILN_CHECK(!setup.optimizers.empty(), "Trainer: configure_optimizers() returned no optimizer");
    for (size_t i = 0; i < setup.schedulers.size(); ++i) {
      const SchedulerConfig& s = setup.schedulers[i];
      KILN_CHECK((s.scheduler != nullptr) != (s.plateau != nullptr), "Trainer: scheduler ", i,
                 " from configure_optimizers() must set exactly one of scheduler and plateau");
      KILN_CHECK(s.interval == "epoch" || s.interval == "step", "Trainer: scheduler ", i, " has interval '",
                 s.interval, "': expected 'epoch' or 'step'");
      KILN_CHECK(s.frequency >= 1, "Trainer: scheduler ", i, " has frequency ", s.frequency, ": expected >= 1");
    }
    optimizers_ = std::move(setup.optimizers);
    schedulers_ = std::move(setup.schedulers);
    check_optimization();
    scaler_ = options_.precision == "16-mixed" ? std::make_unique<optim::GradScaler>() : nullptr;
    if (strategy_->optimizers_ready(module, optimizers_)) {
      // A parameter server's server: it has served the workers' whole fit.
      call_hooks("teardown", [&](Callback& c) { c.teardown(*this, module, Stage::Fit); });
      finish_profiler(Stage::Fit);
      detach();
      return;
    }

    bool resumed = false;
    if (!ckpt_path.empty()) {
      const std::string path = resolve_ckpt_path(ckpt_path);
      if (!path.empty()) {
        Checkpoint ckpt = preloaded_checkpoint_ && preloaded_checkpoint_->first == path
                              ? std::move(preloaded_checkpoint_->second)
                              : load_checkpoint(path);
        preloaded_checkpoint_.reset();
        restore(ckpt, *train_loader_);
        resumed = true;
        for (auto& logger : loggers_) {
          if (ckpt.has("trainer.log_dir") && logger->log_dir() == ckpt.get("trainer.log_dir")) {
            logger->on_resume(global_step_);
          }
        }
      }
    }
    strategy_->fit_starting();
    if (!module.hparams().empty()) {
      for (auto& logger : loggers_) logger->log_hyperparams(module.hparams());
    }
    {
      HookScope scope(*this, LogContext::TrainHook);
      call_hooks("on_fit_start", [&](Callback& c) { c.on_fit_start(*this, module); });
    }

    std::vector<int64_t> sanity = val_limits_;  // num_sanity_val_steps of each loader
    if (options_.num_sanity_val_steps >= 0) {
      for (int64_t& n : sanity) n = n < 0 ? options_.num_sanity_val_steps : std::min(n, options_.num_sanity_val_steps);
    }
    if (num_val_batches_ > 0 && options_.num_sanity_val_steps != 0 && !resumed) {
      sanity_checking_ = true;
      call_hooks("on_sanity_check_start", [&](Callback& c) { c.on_sanity_check_start(*this, module); });
      eval_loop(val_loaders_, Stage::Validate, sanity);
      call_hooks("on_sanity_check_end", [&](Callback& c) { c.on_sanity_check_end(*this, module); });
      sanity_checking_ = false;
      callback_metrics_.clear();
      progress_bar_metrics_.clear();
    }

    {
      HookScope scope(*this, LogContext::TrainHook);
      call_hooks("on_train_start", [&](Callback& c) { c.on_train_start(*this, module); });
    }
    train_loop();
    {
      HookScope scope(*this, LogContext::TrainHook);
      call_hooks("on_train_end", [&](Callback& c) { c.on_train_end(*this, module); });
      call_hooks("on_fit_end", [&](Callback& c) { c.on_fit_end(*this, module); });
    }
    strategy_->fit_ended("");
    for (auto& logger : loggers_) logger->finalize("success");
    call_hooks("teardown", [&](Callback& c) { c.teardown(*this, module, Stage::Fit); });
  } catch (const std::exception& e) {
    fit_failed(e);
    throw;
  } catch (...) {
    fit_failed(foreign_exception());
    throw;
  }
  finish_profiler(Stage::Fit);
  detach();
}

void Trainer::fit_failed(const std::exception& error) {
  sanity_checking_ = false;
  try {
    strategy_->fit_ended(error.what());
  } catch (...) {
    // Telling the other processes is best effort; the error in flight is what counts.
  }
  notify_exception(error);
  const char* status = dynamic_cast<const Interrupted*>(&error) != nullptr ? "interrupted" : "failed";
  for (auto& logger : loggers_) {
    try { logger->finalize(status); } catch (...) {}
  }
  detach();
}

bool Trainer::stop_requested() const {
  if (options_.max_steps >= 0 && global_step_ >= options_.max_steps) return true;
  if (options_.max_time > 0 && elapsed_seconds() >= options_.max_time) return true;
  return should_stop_ && epoch_ + 1 >= options_.min_epochs;
}

bool Trainer::agreed_stop(bool ranks_met) {
  if (strategy_->world_size() == 1) {
    if (interrupt_ == 0 && catch_signals_) interrupt_ = pending_interrupt();
    return stop_requested();
  }
  if (!strategy_->agree_every_batch() && !ranks_met) {
    // Ranks that do not meet every batch (a parameter server's asynchronous workers) stop mid-epoch only where
    // they all arrive at the same batch: max_steps (every worker counts the same steps), and a mid-epoch
    // validation (`ranks_met`: every worker runs it after the same batch), after which they agree on time limits
    // and stop requests as ranks in lockstep do after every batch. Elsewhere those wait for the epoch's end,
    // where train_loop agrees on them: a worker that left its epoch early on its own would meet the others'
    // next validation with its epoch's end.
    return options_.max_steps >= 0 && global_step_ >= options_.max_steps;
  }
  // Every rank must leave the epoch at the same batch: a stop anywhere (a callback's, max_time's, a signal's)
  // stops all.
  const int signal = catch_signals_ ? pending_interrupt() : 0;
  std::vector<double> v{should_stop_ ? 1.0 : 0.0, stop_requested() ? 1.0 : 0.0, signal == SIGINT ? 1.0 : 0.0,
                        signal == SIGTERM ? 1.0 : 0.0};
  strategy_->all_reduce_sum(v);
  should_stop_ = v[0] > 0;
  if (interrupt_ == 0) interrupt_ = v[2] > 0 ? SIGINT : v[3] > 0 ? SIGTERM : 0;
  // Only the agreed answer: reading the clock again here could stop this rank alone (max_time running out
  // while it waited in the all-reduce).
  return v[1] > 0;
}

void Trainer::throw_if_interrupted() {
  if (interrupt_ == 0 || accumulated_ > 0) return;  // an open window runs to its step first
  consume_interrupt();
  throw Interrupted(interrupt_, "Trainer: interrupted by " + signal_name(interrupt_) + " in epoch " +
                                    std::to_string(epoch_) + " after " + std::to_string(batch_in_epoch_) +
                                    " batches (global step " + std::to_string(global_step_) + ")");
}

void Trainer::agree_on_interrupt_and_throw() {
  if (interrupt_ == 0) {
    const int signal = pending_interrupt();
    std::vector<double> v{signal == SIGINT ? 1.0 : 0.0, signal == SIGTERM ? 1.0 : 0.0};
    strategy_->all_reduce_sum(v);
    interrupt_ = v[0] > 0 ? SIGINT : v[1] > 0 ? SIGTERM : 0;
  }
  throw_if_interrupted();
}

bool Trainer::validation_due(int64_t batches_done) const {
  if (num_val_batches_ == 0 || (epoch_ + 1) % options_.check_val_every_n_epoch != 0) return false;
  if (batches_done < 0) return true;  // the end of an epoch of unknown length
  if (batches_done == num_training_batches_) return true;
  return val_every_ > 0 && batches_done % val_every_ == 0;
}

void Trainer::train_loop() {
  bool resuming_mid_epoch = batch_in_epoch_ > 0;
  for (bool first_epoch = true;; first_epoch = false) {
    // A signal during the last epoch's end (its validation, its hooks), or one a stop or limit left unread.
    if (catch_signals_) agree_on_interrupt_and_throw();
    if (options_.max_epochs >= 0 && epoch_ >= options_.max_epochs) break;
    if (options_.max_steps >= 0 && global_step_ >= options_.max_steps) break;
    // The clock and stop requests may differ between ranks: all leave here together, or none does.
    const bool out_of_time = options_.max_time > 0 && elapsed_seconds() >= options_.max_time;
    if (strategy_->any(out_of_time || (should_stop_ && epoch_ >= options_.min_epochs))) break;

    epoch_finished_ = false;
    // A rebuild is due at every multiple of n but in the first epoch a fit runs, whose loaders fit(DataModule)
    // has just built: a resumed one's from the state the checkpoint says its epoch's loaders came from.
    const int64_t reload_every = options_.reload_dataloaders_every_n_epochs;
    if (!first_epoch && reload_every > 0 && epoch_ % reload_every == 0) {
      // Every rank rebuilds here; one whose DataModule failed to would leave the others in collectives it
      // never makes, so they agree first (ddp).
      std::exception_ptr error;
      try {
        reload_loaders_();
      } catch (...) {
        error = std::current_exception();
      }
      strategy_->agree(error, "rebuilding the DataModule's loaders (reload_dataloaders_every_n_epochs)");
    }
    data::DataLoader& train = *train_loader_;
    if (!resuming_mid_epoch) {
      train.set_epoch(static_cast<uint64_t>(epoch_));
      batch_in_epoch_ = 0;
      train_epoch_means_.clear();
    }
    const bool resumed_here = resuming_mid_epoch;
    resuming_mid_epoch = false;
    module_->train();
    {
      HookScope scope(*this, LogContext::TrainHook);
      call_hooks("on_train_epoch_start", [&](Callback& c) { c.on_train_epoch_start(*this, *module_); });
    }
    if (resumed_here && validation_due(batch_in_epoch_)) {
      // The checkpoint was taken after a batch that validation follows: the interrupted run may not have
      // finished that validation, and the epoch's end (schedulers on a monitored metric, early stopping)
      // depends on it. Validation changes no weights, so running it again is safe.
      validate_in_fit();
    }
    const bool unknown_length = num_training_batches_ < 0;  // a stream: the epoch ends where it does
    if (unknown_length || batch_in_epoch_ < num_training_batches_) {
      // A range-for written out, so that the profiler sees the time spent waiting for each batch.
      auto it = [&] {
        profiler::Range range("train_dataloader_next");
        return train.begin();
      }();
      bool stopped = false, validated = false;
      for (;;) {
        const bool exhausted = it == std::default_sentinel;
        // Ranks in lockstep over streams of different lengths end the epoch together, at the first one's end.
        if (unknown_length && strategy_->agree_every_batch() ? strategy_->any(exhausted) : exhausted) break;
        const int64_t idx = batch_in_epoch_;
        train_batch(to_device(*it), idx, idx + 1 == num_training_batches_);
        validated = validation_due(batch_in_epoch_);
        if (validated) validate_in_fit();
        if (!unknown_length && batch_in_epoch_ >= num_training_batches_) break;
        if ((stopped = agreed_stop(validated))) break;
        throw_if_interrupted();
        profiler::Range range("train_dataloader_next");
        ++it;
      }
      // A stream that ran out: its last batch was the epoch's, so a window it left open steps now (as a last
      // batch known in advance would have), and then comes the epoch's validation when one is due there.
      if (unknown_length && !stopped) {
        if (accumulated_ > 0) optimizer_step();
        if (!validated && validation_due(-1)) validate_in_fit();
      }
    }

    // Stopped in the middle of an accumulation window (should_stop, max_time): the batch that ran last is the
    // epoch's last, and an epoch's last batch always steps, so no gradient is left behind.
    if (accumulated_ > 0) optimizer_step();

    // The epoch's end: schedulers, then its metrics, then the hooks (checkpoints taken there resume at the
    // next epoch, with the schedulers already stepped), then the loggers.
    epoch_finished_ = true;
    step_schedulers("epoch");
    std::map<std::string, double> to_log = finish_means(train_epoch_means_);
    pending_step_logs_.clear();
    {
      HookScope scope(*this, LogContext::TrainHook);
      call_hooks("on_train_epoch_end", [&](Callback& c) { c.on_train_epoch_end(*this, *module_); });
    }
    for (const auto& [k, v] : pending_step_logs_) to_log[k] = v;
    pending_step_logs_.clear();
    send_to_loggers(to_log);
    ++epoch_;
    batch_in_epoch_ = 0;
    epoch_finished_ = false;
  }
}

void Trainer::train_batch(const data::Batch& batch, int64_t batch_idx, bool last_in_epoch) {
  profiler::Range batch_range("run_training_batch");
  const int64_t steps_before = global_step_;
  const bool automatic = module_->automatic_optimization();
  current_batch_size_ = batch_size_of(batch);
  pending_step_logs_.clear();
  {
    HookScope scope(*this, LogContext::TrainStep);
    call_hooks("on_train_batch_start", [&](Callback& c) { c.on_train_batch_start(*this, *module_, batch, batch_idx); });
  }
  Tensor loss;
  const bool by_closure = automatic && steps_by_closure();
  if (by_closure) {
    loss = closure_batch(batch, batch_idx);
  } else {
    HookScope scope(*this, LogContext::TrainStep);
    strategy_->before_training_step();
    {
      profiler::Range range("training_step");
      const auto autocast = autocast_guard();
      loss = module_->training_step(batch, batch_idx);
    }
    if (automatic) strategy_->after_training_step(loss);
  }
  if (loss.defined() && automatic && !by_closure) {
    check_training_loss(loss, batch_idx);
    const int64_t acc = accumulate_;
    // NOTE: dividing by the window keeps an accumulated step equal to one on a batch acc times larger (for
    // losses that are means over the batch).
    Tensor scaled = acc > 1 ? loss / static_cast<double>(acc) : loss;
    // 16-mixed: times the loss scale; the hook sees the loss backward runs on, as in Lightning.
    if (scaler_) scaled = scaler_->scale(scaled);
    call_hooks("on_before_backward", [&](Callback& c) { c.on_before_backward(*this, *module_, scaled); });
    // Under ddp a backward that does not end the accumulation window keeps its gradients local.
    const bool ends_window = accumulated_ + 1 >= acc || last_in_epoch;
    {
      profiler::Range range("backward");
      strategy_->backward(scaled, ends_window);
    }
    last_backward_synced_ = ends_window;
    call_hooks("on_after_backward", [&](Callback& c) { c.on_after_backward(*this, *module_); });
    ++accumulated_;
  }
  // Under manual optimization training_step stepped (or not) itself, and by a closure closure_batch stepped;
  // accumulated_ stays 0.
  if (accumulated_ > 0 && (accumulated_ >= accumulate_ || last_in_epoch)) optimizer_step();
  batch_in_epoch_ = batch_idx + 1;
  {
    HookScope scope(*this, LogContext::TrainStep);
    const Tensor out = loss.defined() ? loss.detach() : loss;
    call_hooks("on_train_batch_end",
               [&](Callback& c) { c.on_train_batch_end(*this, *module_, out, batch, batch_idx); });
  }
  // The step metrics go out when this batch's steps reached a multiple of log_every_n_steps (a batch of manual
  // optimization may take several steps).
  const int64_t n = options_.log_every_n_steps;
  if (global_step_ / n > steps_before / n && !pending_step_logs_.empty()) {
    send_to_loggers(pending_step_logs_);
  }
  pending_step_logs_.clear();
}

void Trainer::check_training_loss(const Tensor& loss, int64_t batch_idx) const {
  KILN_CHECK(loss.numel() == 1, "Trainer: training_step returned a tensor of shape ", shape_str(loss.shape()),
             " at batch ", batch_idx, "; it must return the loss, a single value");
  KILN_CHECK(loss.requires_grad(), "Trainer: the loss training_step returned at batch ", batch_idx,
             " does not require grad (computed under NoGradGuard, or only from detached tensors?)");
}

void Trainer::optimizer_step() {
  profiler::Range step_range("optimizer_step");
  strategy_->before_optimizer_step(*module_, last_backward_synced_);
  last_backward_synced_ = true;
  for (auto& opt : optimizers_) {
    step_one(*opt, options_.gradient_clip_val);
    call_hooks("on_before_zero_grad", [&](Callback& c) { c.on_before_zero_grad(*this, *module_, *opt); });
    {
      profiler::Range range("zero_grad");
      opt->zero_grad();
    }
  }
  if (scaler_) scaler_->update();
  accumulated_ = 0;
  ++global_step_;
  step_schedulers("step");
}

void Trainer::step_one(optim::Optimizer& opt, double clip_val) {
  // 16-mixed: the hooks and clipping see the true gradients, as in Lightning (unscaled once: a manual
  // clip_gradients may have done it already).
  if (scaler_ && !scaler_->unscaled(opt)) scaler_->unscale_(opt);
  call_hooks("on_before_optimizer_step", [&](Callback& c) { c.on_before_optimizer_step(*this, *module_, opt); });
  if (clip_val > 0) clip_gradients(opt, clip_val, options_.gradient_clip_algorithm);
  // A gradient that overflowed float16: the step is skipped (the same on every ddp rank, whose gradients are
  // the same after the all-reduce); the scaler backs off at its update.
  const bool skip = scaler_ && scaler_->found_inf(opt);
  profiler::Range range("optimizer.step");
  if (!skip && !strategy_->step_optimizer(opt)) opt.step();
}

std::optional<AutocastGuard> Trainer::autocast_guard() const {
  if (options_.precision == "16-mixed") return std::optional<AutocastGuard>(std::in_place, device_.type, kFloat16);
  if (options_.precision == "bf16-mixed") return std::optional<AutocastGuard>(std::in_place, device_.type, kBFloat16);
  return std::nullopt;
}

void Trainer::step_schedulers(const std::string& interval) {
  if (!module_->automatic_optimization()) return;  // the module steps its schedulers itself, as in Lightning
  const int64_t count = interval == "step" ? global_step_ : epoch_ + 1;
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    SchedulerConfig& s = schedulers_[i];
    if (s.interval != interval || count % s.frequency != 0) continue;
    if (s.scheduler) {
      s.scheduler->step();
      continue;
    }
    auto it = callback_metrics_.find(s.monitor);
    KILN_CHECK(it != callback_metrics_.end(), "Trainer: ReduceLROnPlateau (scheduler ", i, ") monitors '",
               s.monitor, "', which has not been logged; logged metrics: ", join_keys(callback_metrics_));
    s.plateau->step(it->second);
  }
}

}  // namespace kiln::trainer
