// Classifier: the TrainModule `kiln train` runs. It wraps any network that maps a batch of examples to class
// scores (N, K), or sequences to scores per position (N, S, K) (a language model: every position's next token
// is a class, and loss and accuracy are means over tokens), trains it with cross-entropy, reports loss and accuracy per split ("train/loss", "val/acc",
// "test/acc"), and builds its optimizer and scheduler from the run's config. The resolved config is kept as
// the "config" hyperparameter, so a checkpoint alone is enough to rebuild the run (kiln eval / predict).
#pragma once

#include <memory>

#include "kiln/tools/run_config.h"
#include "kiln/trainer/train_module.h"

namespace kiln::tools {

class Classifier : public trainer::TrainModule {
 public:
  Classifier(std::shared_ptr<nn::Module> net, RunConfig config);

  // x: (N, ...) -> scores (N, K) or (N, S, K)
  Tensor forward(const Tensor& x) override { return (*net_)(x); }
  Tensor training_step(const data::Batch& batch, int64_t batch_idx) override;
  Tensor validation_step(const data::Batch& batch, int64_t batch_idx) override;
  Tensor test_step(const data::Batch& batch, int64_t batch_idx) override;
  // The class probabilities (N, K) or (N, S, K).
  Tensor predict_step(const data::Batch& batch, int64_t batch_idx) override;
  trainer::OptimizerSetup configure_optimizers() override;

  const RunConfig& config() const { return config_; }

 private:
  // Logs "<split>/loss" and "<split>/acc" for one batch; returns the loss.
  Tensor evaluate(const data::Batch& batch, const std::string& split);

  std::shared_ptr<nn::Module> net_;
  RunConfig config_;
  int64_t last_histogram_step_ = -1;  // logger.histogram_every_n_steps: once per optimizer step, not per batch
};

// The optimizer a config names, over `params`.
std::shared_ptr<optim::Optimizer> make_optimizer(const RunConfig::Optimizer& config, std::vector<Tensor> params);
// The scheduler a config names (none: an empty config), for a run of `epochs` epochs of `steps_per_epoch`
// optimizer steps (used where the config leaves a length open: t_max, onecycle's total steps).
std::optional<trainer::SchedulerConfig> make_scheduler(const RunConfig::Scheduler& config, optim::Optimizer& opt,
                                                       int64_t epochs, int64_t steps_per_epoch);

}  // namespace kiln::tools
