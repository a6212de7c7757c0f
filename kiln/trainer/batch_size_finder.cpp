// The batch-size search: each size tried is a short fit of its own, the module put back after it, and the
// modes' walk over sizes below (scale_batch_size's loop) decides the next size from which have fit.
#include "kiln/trainer/batch_size_finder.h"

#include <algorithm>
#include <limits>
#include <map>

#include "kiln/autograd/grad_mode.h"
#include "kiln/tensor/allocator.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/rng.h"
#include "kiln/trainer/short_fit.h"

namespace kiln::trainer {

namespace {

void reset_peaks() {
  cpu_reset_peak_memory_stats();
  for (int d = 0; d < cuda::device_count(); ++d) cuda::reset_peak_memory_stats(d);
}

size_t peak_on(Device device) {
  return device.is_cuda() ? cuda::memory_stats(device.index).peak_allocated_bytes
                          : cpu_memory_stats().peak_allocated_bytes;
}

// The options of one trial: steps_per_trial optimizer steps over the whole loader, and nothing else.
TrainerOptions trial_options(TrainerOptions o, const BatchSizeFinderOptions& f) {
  o = short_fit_options(std::move(o), f.steps_per_trial);
  o.limit_train_batches = 1.0;
  o.handle_signals = false;
  return o;
}

}  // namespace

BatchSizeResult scale_batch_size(TrainModule& module, const LoaderForBatchSize& train, TrainerOptions o,
                                 const BatchSizeFinderOptions& f, const LoaderForBatchSize& val) {
  KILN_CHECK(f.mode == "power" || f.mode == "binsearch", "scale_batch_size: mode '", f.mode,
             "': expected 'power' or 'binsearch'");
  KILN_CHECK(f.steps_per_trial >= 1, "scale_batch_size: steps_per_trial must be at least 1, got ", f.steps_per_trial);
  KILN_CHECK(f.init_val >= 1, "scale_batch_size: init_val must be at least 1, got ", f.init_val);
  KILN_CHECK(f.max_trials >= 1, "scale_batch_size: max_trials must be at least 1, got ", f.max_trials);
  KILN_CHECK(static_cast<bool>(train), "scale_batch_size: no training loader factory given");
  KILN_CHECK(o.strategy == "auto" || o.strategy == "single", "scale_batch_size: runs in one process; got strategy '",
             o.strategy, "'");

  // What a trial changes, put back after each. The values are kept as bytes outside kiln's allocator and
  // copied back into the module's own tensors, so that neither the copy nor putting it back takes from the
  // memory being measured (under a CPU limit, a restore that allocated could itself run out).
  struct SavedTensor {
    Shape shape;
    DType dtype;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, SavedTensor> saved;
  for (const auto& [name, t] : module.state_dict()) {
    const Tensor host = t.detach().to(kCPU).contiguous();
    const auto* data = static_cast<const uint8_t*>(host.raw_data_ptr());
    saved[name] = {t.shape(), t.dtype(), std::vector<uint8_t>(data, data + host.nbytes())};
  }
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  auto restore = [&] {
    NoGradGuard no_grad;
    module.nn::Module::zero_grad(/*set_to_none=*/true);
    const nn::StateDict now = module.state_dict();
    KILN_CHECK(now.size() == saved.size(), "scale_batch_size: the module's state changed during a trial (",
               saved.size(), " tensors before, ", now.size(), " after)");
    for (auto& [name, s] : saved) {
      const auto it = now.find(name);
      KILN_CHECK(it != now.end() && it->second.shape() == s.shape && it->second.dtype() == s.dtype,
                 "scale_batch_size: the module's '", name, "' changed its shape or dtype during a trial");
      it->second.detach().copy_(from_blob(s.bytes.data(), s.shape, s.dtype));
    }
    gen.set_state(seed, offset);
  };

  const TrainerOptions options = trial_options(std::move(o), f);
  int64_t dataset_size = -1;  // -1: unknown (an iterable dataset)

  auto make_train = [&](int64_t batch_size) {
    std::unique_ptr<data::DataLoader> loader = train(batch_size);
    KILN_CHECK(loader != nullptr, "scale_batch_size: the training loader factory returned none for batch size ",
               batch_size);
    return loader;
  };
  // Tries batch_size, or the dataset's size where that is smaller (the batches would be the same).
  auto run_trial = [&](int64_t batch_size) {
    BatchSizeTrial trial;
    trial.batch_size = batch_size;
    reset_peaks();
    Device device = kCPU;
    try {
      Trainer t(options);  // in this scope: gone, with its optimizers, before the cache is emptied below
      std::unique_ptr<data::DataLoader> train_loader = make_train(batch_size);
      if (dataset_size < 0 && train_loader->dataset()) {
        dataset_size = std::max<int64_t>(train_loader->dataset()->size(), 1);
        if (batch_size > dataset_size) train_loader = make_train(batch_size = dataset_size);
      }
      trial.batch_size = batch_size;
      std::unique_ptr<data::DataLoader> val_loader = val ? val(batch_size) : nullptr;
      KILN_CHECK(!val || val_loader != nullptr, "scale_batch_size: the validation loader factory returned none for "
                 "batch size ", batch_size);
      try {
        t.fit(module, *train_loader);
        device = t.device();
        KILN_CHECK(t.global_step() == f.steps_per_trial, "scale_batch_size: a trial at batch size ", batch_size,
                   " took ", t.global_step(), " optimizer steps of ", f.steps_per_trial, " (an empty loader, or ",
                   "training_step returning no loss?)");
        if (val_loader) {
          TrainerOptions vo = options;
          vo.limit_val_batches = f.steps_per_trial;
          Trainer v(vo);
          v.validate(module, *val_loader);
        }
        trial.fits = true;
      } catch (const OutOfMemoryError&) {
        device = t.device();  // resolved as the fit started
        throw;
      }
    } catch (const OutOfMemoryError& e) {
      trial.error = e.what();
    } catch (...) {
      try {
        restore();
      } catch (...) {
        // the trial's error is the one to report
      }
      throw;
    }
    trial.peak_bytes = peak_on(device);
    restore();
    if (!trial.fits) cuda::empty_cache();  // what the failed step had cached goes back to the device
    return trial;
  };

  BatchSizeResult result;
  int64_t size = f.init_val;
  int64_t fit = 0, fail = 0;  // the largest size that fit and the smallest that did not (0: none yet)
  result.stopped_by = "max_trials";
  for (int64_t trial = 0; trial < f.max_trials; ++trial) {
    result.trials.push_back(run_trial(size));
    size = result.trials.back().batch_size;
    if (result.trials.back().fits) {
      fit = std::max(fit, size);
    } else {
      fail = fail == 0 ? size : std::min(fail, size);
      KILN_CHECK(size > 1, "scale_batch_size: even a batch of 1 does not fit: ", result.trials.back().error);
    }
    if (fail == 0) {  // growing
      if (dataset_size >= 0 && size >= dataset_size) {
        result.stopped_by = "dataset";
        break;
      }
      KILN_CHECK(size <= std::numeric_limits<int64_t>::max() / 2, "scale_batch_size: batch size ", size,
                 " fit and cannot be doubled further");
      size = dataset_size >= 0 ? std::min(size * 2, dataset_size) : size * 2;
    } else if (fit == 0) {  // nothing fit yet: back off
      size /= 2;
    } else if (f.mode == "power" || fail - fit <= 1) {
      result.stopped_by = "out of memory";
      break;
    } else {
      size = fit + (fail - fit) / 2;
    }
  }
  KILN_CHECK(fit > 0, "scale_batch_size: no batch size fit in ", f.max_trials, " trials (the last, ",
             result.trials.back().batch_size, ": ", result.trials.back().error, ")");
  result.batch_size = fit;
  return result;
}

BatchSizeResult scale_batch_size(TrainModule& module, DataModule& data, TrainerOptions options,
                                 const BatchSizeFinderOptions& finder) {
  const int64_t before = data.batch_size;
  data.prepare_data();
  BatchSizeResult result;
  try {
    data.setup(Stage::Fit);
    auto train = [&](int64_t batch_size) {
      data.batch_size = batch_size;
      std::unique_ptr<data::DataLoader> loader = data.train_dataloader();
      KILN_CHECK(loader == nullptr || loader->options().batch_size == batch_size, "scale_batch_size: the ",
                 "DataModule's train_dataloader() built batches of ", loader->options().batch_size, " with its ",
                 "batch_size at ", batch_size, "; it must build its loaders with batch_size");
      return loader;
    };
    LoaderForBatchSize val;
    if (!data.val_dataloaders().empty()) {
      val = [&](int64_t batch_size) {
        data.batch_size = batch_size;
        std::vector<std::unique_ptr<data::DataLoader>> loaders = data.val_dataloaders();
        return loaders.empty() ? nullptr : std::move(loaders.front());
      };
    }
    result = scale_batch_size(module, train, std::move(options), finder, val);
  } catch (...) {
    data.batch_size = before;
    try {
      data.teardown(Stage::Fit);
    } catch (...) {
      // the search's error is the one to report
    }
    throw;
  }
  data.batch_size = result.batch_size;
  try {
    data.teardown(Stage::Fit);
  } catch (...) {
    data.batch_size = before;
    throw;
  }
  return result;
}

}  // namespace kiln::trainer
