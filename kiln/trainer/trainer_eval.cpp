// The Trainer's evaluation loops: validation (inside fit, or alone), test and predict. Each runs the module in
// eval mode under NoGradGuard, reports the epoch means of what the steps logged, and puts the module back the
// way it found it.
#include "kiln/autograd/grad_mode.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {

// The loader's next batch, as an event of the profiler.
void next_batch(data::DataLoader::Iterator& it, const char* event) {
  profiler::Range range(event);
  ++it;
}

}  // namespace

std::map<std::string, double> Trainer::eval_loop(const std::vector<data::DataLoader*>& loaders, Stage stage,
                                                 const std::vector<int64_t>& limits) {
  const bool was_training = module_->is_training();
  const int64_t saved_batch_size = current_batch_size_;
  module_->eval();
  NoGradGuard no_grad;
  HookScope scope(*this, LogContext::Eval);
  eval_means_.clear();
  num_eval_loaders_ = static_cast<int64_t>(loaders.size());
  const bool validating = stage == Stage::Validate;
  call_hooks(validating ? "on_validation_start" : "on_test_start", [&](Callback& c) {
    validating ? c.on_validation_start(*this, *module_) : c.on_test_start(*this, *module_);
  });
  call_hooks(validating ? "on_validation_epoch_start" : "on_test_epoch_start", [&](Callback& c) {
    validating ? c.on_validation_epoch_start(*this, *module_) : c.on_test_epoch_start(*this, *module_);
  });
  // One evaluation epoch over every loader in turn; the hooks above and below run once for all of them.
  for (size_t k = 0; k < loaders.size(); ++k) {
    data::DataLoader& loader = *loaders[k];
    const int64_t limit = limits[k];
    dataloader_idx_ = static_cast<int64_t>(k);
    num_eval_batches_ = limit;
    if (limit == 0) continue;
    loader.set_epoch(0);
    int64_t idx = 0;
    const char* next_name = validating ? "val_dataloader_next" : "test_dataloader_next";
    auto it = [&] {
      profiler::Range range(next_name);
      return loader.begin();
    }();
    for (; it != std::default_sentinel; next_batch(it, next_name)) {
      const data::Batch batch = to_device(*it);
      current_batch_size_ = batch_size_of(batch);
      call_hooks(validating ? "on_validation_batch_start" : "on_test_batch_start", [&](Callback& c) {
        validating ? c.on_validation_batch_start(*this, *module_, batch, idx)
                   : c.on_test_batch_start(*this, *module_, batch, idx);
      });
      Tensor out;
      {
        profiler::Range range(validating ? "validation_step" : "test_step");
        const auto autocast = autocast_guard();
        out = validating ? module_->validation_step(batch, idx, dataloader_idx_)
                         : module_->test_step(batch, idx, dataloader_idx_);
      }
      call_hooks(validating ? "on_validation_batch_end" : "on_test_batch_end", [&](Callback& c) {
        validating ? c.on_validation_batch_end(*this, *module_, out, batch, idx)
                   : c.on_test_batch_end(*this, *module_, out, batch, idx);
      });
      if (++idx == limit) break;  // (a limit of -1: all of a stream)
    }
  }
  current_batch_size_ = 1;
  dataloader_idx_ = 0, num_eval_loaders_ = 1;  // the epoch-end hooks log under their own names
  call_hooks(validating ? "on_validation_epoch_end" : "on_test_epoch_end", [&](Callback& c) {
    validating ? c.on_validation_epoch_end(*this, *module_) : c.on_test_epoch_end(*this, *module_);
  });
  std::map<std::string, double> metrics = finish_means(eval_means_);
  last_eval_metrics_ = metrics;
  send_to_loggers(metrics);
  call_hooks(validating ? "on_validation_end" : "on_test_end",
             [&](Callback& c) { validating ? c.on_validation_end(*this, *module_) : c.on_test_end(*this, *module_); });
  current_batch_size_ = saved_batch_size;
  module_->train(was_training);
  return metrics;
}

std::map<std::string, double> Trainer::run_eval(TrainModule& module, const std::vector<data::DataLoader*>& loaders,
                                                Stage stage, const std::string& ckpt_path) {
  for (size_t k = 0; k < loaders.size(); ++k) {
    KILN_CHECK(loaders[k] != nullptr, "Trainer: ", stage_name(stage), "(): loader ", k, " is null");
  }
  KILN_CHECK(!loaders.empty(), "Trainer: ", stage_name(stage), "(): no loader given");
  attach(module, stage);
  std::map<std::string, double> metrics;
  try {
    KILN_CHECK(!strategy_->is_server(), "Trainer: this process is a parameter server's server, which only serves: ",
               stage_name(stage), " runs on the workers");
    load_weights(module, ckpt_path);
    strategy_->setup(module);
    std::vector<data::DataLoader*> shards;  // this rank's parts under ddp
    std::vector<int64_t> limits;
    const BatchLimit& limit = stage == Stage::Test ? options_.limit_test_batches : options_.limit_val_batches;
    for (data::DataLoader* loader : loaders) {
      shards.push_back(strategy_->eval_loader(loader));
      limits.push_back(resolve_limit(limit, stage == Stage::Test ? "limit_test_batches" : "limit_val_batches",
                                     *shards.back()));
    }
    call_hooks("setup", [&](Callback& c) { c.setup(*this, module, stage); });
    metrics = eval_loop(shards, stage, limits);
    for (auto& logger : loggers_) logger->flush();
    call_hooks("teardown", [&](Callback& c) { c.teardown(*this, module, stage); });
    finish_profiler(stage);
  } catch (const std::exception& e) {
    notify_exception(e);
    detach();
    throw;
  } catch (...) {
    notify_exception(foreign_exception());
    detach();
    throw;
  }
  detach();
  return metrics;
}

std::map<std::string, double> Trainer::validate(TrainModule& module, data::DataLoader& loader,
                                                const std::string& ckpt_path) {
  return run_eval(module, {&loader}, Stage::Validate, ckpt_path);
}

std::map<std::string, double> Trainer::validate(TrainModule& module, const std::vector<data::DataLoader*>& loaders,
                                                const std::string& ckpt_path) {
  return run_eval(module, loaders, Stage::Validate, ckpt_path);
}

std::map<std::string, double> Trainer::test(TrainModule& module, data::DataLoader& loader,
                                            const std::string& ckpt_path) {
  return run_eval(module, {&loader}, Stage::Test, ckpt_path);
}

std::map<std::string, double> Trainer::test(TrainModule& module, const std::vector<data::DataLoader*>& loaders,
                                            const std::string& ckpt_path) {
  return run_eval(module, loaders, Stage::Test, ckpt_path);
}

std::vector<Tensor> Trainer::predict(TrainModule& module, data::DataLoader& loader, const std::string& ckpt_path,
                                     bool return_predictions) {
  attach(module, Stage::Predict);
  std::vector<Tensor> outputs;
  try {
    load_weights(module, ckpt_path);
    call_hooks("setup", [&](Callback& c) { c.setup(*this, module, Stage::Predict); });
    const bool was_training = module.is_training();
    module.eval();
    NoGradGuard no_grad;
    HookScope scope(*this, LogContext::Eval);
    num_eval_batches_ = resolve_limit(options_.limit_predict_batches, "limit_predict_batches", loader);
    call_hooks("on_predict_start", [&](Callback& c) { c.on_predict_start(*this, module); });
    call_hooks("on_predict_epoch_start", [&](Callback& c) { c.on_predict_epoch_start(*this, module); });
    if (num_eval_batches_ != 0) {
      loader.set_epoch(0);
      int64_t idx = 0;
      auto it = [&] {
        profiler::Range range("predict_dataloader_next");
        return loader.begin();
      }();
      for (; it != std::default_sentinel; next_batch(it, "predict_dataloader_next")) {
        const data::Batch batch = to_device(*it);
        call_hooks("on_predict_batch_start", [&](Callback& c) { c.on_predict_batch_start(*this, module, batch, idx); });
        Tensor out;
        {
          profiler::Range range("predict_step");
          const auto autocast = autocast_guard();
          out = module.predict_step(batch, idx);
        }
        call_hooks("on_predict_batch_end",
                   [&](Callback& c) { c.on_predict_batch_end(*this, module, out, batch, idx); });
        if (return_predictions) outputs.push_back(out.defined() ? out.cpu() : out);
        if (++idx == num_eval_batches_) break;
      }
    }
    call_hooks("on_predict_epoch_end", [&](Callback& c) { c.on_predict_epoch_end(*this, module); });
    call_hooks("on_predict_end", [&](Callback& c) { c.on_predict_end(*this, module); });
    module.train(was_training);
    call_hooks("teardown", [&](Callback& c) { c.teardown(*this, module, Stage::Predict); });
    finish_profiler(Stage::Predict);
  } catch (const std::exception& e) {
    notify_exception(e);
    detach();
    throw;
  } catch (...) {
    notify_exception(foreign_exception());
    detach();
    throw;
  }
  detach();
  return outputs;
}

}  // namespace kiln::trainer
