#include "kiln/trainer/train_module.h"

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

Tensor TrainModule::validation_step(const data::Batch& batch, int64_t batch_idx) {
  KILN_CHECK(false, type_name(), ": validation_step is not defined; override it to validate (fit with a "
             "validation loader, or Trainer::validate)");
  return {};
}

Tensor TrainModule::test_step(const data::Batch& batch, int64_t batch_idx) {
  KILN_CHECK(false, type_name(), ": test_step is not defined; override it to use Trainer::test");
  return {};
}

Tensor TrainModule::predict_step(const data::Batch& batch, int64_t batch_idx) {
  KILN_CHECK(!batch.empty(), type_name(), ": predict_step: the batch has no fields");
  return (*this)(batch[0]);
}

void TrainModule::log(const std::string& name, const Tensor& value, LogOptions options) {
  KILN_CHECK(value.defined() && value.numel() == 1, type_name(), ": log(\"", name, "\"): expected a single value, got ",
             value.defined() ? "a tensor of shape " + shape_str(value.shape()) : std::string("an undefined tensor"));
  log(name, value.item<double>(), options);  // item() copies the one value from any device
}

void TrainModule::log(const std::string& name, double value, LogOptions options) {
  KILN_CHECK(trainer_ != nullptr, type_name(), ": log(\"", name, "\") outside a Trainer's fit, validate or test");
  trainer_->log_metric(name, value, options);
}

void TrainModule::log_histogram(const std::string& tag, const Tensor& values, int64_t bins) {
  KILN_CHECK(trainer_ != nullptr, type_name(), ": log_histogram(\"", tag, "\") outside a Trainer's fit, validate or test");
  trainer_->log_histogram(tag, values, bins);
}

void TrainModule::log_image(const std::string& tag, const Tensor& image) {
  KILN_CHECK(trainer_ != nullptr, type_name(), ": log_image(\"", tag, "\") outside a Trainer's fit, validate or test");
  trainer_->log_image(tag, image);
}

Trainer& TrainModule::trainer() const {
  KILN_CHECK(trainer_ != nullptr, type_name(), ": trainer(): the module is not being run by a Trainer");
  return *trainer_;
}

}  // namespace kiln::trainer
