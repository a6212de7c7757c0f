// EarlyStopping's checks, in Lightning's order: non-finite, stopping threshold, divergence threshold, then
// improvement or patience. The thresholds come before the improvement test, so a value past the stopping
// threshold stops the run without becoming the best score.
#include "kiln/trainer/early_stopping.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  KILN_CHECK(!o.monitor.empty(), "EarlyStopping: monitor is empty; name the metric to watch (\"val/loss\")");
  KILN_CHECK(o.mode == "min" || o.mode == "max", "EarlyStopping: mode '", o.mode, "': expected 'min' or 'max'");
  KILN_CHECK(o.patience >= 0, "EarlyStopping: patience = ", o.patience, ": expected >= 0");
  KILN_CHECK(o.min_delta >= 0, "EarlyStopping: min_delta = ", o.min_delta,
             ": expected >= 0 (the direction follows mode)");
  best_score_ = o.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

std::string EarlyStopping::state_key() const {
  return "EarlyStopping{monitor=" + options_.monitor + ",mode=" + options_.mode + "}";
}

void EarlyStopping::setup(Trainer& trainer, TrainModule&, Stage stage) {
  if (stage != Stage::Fit) return;
  check_on_train_epoch_end_ = options_.check_on_train_epoch_end.value_or(trainer.num_val_batches() == 0);
}

void EarlyStopping::on_validation_end(Trainer& trainer, TrainModule&) {
  if (check_on_train_epoch_end_ || trainer.stage() != Stage::Fit || trainer.sanity_checking()) return;
  run_check(trainer);
}

void EarlyStopping::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (!check_on_train_epoch_end_ || trainer.stage() != Stage::Fit || trainer.sanity_checking()) return;
  run_check(trainer);
}

void EarlyStopping::run_check(Trainer& trainer) {
  const auto& metrics = trainer.callback_metrics();
  auto it = metrics.find(options_.monitor);
  if (it == metrics.end()) {
    if (!options_.strict) return;
    std::string names;
    for (const auto& [k, v] : metrics) names += (names.empty() ? "" : ", ") + k;
    KILN_CHECK(false, "EarlyStopping: monitor '", options_.monitor, "' has not been logged (epoch ",
               trainer.current_epoch(), "); logged metrics: ", names.empty() ? "(none)" : names,
               ". Log it with log(\"", options_.monitor, "\", value) or pass one of those");
  }
  std::string reason;
  const bool stop = evaluate(it->second, reason);
  if (stop) {
    trainer.set_should_stop(true);
    stopped_epoch_ = trainer.current_epoch();
    stopping_reason_ = reason;
  }
  if (options_.verbose && !reason.empty()) {
    std::fprintf(stderr, "kiln: EarlyStopping (epoch %lld): %s\n", static_cast<long long>(trainer.current_epoch()),
                 reason.c_str());
  }
}

bool EarlyStopping::evaluate(double current, std::string& reason) {
  const std::string& m = options_.monitor;
  if (options_.check_finite && !std::isfinite(current)) {
    reason = "monitored metric " + m + " = " + num(current) + " is not finite; the best was " + num(best_score_) +
             ". Stopping";
    return true;
  }
  if (options_.stopping_threshold && better(current, *options_.stopping_threshold)) {
    reason = "stopping threshold reached: " + m + " = " + num(current) + (options_.mode == "min" ? " < " : " > ") +
             num(*options_.stopping_threshold) + ". Stopping";
    return true;
  }
  if (options_.divergence_threshold && better(*options_.divergence_threshold, current)) {
    reason = "divergence threshold reached: " + m + " = " + num(current) + (options_.mode == "min" ? " > " : " < ") +
             num(*options_.divergence_threshold) + ". Stopping";
    return true;
  }
  // NOTE: a NaN (with check_finite off) is never an improvement: every comparison with it is false.
  const double shifted = options_.mode == "min" ? current + options_.min_delta : current - options_.min_delta;
  if (better(shifted, best_score_)) {
    reason = std::isfinite(best_score_)
                 ? "metric " + m + " improved by " + num(std::fabs(best_score_ - current)) + " >= min_delta = " +
                       num(options_.min_delta) + "; new best " + num(current)
                 : "metric " + m + " improved; new best " + num(current);
    best_score_ = current;
    wait_count_ = 0;
    return false;
  }
  ++wait_count_;
  if (wait_count_ >= options_.patience) {
    reason = "monitored metric " + m + " did not improve in the last " + std::to_string(wait_count_) +
             " checks; the best was " + num(best_score_) + ". Stopping";
    return true;
  }
  return false;
}

CallbackState EarlyStopping::checkpoint_state() const {
  return {{"wait_count", std::to_string(wait_count_)},
          {"stopped_epoch", std::to_string(stopped_epoch_)},
          {"best_score", exact_text(best_score_)},
          {"patience", std::to_string(options_.patience)}};
}

void EarlyStopping::load_checkpoint_state(const CallbackState& state) {
  if (state.empty()) return;
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = state.find(key);
    KILN_CHECK(it != state.end(), "EarlyStopping: checkpoint state lacks '", key, "'");
    return it->second;
  };
  wait_count_ = std::stoll(get("wait_count"));
  stopped_epoch_ = std::stoll(get("stopped_epoch"));
  best_score_ = std::strtod(get("best_score").c_str(), nullptr);
}

}  // namespace kiln::trainer
