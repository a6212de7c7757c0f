// Manual optimization: the module's training_step runs backward and the optimizers' steps itself, through
// TrainModule::manual_backward and ManualOptimizer::step, which do what the Trainer's automatic step does around
// them (train_batch and optimizer_step in trainer.cpp): the loss scale and its overflow check under 16-mixed,
// the strategy's gradient averaging under ddp, the backward and optimizer-step hooks, and the step count.
//
// Also here: LBFGS, whose step takes a closure that it calls as often as its iterations and line search need.
// Under manual optimization the module passes its own closure to ManualOptimizer::step; the automatic loop
// makes the whole training step its closure (closure_batch), as Lightning does.
#include <algorithm>
#include <unordered_set>

#include "kiln/optim/clip_grad.h"
#include "kiln/optim/lbfgs.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

// ---- the module's side ----

std::vector<ManualOptimizer> TrainModule::optimizers() {
  Trainer& t = trainer();
  KILN_CHECK(t.stage() == Stage::Fit && !t.optimizers().empty(), type_name(),
             ": optimizers(): there are optimizers only while fit() runs, after configure_optimizers()");
  std::vector<ManualOptimizer> out;
  for (const auto& opt : t.optimizers()) out.emplace_back(t, opt);
  return out;
}

const std::vector<SchedulerConfig>& TrainModule::lr_schedulers() const { return trainer().schedulers(); }

void TrainModule::manual_backward(const Tensor& loss) { trainer().manual_backward(loss); }

void TrainModule::clip_gradients(const ManualOptimizer& optimizer, double max, const std::string& algorithm) {
  trainer().manual_clip_gradients(optimizer.optimizer(), max, algorithm);
}

void TrainModule::toggle_optimizer(const ManualOptimizer& optimizer) {
  KILN_CHECK(toggled_.empty(), type_name(), ": toggle_optimizer: another optimizer is toggled; call ",
             "untoggle_optimizer() first");
  std::unordered_set<const TensorImpl*> own;
  for (const auto& group : optimizer.optimizer().param_groups()) {
    for (const Tensor& p : group.params) own.insert(p.impl());
  }
  for (const Tensor& p : parameters()) {
    toggled_.emplace_back(p, p.requires_grad());
    if (!own.count(p.impl())) p.requires_grad_(false);
  }
}

void TrainModule::untoggle_optimizer() {
  for (const auto& [p, requires_grad] : toggled_) p.requires_grad_(requires_grad);
  toggled_.clear();
}

void ManualOptimizer::step() { trainer_->manual_optimizer_step(*optimizer_); }

Tensor ManualOptimizer::step(const Closure& closure) { return trainer_->manual_optimizer_step(*optimizer_, closure); }

// ---- the Trainer's side ----

bool Trainer::steps_by_closure() const {
  return optimizers_.size() == 1 && dynamic_cast<const optim::LBFGS*>(optimizers_[0].get()) != nullptr;
}

void Trainer::check_optimization() const {
  if (module_->automatic_optimization()) {
    const bool lbfgs = std::any_of(optimizers_.begin(), optimizers_.end(), [](const auto& opt) {
      return dynamic_cast<const optim::LBFGS*>(opt.get()) != nullptr;
    });
    if (!lbfgs) return;
    const std::string what = "configure_optimizers() returned LBFGS, whose closure the automatic loop makes of "
                             "the whole training step";
    const std::string instead = "; or turn automatic optimization off and call optimizers()[i].step(closure)";
    KILN_CHECK(optimizers_.size() == 1, "Trainer: ", what, ", so it must be the only optimizer, but there are ",
               optimizers_.size(), instead);
    KILN_CHECK(options_.accumulate_grad_batches == 1, "Trainer: ", what, ", which evaluates one batch at a time: ",
               "accumulate_grad_batches must be 1, not ", options_.accumulate_grad_batches, instead);
    KILN_CHECK(strategy_->supports_manual_optimization(), "Trainer: ", what, ", which strategy '",
               strategy_->name(), "' cannot run: its workers step through the servers; use 'ddp' or one process");
    KILN_CHECK(options_.precision != "16-mixed", "Trainer: ", what, " under precision '16-mixed': its line search ",
               "compares losses and gradients across calls, which a changing loss scale would break; use ",
               "'bf16-mixed' or '32'");
    return;
  }
  const std::string who = module_->type_name() + " turned automatic optimization off";
  KILN_CHECK(strategy_->supports_manual_optimization(), "Trainer: ", who, ", which strategy '", strategy_->name(),
             "' does not support: its workers step through the servers as a whole; use 'ddp' or one process");
  KILN_CHECK(options_.accumulate_grad_batches == 1, "Trainer: accumulate_grad_batches = ",
             options_.accumulate_grad_batches, ", but ", who, ": accumulate in training_step instead (step the ",
             "optimizers every k batches)");
  KILN_CHECK(options_.gradient_clip_val == 0, "Trainer: gradient_clip_val = ", options_.gradient_clip_val, ", but ",
             who, ": call clip_gradients(optimizer, max) in training_step instead");
}

// Checks that manual optimization's calls come from where they can work: training_step (or a training hook)
// of a fit whose module turned automatic optimization off.
#define KILN_CHECK_MANUAL(what)                                                                                 \
  KILN_CHECK(module_ != nullptr && stage_ == Stage::Fit && !module_->automatic_optimization(), "Trainer: ", what, \
             " is for manual optimization: turn automatic optimization off in the module (set_automatic_",       \
             "optimization(false)) and call it from training_step")

void Trainer::manual_backward(const Tensor& loss) {
  KILN_CHECK_MANUAL("manual_backward");
  KILN_CHECK(loss.defined() && loss.numel() == 1, "Trainer: manual_backward: expected the loss, a single value; got ",
             loss.defined() ? "shape " + shape_str(loss.shape()) : std::string("an undefined tensor"));
  KILN_CHECK(loss.requires_grad(), "Trainer: manual_backward: the loss does not require grad (computed under ",
             "NoGradGuard, or only from detached tensors or frozen parameters?)");
  const Tensor scaled = scaler_ ? scaler_->scale(loss) : loss;
  call_hooks("on_before_backward", [&](Callback& c) { c.on_before_backward(*this, *module_, scaled); });
  {
    profiler::Range range("backward");
    // training_step runs under mixed precision's autocast; backward must replay the dtypes forward chose, as
    // it does outside the guard in the automatic loop, not cast its own products again.
    AutocastGuard no_autocast(device_.type, kBFloat16, /*enabled=*/false);
    strategy_->manual_backward(scaled);
  }
  call_hooks("on_after_backward", [&](Callback& c) { c.on_after_backward(*this, *module_); });
}

void Trainer::manual_clip_gradients(optim::Optimizer& optimizer, double max, const std::string& algorithm) {
  KILN_CHECK_MANUAL("clip_gradients");
  KILN_CHECK(max > 0, "Trainer: clip_gradients: max = ", max, ": expected > 0");
  KILN_CHECK(algorithm == "norm" || algorithm == "value", "Trainer: clip_gradients: algorithm '", algorithm,
             "': expected 'norm' or 'value'");
  // Clipping is defined on the true gradients: unscale them first (step() will not unscale them twice).
  if (scaler_ && !scaler_->unscaled(optimizer)) scaler_->unscale_(optimizer);
  clip_gradients(optimizer, max, algorithm);
}

void Trainer::manual_optimizer_step(optim::Optimizer& optimizer) {
  KILN_CHECK_MANUAL("ManualOptimizer::step");
  profiler::Range step_range("optimizer_step");
  AutocastGuard no_autocast(device_.type, kBFloat16, /*enabled=*/false);  // the step runs as in the automatic loop
  strategy_->before_optimizer_step(*module_, true);
  step_one(optimizer, /*clip_val=*/0);  // clipping is the module's (clip_gradients)
  // One scaler update per step, as Lightning's mixed precision does under manual optimization: each
  // optimizer's step is an iteration of its own.
  if (scaler_) scaler_->update();
  ++global_step_;
}

Tensor Trainer::manual_optimizer_step(optim::Optimizer& optimizer, const std::function<Tensor()>& closure) {
  KILN_CHECK_MANUAL("ManualOptimizer::step(closure)");
  KILN_CHECK(closure != nullptr, "Trainer: ManualOptimizer::step(closure): the closure is empty");
  auto* lbfgs = dynamic_cast<optim::LBFGS*>(&optimizer);
  if (lbfgs == nullptr) {
    const Tensor loss = closure();  // its manual_backward leaves the gradients the step below uses
    manual_optimizer_step(optimizer);
    return loss;
  }
  // LBFGS calls the closure as often as its iterations and line search need, each a complete manual_backward
  // (averaged over ranks under ddp); what it steps on is whatever the last call left.
  KILN_CHECK(!scaler_, "Trainer: LBFGS under precision '16-mixed': its line search compares losses and ",
             "gradients across calls, which a changing loss scale would break; use 'bf16-mixed' or '32'");
  call_hooks("on_before_optimizer_step", [&](Callback& c) { c.on_before_optimizer_step(*this, *module_, optimizer); });
  const Tensor loss = closure_step(*lbfgs, closure);
  ++global_step_;
  return loss;
}

// LBFGS decides from the loss and the gradients how often it calls the closure, and each call under ddp is an
// all-reduce round. The gradients are the mean over the ranks already; the loss is each rank's own, so it is
// averaged here too: every rank then takes the same decisions and makes as many calls (a rank that made one
// call more would wait on an all-reduce the others never start).
Tensor Trainer::closure_step(optim::Optimizer& lbfgs, const std::function<Tensor()>& evaluate) {
  profiler::Range range("optimizer.step");
  const int world = strategy_->world_size();
  return static_cast<optim::LBFGS&>(lbfgs).step([&] {
    const Tensor loss = evaluate();
    if (world == 1 || !loss.defined() || loss.numel() != 1) return loss;  // LBFGS names what is wrong
    std::vector<double> sum = {loss.detach().item<double>()};
    strategy_->all_reduce_sum(sum);
    return full({}, sum[0] / world, TensorOptions(loss.dtype()).device(loss.device()));
  });
}

// The automatic loop's step with LBFGS. Each call of the closure is what one batch of the automatic loop does
// with accumulate_grad_batches = 1, in Lightning's order: zero_grad, training_step, backward (a whole ddp
// round), then on_before_optimizer_step and clipping, which LBFGS's direction then uses. training_step's logs
// come from every call (the step value is the last one's; an epoch mean counts each call), as in Lightning.
Tensor Trainer::closure_batch(const data::Batch& batch, int64_t batch_idx) {
  optim::Optimizer& opt = *optimizers_[0];
  Tensor last;
  auto evaluate = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      HookScope scope(*this, LogContext::TrainStep);
      strategy_->before_training_step();
      {
        profiler::Range range("training_step");
        const auto autocast = autocast_guard();
        loss = module_->training_step(batch, batch_idx);
      }
      KILN_CHECK(loss.defined(), "Trainer: training_step returned no loss at batch ", batch_idx, "; LBFGS ",
                 "evaluates the training step several times per batch and cannot skip one");
      strategy_->after_training_step(loss);
    }
    check_training_loss(loss, batch_idx);
    call_hooks("on_before_backward", [&](Callback& c) { c.on_before_backward(*this, *module_, loss); });
    {
      profiler::Range range("backward");
      strategy_->backward(loss, /*sync=*/true);
    }
    call_hooks("on_after_backward", [&](Callback& c) { c.on_after_backward(*this, *module_); });
    strategy_->before_optimizer_step(*module_, /*synced=*/true);
    call_hooks("on_before_optimizer_step", [&](Callback& c) { c.on_before_optimizer_step(*this, *module_, opt); });
    if (options_.gradient_clip_val > 0) clip_gradients(opt, options_.gradient_clip_val, options_.gradient_clip_algorithm);
    last = loss;
    return loss;
  };
  closure_step(opt, evaluate);
  call_hooks("on_before_zero_grad", [&](Callback& c) { c.on_before_zero_grad(*this, *module_, opt); });
  {
    profiler::Range range("zero_grad");
    opt.zero_grad();
  }
  last_backward_synced_ = true;
  ++global_step_;
  step_schedulers("step");
  return last;
}

#undef KILN_CHECK_MANUAL

void Trainer::clip_gradients(const optim::Optimizer& optimizer, double max, const std::string& algorithm) {
  profiler::Range range("clip_gradients");
  std::vector<Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params) params.push_back(p);
  }
  if (algorithm == "norm") {
    optim::clip_grad_norm_(params, max);
  } else {
    optim::clip_grad_value_(params, max);
  }
}

}  // namespace kiln::trainer
