// Trainer: runs a TrainModule's training, validation, test and prediction loops, with the engineering people
// otherwise write by hand around them: devices, gradient accumulation and clipping, schedulers, validation
// cadence, logging, checkpoints, exact resume and callbacks. Shaped like PyTorch Lightning's Trainer.
//
//   trainer::Trainer t({.max_epochs = 3, .default_root_dir = "runs"});
//   t.fit(module, train_loader, &val_loader);   // or fit(..., "last") to resume the latest run
//   auto results = t.test(module, test_loader);  // {"test/acc": 0.91, ...}
//
// Progress: global_step counts optimizer steps; current_epoch counts training epochs from 0. A checkpoint holds
// everything the loops depend on (weights, optimizer and scheduler state, the default generator, the loader's
// position, the epoch's running metric sums, callback state), so fit() from a checkpoint continues exactly:
// on the CPU the final weights equal those of a run never stopped, bit for bit. docs/trainer.md walks through
// the loop and the order of hooks.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/autograd/autocast.h"
#include "kiln/data/dataloader.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/tensor/determinism.h"
#include "kiln/tensor/profiler.h"
#include "kiln/trainer/batch_limit.h"
#include "kiln/trainer/callback.h"
#include "kiln/trainer/checkpoint.h"
#include "kiln/trainer/interrupt.h"
#include "kiln/trainer/logger.h"
#include "kiln/trainer/strategy.h"
#include "kiln/trainer/train_module.h"

namespace kiln::trainer {

class DataModule;  // data_module.h

// The parameter server under strategy "parameter_server" (kiln/distributed/ps/parameter_server.h).
struct ParameterServerOptions {
  int servers = 0;             // how many of the job's ranks are servers (0: KILN_PS_SERVERS, set by kiln launch)
  std::string mode = "sync";   // "sync", "async" or "ssp"
  int staleness = 0;           // ssp: how far a worker may run ahead of the slowest, in steps
  std::string optimizer = "server";  // where the optimizer steps: "server" or "worker" (sync only)
};

struct TrainerOptions {
  // Stop after this many epochs (-1: no epoch limit; with max_steps also -1, 1000 epochs as in Lightning) or
  // optimizer steps (-1: none). min_epochs holds off early stopping.
  int64_t max_epochs = -1;
  int64_t min_epochs = 0;
  int64_t max_steps = -1;
  // Wall-clock budget in seconds (0: none); checked after each batch.
  double max_time = 0;

  // "cpu", "cuda" or "auto" (cuda when a device is present); devices: how many (1 for the single strategy).
  std::string accelerator = "auto";
  int devices = 1;
  // "auto" or "single": one process; "ddp": one process per rank, started by `kiln launch` (strategy.h);
  // "parameter_server": servers and workers, started by `kiln launch --servers S --workers W`.
  std::string strategy = "auto";
  // ddp and parameter_server: the deadline of every collective and of the rendezvous, in seconds; also how long
  // the other processes wait for a DataModule's prepare_data (raise it for a long download).
  double process_group_timeout = 300;
  // ddp: the process-group backend the ranks form ("tcp"; "gloo" and "mpi" when built, mpi under mpirun).
  std::string ddp_backend = "tcp";
  // ddp: parameters a backward does not reach count as zero gradients instead of being an error
  // (DDPOptions::find_unused_parameters); needed by models that use part of their parameters per step, such as
  // a GAN's manual optimization without toggle_optimizer, where each optimizer's loss reaches only its own
  // network. (Frozen parameters, requires_grad false, never need it: DDP lets them sit the round out.)
  bool ddp_find_unused_parameters = false;
  // ddp: batch norms take their training statistics over every rank's batch during fit
  // (distributed::convert_sync_batchnorm, Lightning's sync_batchnorm; reverted when fit ends). One process needs
  // nothing (its batch is the whole batch); the parameter server refuses it (its workers do not run in step).
  bool sync_batchnorm = false;
  ParameterServerOptions ps;
  // "32"; or mixed precision: "bf16-mixed" (forward passes under autocast with bfloat16) and "16-mixed"
  // (float16, with a GradScaler scaling the loss and skipping the steps whose gradients overflow; its state is
  // in the checkpoints). On the CPU the 16-bit kernels run through float32: mixed precision is for the GPU.
  std::string precision = "32";

  int64_t accumulate_grad_batches = 1;
  double gradient_clip_val = 0;                // 0: no clipping
  std::string gradient_clip_algorithm = "norm";  // "norm" (total 2-norm) or "value" (each element)

  BatchLimit val_check_interval = 1.0;  // validate every this many training batches / fraction of an epoch
  int64_t check_val_every_n_epoch = 1;
  BatchLimit limit_train_batches = 1.0, limit_val_batches = 1.0, limit_test_batches = 1.0,
             limit_predict_batches = 1.0;
  int64_t num_sanity_val_steps = 2;  // validation batches run before training (-1: all; skipped on resume)
  // A fit given a DataModule asks it for new training and validation loaders at the start of every epoch that
  // is a multiple of this (0: never; the first epoch a fit runs, resumed or not, uses the loaders it started
  // with). For loaders that change during training: a curriculum, a batch size set by a callback. Checkpoints
  // keep the DataModule's state as it was when the loaders in use were built, and a resume builds them from it
  // (then hands the DataModule its latest state), so the resumed epoch runs on the same loaders; a resume at
  // the start of an epoch that rebuilds builds them from the latest state, as the interrupted run would have.
  // What callbacks read once at the fit's start (EarlyStopping's validation length, a schedule sized by the
  // first epoch's batches) does not follow a rebuild. A fit given loaders cannot rebuild them and refuses it.
  int64_t reload_dataloaders_every_n_epochs = 0;
  int64_t log_every_n_steps = 50;

  // Each run (fit, validate, test, predict) uses deterministic algorithms (kiln/tensor/determinism.h, PyTorch's
  // use_deterministic_algorithms): on CUDA, index_add and scatter_add (the gradients of embedding, index_select
  // and gather) and max pooling's gradient add in a fixed order, convolution takes only deterministic cuDNN
  // algorithms, and an op with no deterministic kernel (grid_sample's input gradient) stops with an error naming
  // it. The process's setting is put back when the run ends; false leaves it as it is. Every CPU kernel
  // is deterministic for a fixed thread count either way.
  bool deterministic = false;
  // fit() runs in autograd's anomaly mode (DetectAnomalyGuard): a NaN or Inf in any gradient stops it with an
  // error naming the op and where forward made it. Slow (every node keeps a stack trace); for debugging.
  bool detect_anomaly = false;
  std::optional<uint64_t> seed;  // seeds the default generator when fit() starts
  // fit() catches SIGINT and SIGTERM (kiln/trainer/interrupt.h): the first stops training at the next
  // optimizer-step boundary and throws trainer::Interrupted out of fit(), after the on_exception hooks (an
  // OnExceptionCheckpoint there resumes exactly); a second one ends the process. Off by default, since a
  // program that links kiln owns its signals; `kiln train` turns it on. Not under parameter_server.
  bool handle_signals = false;
  std::string default_root_dir = ".";
  // Run n batches of training, validation and test (1 epoch, no loggers, no checkpoints): a smoke test.
  int64_t fast_dev_run = 0;
  // Lightning's overfit_batches: train and validate on only this many batches (a count, or a fraction of each
  // loader), the training ones in order (the training loader's shuffle is turned off), every epoch the same:
  // a model that cannot drive their loss to near zero has a bug. 0 (or 0.0): off.
  BatchLimit overfit_batches = 0.0;

  // Where the time goes (kiln/tensor/profiler.h): "none"; "simple": the Trainer's actions (training_step,
  // backward, optimizer_step, the loaders' next batch, ...) and every hook of every callback; "ops": those and
  // every kernel and autograd node, and a timeline. Each fit, validate, test and predict writes its table to
  // <log_dir>/<stage>-profile.txt and prints its top rows; "ops" also writes <stage>-trace.json (Perfetto,
  // chrome://tracing). Rank 0 writes and prints.
  std::string profiler = "none";

  bool enable_progress_bar = true;
  bool enable_checkpointing = true;  // adds a ModelCheckpoint when none is given
  bool enable_model_summary = true;
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::vector<std::shared_ptr<Logger>> loggers;
  bool logger = true;  // with no loggers given: a CSVLogger under default_root_dir
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains `module` on `train`, validating on `val` (if given) as the options say. ckpt_path: a checkpoint
  // file to resume from, or "last" (the newest last.ckpt under default_root_dir).
  void fit(TrainModule& module, data::DataLoader& train, data::DataLoader* val = nullptr,
           const std::string& ckpt_path = "");
  // With several validation loaders: each validation runs them all in order, validation_step gets the
  // loader's index (dataloader_idx), and with more than one loader the metrics logged on loader k are
  // reported as "<name>/dataloader_idx_<k>" (as in Lightning; LogOptions::add_dataloader_idx turns it off).
  // limit_val_batches and num_sanity_val_steps apply to each loader.
  void fit(TrainModule& module, data::DataLoader& train, const std::vector<data::DataLoader*>& val,
           const std::string& ckpt_path = "");
  // One pass of validation_step / test_step over `loader` (or over each of `loaders`, as fit's); returns the
  // epoch metrics logged. ckpt_path loads the weights of a checkpoint first: a file, "last", or "best" (the
  // best_model_path of the first ModelCheckpoint, as Lightning's: its best by the monitor, or without one its
  // latest; an error before it saved any).
  std::map<std::string, double> validate(TrainModule& module, data::DataLoader& loader,
                                         const std::string& ckpt_path = "");
  std::map<std::string, double> validate(TrainModule& module, const std::vector<data::DataLoader*>& loaders,
                                         const std::string& ckpt_path = "");
  std::map<std::string, double> test(TrainModule& module, data::DataLoader& loader, const std::string& ckpt_path = "");
  std::map<std::string, double> test(TrainModule& module, const std::vector<data::DataLoader*>& loaders,
                                     const std::string& ckpt_path = "");
  // predict_step's output for every batch, in order (moved to the CPU). return_predictions false (Lightning's
  // return_predictions=False): keeps none and returns none, for a run whose outputs a prediction writer
  // (prediction_writer.h) writes as they come, so that memory does not grow with the loader.
  std::vector<Tensor> predict(TrainModule& module, data::DataLoader& loader, const std::string& ckpt_path = "",
                              bool return_predictions = true);
  // The same four with a DataModule's loaders (data_module.h): its prepare_data and setup(stage) first, its
  // teardown(stage) at the end (also after a failure), and under fit its state_dict in the checkpoints.
  void fit(TrainModule& module, DataModule& data, const std::string& ckpt_path = "");
  std::map<std::string, double> validate(TrainModule& module, DataModule& data, const std::string& ckpt_path = "");
  std::map<std::string, double> test(TrainModule& module, DataModule& data, const std::string& ckpt_path = "");
  std::vector<Tensor> predict(TrainModule& module, DataModule& data, const std::string& ckpt_path = "",
                              bool return_predictions = true);

  // ---- state, for callbacks and the module ----
  const TrainerOptions& options() const { return options_; }
  Stage stage() const { return stage_; }
  bool sanity_checking() const { return sanity_checking_; }
  int64_t current_epoch() const { return epoch_; }
  int64_t global_step() const { return global_step_; }
  // The backward passes each optimizer step accumulates: TrainerOptions::accumulate_grad_batches, unless a
  // callback (GradientAccumulationScheduler) changed it. Set it between optimizer steps only, under automatic
  // optimization (an epoch's start is such a point).
  int64_t accumulate_grad_batches() const { return accumulate_; }
  void set_accumulate_grad_batches(int64_t n);
  // Drops the schedulers configure_optimizers returned, for the rest of this fit (the LR finder sets every
  // step's rate itself).
  void drop_schedulers() { schedulers_.clear(); }
  // The training epoch's batches so far (the index of the next batch).
  int64_t batch_in_epoch() const { return batch_in_epoch_; }
  // -1 where the training loader reads a stream (an iterable dataset): its epochs end where the stream does.
  int64_t num_training_batches() const { return num_training_batches_; }
  // A validation's batches, over all its loaders (-1 when one of them reads a stream).
  int64_t num_val_batches() const { return num_val_batches_; }
  // The batches of the current evaluation (validation, test or predict) run, on its current loader (-1: a
  // stream, all of it).
  int64_t num_eval_batches() const { return num_eval_batches_; }
  // The current evaluation loader's index (0 with one loader), and how many the run has.
  int64_t dataloader_idx() const { return dataloader_idx_; }
  int64_t num_eval_loaders() const { return num_eval_loaders_; }
  // A batch's size as the Trainer counts it (weighting epoch means; ThroughputMonitor's default): dim 0 of its
  // first field (1 for a field without dims).
  static int64_t batch_size_of(const data::Batch& batch);
  // Optimizer steps the whole fit will take, as far as the limits say (-1 when unbounded).
  int64_t estimated_stepping_batches() const;
  Device device() const { return device_; }
  TrainModule* module() const { return module_; }
  // The DataModule of the run in progress (null when the run was given loaders).
  DataModule* datamodule() const { return datamodule_; }
  // This process's rank and the number of ranks (1 and 0 without ddp). Only the global zero (rank 0) writes
  // logs and checkpoints and prints.
  int world_size() const { return strategy_->world_size(); }
  int global_rank() const { return strategy_->rank(); }
  bool is_global_zero() const { return strategy_->is_global_zero(); }
  const Strategy& strategy() const { return *strategy_; }
  // Whether `flag` is true on any rank: a collective, so every rank calls it at the same point (a callback that
  // decides from its own clock, as ModelCheckpoint's train_time_interval). One process: flag.
  bool any_rank(bool flag);

  // Set by callbacks (EarlyStopping) to end training after the current epoch (once min_epochs have run).
  bool should_stop() const { return should_stop_; }
  void set_should_stop(bool stop) { should_stop_ = stop; }

  // The latest value of every metric (step values and epoch means): what ModelCheckpoint and EarlyStopping
  // monitor. logged_metrics: those sent to loggers; progress_bar_metrics: those logged with prog_bar.
  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  const std::map<std::string, double>& logged_metrics() const { return logged_metrics_; }
  const std::map<std::string, double>& progress_bar_metrics() const { return progress_bar_metrics_; }
  // The epoch metrics of the latest validation or test run (sanity check included).
  const std::map<std::string, double>& last_eval_metrics() const { return last_eval_metrics_; }

  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }
  // The first logger's run folder, else default_root_dir: where checkpoints and the config go by default.
  std::string log_dir() const;
  const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers() const { return optimizers_; }
  // The loss scaler of precision "16-mixed" (null otherwise), from fit()'s start.
  const optim::GradScaler* grad_scaler() const { return scaler_.get(); }
  const std::vector<SchedulerConfig>& schedulers() const { return schedulers_; }
  // Seconds since fit() started (including the time before a resume).
  double elapsed_seconds() const;

  // Writes a checkpoint of the run as it stands (from a hook; ModelCheckpoint calls this). weights_only (as
  // Lightning's): the module's weights, the epoch and step and the hyperparameters, without the optimizers',
  // schedulers', callbacks' and loaders' state; validate/test/predict load it, a fit cannot resume from it.
  void save_checkpoint(const std::string& path, bool weights_only = false);
  // Called by TrainModule::log.
  void log_metric(const std::string& name, double value, const LogOptions& options);
  // Called by TrainModule::log_histogram and log_image: to every logger at the global step (none while the
  // sanity check runs; the other ranks of ddp have no loggers).
  void log_histogram(const std::string& tag, const Tensor& values, int64_t bins);
  void log_image(const std::string& tag, const Tensor& image);
  // Manual optimization's steps (the TrainModule and ManualOptimizer calls of the same names).
  void manual_backward(const Tensor& loss);
  void manual_optimizer_step(optim::Optimizer& optimizer);
  Tensor manual_optimizer_step(optim::Optimizer& optimizer, const std::function<Tensor()>& closure);
  void manual_clip_gradients(optim::Optimizer& optimizer, double max, const std::string& algorithm);

 private:
  enum class LogContext { None, TrainStep, TrainHook, Eval };
  // An epoch-level metric being averaged (weighted by batch size), and where its mean goes.
  struct Mean {
    double sum = 0, weight = 0;
    bool prog_bar = false, logger = false;
  };
  // Sets the log context for a stretch of code and puts the previous one back.
  class HookScope {
   public:
    HookScope(Trainer& t, LogContext ctx) : t_(t), saved_(t.log_context_) { t.log_context_ = ctx; }
    ~HookScope() { t_.log_context_ = saved_; }

   private:
    Trainer& t_;
    LogContext saved_;
  };

  // Hooks: the module's first, then each callback's. `hook` names them for the profiler.
  template <class F>
  void call_hooks(const char* hook, F&& f) {
    if (profiler::recording_ranges()) [[unlikely]] {
      profiler::Range r(hook_event_name(*module_, hook));
      f(static_cast<Callback&>(*module_));
      for (auto& cb : callbacks_) {
        profiler::Range rc(hook_event_name(*cb, hook));
        f(*cb);
      }
      return;
    }
    f(static_cast<Callback&>(*module_));
    for (auto& cb : callbacks_) f(*cb);
  }
  // "ModelCheckpoint.on_train_batch_end": the callback's class and the hook.
  static std::string hook_event_name(const Callback& callback, const char* hook);
  // options.profiler: starts recording (when not "none") for one fit/validate/test/predict, then writes and
  // prints the report of the stage that ends.
  void start_profiler();
  void finish_profiler(Stage stage);
  void attach(TrainModule& module, Stage stage);
  void detach();
  void resolve_device();
  void setup_callbacks_and_loggers();
  void send_to_loggers(std::map<std::string, double> metrics);
  void restore(const Checkpoint& ckpt, data::DataLoader& train);
  std::string resolve_ckpt_path(const std::string& path) const;
  // validate/test/predict: the weights of the checkpoint at ckpt_path (nothing when it is empty).
  void load_weights(TrainModule& module, const std::string& ckpt_path);
  // Tells the module and every callback of `error` (on_exception), before the Trainer rethrows it.
  void notify_exception(const std::exception& error);
  // A fit that throws: the other ranks, the callbacks and the loggers hear of it, and the module is let go.
  void fit_failed(const std::exception& error);
  // Something thrown that is not a std::exception (an int, a user's own type) fails a run as any error does: the
  // callbacks and the other ranks hear of it as this Error, and the original propagates.
  static const Error& foreign_exception();
  Checkpoint build_checkpoint(bool weights_only = false);

  void train_loop();
  void train_batch(const data::Batch& batch, int64_t batch_idx, bool last_in_epoch);
  // The automatic loop's checks on what training_step returned (one value that requires grad).
  void check_training_loss(const Tensor& loss, int64_t batch_idx) const;
  void optimizer_step();
  // Whether the automatic loop steps through a closure: its one optimizer is LBFGS.
  bool steps_by_closure() const;
  // Automatic optimization with a closure optimizer (LBFGS): the closure is the whole training step, evaluated
  // as often as the optimizer asks; one step and one global_step. Returns the last evaluation's loss.
  Tensor closure_batch(const data::Batch& batch, int64_t batch_idx);
  // LBFGS's step over `evaluate`; under ddp the loss it sees is the mean over the ranks (see the .cpp).
  Tensor closure_step(optim::Optimizer& lbfgs, const std::function<Tensor()>& evaluate);
  // One optimizer's step in either loop: unscaled under 16-mixed, the on_before_optimizer_step hooks, clipped
  // at clip_val (0: not), then stepped unless a gradient overflowed (or by the strategy, a parameter server).
  void step_one(optim::Optimizer& opt, double clip_val);
  // Clips the gradients of `optimizer`'s parameters by total norm or value (gradient_clip_algorithm's names).
  static void clip_gradients(const optim::Optimizer& optimizer, double max, const std::string& algorithm);
  // fit(): the optimizers against the loop that will step them (LBFGS steps with a closure: alone, one batch at
  // a time), and a module that turned automatic optimization off against the options that need it.
  void check_optimization() const;
  void step_schedulers(const std::string& interval);
  bool validation_due(int64_t batches_done) const;
  // The loaders fit() iterates: this rank's shards of the user's (without shuffling under overfit_batches),
  // each validation loader's limit, and the counts that follow from them (batches per epoch, validation cadence).
  void use_loaders(data::DataLoader& user_train, const std::vector<data::DataLoader*>& user_vals);
  bool stop_requested() const;
  // stop_requested(), agreed by every rank (and should_stop made the same on all of them). ranks_met: every rank
  // has just validated after this same batch (see trainer.cpp for ranks that do not otherwise meet every batch).
  bool agreed_stop(bool ranks_met);
  // Under handle_signals: a signal caught on any rank (agreed_stop and the epoch loop read it), and, once the
  // accumulation window is closed, the Interrupted thrown for it.
  void throw_if_interrupted();
  // The same at an epoch boundary, where no per-batch agreement ran: agrees on the flags first.
  void agree_on_interrupt_and_throw();
  // Runs validation or test over each of `loaders` in turn, limited to limits[k] batches of loader k; returns
  // the epoch metrics.
  std::map<std::string, double> eval_loop(const std::vector<data::DataLoader*>& loaders, Stage stage,
                                          const std::vector<int64_t>& limits);
  // fit()'s validation: every loader, to its limit.
  std::map<std::string, double> validate_in_fit() { return eval_loop(val_loaders_, Stage::Validate, val_limits_); }
  std::map<std::string, double> run_eval(TrainModule& module, const std::vector<data::DataLoader*>& loaders,
                                         Stage stage, const std::string& ckpt_path);
  std::map<std::string, double> finish_means(std::map<std::string, Mean>& means);
  data::Batch to_device(const data::Batch& batch) const;
  // limit.resolve(loader.size()): -1 (all) for a stream's unknown length, where only counts and 1.0 are allowed.
  static int64_t resolve_limit(const BatchLimit& limit, const char* name, const data::DataLoader& loader);

  // The guard a forward pass runs under: autocast when precision is mixed, nothing otherwise.
  std::optional<AutocastGuard> autocast_guard() const;

  TrainerOptions options_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<optim::GradScaler> scaler_;  // precision "16-mixed" only
  TrainModule* module_ = nullptr;
  DataModule* datamodule_ = nullptr;
  // A DataModule's fit: builds its loaders (into dm_train_ and dm_vals_) and hands them to use_loaders; run
  // where reload_dataloaders_every_n_epochs says (data_module.cpp).
  std::function<void()> reload_loaders_;
  std::optional<DeterministicAlgorithmsGuard> deterministic_;  // a run's, with options_.deterministic
  std::unique_ptr<data::DataLoader> dm_train_;
  std::vector<std::unique_ptr<data::DataLoader>> dm_vals_;
  CallbackState dm_state_at_build_;  // the DataModule's state_dict() just before they were built
  int64_t dm_built_for_epoch_ = 0;    // the epoch they were built for
  // The checkpoint a DataModule's fit read to hand the DataModule its state before its loaders were built,
  // with its path: fit's resume takes it rather than reading the file again.
  std::optional<std::pair<std::string, Checkpoint>> preloaded_checkpoint_;
  Stage stage_ = Stage::Fit;
  Device device_ = kCPU;
  bool sanity_checking_ = false;
  bool should_stop_ = false;
  int interrupt_ = 0;  // the signal that stops this fit (agreed over ranks), 0 while none
  bool catch_signals_ = false;  // this fit catches SIGINT and SIGTERM (handle_signals, not under a parameter server)
  bool epoch_finished_ = false;  // between the last batch of an epoch and the next epoch's start

  int64_t epoch_ = 0, global_step_ = 0, batch_in_epoch_ = 0;
  int64_t accumulated_ = 0;  // backward passes since the last optimizer step
  bool last_backward_synced_ = true;  // ddp: the last backward averaged its gradients over ranks
  int64_t num_training_batches_ = 0, num_val_batches_ = 0, num_eval_batches_ = 0;
  int64_t dataloader_idx_ = 0, num_eval_loaders_ = 1;
  std::vector<data::DataLoader*> val_loaders_;  // fit(): this rank's validation loaders
  std::vector<int64_t> val_limits_;             // and how many batches of each a validation runs
  int64_t val_every_ = 0;  // validate after every this many training batches (0: at epoch end only)
  data::DataLoader* train_loader_ = nullptr;
  int64_t accumulate_ = 1;  // accumulate_grad_batches() now
  std::unique_ptr<data::DataLoader> overfit_train_;  // the user's training loader without shuffling

  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Logger>> loggers_;
  std::vector<std::shared_ptr<optim::Optimizer>> optimizers_;
  std::vector<SchedulerConfig> schedulers_;

  LogContext log_context_ = LogContext::None;
  int64_t current_batch_size_ = 1;
  std::map<std::string, Mean> train_epoch_means_, eval_means_;
  std::map<std::string, double> pending_step_logs_;  // this batch's on_step metrics, for the loggers
  std::map<std::string, double> callback_metrics_, logged_metrics_, progress_bar_metrics_, last_eval_metrics_;

  std::unique_ptr<profiler::Profiler> profiler_;  // options.profiler, while a stage runs
  std::string log_dir_;  // rank 0's run folder, agreed by every rank when fit() starts
  std::chrono::steady_clock::time_point start_time_;
  double elapsed_before_ = 0;  // seconds of the run before it was resumed
};

}  // namespace kiln::trainer
