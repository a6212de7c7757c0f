#include "kiln/trainer/lr_finder.h"

#include <cmath>
#include <memory>

#include "kiln/autograd/grad_mode.h"
#include "kiln/tensor/rng.h"
#include "kiln/trainer/short_fit.h"

namespace kiln::trainer {

namespace {

// Sets each step's rate and records the smoothed loss after it.
class LRFinderCallback : public Callback {
 public:
  LRFinderCallback(const LRFinderOptions& options, LRFinderResult& result) : options_(options), result_(result) {}
  std::string state_key() const override { return "LRFinder"; }

  // The rate of step i (0-based).
  double lr_at(int64_t i) const {
    const double r = static_cast<double>(i) / static_cast<double>(options_.num_training - 1);
    if (options_.mode == "linear") return options_.min_lr + r * (options_.max_lr - options_.min_lr);
    return options_.min_lr * std::pow(options_.max_lr / options_.min_lr, r);
  }

  void on_train_start(Trainer& trainer, TrainModule&) override {
    steps_seen_ = trainer.global_step();
    trainer.drop_schedulers();  // each step's rate is set here; a plateau scheduler would wait for validation
  }
  void on_train_epoch_start(Trainer& trainer, TrainModule&) override { epoch_start_step_ = trainer.global_step(); }
  // An epoch without a step would repeat forever: no batches, or none that returned a loss.
  void on_train_epoch_end(Trainer& trainer, TrainModule&) override {
    KILN_CHECK(trainer.global_step() > epoch_start_step_, "lr_find: a whole epoch of the training loader took no "
               "optimizer step (an empty loader, limit_train_batches 0, or training_step returning no loss)");
  }

  void on_before_optimizer_step(Trainer& trainer, TrainModule&, optim::Optimizer& optimizer) override {
    for (optim::ParamGroup& group : optimizer.param_groups()) group.set_lr(lr_at(trainer.global_step()));
  }

  void on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor& loss, const data::Batch&,
                          int64_t) override {
    if (loss.defined()) window_sum_ += loss.item<double>(), ++window_count_;
    if (trainer.global_step() == steps_seen_) return;  // inside an accumulation window
    steps_seen_ = trainer.global_step();
    KILN_CHECK(window_count_ > 0, "lr_find: training_step returned no loss for step ", steps_seen_,
               "; the range test records the loss the Trainer steps on (automatic optimization)");
    const double current = window_sum_ / static_cast<double>(window_count_);
    window_sum_ = 0, window_count_ = 0;
    const size_t count = result_.losses.size() + 1;  // steps recorded with this one
    avg_ = options_.beta * avg_ + (1 - options_.beta) * current;
    const double smoothed = avg_ / (1 - std::pow(options_.beta, static_cast<double>(count)));
    // Diverged: the rest of the range would only blow up further. Measured from the best by |best|, so that a
    // negative loss (a likelihood) does not stop at once; NaN compares false, and stops too.
    if (options_.early_stop_threshold > 0 && count > 1 &&
        !(smoothed - best_ <= (options_.early_stop_threshold - 1) * std::abs(best_)))
      trainer.set_should_stop(true);
    if (count == 1 || smoothed < best_) best_ = smoothed;
    result_.lrs.push_back(lr_at(steps_seen_ - 1));
    result_.losses.push_back(smoothed);
  }

 private:
  LRFinderOptions options_;
  LRFinderResult& result_;
  int64_t steps_seen_ = 0, epoch_start_step_ = 0;
  double window_sum_ = 0;
  int64_t window_count_ = 0;
  double avg_ = 0, best_ = 0;
};

}  // namespace

std::vector<double> gradient_uneven(const std::vector<double>& y, const std::vector<double>& x) {
  const size_t n = y.size();
  KILN_CHECK(n >= 2 && x.size() == n, "gradient_uneven: expected at least 2 points and as many x as y, got ", n,
             " values at ", x.size(), " points");
  std::vector<double> d(n);
  d[0] = (y[1] - y[0]) / (x[1] - x[0]);
  d[n - 1] = (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]);
  for (size_t i = 1; i + 1 < n; ++i) {
    const double hl = x[i] - x[i - 1], hr = x[i + 1] - x[i];
    d[i] = (hl * hl * y[i + 1] - hr * hr * y[i - 1] + (hr * hr - hl * hl) * y[i]) / (hl * hr * (hl + hr));
  }
  return d;
}

std::optional<size_t> LRFinderResult::suggestion_index(int64_t skip_begin, int64_t skip_end) const {
  KILN_CHECK(skip_begin >= 0 && skip_end >= 0, "LRFinderResult::suggestion: skip_begin and skip_end must be "
             "non-negative, got ", skip_begin, " and ", skip_end);
  std::vector<double> y, x;
  std::vector<size_t> at;  // the index of each kept point in lrs / losses
  const auto n = static_cast<int64_t>(losses.size());
  for (int64_t i = skip_begin; i < n - skip_end; ++i) {
    if (!std::isfinite(losses[static_cast<size_t>(i)])) continue;
    y.push_back(losses[static_cast<size_t>(i)]);
    x.push_back(exponential ? std::log(lrs[static_cast<size_t>(i)]) : lrs[static_cast<size_t>(i)]);
    at.push_back(static_cast<size_t>(i));
  }
  if (y.size() < 2) return std::nullopt;
  const std::vector<double> d = gradient_uneven(y, x);
  size_t best = 0;
  for (size_t i = 1; i < d.size(); ++i)
    if (d[i] < d[best]) best = i;
  return at[best];
}

std::optional<double> LRFinderResult::suggestion(int64_t skip_begin, int64_t skip_end) const {
  const auto i = suggestion_index(skip_begin, skip_end);
  if (!i) return std::nullopt;
  return lrs[*i];
}

LRFinderResult lr_find(TrainModule& module, data::DataLoader& train, TrainerOptions o, const LRFinderOptions& f) {
  KILN_CHECK(f.min_lr > 0 && f.max_lr > f.min_lr, "lr_find: expected 0 < min_lr < max_lr, got min_lr ", f.min_lr,
             ", max_lr ", f.max_lr);
  KILN_CHECK(f.num_training >= 2, "lr_find: num_training must be at least 2 steps, got ", f.num_training);
  KILN_CHECK(f.mode == "exponential" || f.mode == "linear", "lr_find: mode '", f.mode,
             "': expected 'exponential' or 'linear'");
  KILN_CHECK(f.beta >= 0 && f.beta < 1, "lr_find: beta must be in [0, 1), got ", f.beta);
  KILN_CHECK(f.early_stop_threshold >= 0, "lr_find: early_stop_threshold must be >= 0 (0: never), got ",
             f.early_stop_threshold);
  KILN_CHECK(o.strategy == "auto" || o.strategy == "single", "lr_find: runs in one process; got strategy '",
             o.strategy, "'");

  // What the test changes, put back whatever happens.
  nn::StateDict saved;
  for (const auto& [name, t] : module.state_dict()) saved[name] = t.detach().clone();
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  auto restore = [&] {
    NoGradGuard no_grad;
    module.load_state_dict(saved);
    gen.set_state(seed, offset);
  };

  LRFinderResult result;
  result.exponential = f.mode == "exponential";
  o = short_fit_options(std::move(o), f.num_training);
  o.callbacks = {std::make_shared<LRFinderCallback>(f, result)};
  try {
    Trainer t(o);
    t.fit(module, train);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return result;
}

}  // namespace kiln::trainer
