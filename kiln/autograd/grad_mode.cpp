#include "kiln/autograd/grad_mode.h"

#include <vector>

namespace kiln::autograd {

namespace {
thread_local bool grad_enabled = true;
thread_local bool inference_enabled = false;
// Anomaly mode is process-wide, as in PyTorch: backward may run on another thread than the forward did.
bool anomaly_enabled = false;
}  // namespace

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

InferenceMode::InferenceMode(bool enabled) : prev_inference_(inference_enabled), prev_grad_(grad_enabled) {
  inference_enabled = enabled;
  if (enabled) grad_enabled = false;
}
InferenceMode::~InferenceMode() {
  inference_enabled = prev_inference_;
  grad_enabled = prev_grad_;
}
bool InferenceMode::is_enabled() { return inference_enabled; }

namespace {
thread_local std::vector<std::string> scopes;
}
ForwardScope::ForwardScope(std::string name) { scopes.push_back(std::move(name)); }
ForwardScope::~ForwardScope() { scopes.pop_back(); }
std::string ForwardScope::current() {
  std::string out;
  for (const std::string& s : scopes) out += (out.empty() ? "" : " > ") + s;
  return out;
}

bool AnomalyMode::is_enabled() { return anomaly_enabled; }
void AnomalyMode::set_enabled(bool enabled) { anomaly_enabled = enabled; }

}  // namespace kiln::autograd
