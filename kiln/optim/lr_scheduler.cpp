// The LR schedulers; see lr_scheduler.h for each one's closed form.
#include "kiln/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln::optim {

// ---- LRScheduler ----

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& g : optimizer_.param_groups()) {
    // The first scheduler made on an optimizer records each group's starting lr; later ones reuse it.
    if (!g.options.count("initial_lr")) g.options["initial_lr"] = g.lr();
    base_lrs_.push_back(g.get("initial_lr"));
  }
}

void LRScheduler::step() {
  ++last_epoch_;
  auto& groups = optimizer_.param_groups();
  // Groups added after the scheduler was made (BackboneFinetuning's) are left alone (see step() in the
  // header); fewer groups than it was made for is an error.
  KILN_CHECK(groups.size() >= base_lrs_.size(), name(), ": the optimizer has ", groups.size(),
             " parameter groups, but the scheduler was made for ", base_lrs_.size());
  last_lrs_.assign(base_lrs_.size(), 0.0);
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    last_lrs_[g] = lr_at(last_epoch_, g);
    groups[g].set_lr(last_lrs_[g]);
  }
  apply_extras(last_epoch_);
}

SchedulerState LRScheduler::state_dict() const {
  SchedulerState s;
  s["last_epoch"] = static_cast<double>(last_epoch_);
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    s["base_lrs." + std::to_string(g)] = base_lrs_[g];
    s["last_lrs." + std::to_string(g)] = g < last_lrs_.size() ? last_lrs_[g] : base_lrs_[g];
  }
  return s;
}

namespace {
double state_value(const SchedulerState& s, const char* op, const std::string& key) {
  auto it = s.find(key);
  KILN_CHECK(it != s.end(), op, ".load_state_dict: '", key, "' is missing");
  return it->second;
}
}  // namespace

void LRScheduler::load_state_dict(const SchedulerState& s) {
  int64_t epoch = static_cast<int64_t>(state_value(s, name(), "last_epoch"));
  std::vector<double> base(base_lrs_.size()), last(base_lrs_.size());
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    base[g] = state_value(s, name(), "base_lrs." + std::to_string(g));
    last[g] = state_value(s, name(), "last_lrs." + std::to_string(g));
  }
  KILN_CHECK(!s.count("base_lrs." + std::to_string(base_lrs_.size())), name(),
             ".load_state_dict: the state has more parameter groups than the scheduler's ", base_lrs_.size());
  last_epoch_ = epoch;
  base_lrs_ = std::move(base);
  last_lrs_ = std::move(last);
}

// ---- StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR ----

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  initial_step();
}

double StepLR::lr_at(int64_t epoch, size_t group) const {
  return base_lrs_[group] * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

double MultiStepLR::lr_at(int64_t epoch, size_t group) const {
  auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lrs_[group] * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

double ExponentialLR::lr_at(int64_t epoch, size_t group) const {
  return base_lrs_[group] * std::pow(gamma_, static_cast<double>(epoch));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", T_max);
  initial_step();
}

double CosineAnnealingLR::lr_at(int64_t epoch, size_t group) const {
  double t = static_cast<double>(epoch) / static_cast<double>(T_max_);
  return eta_min_ + (base_lrs_[group] - eta_min_) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  KILN_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  KILN_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  KILN_CHECK(total_iters >= 1, "LinearLR: total_iters must be >= 1, got ", total_iters);
  initial_step();
}

double LinearLR::lr_at(int64_t epoch, size_t group) const {
  double done = static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lrs_[group] * (start_factor_ + (end_factor_ - start_factor_) * done);
}

// ---- ConstantLR, PolynomialLR, LambdaLR, CosineAnnealingWarmRestarts ----

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  KILN_CHECK(factor >= 0 && factor <= 1, "ConstantLR: factor must be in [0, 1], got ", factor);
  KILN_CHECK(total_iters >= 0, "ConstantLR: total_iters must be >= 0, got ", total_iters);
  initial_step();
}

double ConstantLR::lr_at(int64_t epoch, size_t group) const {
  return epoch < total_iters_ ? base_lrs_[group] * factor_ : base_lrs_[group];
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer), total_iters_(total_iters), power_(power) {
  KILN_CHECK(total_iters >= 1, "PolynomialLR: total_iters must be >= 1, got ", total_iters);
  KILN_CHECK(power >= 0, "PolynomialLR: power must be >= 0, got ", power);
  initial_step();
}

double PolynomialLR::lr_at(int64_t epoch, size_t group) const {
  const double left = 1.0 - static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lrs_[group] * std::pow(left, power_);
}

namespace {
// LambdaLR's and MultiplicativeLR's functions: one per parameter group, none empty.
void check_functions(const char* who, const std::vector<std::function<double(int64_t)>>& fns, size_t groups) {
  KILN_CHECK(fns.size() == groups, who, ": got ", fns.size(), " functions for ", groups,
             " parameter groups; expected one, or one per group");
  for (size_t g = 0; g < fns.size(); ++g) KILN_CHECK(fns[g] != nullptr, who, ": function ", g, " is empty");
}
}  // namespace

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), std::move(lambda))) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lambdas)) {
  check_functions("LambdaLR", lambdas_, base_lrs_.size());
  initial_step();
}

double LambdaLR::lr_at(int64_t epoch, size_t group) const { return base_lrs_[group] * lambdas_[group](epoch); }

MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, Lambda lambda)
    : MultiplicativeLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), std::move(lambda))) {}

MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, std::vector<Lambda> lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lambdas)), products_(lambdas_.size(), std::vector<double>{1.0}) {
  check_functions("MultiplicativeLR", lambdas_, base_lrs_.size());
  initial_step();
}

double MultiplicativeLR::lr_at(int64_t epoch, size_t group) const {
  KILN_CHECK(epoch >= 0, "MultiplicativeLR: epoch ", epoch, " is negative");
  std::vector<double>& p = products_[group];
  while (static_cast<int64_t>(p.size()) <= epoch) {
    const auto e = static_cast<int64_t>(p.size());
    p.push_back(p.back() * lambdas_[group](e));
  }
  return base_lrs_[group] * p[static_cast<size_t>(epoch)];
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult,
                                                         double eta_min)
    : LRScheduler(optimizer), T_0_(T_0), T_mult_(T_mult), eta_min_(eta_min) {
  KILN_CHECK(T_0 >= 1, "CosineAnnealingWarmRestarts: T_0 must be >= 1, got ", T_0);
  KILN_CHECK(T_mult >= 1, "CosineAnnealingWarmRestarts: T_mult must be >= 1, got ", T_mult);
  initial_step();
}

double CosineAnnealingWarmRestarts::lr_at(int64_t epoch, size_t group) const {
  int64_t t_cur = epoch % T_0_, t_i = T_0_;
  if (T_mult_ > 1 && epoch >= T_0_) {
    // The period n that holds epoch: the first n periods span T_0 (T_mult^n - 1) / (T_mult - 1) epochs. The log
    // gives n; the integer loops correct it where rounding put epoch on the wrong side of a restart.
    const double m = static_cast<double>(T_mult_);
    auto n = static_cast<int64_t>(std::log(static_cast<double>(epoch) / T_0_ * (m - 1) + 1) / std::log(m));
    auto start = [&](int64_t k) {  // the first epoch of period k
      int64_t p = 1;
      for (int64_t i = 0; i < k; ++i) p *= T_mult_;
      return T_0_ * (p - 1) / (T_mult_ - 1);
    };
    while (n > 0 && start(n) > epoch) --n;
    while (start(n + 1) <= epoch) ++n;
    t_cur = epoch - start(n);
    t_i = start(n + 1) - start(n);
  }
  const double t = static_cast<double>(t_cur) / static_cast<double>(t_i);
  return eta_min_ + (base_lrs_[group] - eta_min_) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0;
}

namespace {
// The option a scheduler that cycles momentum drives: Adam's "beta1", else "momentum"; an error when neither.
std::string momentum_key(const Optimizer& optimizer, const char* op) {
  const auto& opts = optimizer.param_groups().front().options;
  std::string key = opts.count("beta1") ? "beta1" : opts.count("momentum") ? "momentum" : "";
  KILN_CHECK(!key.empty(), op, ": cycle_momentum needs an optimizer with momentum or betas (", optimizer.name(),
             " has neither); set cycle_momentum = false");
  return key;
}
}  // namespace

// ---- CyclicLR ----

CyclicLR::CyclicLR(Optimizer& optimizer, CyclicOptions options) : LRScheduler(optimizer), options_(std::move(options)) {
  auto& o = options_;
  KILN_CHECK(o.base_lr >= 0 && o.max_lr > 0, "CyclicLR: base_lr must be >= 0 and max_lr > 0, got ", o.base_lr,
             " and ", o.max_lr);
  KILN_CHECK(o.step_size_up >= 1 && o.step_size_down >= 0, "CyclicLR: step_size_up must be >= 1 and step_size_down ",
             ">= 0 (0: as up), got ", o.step_size_up, " and ", o.step_size_down);
  KILN_CHECK(o.mode == "triangular" || o.mode == "triangular2" || o.mode == "exp_range",
             "CyclicLR: mode must be \"triangular\", \"triangular2\" or \"exp_range\", got \"", o.mode, "\"");
  if (o.step_size_down == 0) o.step_size_down = o.step_size_up;
  if (o.cycle_momentum) momentum_key_ = momentum_key(optimizer, "CyclicLR");
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    base_lrs_[g] = o.base_lr;
    optimizer.param_groups()[g].options["initial_lr"] = o.base_lr;
  }
  initial_step();
}

double CyclicLR::height_at(int64_t epoch) const {
  const auto& o = options_;
  const double total = static_cast<double>(o.step_size_up + o.step_size_down);
  const double ratio = static_cast<double>(o.step_size_up) / total, t = static_cast<double>(epoch);
  const double cycle = std::floor(1.0 + t / total);
  const double x = 1.0 + t / total - cycle;
  const double scale = x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
  if (o.mode == "triangular2") return scale / std::pow(2.0, cycle - 1.0);
  if (o.mode == "exp_range") return scale * std::pow(o.gamma, t);
  return scale;
}

double CyclicLR::lr_at(int64_t epoch, size_t group) const {
  return base_lrs_[group] + (options_.max_lr - base_lrs_[group]) * height_at(epoch);
}

double CyclicLR::momentum_at(int64_t epoch) const {
  return options_.max_momentum - (options_.max_momentum - options_.base_momentum) * height_at(epoch);
}

void CyclicLR::apply_extras(int64_t epoch) {
  if (!options_.cycle_momentum) return;
  const double m = momentum_at(epoch);
  for (auto& g : optimizer_.param_groups()) g.options[momentum_key_] = m;
}

// ---- OneCycleLR ----

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  const auto& o = options_;
  KILN_CHECK(o.total_steps >= 1, "OneCycleLR: total_steps must be >= 1, got ", o.total_steps);
  KILN_CHECK(o.max_lr >= 0, "OneCycleLR: max_lr must be >= 0, got ", o.max_lr);
  KILN_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", o.pct_start);
  KILN_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear",
             "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"", o.anneal_strategy, "\"");
  KILN_CHECK(o.div_factor > 0 && o.final_div_factor > 0, "OneCycleLR: div_factor and final_div_factor must be > 0, "
             "got ", o.div_factor, " and ", o.final_div_factor);
  double T = static_cast<double>(o.total_steps);
  if (o.three_phase) {
    phases_ = {{o.pct_start * T - 1, 0, 1, 0, 1}, {2 * o.pct_start * T - 2, 1, 0, 1, 0}, {T - 1, 0, 2, 0, 0}};
  } else {
    phases_ = {{o.pct_start * T - 1, 0, 1, 0, 1}, {T - 1, 1, 2, 1, 0}};
  }
  if (o.cycle_momentum) momentum_key_ = momentum_key(optimizer, "OneCycleLR");
  // Like PyTorch, OneCycleLR sets each group's initial lr itself instead of reading it.
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    base_lrs_[g] = o.max_lr / o.div_factor;
    optimizer.param_groups()[g].options["initial_lr"] = base_lrs_[g];
  }
  initial_step();
}

double OneCycleLR::anneal_at(int64_t epoch, const double* values, bool momentum) const {
  KILN_CHECK(epoch <= options_.total_steps, "OneCycleLR: tried to step ", epoch, " times; the cycle has only ",
             options_.total_steps, " steps");
  double step = static_cast<double>(epoch), start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (step <= ph.end_step || i + 1 == phases_.size()) {
      double pct = (step - start_step) / (ph.end_step - start_step);
      double from = values[momentum ? ph.m_from : ph.lr_from], to = values[momentum ? ph.m_to : ph.lr_to];
      if (options_.anneal_strategy == "cos") return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
      return (to - from) * pct + from;
    }
    start_step = ph.end_step;
  }
  return values[0];  // not reached: the last phase always answers
}

double OneCycleLR::lr_at(int64_t epoch, size_t group) const {
  double initial = options_.max_lr / options_.div_factor;
  const double lrs[3] = {initial, options_.max_lr, initial / options_.final_div_factor};
  return anneal_at(epoch, lrs, false);
}

double OneCycleLR::momentum_at(int64_t epoch) const {
  const double moms[2] = {options_.max_momentum, options_.base_momentum};
  return anneal_at(epoch, moms, true);
}

void OneCycleLR::apply_extras(int64_t epoch) {
  if (!options_.cycle_momentum) return;
  double m = momentum_at(epoch);
  for (auto& g : optimizer_.param_groups()) g.options[momentum_key_] = m;
}

// ---- SequentialLR ----

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty(), "SequentialLR: needs at least one scheduler");
  KILN_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
             " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    KILN_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
    KILN_CHECK(&schedulers_[i]->optimizer() == &optimizer, "SequentialLR: scheduler ", i, " (",
               schedulers_[i]->name(), ") drives another optimizer");
  }
  for (size_t i = 0; i + 1 < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] < milestones_[i + 1], "SequentialLR: milestones must increase, got ", milestones_[i],
               " then ", milestones_[i + 1]);
  initial_step();
}

std::pair<LRScheduler*, int64_t> SequentialLR::locate(int64_t epoch) const {
  size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  int64_t local = idx == 0 ? epoch : epoch - milestones_[idx - 1];
  return {schedulers_[idx].get(), local};
}

double SequentialLR::lr_at(int64_t epoch, size_t group) const {
  auto [s, local] = locate(epoch);
  return s->lr_at(local, group);
}

void SequentialLR::apply_extras(int64_t epoch) {
  auto [s, local] = locate(epoch);
  s->apply_extras(local);
}

// ---- ChainedScheduler ----

ChainedScheduler::ChainedScheduler(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)) {
  KILN_CHECK(!schedulers_.empty(), "ChainedScheduler: needs at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const LRScheduler* s = schedulers_[i].get();
    KILN_CHECK(s != nullptr, "ChainedScheduler: scheduler ", i, " is null");
    KILN_CHECK(&s->optimizer() == &optimizer, "ChainedScheduler: scheduler ", i, " (", s->name(),
               ") drives another optimizer");
    const std::string name = s->name();
    KILN_CHECK(name != "OneCycleLR" && name != "CyclicLR", "ChainedScheduler: scheduler ", i, " is a ", name,
               ", which sets the lr outright instead of scaling it; chain schedulers that scale the lr, or run it in "
               "a SequentialLR");
    KILN_CHECK(s->base_lrs() == base_lrs_, "ChainedScheduler: scheduler ", i, " (", name,
               ") has other base lrs than the optimizer's initial_lr");
  }
  initial_step();
}

double ChainedScheduler::lr_at(int64_t epoch, size_t group) const {
  const double base = base_lrs_[group];
  if (base == 0) return 0;
  double lr = base;
  for (const auto& s : schedulers_) lr *= s->lr_at(epoch, group) / base;
  return lr;
}

void ChainedScheduler::apply_extras(int64_t epoch) {
  for (const auto& s : schedulers_) s->apply_extras(epoch);
}

// ---- ReduceLROnPlateau ----

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  const auto& o = options_;
  KILN_CHECK(o.factor < 1.0 && o.factor >= 0, "ReduceLROnPlateau: factor must be in [0, 1), got ", o.factor);
  KILN_CHECK(o.mode == "min" || o.mode == "max", "ReduceLROnPlateau: mode must be \"min\" or \"max\", got \"", o.mode,
             "\"");
  KILN_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs",
             "ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got \"", o.threshold_mode, "\"");
  KILN_CHECK(o.patience >= 0 && o.cooldown >= 0, "ReduceLROnPlateau: patience and cooldown must be >= 0, got ",
             o.patience, " and ", o.cooldown);
  KILN_CHECK(o.min_lr >= 0, "ReduceLROnPlateau: min_lr must be >= 0, got ", o.min_lr);
  best_ = o.mode == "min" ? INFINITY : -INFINITY;
  for (const auto& g : optimizer_.param_groups()) last_lrs_.push_back(g.lr());
}

bool ReduceLROnPlateau::is_better(double a) const {
  const auto& o = options_;
  if (o.mode == "min") return o.threshold_mode == "rel" ? a < best_ * (1.0 - o.threshold) : a < best_ - o.threshold;
  return o.threshold_mode == "rel" ? a > best_ * (o.threshold + 1.0) : a > best_ + o.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs during cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    for (auto& g : optimizer_.param_groups()) {
      double old_lr = g.lr(), new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      if (old_lr - new_lr > options_.eps) g.set_lr(new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lrs_.clear();
  for (const auto& g : optimizer_.param_groups()) last_lrs_.push_back(g.lr());
}

SchedulerState ReduceLROnPlateau::state_dict() const {
  SchedulerState s{{"best", best_},
                   {"num_bad_epochs", static_cast<double>(num_bad_epochs_)},
                   {"cooldown_counter", static_cast<double>(cooldown_counter_)},
                   {"last_epoch", static_cast<double>(last_epoch_)}};
  for (size_t g = 0; g < last_lrs_.size(); ++g) s["last_lrs." + std::to_string(g)] = last_lrs_[g];
  return s;
}

void ReduceLROnPlateau::load_state_dict(const SchedulerState& s) {
  const char* op = "ReduceLROnPlateau";
  double best = state_value(s, op, "best");
  auto bad = static_cast<int64_t>(state_value(s, op, "num_bad_epochs"));
  auto cooldown = static_cast<int64_t>(state_value(s, op, "cooldown_counter"));
  auto epoch = static_cast<int64_t>(state_value(s, op, "last_epoch"));
  std::vector<double> last(last_lrs_.size());
  for (size_t g = 0; g < last.size(); ++g) last[g] = state_value(s, op, "last_lrs." + std::to_string(g));
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
  last_epoch_ = epoch;
  last_lrs_ = std::move(last);
}

}  // namespace kiln::optim
