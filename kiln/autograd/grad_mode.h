// Grad modes: whether ops record the graph, per thread, as in PyTorch.
//
//   { NoGradGuard g; w.sub_(lr * w.grad()); }   // optimizer steps and evaluation: nothing recorded
//   { InferenceMode g; y = model(x); }           // serving: never any backward
//   { DetectAnomalyGuard g; loss.backward(); }   // NaN/Inf in backward names the op and where it was made
//
// Each mode is a thread-local flag and each guard restores the previous value when it goes out of scope, so
// guards nest. Threads start with grad enabled, inference mode and anomaly mode off.
#pragma once

#include <string>

namespace kiln::autograd {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Inference mode: no grad, for code that will never call backward. kiln's no-grad mode already keeps no
// autograd state at all (no nodes, no view tracking: only the tensor layer's version counters), so the two
// cost the same today; InferenceMode is the PyTorch spelling, and where any future savings will go.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled();

 private:
  bool prev_inference_, prev_grad_;
};

// Anomaly mode: nodes remember where forward created them, and backward checks every gradient a node
// produces for NaN and Inf. Costs a stack trace per op in forward and a scan per gradient in backward.
// "Where" is the forward scopes open at the time (ForwardScope: nn modules open one per forward) and the
// native stack; the stack names functions when the program is linked with -rdynamic (CMake: ENABLE_EXPORTS).
class AnomalyMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// A named part of forward ("encoder.layers.0.attn"), recorded on the nodes made inside it in anomaly mode.
class ForwardScope {
 public:
  explicit ForwardScope(std::string name);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;
  // The open scopes, outermost first, joined by " > "; empty when none is open.
  static std::string current();
};

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeGuard() { GradMode::set_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

struct NoGradGuard : GradModeGuard {
  NoGradGuard() : GradModeGuard(false) {}
};
struct EnableGradGuard : GradModeGuard {
  EnableGradGuard() : GradModeGuard(true) {}
};

class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true) : prev_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(enabled); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln::autograd

namespace kiln {
using autograd::DetectAnomalyGuard;
using autograd::EnableGradGuard;
using autograd::InferenceMode;
using autograd::NoGradGuard;
}  // namespace kiln
