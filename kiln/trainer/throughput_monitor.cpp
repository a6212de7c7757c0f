// ThroughputMonitor (throughput_monitor.h): a clock and counts per stage, and rates over a window of the
// counts taken at batch ends, as Lightning's Throughput computes them.
#include "kiln/trainer/throughput_monitor.h"

#include "kiln/tensor/cuda/cuda.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

ThroughputMonitor::ThroughputMonitor(ThroughputMonitorOptions options) : options_(std::move(options)) {
  KILN_CHECK(options_.window_size >= 2, "ThroughputMonitor: window_size = ", options_.window_size,
             ": expected >= 2 (a rate needs two batch ends)");
  KILN_CHECK(options_.flops_per_batch >= 0, "ThroughputMonitor: flops_per_batch = ", options_.flops_per_batch,
             ": expected >= 0");
  KILN_CHECK(options_.available_flops >= 0, "ThroughputMonitor: available_flops = ", options_.available_flops,
             ": expected >= 0");
}

void ThroughputMonitor::start(Meter& meter, const std::string& stage) {
  meter = Meter{};
  meter.start = Clock::now();
  // A new run of the stage: the last run's numbers (its rates above all) must not pass for this one's.
  std::erase_if(last_metrics_, [&](const auto& entry) { return entry.first.rfind(stage + "/", 0) == 0; });
}

void ThroughputMonitor::update(Trainer& trainer, Meter& meter, const std::string& stage, const data::Batch& batch,
                               bool log, int64_t step) {
  // The batch's kernels are queued on a GPU: its time is not over until they ran.
  if (trainer.device().is_cuda()) cuda::synchronize(trainer.device().index);
  const double time = std::chrono::duration<double>(Clock::now() - meter.start).count() - meter.paused;
  const int64_t samples = options_.batch_size_fn ? options_.batch_size_fn(batch) : Trainer::batch_size_of(batch);
  KILN_CHECK(samples >= 0, "ThroughputMonitor: batch_size_fn gave ", samples, " samples: expected >= 0");
  const int64_t items = options_.length_fn ? options_.length_fn(batch) : 0;
  KILN_CHECK(items >= 0, "ThroughputMonitor: length_fn gave ", items, " items: expected >= 0");
  ++meter.batches;
  meter.samples += samples;
  meter.items += items;
  meter.window.push_back({time, meter.batches, meter.samples, meter.items});
  if (static_cast<int64_t>(meter.window.size()) > options_.window_size) meter.window.pop_front();

  std::map<std::string, double> m;
  const std::string p = stage + "/";
  m[p + "time"] = time;
  m[p + "batches"] = static_cast<double>(meter.batches);
  m[p + "samples"] = static_cast<double>(meter.samples);
  if (options_.length_fn) m[p + "lengths"] = static_cast<double>(meter.items);
  if (static_cast<int64_t>(meter.window.size()) == options_.window_size) {
    const Meter::Sample& first = meter.window.front();
    const Meter::Sample& last = meter.window.back();
    const double elapsed = last.time - first.time;
    if (elapsed > 0) {
      const double batches = static_cast<double>(last.batches - first.batches);
      std::map<std::string, double> rates;
      rates["batches_per_sec"] = batches / elapsed;
      rates["samples_per_sec"] = static_cast<double>(last.samples - first.samples) / elapsed;
      if (options_.length_fn) rates["items_per_sec"] = static_cast<double>(last.items - first.items) / elapsed;
      if (options_.flops_per_batch > 0) {
        rates["flops_per_sec"] = options_.flops_per_batch * batches / elapsed;
        if (options_.available_flops > 0) rates["mfu"] = rates["flops_per_sec"] / options_.available_flops;
      }
      const int world = trainer.world_size();
      for (const auto& [name, value] : rates) {
        m[p + "device/" + name] = value;
        // The job's rate, as Lightning's: every rank assumed as fast as this one. (mfu is of one device.)
        if (world > 1 && name != "mfu") m[p + name] = value * world;
      }
    }
  }
  for (const auto& [name, value] : m) last_metrics_[name] = value;
  if (log) {
    for (const auto& logger : trainer.loggers()) logger->log_metrics(m, step);
  }
}

void ThroughputMonitor::on_train_start(Trainer& trainer, TrainModule& module) {
  start(train_, "train");
  train_.last_logged_step = trainer.global_step();
}

void ThroughputMonitor::on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss,
                                           const data::Batch& batch, int64_t batch_idx) {
  const int64_t n = trainer.options().log_every_n_steps;
  const int64_t step = trainer.global_step();
  const bool log = step / n > train_.last_logged_step / n;
  if (log) train_.last_logged_step = step;
  update(trainer, train_, "train", batch, log, step);
}

void ThroughputMonitor::on_validation_start(Trainer& trainer, TrainModule& module) {
  sanity_checking_ = trainer.sanity_checking();
  validating_in_fit_ = trainer.stage() == Stage::Fit && !sanity_checking_;
  // The sanity check runs before training's clock starts (on_train_start resets it anyway) and is not measured.
  if (!sanity_checking_) start(eval_, "validate");
}

void ThroughputMonitor::on_validation_end(Trainer& trainer, TrainModule& module) {
  if (validating_in_fit_) {
    // Training's clock stood still for as long as validation's ran.
    const double validation_time = std::chrono::duration<double>(Clock::now() - eval_.start).count();
    train_.paused += validation_time;
    std::map<std::string, double> m;
    for (const auto& [name, value] : last_metrics_)
      if (name.rfind("validate/", 0) == 0) m[name] = value;
    if (!m.empty()) {
      for (const auto& logger : trainer.loggers()) logger->log_metrics(m, trainer.global_step());
    }
  }
  validating_in_fit_ = sanity_checking_ = false;
}

void ThroughputMonitor::on_validation_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                                                const data::Batch& batch, int64_t batch_idx) {
  if (sanity_checking_) return;
  // Inside fit, the validation logs once, at its end; run alone, every log_every_n_steps batches.
  const bool log = !validating_in_fit_ && (eval_.batches + 1) % trainer.options().log_every_n_steps == 0;
  update(trainer, eval_, "validate", batch, log, eval_.batches + 1);
}

void ThroughputMonitor::on_test_start(Trainer& trainer, TrainModule& module) { start(eval_, "test"); }

void ThroughputMonitor::on_test_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                                          const data::Batch& batch, int64_t batch_idx) {
  update(trainer, eval_, "test", batch, (eval_.batches + 1) % trainer.options().log_every_n_steps == 0,
         eval_.batches + 1);
}

void ThroughputMonitor::on_predict_start(Trainer& trainer, TrainModule& module) { start(eval_, "predict"); }

void ThroughputMonitor::on_predict_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                                             const data::Batch& batch, int64_t batch_idx) {
  update(trainer, eval_, "predict", batch, (eval_.batches + 1) % trainer.options().log_every_n_steps == 0,
         eval_.batches + 1);
}

}  // namespace kiln::trainer
