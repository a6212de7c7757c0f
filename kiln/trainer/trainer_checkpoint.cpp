// The Trainer's side of checkpoints: what a checkpoint of a running fit holds (build_checkpoint) and how a fit
// is put back into that state (restore), side by side so that every entry written has its reader next to it.
// The file format itself (safetensors + checksum, atomic writes) is checkpoint.cpp's.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <set>

#include "kiln/tensor/rng.h"
#include "kiln/trainer/data_module.h"
#include "kiln/trainer/model_checkpoint.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

std::string Trainer::resolve_ckpt_path(const std::string& path) const {
  if (path == "best") {
    for (const auto& cb : callbacks_) {
      const auto* mc = dynamic_cast<const ModelCheckpoint*>(cb.get());
      if (mc == nullptr) continue;
      KILN_CHECK(!mc->best_model_path().empty(), "Trainer: ckpt_path \"best\": the ModelCheckpoint (monitor '",
                 mc->options().monitor, "') of this Trainer has saved no checkpoint yet (a fit saves them)");
      return mc->best_model_path();
    }
    detail::throw_error("Trainer: ckpt_path \"best\" needs a ModelCheckpoint among the callbacks (enable_checkpointing "
                        "adds one; give it a monitor)");
  }
  if (path != "last") {
    KILN_CHECK(std::filesystem::exists(path), "Trainer: ckpt_path '", path, "' does not exist");
    return path;
  }
  std::string weights_only;
  const std::string best = find_last_checkpoint(options_.default_root_dir, &weights_only);
  // Starting afresh beside a weights-only last.ckpt would quietly throw the run away: say so instead.
  KILN_CHECK(!best.empty() || weights_only.empty(), "Trainer: ckpt_path \"last\": the last.ckpt under ",
             options_.default_root_dir, " (", weights_only, ") holds the weights only (save_weights_only), which a ",
             "fit cannot resume from; resume from a full checkpoint, or leave ckpt_path out to start afresh");
  if (best.empty()) {
    std::fprintf(stderr, "kiln: ckpt_path \"last\": no last.ckpt under %s; starting from scratch\n",
                 options_.default_root_dir.c_str());
  }
  return best;
}

namespace {
// Every hook owner (the module, then each callback) with its checkpoint key.
std::vector<std::pair<std::string, Callback*>> keyed_callbacks(TrainModule& module,
                                                               const std::vector<std::shared_ptr<Callback>>& cbs) {
  std::vector<std::pair<std::string, Callback*>> out{{module.state_key(), &module}};
  for (const auto& cb : cbs) out.emplace_back(cb->state_key(), cb.get());
  return out;
}

// A key that two owners with state to keep share would mix their states (two ModelCheckpoints watching one
// metric would overwrite each other's). Owners that keep none (two LambdaCallbacks, two ThroughputMonitors)
// may share one.
void check_key_unused(const std::set<std::string>& used, const std::string& key) {
  KILN_CHECK(!used.count(key), "Trainer: two callbacks with state to checkpoint have the key '", key,
             "'; give them different state_key()s (for ModelCheckpoint: a different monitor or dirpath)");
}
}  // namespace

Checkpoint Trainer::build_checkpoint(bool weights_only) {
  KILN_CHECK(module_ != nullptr && stage_ == Stage::Fit, "Trainer::save_checkpoint: only during fit()");
  KILN_CHECK(accumulated_ == 0, "Trainer::save_checkpoint: called with ", accumulated_,
             " backward passes accumulated and not yet stepped; their gradients would be lost. Save after an "
             "optimizer step (ModelCheckpoint does)");
  Checkpoint c;
  for (const auto& [name, t] : module_->state_dict()) c.tensors["model." + name] = t;
  if (weights_only) {
    // A parameter server's servers hold the parameters; this process's copy may lag behind their updates.
    KILN_CHECK(strategy_->name() != "parameter_server", "Trainer::save_checkpoint: weights only (save_weights_only) ",
               "under strategy parameter_server: the servers hold the parameters, and a worker's copy can lag behind ",
               "them; save full checkpoints, which carry the servers' shards");
    c.set("trainer.weights_only", "1");
    c.set_int("trainer.epoch", epoch_finished_ ? epoch_ + 1 : epoch_);
    c.set_int("trainer.global_step", global_step_);
    for (const auto& [k, v] : module_->hparams()) c.set("hparams." + k, v);
    // The hooks still run: one may change the weights written (WeightAveraging writes its averages).
    call_hooks("on_save_checkpoint", [&](Callback& cb) { cb.on_save_checkpoint(*this, *module_, c); });
    return c;
  }

  c.set_int("trainer.num_optimizers", static_cast<int64_t>(optimizers_.size()));
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const std::string prefix = "optimizer." + std::to_string(i) + ".";
    optim::OptimizerState st = optimizers_[i]->state_dict();
    for (auto& [k, t] : st.tensors) c.tensors[prefix + k] = t;
    for (auto& [k, v] : st.scalars) c.set_double(prefix + k, v);
  }
  c.set_int("trainer.num_schedulers", static_cast<int64_t>(schedulers_.size()));
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const auto& s = schedulers_[i];
    const optim::SchedulerState st = s.scheduler ? s.scheduler->state_dict() : s.plateau->state_dict();
    for (const auto& [k, v] : st) c.set_double("scheduler." + std::to_string(i) + "." + k, v);
  }

  // Progress: a checkpoint from an epoch's end resumes at the next epoch's start.
  c.set_int("trainer.epoch", epoch_finished_ ? epoch_ + 1 : epoch_);
  c.set_int("trainer.batch_in_epoch", epoch_finished_ ? 0 : batch_in_epoch_);
  c.set_int("trainer.global_step", global_step_);
  c.set_double("trainer.elapsed_seconds", elapsed_seconds());
  c.set("trainer.log_dir", log_dir());
  if (!epoch_finished_) {
    for (const auto& [name, m] : train_epoch_means_) {
      c.set_double("trainer.epoch_mean.sum." + name, m.sum);
      c.set_double("trainer.epoch_mean.weight." + name, m.weight);
      c.set_int("trainer.epoch_mean.flags." + name, (m.prog_bar ? 1 : 0) | (m.logger ? 2 : 0));
    }
  }
  const Generator& gen = default_generator();
  c.set_uint("rng.default.seed", gen.seed());
  c.set_uint("rng.default.offset", gen.offset());
  if (train_loader_ != nullptr) c.set_uint("rng.train_loader.seed", train_loader_->state().seed);

  for (const auto& [k, v] : module_->hparams()) c.set("hparams." + k, v);
  std::set<std::string> keys_with_state;
  for (const auto& [key, cb] : keyed_callbacks(*module_, callbacks_)) {
    const CallbackState state = cb->checkpoint_state();
    if (state.empty()) continue;
    check_key_unused(keys_with_state, key);
    keys_with_state.insert(key);
    for (const auto& [k, v] : state) c.set("callbacks." + key + "." + k, v);
  }
  if (datamodule_ != nullptr) {
    for (const auto& [k, v] : datamodule_->state_dict()) c.set("datamodule." + k, v);
    // What it held when the loaders in use were built, and for which epoch, for a resume to build the same
    // ones (a callback may have changed the state since: a batch size, a curriculum's stage).
    for (const auto& [k, v] : dm_state_at_build_) c.set("datamodule_at_build." + k, v);
    c.set_int("trainer.datamodule_loaders_epoch", dm_built_for_epoch_);
  }
  if (scaler_)
    for (const auto& [k, v] : scaler_->state_dict()) c.set_double("grad_scaler." + k, v);
  strategy_->save_state(c);
  call_hooks("on_save_checkpoint", [&](Callback& cb) { cb.on_save_checkpoint(*this, *module_, c); });
  return c;
}

void Trainer::save_checkpoint(const std::string& path, bool weights_only) {
  profiler::Range range("save_checkpoint");
  // Every rank holds the same state; rank 0 writes it, and the others wait until it has, so that no rank
  // goes on to read a checkpoint (a resume, a test of the best one) that is not there yet. Every rank calls
  // this at the same point (callbacks decide alike on every rank, from metrics reduced over ranks).
  std::exception_ptr failed;
  if (strategy_->is_global_zero()) {
    try {
      trainer::save_checkpoint(build_checkpoint(weights_only), path);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  strategy_->barrier();
  if (failed) std::rethrow_exception(failed);
}

void Trainer::restore(const Checkpoint& c, data::DataLoader& train) {
  const std::string where = "resuming from " + c.path + ": ";
  KILN_CHECK(!c.has("trainer.weights_only"), where, "the checkpoint holds the weights only (save_weights_only), ",
             "not the optimizers', schedulers' and loops' state a fit resumes from; resume from a full checkpoint, ",
             "or load these weights into the module (validate/test/predict take it as ckpt_path)");
  try {
    module_->load_state_dict(c.tensor_section("model"));
  } catch (const Error& e) {
    throw Error(where + "the module does not match the checkpoint's weights: " + e.what());
  }
  // Callbacks' own state before the optimizers': a callback may change an optimizer's groups to what the
  // checkpoint's has (BackboneFinetuning re-adds the backbone's group). Their state is their own, so nothing
  // else restored below depends on it.
  std::set<std::string> keys_with_state;
  for (const auto& [key, cb] : keyed_callbacks(*module_, callbacks_)) {
    const CallbackState state = c.section("callbacks." + key);
    if (!state.empty()) {
      check_key_unused(keys_with_state, key);  // which of the two owners would it be?
      keys_with_state.insert(key);
    }
    cb->load_checkpoint_state(state);
  }
  const int64_t num_opt = c.get_int("trainer.num_optimizers");
  KILN_CHECK(num_opt == static_cast<int64_t>(optimizers_.size()), where, "the checkpoint has ", num_opt,
             " optimizers, configure_optimizers() made ", optimizers_.size());
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const std::string prefix = "optimizer." + std::to_string(i);
    optim::OptimizerState st;
    st.tensors = c.tensor_section(prefix);
    for (const auto& [k, v] : c.section(prefix)) st.scalars[k] = c.get_double(prefix + "." + k);
    optimizers_[i]->load_state_dict(st);
  }
  const int64_t num_sched = c.get_int("trainer.num_schedulers");
  KILN_CHECK(num_sched == static_cast<int64_t>(schedulers_.size()), where, "the checkpoint has ", num_sched,
             " schedulers, configure_optimizers() made ", schedulers_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const std::string prefix = "scheduler." + std::to_string(i);
    optim::SchedulerState st;
    for (const auto& [k, v] : c.section(prefix)) st[k] = c.get_double(prefix + "." + k);
    if (schedulers_[i].scheduler) {
      schedulers_[i].scheduler->load_state_dict(st);
    } else {
      schedulers_[i].plateau->load_state_dict(st);
    }
  }

  epoch_ = c.get_int("trainer.epoch");
  batch_in_epoch_ = c.get_int("trainer.batch_in_epoch");
  global_step_ = c.get_int("trainer.global_step");
  elapsed_before_ = c.get_double("trainer.elapsed_seconds");
  start_time_ = std::chrono::steady_clock::now();
  train_epoch_means_.clear();
  for (const auto& [name, text] : c.section("trainer.epoch_mean.sum")) {
    Mean& m = train_epoch_means_[name];
    m.sum = c.get_double("trainer.epoch_mean.sum." + name);
    m.weight = c.get_double("trainer.epoch_mean.weight." + name);
    const int64_t flags = c.get_int("trainer.epoch_mean.flags." + name);
    m.prog_bar = (flags & 1) != 0;
    m.logger = (flags & 2) != 0;
  }
  default_generator().set_state(c.get_uint("rng.default.seed"), c.get_uint("rng.default.offset"));
  const uint64_t loader_seed = c.has("rng.train_loader.seed") ? c.get_uint("rng.train_loader.seed")
                                                              : train.state().seed;
  train.set_state({static_cast<uint64_t>(epoch_), batch_in_epoch_, loader_seed});

  // 16-mixed: the loss scale goes on from where it was (a checkpoint of a run in another precision has none:
  // the scaler starts from its initial scale).
  if (scaler_ && c.has("grad_scaler.scale")) {
    std::map<std::string, double> st;
    for (const auto& [k, v] : c.section("grad_scaler")) st[k] = c.get_double("grad_scaler." + k);
    scaler_->load_state_dict(st);
  }
  strategy_->load_state(c);
  call_hooks("on_load_checkpoint", [&](Callback& cb) { cb.on_load_checkpoint(*this, *module_, c); });
}

}  // namespace kiln::trainer
