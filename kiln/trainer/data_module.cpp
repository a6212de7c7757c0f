// DataModule's defaults, and the Trainer's runs over one: each is the loader-taking run of the same name
// between the DataModule's setup and teardown.
#include "kiln/trainer/data_module.h"

#include <optional>

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

std::unique_ptr<data::DataLoader> DataModule::train_dataloader() {
  detail::throw_error("DataModule: train_dataloader() is not implemented; fit() needs it (override it to return "
                      "the training loader, built with batch_size)");
}

std::vector<std::unique_ptr<data::DataLoader>> DataModule::val_dataloaders() {
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  if (auto loader = val_dataloader()) loaders.push_back(std::move(loader));
  return loaders;
}

std::vector<std::unique_ptr<data::DataLoader>> DataModule::test_dataloaders() {
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  if (auto loader = test_dataloader()) loaders.push_back(std::move(loader));
  return loaders;
}

namespace {

// The loaders as the loader-taking runs want them; a null one among several is the DataModule's mistake.
std::vector<data::DataLoader*> pointers(const std::vector<std::unique_ptr<data::DataLoader>>& loaders,
                                        const char* what) {
  std::vector<data::DataLoader*> out;
  for (size_t k = 0; k < loaders.size(); ++k) {
    KILN_CHECK(loaders[k] != nullptr, "Trainer: the DataModule's ", what, "() returned a null loader at index ", k);
    out.push_back(loaders[k].get());
  }
  return out;
}

// prepare_data (where the strategy runs it), then setup(stage) and `build` (the stage's loaders), agreed over
// the ranks (under ddp a rank whose setup or loaders failed would otherwise leave the others in collectives it
// never makes), then `run`; then `release` (the loaders go) and teardown(stage), once setup has been called,
// whatever happened (a teardown that throws after a failure does not hide that failure). The DataModule is the
// Trainer's datamodule() meanwhile.
template <class Build, class Run, class Release>
auto with_datamodule(DataModule*& current, Strategy& strategy, DataModule& data, Stage stage, Build&& build,
                     Run&& run, Release&& release) {
  KILN_CHECK(current == nullptr, "Trainer: ", stage_name(stage), "() with a DataModule called while another run ",
             "of this Trainer is using one (from a hook?)");
  // Before prepare_data, which a server would otherwise wait in for workers that never make this call.
  KILN_CHECK(stage == Stage::Fit || !strategy.is_server(), "Trainer: this process is a parameter server's server, ",
             "which only serves: ", stage_name(stage), " runs on the workers");
  current = &data;
  try {
    strategy.prepare_data([&data] { data.prepare_data(); }, data.prepare_data_per_node);
  } catch (...) {
    current = nullptr;
    throw;
  }
  std::optional<decltype(run())> result;
  try {
    std::exception_ptr error;
    try {
      data.setup(stage);
      build();
    } catch (...) {
      error = std::current_exception();
    }
    strategy.agree(error, std::string("the DataModule's setup(") + stage_name(stage) + ") or its loaders");
    result.emplace(run());
  } catch (...) {
    current = nullptr;
    release();
    try {
      data.teardown(stage);
    } catch (...) {
      // the run's error is the one to report
    }
    throw;
  }
  current = nullptr;
  release();
  data.teardown(stage);
  return std::move(*result);
}

}  // namespace

void Trainer::fit(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  std::string path;
  std::vector<data::DataLoader*> vals;
  // The loaders for `epoch`, built again where reload_dataloaders_every_n_epochs says: the Trainer owns them,
  // and the ones it replaces go once the new ones are in use. The DataModule's state just before they are
  // built is what checkpoints keep for a resume to build the same ones (given it, the DataModule builds them
  // and moves its state on as it did: a builder may advance a counter or a shard of its own).
  auto build = [this, &data](int64_t epoch) {
    CallbackState state = data.state_dict();
    std::unique_ptr<data::DataLoader> train = data.train_dataloader();
    KILN_CHECK(train != nullptr, "Trainer: fit(): the DataModule's train_dataloader() returned no loader");
    std::vector<std::unique_ptr<data::DataLoader>> loaders = data.val_dataloaders();
    const std::vector<data::DataLoader*> ptrs = pointers(loaders, "val_dataloaders");
    if (dm_train_ != nullptr) use_loaders(*train, ptrs);
    dm_train_ = std::move(train), dm_vals_ = std::move(loaders), dm_state_at_build_ = std::move(state);
    dm_built_for_epoch_ = epoch;
    return ptrs;
  };
  with_datamodule(datamodule_, *strategy_, data, Stage::Fit, [&] {
    // A resume hands the DataModule its state before it builds the loaders, which that state may shape: the
    // state it had when the interrupted run built the loaders it was using (a callback may have changed it
    // since), and then, if that differs, its latest. But where the run resumes at an epoch that
    // reload_dataloaders_every_n_epochs rebuilds for, and the interrupted run had not rebuilt yet (its
    // checkpoint came from the epoch before's end), that run would have built them there from its latest
    // state: so does the resume, once (the train loop rebuilds only from the second epoch a fit runs). The
    // checkpoint read for it is the one fit's resume then takes (fit gets the path resolved here, so "last" is
    // looked up once). A checkpoint that cannot be read fails here, before fit starts.
    path = ckpt_path.empty() ? std::string() : resolve_ckpt_path(ckpt_path);
    CallbackState latest, at_build;
    int64_t epoch = 0;
    if (!path.empty()) {
      preloaded_checkpoint_.emplace(path, load_checkpoint(path));
      const Checkpoint& c = preloaded_checkpoint_->second;
      latest = c.section("datamodule");
      epoch = c.has("trainer.epoch") ? c.get_int("trainer.epoch") : 0;
      const int64_t built_for = c.has("trainer.datamodule_loaders_epoch")
                                    ? c.get_int("trainer.datamodule_loaders_epoch") : epoch;
      const int64_t every = options_.reload_dataloaders_every_n_epochs;
      const bool rebuild_due = every > 0 && epoch > 0 && epoch % every == 0 && built_for < epoch;
      if (!rebuild_due) at_build = c.section("datamodule_at_build");
      if (at_build.empty()) at_build = latest;  // also a checkpoint without it (written by a fit given loaders)
      if (!at_build.empty()) data.load_state_dict(at_build);
    }
    vals = build(epoch);
    if (!latest.empty() && at_build != latest) data.load_state_dict(latest);
    reload_loaders_ = [this, build] { build(epoch_); };
  }, [&] {
    // The fit runs with datamodule_ set: its checkpoints keep the DataModule's state.
    fit(module, *dm_train_, vals, path);
    return 0;
  }, [this] {
    preloaded_checkpoint_.reset();  // not left for a later fit of this Trainer
    reload_loaders_ = nullptr, dm_train_.reset(), dm_vals_.clear(), dm_state_at_build_.clear();
    dm_built_for_epoch_ = 0;
  });
}

std::map<std::string, double> Trainer::validate(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  std::vector<data::DataLoader*> ptrs;
  return with_datamodule(datamodule_, *strategy_, data, Stage::Validate, [&] {
    loaders = data.val_dataloaders();
    KILN_CHECK(!loaders.empty(), "Trainer: validate(): the DataModule has no validation loader (val_dataloader())");
    ptrs = pointers(loaders, "val_dataloaders");
  }, [&] { return validate(module, ptrs, ckpt_path); }, [&] { ptrs.clear(), loaders.clear(); });
}

std::map<std::string, double> Trainer::test(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  std::vector<data::DataLoader*> ptrs;
  return with_datamodule(datamodule_, *strategy_, data, Stage::Test, [&] {
    loaders = data.test_dataloaders();
    KILN_CHECK(!loaders.empty(), "Trainer: test(): the DataModule has no test loader (test_dataloader())");
    ptrs = pointers(loaders, "test_dataloaders");
  }, [&] { return test(module, ptrs, ckpt_path); }, [&] { ptrs.clear(), loaders.clear(); });
}

std::vector<Tensor> Trainer::predict(TrainModule& module, DataModule& data, const std::string& ckpt_path,
                                     bool return_predictions) {
  std::unique_ptr<data::DataLoader> loader;
  return with_datamodule(datamodule_, *strategy_, data, Stage::Predict, [&] {
    loader = data.predict_dataloader();
    KILN_CHECK(loader != nullptr, "Trainer: predict(): the DataModule has no prediction loader (predict_dataloader())");
  }, [&] { return predict(module, *loader, ckpt_path, return_predictions); }, [&] { loader.reset(); });
}

}  // namespace kiln::trainer
