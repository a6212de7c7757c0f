// TensorBoardLogger: metrics as TensorBoard event files, written directly (no TensorFlow, no protobuf library).
//
// An event file, <log_dir>/events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>.<counter>, is a
// sequence of TFRecords, each holding one serialized `Event` protobuf:
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
// The first Event carries file_version "brain.Event:2"; each log_metrics call writes one Event whose Summary
// has one simple_value (float32) per metric. The protobuf messages are encoded by hand in the .cpp, with the
// field numbers of TensorBoard's event.proto, summary.proto and tensor.proto.
//
// Histograms are HistogramProto values and images Image values holding a PNG (summary.proto's legacy fields,
// which TensorBoard reads into its Histograms, Distributions and Images tabs).
//
// Hyperparameters go in as a text summary (tag "hparams", a markdown table; TensorBoard's Text tab shows it)
// and to hparams.yaml, as CSVLogger writes it. on_resume writes a SessionLog START event at step + 1:
// TensorBoard then drops the events at that step and after which it read from earlier files of the folder,
// i.e. what the interrupted run logged past its checkpoint.
//
// As in CSVLogger, each Event is handed to the OS (fflush) within its call, so TensorBoard sees it at once
// and a crashed process loses nothing already logged; flush() adds an fsync, finalize() closes the file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "kiln/trainer/logger.h"

namespace kiln::trainer {

class TensorBoardLogger : public Logger {
 public:
  // version -1 takes next_version(save_dir, name), fixed here, so that loggers made together share a folder.
  explicit TensorBoardLogger(std::string save_dir, std::string name = "kiln", int64_t version = -1);
  ~TensorBoardLogger() override;
  TensorBoardLogger(const TensorBoardLogger&) = delete;
  TensorBoardLogger& operator=(const TensorBoardLogger&) = delete;

  std::string name() const override { return "tensorboard"; }
  std::string log_dir() const override { return log_dir_; }
  int64_t version() const { return version_; }
  // The event file being written ("" before the first event).
  std::string event_file() const { return path_; }

  // Merged with earlier calls; each call writes the whole set as a text summary at step 0.
  void log_hyperparams(const std::map<std::string, std::string>& hparams) override;
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  // A HistogramProto (TensorBoard's Histograms and Distributions tabs): minimum, maximum, count, sum and sum of
  // squares of the values, and the counts of `bins` equal-width bins over [min, max] (numpy.histogram's bins;
  // [v - 0.5, v + 0.5] when every value is v). NaN or inf among the values is an error naming the tag.
  void log_histogram(const std::string& tag, const Tensor& values, int64_t step, int64_t bins = 64) override;
  // An Image summary holding the PNG of data::encode_png (TensorBoard's Images tab).
  void log_image(const std::string& tag, const Tensor& image, int64_t step) override;
  void on_resume(int64_t step) override;
  void flush() override;
  void finalize(const std::string& status) override;

 private:
  // First use: creates the folder and a new event file, and writes the file_version event.
  void open();
  // Frames `event` (a serialized Event) as a TFRecord and appends it.
  void write_record(const std::string& event);
  void close_file() noexcept;

  std::string log_dir_;
  int64_t version_ = 0;
  std::string path_;
  std::FILE* file_ = nullptr;
  std::map<std::string, std::string> hparams_;
};

}  // namespace kiln::trainer
