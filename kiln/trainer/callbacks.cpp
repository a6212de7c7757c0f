// add_default_callbacks, GradientAccumulationScheduler, OnExceptionCheckpoint, LearningRateMonitor and Timer: the
// built-in callbacks small enough to share a file.
#include "kiln/trainer/callbacks.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <type_traits>

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

std::string exact_text(double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  return buf;
}

void add_default_callbacks(const TrainerOptions& options, std::vector<std::shared_ptr<Callback>>& callbacks) {
  auto has = [&](auto* type_tag) {
    using T = std::remove_pointer_t<decltype(type_tag)>;
    for (const auto& cb : callbacks) {
      if (dynamic_cast<T*>(cb.get()) != nullptr) return true;
    }
    return false;
  };
  const bool has_checkpoint = has(static_cast<ModelCheckpoint*>(nullptr));
  const bool has_bar = has(static_cast<ProgressBar*>(nullptr));
  // fast_dev_run turns checkpointing off by itself; a ModelCheckpoint given then is not a contradiction (it
  // does not save during fast_dev_run).
  KILN_CHECK(has_checkpoint == false || options.enable_checkpointing || options.fast_dev_run > 0,
             "Trainer: enable_checkpointing = false, but a ModelCheckpoint is among the callbacks; remove it or set "
             "enable_checkpointing = true");
  KILN_CHECK(has_bar == false || options.enable_progress_bar,
             "Trainer: enable_progress_bar = false, but a ProgressBar is among the callbacks; remove it or set "
             "enable_progress_bar = true");
  if (options.enable_checkpointing && !has_checkpoint) callbacks.push_back(std::make_shared<ModelCheckpoint>());
  if (options.enable_progress_bar && !has_bar) callbacks.push_back(std::make_shared<ProgressBar>());
  if (options.enable_model_summary && !has(static_cast<ModelSummary*>(nullptr))) {
    callbacks.push_back(std::make_shared<ModelSummary>());
  }
  // Checkpoints last, in their own order, as Lightning orders them: a file written at a step or an epoch's end
  // then holds what every other callback did there (an averaging update, an early-stopping count).
  std::stable_partition(callbacks.begin(), callbacks.end(), [](const std::shared_ptr<Callback>& cb) {
    return dynamic_cast<const ModelCheckpoint*>(cb.get()) == nullptr;
  });
}

// ---- GradientAccumulationScheduler ----

GradientAccumulationScheduler::GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling)
    : scheduling_(std::move(scheduling)) {
  KILN_CHECK(!scheduling_.empty(), "GradientAccumulationScheduler: the scheduling is empty; give at least one "
             "{epoch, factor}");
  for (const auto& [epoch, n] : scheduling_) {
    KILN_CHECK(epoch >= 0, "GradientAccumulationScheduler: epoch ", epoch, " is negative");
    KILN_CHECK(n >= 1, "GradientAccumulationScheduler: factor ", n, " for epoch ", epoch, ": expected >= 1");
  }
}

int64_t GradientAccumulationScheduler::factor(int64_t epoch) const {
  auto it = scheduling_.upper_bound(epoch);  // the first key after epoch: the one before it applies
  return it == scheduling_.begin() ? 1 : std::prev(it)->second;
}

void GradientAccumulationScheduler::setup(Trainer& trainer, TrainModule& module, Stage stage) {
  if (stage != Stage::Fit) return;
  KILN_CHECK(trainer.options().accumulate_grad_batches == 1, "GradientAccumulationScheduler: the Trainer's "
             "accumulate_grad_batches is ", trainer.options().accumulate_grad_batches, "; leave it at 1 and put the "
             "factors in the scheduling");
  KILN_CHECK(module.automatic_optimization(), "GradientAccumulationScheduler: the module uses manual "
             "optimization, which accumulates in training_step itself");
}

void GradientAccumulationScheduler::on_train_epoch_start(Trainer& trainer, TrainModule&) {
  trainer.set_accumulate_grad_batches(factor(trainer.current_epoch()));
}

// ---- OnExceptionCheckpoint ----

OnExceptionCheckpoint::OnExceptionCheckpoint(OnExceptionCheckpointOptions options) : options_(std::move(options)) {
  KILN_CHECK(!options_.filename.empty() && options_.filename.find('/') == std::string::npos,
             "OnExceptionCheckpoint: filename '", options_.filename, "': expected a file name without a folder "
             "(the folder is dirpath)");
}

void OnExceptionCheckpoint::setup(Trainer&, TrainModule&, Stage stage) {
  if (stage == Stage::Fit) saved_path_.clear();
}

void OnExceptionCheckpoint::on_exception(Trainer& trainer, TrainModule&, const std::exception& error) {
  // Nothing to keep from a smoke test, from the sanity validation before training, or from before the
  // optimizers exist (a failed setup or configure_optimizers).
  if (trainer.stage() != Stage::Fit || trainer.options().fast_dev_run > 0 || trainer.sanity_checking() ||
      trainer.optimizers().empty()) {
    return;
  }
  const bool interrupted = dynamic_cast<const Interrupted*>(&error) != nullptr;
  if (trainer.world_size() > 1 && !interrupted) {
    if (trainer.is_global_zero()) {
      std::fprintf(stderr, "OnExceptionCheckpoint: no checkpoint after this error on %d processes: the other ranks "
                   "may not be there to write it\n", trainer.world_size());
    }
    return;
  }
  namespace fs = std::filesystem;
  const fs::path dir = options_.dirpath.empty() ? fs::path(trainer.log_dir()) / "checkpoints" : fs::path(options_.dirpath);
  const std::string path = (dir / (options_.filename + ".ckpt")).string();
  try {
    trainer.save_checkpoint(path);
  } catch (const std::exception& e) {  // mid-window (unstepped gradients), or the disk: say so, keep the error
    if (trainer.is_global_zero()) std::fprintf(stderr, "OnExceptionCheckpoint: nothing saved: %s\n", e.what());
    return;
  }
  saved_path_ = path;
  if (trainer.is_global_zero()) std::fprintf(stderr, "OnExceptionCheckpoint: saved %s\n", path.c_str());
}

// ---- LearningRateMonitor ----

LearningRateMonitor::LearningRateMonitor(LearningRateMonitorOptions options) : options_(std::move(options)) {
  const std::string& i = options_.logging_interval;
  KILN_CHECK(i.empty() || i == "epoch" || i == "step", "LearningRateMonitor: logging_interval '", i,
             "': expected 'epoch', 'step' or '' (each optimizer as its scheduler steps)");
}

void LearningRateMonitor::setup(Trainer&, TrainModule&, Stage stage) {
  if (stage == Stage::Fit) last_step_logged_ = -1;
}

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, TrainModule&) { log(trainer, "epoch"); }

void LearningRateMonitor::on_train_batch_start(Trainer& trainer, TrainModule&, const data::Batch&, int64_t) {
  const int64_t step = trainer.global_step();
  if (step % trainer.options().log_every_n_steps != 0 || step == last_step_logged_) return;
  last_step_logged_ = step;
  log(trainer, "step");
}

void LearningRateMonitor::log(Trainer& trainer, const std::string& interval) {
  const auto& optimizers = trainer.optimizers();
  std::map<std::string, double> values;
  std::map<std::string, int> seen;  // optimizer name -> how many of that kind so far
  for (const auto& opt : optimizers) {
    const int index = seen[opt->name()]++;
    std::string own = options_.logging_interval;
    if (own.empty()) {
      // NOTE: a ReduceLROnPlateau does not say which optimizer it drives; those optimizers log per epoch.
      own = "epoch";
      for (const SchedulerConfig& s : trainer.schedulers()) {
        if (s.scheduler && &s.scheduler->optimizer() == opt.get()) own = s.interval;
      }
    }
    if (own != interval) continue;
    const std::string suffix = index == 0 ? "" : "-" + std::to_string(index);
    const auto& groups = opt->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string pg = groups.size() > 1 ? "/pg" + std::to_string(g + 1) : "";
      const auto& o = groups[g].options;
      values["lr-" + std::string(opt->name()) + suffix + pg] = groups[g].lr();
      if (options_.log_momentum) {
        if (auto it = o.count("momentum") ? o.find("momentum") : o.find("beta1"); it != o.end()) {
          values["momentum-" + std::string(opt->name()) + suffix + pg] = it->second;
        }
      }
      if (options_.log_weight_decay) {
        if (auto it = o.find("weight_decay"); it != o.end()) {
          values["weight_decay-" + std::string(opt->name()) + suffix + pg] = it->second;
        }
      }
    }
  }
  if (values.empty()) return;
  for (const auto& [k, v] : values) last_values_[k] = v;
  for (const auto& logger : trainer.loggers()) logger->log_metrics(values, trainer.global_step());
}

// ---- Timer ----

Timer::Timer(TimerOptions options) : options_(std::move(options)) {
  KILN_CHECK(options_.duration > 0, "Timer: duration = ", options_.duration, " s: expected > 0");
  KILN_CHECK(options_.interval == "step" || options_.interval == "epoch", "Timer: interval '", options_.interval,
             "': expected 'step' or 'epoch'");
}

double Timer::time_elapsed() const {
  const double running = running_ ? std::chrono::duration<double>(Clock::now() - start_).count() : 0;
  return offset_ + running;
}

void Timer::setup(Trainer&, TrainModule&, Stage stage) {
  // A new fit starts a new budget; a resumed one gets its earlier time back from the checkpoint, which is
  // read after setup.
  if (stage == Stage::Fit) offset_ = 0, running_ = false;
}

void Timer::on_train_start(Trainer& trainer, TrainModule&) {
  start_ = Clock::now();
  running_ = true;
  check(trainer);  // a resumed run may have no time left
}

void Timer::on_train_end(Trainer&, TrainModule&) {
  offset_ = time_elapsed();
  running_ = false;
}

void Timer::on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const data::Batch&, int64_t) {
  if (options_.interval == "step") check(trainer);
}

void Timer::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (options_.interval == "epoch") check(trainer);
}

void Timer::check(Trainer& trainer) {
  if (trainer.should_stop() || time_elapsed() < options_.duration) return;
  trainer.set_should_stop(true);
  if (options_.verbose) {
    std::fprintf(stderr, "kiln: Timer: time limit of %.1f s reached (%.1f s elapsed); stopping\n",
                 options_.duration, time_elapsed());
  }
}

CallbackState Timer::checkpoint_state() const { return {{"time_elapsed", exact_text(time_elapsed())}}; }

void Timer::load_checkpoint_state(const CallbackState& state) {
  auto it = state.find("time_elapsed");
  if (it == state.end()) return;
  char* end = nullptr;
  offset_ = std::strtod(it->second.c_str(), &end);
  KILN_CHECK(end != it->second.c_str(), "Timer: checkpoint state time_elapsed = '", it->second, "' is not a number");
}

}  // namespace kiln::trainer
