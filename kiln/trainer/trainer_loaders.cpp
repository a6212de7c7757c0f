// What a fit iterates: this rank's shards of the loaders it was given (the strategy makes them), the batch
// limits resolved against them (limit_*_batches, overfit_batches, val_check_interval), and the optimizer steps
// that makes (estimated_stepping_batches). fit() calls use_loaders when it starts, and a DataModule's fit again
// where reload_dataloaders_every_n_epochs rebuilds the loaders.
#include "kiln/trainer/trainer.h"

#include <algorithm>

#include "kiln/trainer/callbacks.h"

namespace kiln::trainer {

int64_t Trainer::resolve_limit(const BatchLimit& limit, const char* name, const data::DataLoader& loader) {
  KILN_CHECK(loader.size() >= 0 || limit.is_count || limit.fraction == 1.0, "Trainer: ", name, " = ", limit.fraction,
             ": a fraction of a loader over an iterable dataset, whose length is unknown; give a number of batches");
  return limit.resolve(loader.size());
}

void Trainer::use_loaders(data::DataLoader& user_train, const std::vector<data::DataLoader*>& user_vals) {
  // overfit_batches: the same first batches every epoch.
  data::DataLoader* unshuffled = &user_train;
  std::unique_ptr<data::DataLoader> overfit;
  if (options_.overfit_batches != BatchLimit(0.0) && !user_train.is_iterable() && user_train.options().shuffle) {
    data::DataLoaderOptions o = user_train.options();
    o.shuffle = false;
    overfit = std::make_unique<data::DataLoader>(user_train.dataset(), o);
    unshuffled = overfit.get();
  }
  // This rank's shards of the data (the user's loaders themselves on one process). The strategy frees the
  // shards it made before: nothing points at them from here on, also if a check below fails.
  train_loader_ = nullptr;
  val_loaders_.clear();
  strategy_->forget_eval_loaders();
  data::DataLoader* train = &strategy_->train_loader(*unshuffled);
  std::vector<data::DataLoader*> vals;
  std::vector<int64_t> limits;
  for (data::DataLoader* v : user_vals) {
    vals.push_back(strategy_->eval_loader(v));
    limits.push_back(resolve_limit(options_.limit_val_batches, "limit_val_batches", *vals.back()));
  }
  const int64_t num_train = resolve_limit(options_.limit_train_batches, "limit_train_batches", *train);
  int64_t val_every = 0;
  if (num_train != 0) {
    const BatchLimit& vci = options_.val_check_interval;
    KILN_CHECK(num_train > 0 || vci.is_count || vci.fraction == 1.0, "Trainer: val_check_interval = ",
               vci.fraction, ": a fraction of an epoch of unknown length (an iterable dataset); give a number of "
               "batches");
    if (vci.is_count) {
      KILN_CHECK(num_train < 0 || vci.count <= num_train, "Trainer: val_check_interval = ", vci.count,
                 " batches, but an epoch has only ", num_train, " training batches");
      val_every = vci.count;
    } else if (vci.fraction < 1.0) {
      val_every = std::max<int64_t>(1, static_cast<int64_t>(vci.fraction * num_train));
    }
  }
  overfit_train_ = std::move(overfit);
  train_loader_ = train;
  val_loaders_ = std::move(vals), val_limits_ = std::move(limits);
  num_training_batches_ = num_train;
  num_val_batches_ = 0;
  for (int64_t n : val_limits_) num_val_batches_ = n < 0 || num_val_batches_ < 0 ? -1 : num_val_batches_ + n;
  val_every_ = val_every;
}

int64_t Trainer::estimated_stepping_batches() const {
  if (num_training_batches_ < 0) return options_.max_steps;  // epochs of unknown length
  auto steps_per_epoch = [&](int64_t acc) { return (num_training_batches_ + acc - 1) / acc; };
  // The accumulation factor by epoch: a GradientAccumulationScheduler's where there is one, else the options'.
  const GradientAccumulationScheduler* schedule = nullptr;
  for (const auto& cb : callbacks_)
    if (const auto* s = dynamic_cast<const GradientAccumulationScheduler*>(cb.get())) schedule = s;
  int64_t total = -1;
  if (options_.max_epochs >= 0 && schedule == nullptr) {
    total = steps_per_epoch(options_.accumulate_grad_batches) * options_.max_epochs;
  } else if (options_.max_epochs >= 0) {
    // Epoch by epoch up to the schedule's last change, then its last factor for the rest.
    const int64_t last_change = std::min(options_.max_epochs, schedule->scheduling().rbegin()->first);
    total = 0;
    for (int64_t e = 0; e < last_change; ++e) total += steps_per_epoch(schedule->factor(e));
    total += steps_per_epoch(schedule->factor(last_change)) * (options_.max_epochs - last_change);
  }
  if (options_.max_steps >= 0) total = total < 0 ? options_.max_steps : std::min(total, options_.max_steps);
  return total;
}

}  // namespace kiln::trainer
