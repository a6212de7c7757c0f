// The options of the short fits the tuners run (lr_find's range, scale_batch_size's trials): `steps`
// optimizer steps of the user's training setup (precision, accumulation, clipping, device, seed) and nothing
// around them: no validation, loggers, checkpoints, progress bar, summary, profiler or callbacks.
#pragma once

#include <cstdint>

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

inline TrainerOptions short_fit_options(TrainerOptions o, int64_t steps) {
  o.max_steps = steps;
  o.max_epochs = steps;  // a bound: each epoch takes at least one step (the callers check)
  o.min_epochs = 0;
  o.max_time = 0;
  o.fast_dev_run = 0;
  o.limit_val_batches = 0;
  o.val_check_interval = 1.0;  // no validation runs; a count longer than the loader would be refused
  o.num_sanity_val_steps = 0;
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.logger = false;
  o.loggers.clear();
  o.profiler = "none";
  o.callbacks.clear();
  o.reload_dataloaders_every_n_epochs = 0;  // the tuners fit on loaders, which cannot be rebuilt
  return o;
}

}  // namespace kiln::trainer
