// BasePredictionWriter's dispatch on write_interval, and SafetensorsPredictionWriter's files
// (prediction_writer.h).
#include "kiln/trainer/prediction_writer.h"

#include <filesystem>

#include "kiln/serialize/safetensors.h"
#include "kiln/tensor/ops.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

BasePredictionWriter::BasePredictionWriter(std::string write_interval) : write_interval_(std::move(write_interval)) {
  per_batch_ = write_interval_ == "batch" || write_interval_ == "batch_and_epoch";
  per_epoch_ = write_interval_ == "epoch" || write_interval_ == "batch_and_epoch";
  KILN_CHECK(per_batch_ || per_epoch_, "prediction writer: write_interval '", write_interval_,
             "': expected 'batch', 'epoch' or 'batch_and_epoch'");
}

void BasePredictionWriter::on_predict_epoch_start(Trainer& trainer, TrainModule& module) { predictions_.clear(); }

void BasePredictionWriter::on_predict_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output,
                                                const data::Batch& batch, int64_t batch_idx) {
  if (per_batch_) write_on_batch_end(trainer, module, output, batch, batch_idx);
  if (per_epoch_) predictions_.push_back(output.defined() ? output.cpu() : output);
}

void BasePredictionWriter::on_predict_epoch_end(Trainer& trainer, TrainModule& module) {
  if (per_epoch_) write_on_epoch_end(trainer, module, predictions_);
  predictions_.clear();
}

SafetensorsPredictionWriter::SafetensorsPredictionWriter(std::string dirpath, std::string write_interval)
    : BasePredictionWriter(std::move(write_interval)), dirpath_(std::move(dirpath)) {
  KILN_CHECK(!dirpath_.empty(), "SafetensorsPredictionWriter: dirpath is empty: expected a folder to write into");
}

void SafetensorsPredictionWriter::save(const std::string& name, const Tensor& tensor, Trainer& trainer) {
  std::filesystem::create_directories(dirpath_);
  const std::string path = (std::filesystem::path(dirpath_) / name).string();
  serialize::save_safetensors(path, {{"predictions", tensor.cpu().contiguous()}});
  written_.push_back(path);
}

void SafetensorsPredictionWriter::write_on_batch_end(Trainer& trainer, TrainModule& module, const Tensor& prediction,
                                                     const data::Batch& batch, int64_t batch_idx) {
  if (!prediction.defined()) return;
  save("predictions_" + std::to_string(trainer.global_rank()) + "_" + std::to_string(batch_idx) + ".safetensors",
       prediction, trainer);
}

void SafetensorsPredictionWriter::write_on_epoch_end(Trainer& trainer, TrainModule& module,
                                                     const std::vector<Tensor>& predictions) {
  std::vector<Tensor> parts;
  const Tensor* first = nullptr;
  for (size_t i = 0; i < predictions.size(); ++i) {
    const Tensor& p = predictions[i];
    if (!p.defined()) continue;
    KILN_CHECK(p.dim() >= 1, "SafetensorsPredictionWriter: batch ", i, "'s prediction is a scalar: joining them "
               "along dim 0 needs at least one dim (write_interval 'batch' writes each as it is)");
    if (first == nullptr) {
      first = &p;
    } else {
      const Shape a(first->sizes().begin() + 1, first->sizes().end()), b(p.sizes().begin() + 1, p.sizes().end());
      KILN_CHECK(a == b && p.dtype() == first->dtype(), "SafetensorsPredictionWriter: batch ", i,
                 "'s prediction has shape ", shape_str(p.sizes()), " and dtype ", p.dtype(), ", the first one ",
                 shape_str(first->sizes()), " and ", first->dtype(), ": joining along dim 0 needs the other dims "
                 "and the dtype to agree (write_interval 'batch' writes each as it is)");
    }
    parts.push_back(p);
  }
  if (parts.empty()) return;
  save("predictions_" + std::to_string(trainer.global_rank()) + ".safetensors", cat(parts, 0), trainer);
}

}  // namespace kiln::trainer
