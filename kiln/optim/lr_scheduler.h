// Learning-rate schedulers, as torch.optim.lr_scheduler: each one sets the "lr" of every group of an optimizer.
//
// Every epoch-based scheduler here is a closed form lr_at(epoch, group) of the group's base lr (its lr when the
// first scheduler was made on the optimizer, kept in the group as "initial_lr", as PyTorch does). PyTorch's
// step() mostly uses recursive forms (lr_t from lr_{t-1}); the values agree up to rounding, and the closed
// form lets SequentialLR restart a scheduler at any epoch without replaying it.
//
// Construction takes the first step (epoch 0), as in PyTorch: right after `StepLR s(opt, 10)` the groups hold
// the epoch-0 lr. Call step() once per epoch (or per batch, for OneCycleLR and CyclicLR) after optimizer.step().
// A scheduler keeps a reference to its optimizer, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// A scheduler's state: "last_epoch", "base_lrs.<g>", "last_lrs.<g>" and the scheduler's own counters.
using SchedulerState = std::map<std::string, double>;

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Moves to the next epoch and sets the lr of every group it was made for. Groups added to the optimizer
  // afterwards (BackboneFinetuning's) are left alone: kiln's rule for every scheduler (PyTorch's LambdaLR and
  // CosineAnnealingLR do the same, its StepLR-like ones scale every group). OneCycleLR's and CyclicLR's
  // momentum still goes to every group.
  void step();
  // The lr of each group as the last step() set it.
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  // The lr of group g at `epoch` (epoch 0 is the lr right after construction).
  virtual double lr_at(int64_t epoch, size_t group) const = 0;
  virtual const char* name() const = 0;

  virtual SchedulerState state_dict() const;
  // Restores the epoch counter and lrs (not the groups' lr: the optimizer's own state_dict holds those).
  virtual void load_state_dict(const SchedulerState& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Derived constructors call this last: epoch 0, and the groups get its lr.
  void initial_step() { step(); }
  // Sets what else a scheduler drives at `epoch` besides lr (OneCycleLR's momentum); nothing by default.
  virtual void apply_extras(int64_t epoch) {}
  friend class SequentialLR;
  friend class ChainedScheduler;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
  int64_t last_epoch_ = -1;
};

// lr = base * gamma^floor(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "StepLR"; }

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base * gamma^(number of milestones <= epoch); a milestone given twice counts twice.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "MultiStepLR"; }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr = base * gamma^epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "ExponentialLR"; }

 private:
  double gamma_;
};

// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2   (the closed form; periodic past T_max)
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "CosineAnnealingLR"; }

 private:
  int64_t T_max_;
  double eta_min_;
};

// lr = base * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters)
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "LinearLR"; }

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// lr = base * factor until epoch total_iters, then base (a warm-up at a constant fraction of the lr)
class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3.0, int64_t total_iters = 5);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "ConstantLR"; }

 private:
  double factor_;
  int64_t total_iters_;
};

// lr = base * (1 - min(epoch, total_iters) / total_iters)^power   (0 from total_iters on)
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "PolynomialLR"; }

 private:
  int64_t total_iters_;
  double power_;
};

// lr = base * lambda(epoch), with one function for every group or one per group, as torch's LambdaLR. The
// functions are code, not state: state_dict() holds the epoch, and a resumed run passes the same functions.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  LambdaLR(Optimizer& optimizer, Lambda lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "LambdaLR"; }

 private:
  std::vector<Lambda> lambdas_;
};

// lr = base * lambda(1) * lambda(2) * ... * lambda(epoch), as torch's MultiplicativeLR (which multiplies the
// lr by lambda(epoch) at each step from epoch 1 on). The products are kept as they are first asked for, so a
// per-batch schedule costs one multiplication a step.
class MultiplicativeLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  MultiplicativeLR(Optimizer& optimizer, Lambda lambda);
  MultiplicativeLR(Optimizer& optimizer, std::vector<Lambda> lambdas);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "MultiplicativeLR"; }

 private:
  std::vector<Lambda> lambdas_;
  mutable std::vector<std::vector<double>> products_;  // per group: the product up to each epoch (0: 1)
};

// SGDR (Loshchilov & Hutter), as torch's CosineAnnealingWarmRestarts: cosine annealing from base to eta_min
// over T_i epochs, then a restart at base; T_0 the first period, each next one T_mult times longer.
//   lr = eta_min + (base - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2
// where T_cur is the epoch's place in its period (T_mult = 1: epoch mod T_0; else with
// n = floor(log(epoch / T_0 * (T_mult - 1) + 1) / log(T_mult)): T_i = T_0 T_mult^n and
// T_cur = epoch - T_0 (T_mult^n - 1) / (T_mult - 1)). Step it per epoch, or per batch for restarts mid-epoch.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1, double eta_min = 0.0);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "CosineAnnealingWarmRestarts"; }

 private:
  int64_t T_0_, T_mult_;
  double eta_min_;
};

struct CyclicOptions {
  double base_lr = 0.0;          // the bottom of the cycle, for every group
  double max_lr = 0.0;           // the top of the cycle, for every group (required)
  int64_t step_size_up = 2000;   // steps from base_lr up to max_lr
  int64_t step_size_down = 0;    // steps back down; 0: step_size_up
  std::string mode = "triangular";  // "triangular", "triangular2" (the height halves each cycle), "exp_range"
  double gamma = 1.0;               // exp_range: the height is scaled by gamma^step
  bool cycle_momentum = true;       // momentum (or Adam's beta1) moves opposite to lr
  double base_momentum = 0.8;
  double max_momentum = 0.9;
};

// Cyclical learning rates (Smith 2017), as torch's CyclicLR, stepped once per batch. With C = up + down steps,
// cycle = floor(1 + t / C), x = 1 + t / C - cycle and r = up / C: scale = x / r while x <= r, else
// (x - 1) / (r - 1); lr = base_lr + (max_lr - base_lr) * scale * f, where f is 1 (triangular),
// 1 / 2^(cycle - 1) (triangular2) or gamma^t (exp_range). Momentum, when cycled:
// max_momentum - (max_momentum - base_momentum) * scale * f. Like OneCycleLR, it sets each group's lr itself.
class CyclicLR : public LRScheduler {
 public:
  CyclicLR(Optimizer& optimizer, CyclicOptions options);
  double lr_at(int64_t epoch, size_t group) const override;
  double momentum_at(int64_t epoch) const;
  const char* name() const override { return "CyclicLR"; }

 protected:
  void apply_extras(int64_t epoch) override;

 private:
  // scale * f at step t: where lr sits between base_lr (0) and max_lr (1).
  double height_at(int64_t epoch) const;

  CyclicOptions options_;
  std::string momentum_key_;  // "momentum" or "beta1"
};

struct OneCycleOptions {
  double max_lr = 0.0;       // the peak lr of every group (required)
  int64_t total_steps = 0;   // step() calls in the whole cycle (required)
  double pct_start = 0.3;    // the part of the cycle spent rising
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  bool cycle_momentum = true;           // momentum (or Adam's beta1) moves opposite to lr
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;        // initial lr = max_lr / div_factor
  double final_div_factor = 1e4;   // min lr = initial lr / final_div_factor
  bool three_phase = false;        // rise, fall back to the initial lr, then anneal to the min lr
};

// The 1cycle policy (Smith & Topin), as torch.optim.lr_scheduler.OneCycleLR: phases that anneal lr between
// initial = max_lr / div_factor, max_lr and min = initial / final_div_factor. Two phases (rise until step
// pct_start * total_steps - 1, then fall to min at total_steps - 1) or three (rise; fall to initial at
// 2 * pct_start * total_steps - 2; fall to min at total_steps - 1). Within a phase, with pct the fraction of it
// done, cos: end + (start - end) * (1 + cos(pi * pct)) / 2; linear: start + (end - start) * pct.
// Stepping past total_steps is an error.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleOptions options);
  double lr_at(int64_t epoch, size_t group) const override;
  double momentum_at(int64_t epoch) const;
  const char* name() const override { return "OneCycleLR"; }

 protected:
  void apply_extras(int64_t epoch) override;

 private:
  // A phase ends at end_step; lr goes from lrs[lr_from] to lrs[lr_to] (lrs: initial, max, min) and momentum
  // from moms[m_from] to moms[m_to] (moms: max_momentum, base_momentum).
  struct Phase {
    double end_step;
    int lr_from, lr_to, m_from, m_to;
  };
  // The value at `epoch` of lr (values = lrs, momentum false) or momentum (values = moms, momentum true).
  double anneal_at(int64_t epoch, const double* values, bool momentum) const;

  OneCycleOptions options_;
  std::vector<Phase> phases_;
  std::string momentum_key_;  // "momentum" or "beta1"
};

// Runs schedulers one after another: scheduler k from milestone k-1 on, restarted at its epoch 0 there.
//   SequentialLR s(opt, {std::make_shared<LinearLR>(opt, 0.1, 1.0, 5),
//                        std::make_shared<CosineAnnealingLR>(opt, 95)}, {5});
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "SequentialLR"; }

 protected:
  void apply_extras(int64_t epoch) override;

 private:
  // The scheduler that runs at `epoch` and its own epoch there.
  std::pair<LRScheduler*, int64_t> locate(int64_t epoch) const;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Applies several schedulers at once, their factors multiplied: the lr at epoch t is
// base x prod_k (lr_k(t) / base), where lr_k is scheduler k's own lr and base the group's initial_lr (which
// every scheduler of an optimizer shares). torch.optim.lr_scheduler.ChainedScheduler instead steps each
// scheduler in turn on the lr the previous ones left. The two agree for the schedulers whose steps scale the
// lr (StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR, MultiplicativeLR, and
// CosineAnnealingLR with eta_min 0 up to T_max); they differ where torch's scheduler sets the lr outright
// (LambdaLR, CosineAnnealingWarmRestarts, which in torch's chain discard the factors before them), and for
// CosineAnnealingLR with eta_min or past T_max. Here every scheduler is a factor.
//   ChainedScheduler s(opt, {std::make_shared<ConstantLR>(opt, 0.1, 2), std::make_shared<ExponentialLR>(opt, 0.9)});
// OneCycleLR and CyclicLR (which own the groups' base lrs) are refused; what a scheduler drives besides the
// lr (momentum, from one inside a SequentialLR) is applied in the chain's order. Step only the chain.
class ChainedScheduler : public LRScheduler {
 public:
  ChainedScheduler(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers);
  double lr_at(int64_t epoch, size_t group) const override;
  const char* name() const override { return "ChainedScheduler"; }

 protected:
  void apply_extras(int64_t epoch) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

struct ReduceLROnPlateauOptions {
  std::string mode = "min";            // "min": lower metric is better; "max": higher is better
  double factor = 0.1;                 // new lr = max(lr * factor, min_lr)
  int64_t patience = 10;               // bad epochs allowed before the lr drops
  double threshold = 1e-4;             // how much better counts as better
  std::string threshold_mode = "rel";  // "rel": best * (1 -/+ threshold); "abs": best -/+ threshold
  int64_t cooldown = 0;                // epochs after a drop during which bad epochs are not counted
  double min_lr = 0.0;
  double eps = 1e-8;                   // drops smaller than this are skipped
};

// Drops every group's lr by `factor` once the metric has not improved for more than `patience` steps, as
// torch.optim.lr_scheduler.ReduceLROnPlateau. Unlike the schedulers above it is driven by step(metric).
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }

  // "best", "num_bad_epochs", "cooldown_counter", "last_epoch", "last_lrs.<g>"
  SchedulerState state_dict() const;
  void load_state_dict(const SchedulerState& state);

 private:
  bool is_better(double a) const;

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lrs_;
};

}  // namespace kiln::optim
