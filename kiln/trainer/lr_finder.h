// The learning-rate range test (Lightning's Tuner.lr_find, after Smith's "Cyclical Learning Rates"): a short
// fit whose learning rate grows from min_lr to max_lr over num_training optimizer steps, recording the
// smoothed training loss at each; the suggestion is the rate where that loss falls fastest along the range
// (per decade of rate in the exponential mode, per unit in the linear one).
//
//   trainer::LRFinderResult r = trainer::lr_find(module, train_loader, trainer_options);
//   if (auto lr = r.suggestion()) module.lr = *lr;   // then fit as usual
//
// The module's weights and buffers and the default generator's state are put back afterwards, so the fit that
// follows starts where it would have without the test. The run uses the options' precision, accumulation,
// clipping and seed, but no validation, loggers, checkpoints or other callbacks, in one process. Whatever
// configure_optimizers returns is stepped with every group's lr set to the tested rate before each step; its
// schedulers are dropped. `kiln lr-find --config run.yaml` runs it from the command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

struct LRFinderOptions {
  double min_lr = 1e-8;
  double max_lr = 1.0;
  int64_t num_training = 100;  // optimizer steps, each at the next rate
  // "exponential": min_lr (max_lr / min_lr)^(i / (n - 1)); "linear": evenly spaced.
  std::string mode = "exponential";
  // Stop once the smoothed loss exceeds the best so far by (this - 1) times |best| (for a positive loss: this
  // times the best; the loss has diverged); 0: never.
  double early_stop_threshold = 4.0;
  double beta = 0.98;  // the smoothing: an exponential moving average with bias correction
};

struct LRFinderResult {
  std::vector<double> lrs;     // the rate of each step taken
  std::vector<double> losses;  // the smoothed training loss after it
  bool exponential = true;     // the range's mode: the suggestion differentiates against log(lr) then
  // The rate where the loss falls fastest along the range: the most negative derivative of the loss against
  // log(lr) (exponential mode) or lr (linear). That is Lightning's rule, which differentiates over the steps
  // (evenly spaced in the range's own mode); taking the derivative against the rates themselves keeps the
  // points left out for being non-finite from shifting it. The first skip_begin and last skip_end points and
  // the non-finite losses are left out; nullopt when fewer than 2 points remain.
  // NOTE: against lr itself, an exponential range's tiny first rates (where the steps are closest) would win:
  // on the main job's CNN that picked 6e-8, where the loss had not moved; this rule picks 1.0e-3.
  std::optional<double> suggestion(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  std::optional<size_t> suggestion_index(int64_t skip_begin = 10, int64_t skip_end = 1) const;
};

LRFinderResult lr_find(TrainModule& module, data::DataLoader& train, TrainerOptions options = {},
                       const LRFinderOptions& finder = {});

// dy/dx at each x of a sampled curve with uneven spacing: second-order central differences inside (exact for
// quadratics), one-sided first-order ones at the two ends (numpy's and torch.gradient's rule). x strictly
// increasing, at least 2 points.
std::vector<double> gradient_uneven(const std::vector<double>& y, const std::vector<double>& x);

}  // namespace kiln::trainer
