// Writing predictions as predict() makes them (Lightning's BasePredictionWriter), and one writer built on it that
// saves safetensors files. With write_interval "batch" and predict(..., return_predictions = false), a long
// prediction run holds one batch's output at a time.
//
//   class CsvWriter : public trainer::BasePredictionWriter {
//    public:
//     CsvWriter() : BasePredictionWriter("batch") {}
//     void write_on_batch_end(trainer::Trainer&, trainer::TrainModule&, const Tensor& prediction,
//                             const data::Batch& batch, int64_t batch_idx) override { /* append rows */ }
//   };
//
// write_interval "batch": write_on_batch_end after each batch's predict_step; "epoch": write_on_epoch_end once,
// with every batch's prediction (on the CPU), in order; "batch_and_epoch": both. Every process that calls
// predict() writes its own; a writer of files names them by rank so that ranks do not overwrite each other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

class BasePredictionWriter : public Callback {
 public:
  explicit BasePredictionWriter(std::string write_interval = "batch");
  const std::string& write_interval() const { return write_interval_; }

  // One batch's prediction (what predict_step returned, on the device), with the batch it came from.
  virtual void write_on_batch_end(Trainer& trainer, TrainModule& module, const Tensor& prediction,
                                  const data::Batch& batch, int64_t batch_idx) {}
  // Every batch's prediction, in order, on the CPU.
  virtual void write_on_epoch_end(Trainer& trainer, TrainModule& module, const std::vector<Tensor>& predictions) {}

  void on_predict_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_predict_batch_end(Trainer& trainer, TrainModule& module, const Tensor& output, const data::Batch& batch,
                            int64_t batch_idx) override;
  void on_predict_epoch_end(Trainer& trainer, TrainModule& module) override;

 private:
  std::string write_interval_;
  bool per_batch_ = false, per_epoch_ = false;
  std::vector<Tensor> predictions_;  // "epoch": this run's, until written
};

// Saves predictions as safetensors files in `dirpath` (created when missing), each written whole or not at all:
//   "batch": predictions_<rank>_<batch_idx>.safetensors, one tensor "predictions" each;
//   "epoch": predictions_<rank>.safetensors, one tensor "predictions": every batch's, joined along dim 0 (they
//            must agree in every other dim and in dtype, or the error says which batch does not).
// <rank> is the global rank (0 with one process). Batches whose predict_step returned nothing are skipped.
class SafetensorsPredictionWriter : public BasePredictionWriter {
 public:
  explicit SafetensorsPredictionWriter(std::string dirpath, std::string write_interval = "epoch");
  std::string state_key() const override { return "SafetensorsPredictionWriter"; }
  // The files written so far, in order.
  const std::vector<std::string>& written() const { return written_; }

  void write_on_batch_end(Trainer& trainer, TrainModule& module, const Tensor& prediction, const data::Batch& batch,
                          int64_t batch_idx) override;
  void write_on_epoch_end(Trainer& trainer, TrainModule& module, const std::vector<Tensor>& predictions) override;

 private:
  void save(const std::string& name, const Tensor& tensor, Trainer& trainer);
  std::string dirpath_;
  std::vector<std::string> written_;
};

}  // namespace kiln::trainer
