// The Trainer's logging: TrainModule::log's rules (on_step / on_epoch by where it is called, the "_step" and
// "_epoch" suffixes, one name per evaluation loader), the epoch means (weighted by batch size, summed over
// ranks), and the rows the loggers get.
#include <cmath>

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

void Trainer::log_metric(const std::string& name, double value, const LogOptions& opts) {
  KILN_CHECK(log_context_ != LogContext::None, "TrainModule::log(\"", name,
             "\"): called outside the steps and hooks of a running Trainer");
  const bool in_step = log_context_ == LogContext::TrainStep;
  const bool on_step = opts.on_step.value_or(in_step);
  const bool on_epoch = opts.on_epoch.value_or(!in_step);
  KILN_CHECK(on_step || on_epoch, "TrainModule::log(\"", name, "\"): on_step and on_epoch are both false");
  KILN_CHECK(!(on_step && log_context_ == LogContext::Eval), "TrainModule::log(\"", name,
             "\"): validation and test metrics are reported per epoch; on_step is not supported there");
  const bool both = on_step && on_epoch;
  if (log_context_ == LogContext::Eval && num_eval_loaders_ > 1 && opts.add_dataloader_idx) {
    // Several evaluation loaders: each one's metrics under names of their own, as Lightning reports them.
    LogOptions single = opts;
    single.add_dataloader_idx = false;
    log_metric(name + "/dataloader_idx_" + std::to_string(dataloader_idx_), value, single);
    return;
  }
  if (on_step) {
    const std::string key = both ? name + "_step" : name;
    callback_metrics_[key] = value;
    if (opts.prog_bar) progress_bar_metrics_[key] = value;
    if (opts.logger) pending_step_logs_[key] = value;
  }
  if (on_epoch) {
    const std::string key = both ? name + "_epoch" : name;
    if (log_context_ == LogContext::TrainHook && epoch_finished_) {
      // Logged from on_train_epoch_end: the epoch's means are already out; this value is final as it is.
      callback_metrics_[key] = value;
      if (opts.prog_bar) progress_bar_metrics_[key] = value;
      if (opts.logger) pending_step_logs_[key] = value;
      return;
    }
    auto& means = log_context_ == LogContext::Eval ? eval_means_ : train_epoch_means_;
    const double w = log_context_ == LogContext::TrainHook ? 1.0 : static_cast<double>(current_batch_size_);
    Mean& m = means[key];
    m.sum += value * w;
    m.weight += w;
    m.prog_bar = m.prog_bar || opts.prog_bar;
    m.logger = m.logger || opts.logger;
  }
}

std::map<std::string, double> Trainer::finish_means(std::map<std::string, Mean>& means) {
  if (strategy_->world_size() > 1) {
    // The mean over every rank's examples: sums and weights added up across ranks (every rank logged the same
    // names, so the maps line up in their sorted order).
    std::vector<double> v;
    for (const auto& [name, m] : means) v.insert(v.end(), {m.sum, m.weight});
    strategy_->all_reduce_sum(v);
    size_t i = 0;
    for (auto& [name, m] : means) m.sum = v[i++], m.weight = v[i++];
  }
  std::map<std::string, double> to_log;
  for (const auto& [name, m] : means) {
    const double v = m.weight > 0 ? m.sum / m.weight : std::nan("");
    callback_metrics_[name] = v;
    if (m.prog_bar) progress_bar_metrics_[name] = v;
    if (m.logger) to_log[name] = v;
  }
  means.clear();
  return to_log;
}

void Trainer::log_histogram(const std::string& tag, const Tensor& values, int64_t bins) {
  if (sanity_checking_) return;
  for (auto& logger : loggers_) logger->log_histogram(tag, values, global_step_, bins);
}

void Trainer::log_image(const std::string& tag, const Tensor& image) {
  if (sanity_checking_) return;
  for (auto& logger : loggers_) logger->log_image(tag, image, global_step_);
}

void Trainer::send_to_loggers(std::map<std::string, double> metrics) {
  if (metrics.empty() || sanity_checking_) return;
  metrics.emplace("epoch", static_cast<double>(epoch_));  // every row says which epoch it belongs to
  for (const auto& [k, v] : metrics) logged_metrics_[k] = v;
  for (auto& logger : loggers_) logger->log_metrics(metrics, global_step_);
}

}  // namespace kiln::trainer
