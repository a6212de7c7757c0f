// LambdaCallback: a callback made of functions, for the one-off hook that does not deserve a class (Lightning's
// LambdaCallback). Give the hooks you need; the others do nothing.
//
//   trainer::LambdaHooks hooks;
//   hooks.on_train_epoch_end = [](trainer::Trainer& t, trainer::TrainModule&) {
//     std::printf("epoch %lld done\n", static_cast<long long>(t.current_epoch()));
//   };
//   options.callbacks.push_back(std::make_shared<trainer::LambdaCallback>(hooks));
//
// Each function takes the arguments of the Callback hook of the same name (callback.h). A LambdaCallback keeps no
// state in checkpoints; its state_key is "LambdaCallback", or the name given, so that several in one run can be
// told apart in profiles.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct LambdaHooks {
  using Run = std::function<void(Trainer&, TrainModule&)>;
  using Staged = std::function<void(Trainer&, TrainModule&, Stage)>;
  using BatchStart = std::function<void(Trainer&, TrainModule&, const data::Batch&, int64_t)>;
  using BatchEnd = std::function<void(Trainer&, TrainModule&, const Tensor&, const data::Batch&, int64_t)>;
  using OptimizerHook = std::function<void(Trainer&, TrainModule&, optim::Optimizer&)>;

  Staged setup, teardown;
  Run on_fit_start, on_fit_end, on_sanity_check_start, on_sanity_check_end;
  Run on_train_start, on_train_end, on_train_epoch_start, on_train_epoch_end;
  BatchStart on_train_batch_start;
  BatchEnd on_train_batch_end;
  Run on_validation_start, on_validation_end, on_validation_epoch_start, on_validation_epoch_end;
  BatchStart on_validation_batch_start;
  BatchEnd on_validation_batch_end;
  Run on_test_start, on_test_end, on_test_epoch_start, on_test_epoch_end;
  BatchStart on_test_batch_start;
  BatchEnd on_test_batch_end;
  Run on_predict_start, on_predict_end, on_predict_epoch_start, on_predict_epoch_end;
  BatchStart on_predict_batch_start;
  BatchEnd on_predict_batch_end;
  std::function<void(Trainer&, TrainModule&, const Tensor&)> on_before_backward;
  Run on_after_backward;
  OptimizerHook on_before_optimizer_step, on_before_zero_grad;
  std::function<void(Trainer&, TrainModule&, Checkpoint&)> on_save_checkpoint;
  std::function<void(Trainer&, TrainModule&, const Checkpoint&)> on_load_checkpoint;
  std::function<void(Trainer&, TrainModule&, const std::exception&)> on_exception;
};

class LambdaCallback final : public Callback {
 public:
  explicit LambdaCallback(LambdaHooks hooks, std::string name = "LambdaCallback")
      : hooks_(std::move(hooks)), name_(std::move(name)) {}
  std::string state_key() const override { return name_; }
  const LambdaHooks& hooks() const { return hooks_; }

  void setup(Trainer& t, TrainModule& m, Stage s) override { call(hooks_.setup, t, m, s); }
  void teardown(Trainer& t, TrainModule& m, Stage s) override { call(hooks_.teardown, t, m, s); }
  void on_fit_start(Trainer& t, TrainModule& m) override { call(hooks_.on_fit_start, t, m); }
  void on_fit_end(Trainer& t, TrainModule& m) override { call(hooks_.on_fit_end, t, m); }
  void on_sanity_check_start(Trainer& t, TrainModule& m) override { call(hooks_.on_sanity_check_start, t, m); }
  void on_sanity_check_end(Trainer& t, TrainModule& m) override { call(hooks_.on_sanity_check_end, t, m); }
  void on_train_start(Trainer& t, TrainModule& m) override { call(hooks_.on_train_start, t, m); }
  void on_train_end(Trainer& t, TrainModule& m) override { call(hooks_.on_train_end, t, m); }
  void on_train_epoch_start(Trainer& t, TrainModule& m) override { call(hooks_.on_train_epoch_start, t, m); }
  void on_train_epoch_end(Trainer& t, TrainModule& m) override { call(hooks_.on_train_epoch_end, t, m); }
  void on_train_batch_start(Trainer& t, TrainModule& m, const data::Batch& b, int64_t i) override {
    call(hooks_.on_train_batch_start, t, m, b, i);
  }
  void on_train_batch_end(Trainer& t, TrainModule& m, const Tensor& loss, const data::Batch& b, int64_t i) override {
    call(hooks_.on_train_batch_end, t, m, loss, b, i);
  }
  void on_validation_start(Trainer& t, TrainModule& m) override { call(hooks_.on_validation_start, t, m); }
  void on_validation_end(Trainer& t, TrainModule& m) override { call(hooks_.on_validation_end, t, m); }
  void on_validation_epoch_start(Trainer& t, TrainModule& m) override { call(hooks_.on_validation_epoch_start, t, m); }
  void on_validation_epoch_end(Trainer& t, TrainModule& m) override { call(hooks_.on_validation_epoch_end, t, m); }
  void on_validation_batch_start(Trainer& t, TrainModule& m, const data::Batch& b, int64_t i) override {
    call(hooks_.on_validation_batch_start, t, m, b, i);
  }
  void on_validation_batch_end(Trainer& t, TrainModule& m, const Tensor& out, const data::Batch& b,
                               int64_t i) override {
    call(hooks_.on_validation_batch_end, t, m, out, b, i);
  }
  void on_test_start(Trainer& t, TrainModule& m) override { call(hooks_.on_test_start, t, m); }
  void on_test_end(Trainer& t, TrainModule& m) override { call(hooks_.on_test_end, t, m); }
  void on_test_epoch_start(Trainer& t, TrainModule& m) override { call(hooks_.on_test_epoch_start, t, m); }
  void on_test_epoch_end(Trainer& t, TrainModule& m) override { call(hooks_.on_test_epoch_end, t, m); }
  void on_test_batch_start(Trainer& t, TrainModule& m, const data::Batch& b, int64_t i) override {
    call(hooks_.on_test_batch_start, t, m, b, i);
  }
  void on_test_batch_end(Trainer& t, TrainModule& m, const Tensor& out, const data::Batch& b, int64_t i) override {
    call(hooks_.on_test_batch_end, t, m, out, b, i);
  }
  void on_predict_start(Trainer& t, TrainModule& m) override { call(hooks_.on_predict_start, t, m); }
  void on_predict_end(Trainer& t, TrainModule& m) override { call(hooks_.on_predict_end, t, m); }
  void on_predict_epoch_start(Trainer& t, TrainModule& m) override { call(hooks_.on_predict_epoch_start, t, m); }
  void on_predict_epoch_end(Trainer& t, TrainModule& m) override { call(hooks_.on_predict_epoch_end, t, m); }
  void on_predict_batch_start(Trainer& t, TrainModule& m, const data::Batch& b, int64_t i) override {
    call(hooks_.on_predict_batch_start, t, m, b, i);
  }
  void on_predict_batch_end(Trainer& t, TrainModule& m, const Tensor& out, const data::Batch& b, int64_t i) override {
    call(hooks_.on_predict_batch_end, t, m, out, b, i);
  }
  void on_before_backward(Trainer& t, TrainModule& m, const Tensor& loss) override {
    call(hooks_.on_before_backward, t, m, loss);
  }
  void on_after_backward(Trainer& t, TrainModule& m) override { call(hooks_.on_after_backward, t, m); }
  void on_before_optimizer_step(Trainer& t, TrainModule& m, optim::Optimizer& o) override {
    call(hooks_.on_before_optimizer_step, t, m, o);
  }
  void on_before_zero_grad(Trainer& t, TrainModule& m, optim::Optimizer& o) override {
    call(hooks_.on_before_zero_grad, t, m, o);
  }
  void on_save_checkpoint(Trainer& t, TrainModule& m, Checkpoint& c) override {
    call(hooks_.on_save_checkpoint, t, m, c);
  }
  void on_load_checkpoint(Trainer& t, TrainModule& m, const Checkpoint& c) override {
    call(hooks_.on_load_checkpoint, t, m, c);
  }
  void on_exception(Trainer& t, TrainModule& m, const std::exception& e) override {
    call(hooks_.on_exception, t, m, e);
  }

 private:
  template <class F, class... Args>
  static void call(const F& f, Args&&... args) {
    if (f) f(std::forward<Args>(args)...);
  }
  LambdaHooks hooks_;
  std::string name_;
};

}  // namespace kiln::trainer
