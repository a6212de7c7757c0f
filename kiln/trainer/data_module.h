// DataModule: a run's data in one place (Lightning's LightningDataModule): how to prepare it, how to split it
// for each stage, and the loaders over it, so that a TrainModule and its data travel as two objects and the
// same module trains on other data by swapping the other one.
//
//   struct FashionMnist : trainer::DataModule {
//     std::shared_ptr<data::Dataset> train, val, test;
//     void setup(trainer::Stage stage) override { ... read the files, split train and val ... }
//     std::unique_ptr<data::DataLoader> train_dataloader() override {
//       return std::make_unique<data::DataLoader>(train, data::DataLoaderOptions{.batch_size = batch_size,
//                                                                                .shuffle = true});
//     }
//     std::unique_ptr<data::DataLoader> val_dataloader() override { ... }
//   };
//   FashionMnist data;
//   data.batch_size = 64;
//   trainer.fit(module, data);     // prepare_data, setup(Fit), the loaders, fit, teardown(Fit)
//   trainer.test(module, data);    // prepare_data, setup(Test), test_dataloader(), test, teardown(Test)
//
// Each of the Trainer's fit, validate, test and predict given a DataModule calls prepare_data() then
// setup(stage) before asking for the stage's loaders, and teardown(stage) when the run ends, whether it
// succeeded or threw (once setup has been called, even if setup itself threw). Under ddp and
// parameter_server, as in Lightning, prepare_data runs in one process per node (ddp: local rank 0; a
// parameter server: the node's first worker) or, with prepare_data_per_node false, for data on a filesystem
// every node shares, in one process of the job (rank 0; worker 0), while the others wait, up to
// TrainerOptions::process_group_timeout (raise it for a long download), and then every process calls setup.
// If it fails there, every process's run fails: that one's with its own error, the others' with one naming it.
// Under ddp the ranks then agree that setup and the stage's loaders worked everywhere before any collective
// (a rank where they failed fails the others at once, naming it). Under ddp the Trainer shards the loaders it
// gets, as it does loaders given to fit directly.
//
// state_dict() is kept in the Trainer's checkpoints ("datamodule.<key>"), and so is what it returned just
// before the loaders in use were built ("datamodule_at_build.<key>"; building may move the state on, and a
// callback may change it later, for the next build: a batch size, a curriculum's stage). A fit that resumes
// from one hands the latter to load_state_dict() after setup and before building the loaders (so the state
// shapes them as it shaped the interrupted run's), then, if it differs, the former: load_state_dict may be
// called twice, and should set the whole state from what it is given. A resume at the start of an epoch where
// reload_dataloaders_every_n_epochs rebuilds, which the interrupted run had not reached, hands it the former
// only (that run would have built from it there). A checkpoint without such entries (written by a fit given
// loaders) calls nothing. A checkpoint that cannot be read fails before the fit starts (so callbacks'
// on_exception and the loggers do not hear of it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/trainer/callback.h"

namespace kiln::trainer {

class DataModule {
 public:
  virtual ~DataModule() = default;

  // The batch size the loaders are built with, read by the loader functions below (which must use it for
  // scale_batch_size to work: it sets this and checks the training loader's batch size).
  int64_t batch_size = 1;

  // Work done once before setup: downloading, converting or caching files. Under ddp and parameter_server
  // called in one process per node, or in one process of the job when prepare_data_per_node is false (see
  // above); keep no state in members here, since the other processes never call it: setup is where each
  // process reads.
  virtual void prepare_data() {}
  bool prepare_data_per_node = true;
  // Builds what the stage's loaders read (Fit: training and validation; Validate; Test; Predict).
  virtual void setup(Stage stage) {}
  // Called when the stage's run ends, also after a failure.
  virtual void teardown(Stage stage) {}

  // The loaders, built anew on each call. train_dataloader must be overridden for fit; the others default to
  // none (nullptr). Several validation or test loaders: override the plural, which defaults to the single
  // loader (if any).
  virtual std::unique_ptr<data::DataLoader> train_dataloader();
  virtual std::unique_ptr<data::DataLoader> val_dataloader() { return nullptr; }
  virtual std::unique_ptr<data::DataLoader> test_dataloader() { return nullptr; }
  virtual std::unique_ptr<data::DataLoader> predict_dataloader() { return nullptr; }
  virtual std::vector<std::unique_ptr<data::DataLoader>> val_dataloaders();
  virtual std::vector<std::unique_ptr<data::DataLoader>> test_dataloaders();

  // State to keep in checkpoints (text values under names it chooses), and its restoration on resume.
  virtual CallbackState state_dict() const { return {}; }
  virtual void load_state_dict(const CallbackState& state) {}
};

}  // namespace kiln::trainer
