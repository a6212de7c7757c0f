#include "kiln/optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace kiln::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  KILN_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0,
             "GradScaler: init_scale must be a positive number, got ", options.init_scale);
  KILN_CHECK(options.growth_factor > 1.0 && std::isfinite(options.growth_factor),
             "GradScaler: growth_factor must be > 1, got ", options.growth_factor);
  KILN_CHECK(options.backoff_factor > 0.0 && options.backoff_factor < 1.0,
             "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  KILN_CHECK(options.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ",
             options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled()) return loss;
  KILN_CHECK(loss.defined() && loss.is_floating_point(), "GradScaler::scale: expected a floating-point loss");
  return loss * scale_;
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!enabled()) return;
  Record& r = records_[&opt];
  KILN_CHECK(!r.unscaled, "GradScaler::unscale_: already called for this ", opt.name(),
             " since the last update(); its gradients are unscaled");
  NoGradGuard no_grad;
  // One flag per device, read once at the end: a per-gradient check would synchronize a GPU each time.
  std::vector<std::pair<Device, Tensor>> bad;
  for (const auto& group : opt.param_groups())
    for (const Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      KILN_CHECK(g.dtype() != kFloat16 && g.dtype() != kBFloat16, "GradScaler::unscale_: a gradient of ",
                 g.dtype(), " (shape ", shape_str(g.sizes()), "): unscaled in 16 bits its small values would ",
                 "underflow to 0; keep the parameters float32 and run the forward under AutocastGuard");
      g.mul_(1.0 / scale_);
      Tensor any_bad = ops::any(ops::logical_not(ops::isfinite(g)));
      auto it = std::find_if(bad.begin(), bad.end(), [&](const auto& d) { return d.first == g.device(); });
      if (it == bad.end()) bad.emplace_back(g.device(), any_bad);
      else it->second = ops::logical_or(it->second, any_bad);
    }
  bool found = false;
  for (const auto& [device, flag] : bad) found = found || flag.item<bool>();
  r.unscaled = true;
  r.found_inf = found;
}

bool GradScaler::step(Optimizer& opt) {
  if (!enabled()) {
    opt.step();
    return true;
  }
  KILN_CHECK(!records_[&opt].stepped, "GradScaler::step: already called for this ", opt.name(),
             " since the last update(); call update() once per iteration");
  if (!records_[&opt].unscaled) unscale_(opt);
  records_[&opt].stepped = true;
  if (records_[&opt].found_inf) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!enabled()) return;
  if (records_.empty()) return;  // nothing was unscaled or stepped since the last update
  bool found = false;
  for (const auto& [opt, r] : records_) found = found || r.found_inf;
  if (found) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  records_.clear();
}

bool GradScaler::found_inf(const Optimizer& opt) const {
  auto it = records_.find(&opt);
  return it != records_.end() && it->second.found_inf;
}

bool GradScaler::unscaled(const Optimizer& opt) const {
  auto it = records_.find(&opt);
  return it != records_.end() && it->second.unscaled;
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scale_}, {"growth_tracker", static_cast<double>(growth_tracker_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  auto get = [&](const char* key) {
    auto it = state.find(key);
    KILN_CHECK(it != state.end(), "GradScaler::load_state_dict: no '", key, "' in the state");
    return it->second;
  };
  const double scale = get("scale"), tracker = get("growth_tracker");
  KILN_CHECK(std::isfinite(scale) && scale > 0, "GradScaler::load_state_dict: scale must be a positive number, got ",
             scale);
  KILN_CHECK(tracker >= 0 && tracker == std::floor(tracker),
             "GradScaler::load_state_dict: growth_tracker must be a whole number >= 0, got ", tracker);
  scale_ = scale;
  growth_tracker_ = static_cast<int64_t>(tracker);
  records_.clear();
}

}  // namespace kiln::optim
