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
// never makes), then `run`; teardown(stage) once setup has been called, whatever happened (a teardown that
// throws after a failure does not hide that failure). The DataModule is the Trainer's datamodule() meanwhile.
template <class Build, class Run>
auto with_datamodule(DataModule*& current, Strategy& strategy, DataModule& data, Stage stage, Build&& build,
                     Run&& run) {
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
    try {
      data.teardown(stage);
    } catch (...) {
      // the run's error is the one to report
    }
    throw;
  }
  current = nullptr;
  data.teardown(stage);
  return std::move(*result);
}

}  // namespace

void Trainer::fit(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  // What the DataModule's fit leaves in the Trainer goes when it ends: at the end of a fit that ran, before
  // teardown; else on the way out. Not before the DataModule's run has started (`armed`): a fit refused for
  // being called inside another one's hook must not take that one's loaders.
  bool armed = false;
  auto release = [this] {
    preloaded_checkpoint_.reset();  // not left for a later fit of this Trainer
    reload_loaders_ = nullptr, dm_train_.reset(), dm_vals_.clear(), dm_state_at_build_.clear();
  };
  struct Cleanup {
    const bool& armed;
    const std::function<void()> release;
    ~Cleanup() {
      if (armed) release();
    }
  } cleanup{armed, release};
  std::string path;
  std::vector<data::DataLoader*> vals;
  // The loaders, built again where reload_dataloaders_every_n_epochs says: the Trainer owns them, and the ones
  // it replaces go once the new ones are in use.
  auto build = [this, &data] {
    CallbackState state = data.state_dict();
    std::unique_ptr<data::DataLoader> train = data.train_dataloader();
    KILN_CHECK(train != nullptr, "Trainer: fit(): the DataModule's train_dataloader() returned no loader");
    std::vector<std::unique_ptr<data::DataLoader>> loaders = data.val_dataloaders();
    const std::vector<data::DataLoader*> ptrs = pointers(loaders, "val_dataloaders");
    if (dm_train_ != nullptr) use_loaders(*train, ptrs);
    dm_train_ = std::move(train), dm_vals_ = std::move(loaders), dm_state_at_build_ = std::move(state);
    return ptrs;
  };
  with_datamodule(datamodule_, *strategy_, data, Stage::Fit, [&] {
    armed = true;
    // A resume hands the DataModule its state before it builds the loaders, which that state may shape. The
    // checkpoint read for it is the one fit's resume then takes (fit gets the path resolved here, so "last"
    // is looked up once). A checkpoint that cannot be read fails here, before fit starts. Under
    // reload_dataloaders_every_n_epochs the loaders are built from the state the DataModule had when the
    // interrupted run built its own, and the DataModule then gets its latest.
    path = ckpt_path.empty() ? std::string() : resolve_ckpt_path(ckpt_path);
    CallbackState latest, at_build;
    if (!path.empty()) {
      preloaded_checkpoint_.emplace(path, load_checkpoint(path));
      latest = preloaded_checkpoint_->second.section("datamodule");
      if (options_.reload_dataloaders_every_n_epochs > 0)
        at_build = preloaded_checkpoint_->second.section("datamodule_at_build");
      if (at_build.empty()) at_build = latest;
      if (!at_build.empty()) data.load_state_dict(at_build);
    }
    vals = build();
    if (at_build != latest) data.load_state_dict(latest);
    reload_loaders_ = [build] { build(); };
  }, [&] {
    // The fit runs with datamodule_ set: its checkpoints keep the DataModule's state.
    fit(module, *dm_train_, vals, path);
    release();
    return 0;
  });
}

std::map<std::string, double> Trainer::validate(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  std::vector<data::DataLoader*> ptrs;
  return with_datamodule(datamodule_, *strategy_, data, Stage::Validate, [&] {
    loaders = data.val_dataloaders();
    KILN_CHECK(!loaders.empty(), "Trainer: validate(): the DataModule has no validation loader (val_dataloader())");
    ptrs = pointers(loaders, "val_dataloaders");
  }, [&] { return validate(module, ptrs, ckpt_path); });
}

std::map<std::string, double> Trainer::test(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  std::vector<data::DataLoader*> ptrs;
  return with_datamodule(datamodule_, *strategy_, data, Stage::Test, [&] {
    loaders = data.test_dataloaders();
    KILN_CHECK(!loaders.empty(), "Trainer: test(): the DataModule has no test loader (test_dataloader())");
    ptrs = pointers(loaders, "test_dataloaders");
  }, [&] { return test(module, ptrs, ckpt_path); });
}

std::vector<Tensor> Trainer::predict(TrainModule& module, DataModule& data, const std::string& ckpt_path,
                                     bool return_predictions) {
  std::unique_ptr<data::DataLoader> loader;
  return with_datamodule(datamodule_, *strategy_, data, Stage::Predict, [&] {
    loader = data.predict_dataloader();
    KILN_CHECK(loader != nullptr, "Trainer: predict(): the DataModule has no prediction loader (predict_dataloader())");
  }, [&] { return predict(module, *loader, ckpt_path, return_predictions); });
}

}  // namespace kiln::trainer
