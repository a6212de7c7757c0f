// The batch-size search (Lightning's Tuner.scale_batch_size): the largest batch size whose training steps fit
// in memory, found by running a few steps at each size tried and catching kiln::OutOfMemoryError.
//
//   auto loader = [&](int64_t b) {
//     return std::make_unique<data::DataLoader>(dataset, data::DataLoaderOptions{.batch_size = b});
//   };
//   trainer::BatchSizeResult r = trainer::scale_batch_size(module, loader, trainer_options);
//   auto train = loader(r.batch_size);   // then fit as usual
//   trainer::scale_batch_size(module, data_module, trainer_options);   // or: sets data_module.batch_size
//
// On a GPU the device's memory (or set_per_process_memory_fraction) bounds the search; on the CPU, where the
// system would sooner swap or kill the process than refuse memory, set a budget first (set_cpu_memory_limit,
// or KILN_CPU_MEMORY_LIMIT_MB) or the search ends at the dataset's size or at max_trials.
//
// The modes, as Lightning's:
// - "power": from init_val, double after each size that fits, until one does not (the answer is the last that
//   did), the dataset's size is reached (a size past it is clamped to it) or max_trials sizes were tried. When
//   the first sizes do not fit, they halve until one does.
// - "binsearch": the same doubling, then a binary search between the largest size that fit and the smallest
//   that did not, to a difference of 1.
//
// Each trial is a fresh fit of steps_per_trial optimizer steps (and, when a validation loader is given, as many
// validation batches), with the options' precision, accumulation and clipping but no loggers, checkpoints,
// progress bar or other callbacks, in one process. Memory is measured as the allocator counts it: an
// out-of-memory error anywhere in a trial (the loader, forward, backward, the optimizer's state) fails that
// size; any other error ends the search. The module's weights and buffers and the default generator's state
// are put back after every trial, and its gradients cleared (set to none), so the fit that follows starts
// where it would have. Trials run on plain loaders: trainer.datamodule() is null in them, also when searching
// over a DataModule.
// `kiln scale-batch-size --config run.yaml` runs it from the command line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/trainer/data_module.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

struct BatchSizeFinderOptions {
  std::string mode = "power";  // or "binsearch"
  int64_t steps_per_trial = 3;
  int64_t init_val = 2;        // the first size tried
  int64_t max_trials = 25;     // sizes tried at most
};

struct BatchSizeTrial {
  int64_t batch_size = 0;
  bool fits = false;
  // The most the allocator of the run's device held during the trial (tensors' bytes: the CPU's
  // cpu_memory_stats or the GPU's memory_stats); for a size that did not fit, up to the failure.
  size_t peak_bytes = 0;
  std::string error;  // the out-of-memory message, for a size that did not fit
};

struct BatchSizeResult {
  int64_t batch_size = 0;              // the answer: the largest size tried that fit
  std::vector<BatchSizeTrial> trials;  // in the order they ran
  // Why the search stopped: "out of memory" (a size that did not fit bounded it), "dataset" (the dataset's
  // size was reached), or "max_trials".
  std::string stopped_by;
};

// The training loader (and, optionally, the validation loader) for a batch size.
using LoaderForBatchSize = std::function<std::unique_ptr<data::DataLoader>(int64_t batch_size)>;

BatchSizeResult scale_batch_size(TrainModule& module, const LoaderForBatchSize& train, TrainerOptions options = {},
                                 const BatchSizeFinderOptions& finder = {}, const LoaderForBatchSize& val = nullptr);

// With a DataModule (data_module.h), as Lightning scales datamodule.batch_size: between its prepare_data and
// setup(Fit) and its teardown(Fit) (which runs after a failure too, once setup was called), each trial sets its batch_size and builds its train_dataloader() (which
// must use it: checked) and the first of its val_dataloaders(), if any. Leaves batch_size at the answer; on
// an error, as it was.
BatchSizeResult scale_batch_size(TrainModule& module, DataModule& data, TrainerOptions options = {},
                                 const BatchSizeFinderOptions& finder = {});

}  // namespace kiln::trainer
