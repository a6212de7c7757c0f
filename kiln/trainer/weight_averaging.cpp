#include "kiln/trainer/weight_averaging.h"

#include <string>

#include "kiln/trainer/checkpoint.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {
const std::string kTrained = "callbacks.WeightAveraging.trained.";
const std::string kAverage = "callbacks.WeightAveraging.average.";

// The module's parameter or buffer called name.
Tensor named_tensor(const nn::Module& module, const std::string& name) {
  for (const auto& [n, t] : module.named_parameters())
    if (n == name) return t;
  for (const auto& [n, t] : module.named_buffers())
    if (n == name) return t;
  detail::throw_error(detail::concat("WeightAveraging: ", module.type_name(), " has no \"", name, "\""));
}
}  // namespace

WeightAveraging::WeightAveraging(WeightAveragingOptions options) : options_(options) {
  KILN_CHECK(options.start_epoch >= 0, "WeightAveraging: start_epoch must be non-negative, got ", options.start_epoch);
}

// The settings a checkpoint's average was made with, as text: a resume with others would silently mix two
// averages.
std::string WeightAveraging::settings() const {
  return detail::concat("decay=", options_.decay ? detail::concat(*options_.decay) : std::string("none"),
                        " start_epoch=", options_.start_epoch, " use_buffers=", options_.use_buffers ? 1 : 0);
}

CallbackState WeightAveraging::checkpoint_state() const {
  return {{"num_updates", std::to_string(average_ ? average_->num_updates() : 0)}, {"settings", settings()}};
}

void WeightAveraging::load_checkpoint_state(const CallbackState& state) {
  auto it = state.find("num_updates");
  loaded_updates_ = it == state.end() ? 0 : std::stoll(it->second);
  auto saved = state.find("settings");
  KILN_CHECK(saved == state.end() || saved->second == settings(), "WeightAveraging: the checkpoint's average was "
             "made with ", saved->second, ", this run asks for ", settings(), "; resume with the same settings");
}

void WeightAveraging::setup(Trainer&, TrainModule& module, Stage stage) {
  if (stage != Stage::Fit) return;
  // (ModelCheckpoint's checkpoints include this callback's update of their step or epoch: the Trainer runs
  // checkpoint callbacks last.)
  average_ = std::make_unique<optim::AveragedWeights>(
      module, optim::AveragedWeightsOptions{.decay = options_.decay, .use_buffers = options_.use_buffers});
  swapped_ = false;
}

void WeightAveraging::update(Trainer& trainer, TrainModule& module) {
  if (average_ && trainer.stage() == Stage::Fit && trainer.current_epoch() >= options_.start_epoch)
    average_->update(module);
}

void WeightAveraging::on_train_start(Trainer& trainer, TrainModule&) { steps_seen_ = trainer.global_step(); }

void WeightAveraging::on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor&, const data::Batch&,
                                         int64_t) {
  // Once per batch that stepped (automatic or manual optimization; with accumulation, not every batch does).
  if (!options_.decay || trainer.global_step() == steps_seen_) return;
  steps_seen_ = trainer.global_step();
  update(trainer, module);
}

void WeightAveraging::on_train_epoch_end(Trainer& trainer, TrainModule& module) {
  if (!options_.decay) update(trainer, module);
}

void WeightAveraging::on_validation_start(Trainer& trainer, TrainModule& module) {
  if (!average_ || swapped_ || average_->num_updates() == 0 || trainer.stage() != Stage::Fit ||
      trainer.sanity_checking())
    return;
  average_->swap(module);
  swapped_ = true;
}

void WeightAveraging::on_validation_end(Trainer&, TrainModule& module) {
  if (!swapped_) return;
  average_->swap(module);
  swapped_ = false;
}

void WeightAveraging::on_train_end(Trainer&, TrainModule& module) {
  if (!average_ || average_->num_updates() == 0) return;
  if (swapped_) {
    average_->swap(module);
    swapped_ = false;
  }
  average_->copy_to(module);
}

void WeightAveraging::on_exception(Trainer&, TrainModule& module, const std::exception&) {
  // An error inside a validation: the module gets its trained weights back.
  if (!swapped_) return;
  average_->swap(module);
  swapped_ = false;
}

void WeightAveraging::on_save_checkpoint(Trainer&, TrainModule& module, Checkpoint& checkpoint) {
  if (!average_ || average_->num_updates() == 0) return;
  // A weights-only checkpoint (save_weights_only) takes the averages as its weights and nothing else: no
  // resume reads it, so the trained weights and the averages outside the state dict stay out.
  const bool weights_only = checkpoint.has("trainer.weights_only");
  for (const auto& [name, held] : average_->averages()) {
    // While swapped the module holds the averages and `held` its trained weights.
    const Tensor averaged = swapped_ ? named_tensor(module, name) : held;
    auto it = checkpoint.tensors.find("model." + name);
    if (it == checkpoint.tensors.end()) {  // a buffer outside the state dict
      if (!weights_only) checkpoint.tensors[kAverage + name] = averaged;
      continue;
    }
    if (weights_only) {
      it->second = averaged;
      continue;
    }
    checkpoint.tensors[kTrained + name] = swapped_ ? held : it->second;
    it->second = averaged;
  }
}

void WeightAveraging::on_load_checkpoint(Trainer&, TrainModule& module, const Checkpoint& checkpoint) {
  if (!average_) return;
  swapped_ = false;
  if (loaded_updates_ == 0) return;
  // The Trainer loaded the averages as the module's weights: they go into the average, and the trained
  // weights back into the module.
  nn::StateDict averages;
  NoGradGuard no_grad;
  for (const auto& [name, held] : average_->averages()) {
    auto trained = checkpoint.tensors.find(kTrained + name);
    if (trained != checkpoint.tensors.end()) {
      averages[name] = checkpoint.tensors.at("model." + name);
      named_tensor(module, name).copy_(trained->second);
      continue;
    }
    auto average = checkpoint.tensors.find(kAverage + name);
    KILN_CHECK(average != checkpoint.tensors.end(), "WeightAveraging: resuming from ", checkpoint.path,
               ": the checkpoint has ", loaded_updates_, " averaging updates but no average of \"", name, "\"");
    averages[name] = average->second;
  }
  average_->load(averages, loaded_updates_);
}

}  // namespace kiln::trainer
