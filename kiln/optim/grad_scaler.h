// Dynamic loss scaling for float16 mixed precision. float16's smallest normal number is 6.1e-5: small
// gradients underflow to 0 in a float16 backward. The scaler multiplies the loss by a large factor before
// backward, so that the gradients move up into float16's range, and divides them again before the optimizer
// uses them. When a gradient comes out infinite or NaN (the factor was too large), that step is skipped and
// the factor halves; after growth_interval clean steps in a row it doubles. As in PyTorch:
//
//   optim::GradScaler scaler;
//   for (...) {
//     opt.zero_grad();
//     { AutocastGuard ac(DeviceType::CUDA, kFloat16); loss = F::cross_entropy(model(x), y); }
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);                        // optional: only to see or clip the true gradients
//     optim::clip_grad_norm_(model->parameters(), 1.0);
//     scaler.step(opt);                            // opt.step(), unless a gradient was not finite
//     scaler.update();
//   }
//
// bfloat16 has float32's range and needs no scaler. A scale that is a power of two (the default, and every
// scale the growth and backoff of 2 and 0.5 reach from it) scales and unscales exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: every call passes through (scale 1, step always taken)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides opt's gradients by the scale, in place, and notes whether any is infinite or NaN. At most once per
  // optimizer between two update() calls (a second call is an error: the gradients would be divided twice).
  // The gradients must be float32 or float64 (as autocast leaves those of float32 parameters): unscaled in
  // float16, the small ones the scale was there to keep would underflow to 0 again, so that is an error.
  void unscale_(Optimizer& opt);
  // Unscales opt's gradients if unscale_ has not, then runs opt.step() unless a gradient was not finite.
  // Returns whether the step ran. Once per optimizer between two update() calls.
  bool step(Optimizer& opt);
  // After the step(s) of an iteration: the scale backs off if any optimizer found a non-finite gradient, grows
  // after growth_interval clean iterations in a row, and the per-optimizer records start over.
  void update();

  double get_scale() const { return enabled() ? scale_ : 1.0; }
  bool enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }
  // Whether the last unscale_ of opt (since update()) found a gradient that was not finite.
  bool found_inf(const Optimizer& opt) const;
  // Whether unscale_(opt) ran since the last update().
  bool unscaled(const Optimizer& opt) const;

  // "scale", "growth_tracker": what resuming needs (the options come from the code that builds the scaler).
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  struct Record {
    bool unscaled = false, found_inf = false, stepped = false;
  };
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;  // clean iterations in a row since the scale last changed
  std::map<const Optimizer*, Record> records_;
};

}  // namespace kiln::optim
