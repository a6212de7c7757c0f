#include "kiln/autograd/node.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/meta.h"
#include "kiln/tensor/ops.h"

namespace kiln::autograd {

namespace {
std::atomic<uint64_t> sequence_counter{0};
thread_local NodeRecorder* recorder = nullptr;  // the innermost NodeRecorder of this thread
}  // namespace

NodeRecorder::NodeRecorder() : outer_(recorder) { recorder = this; }
NodeRecorder::~NodeRecorder() { stop(); }
void NodeRecorder::stop() {
  if (!active_) return;
  active_ = false;
  recorder = outer_;
}

std::string TensorMeta::str() const {
  return detail::concat(shape_str(shape), " ", dtype, device.is_cpu() ? "" : " on ", device.is_cpu() ? "" : device.str());
}

Node::Node(const char* name) : name_(name), sequence_nr_(sequence_counter.fetch_add(1, std::memory_order_relaxed)) {
  if (recorder != nullptr) [[unlikely]] recorder->made_.insert(sequence_nr_);
  if (AnomalyMode::is_enabled()) {
    std::string scope = ForwardScope::current();
    anomaly = std::make_unique<AnomalyInfo>(
        AnomalyInfo{(scope.empty() ? "" : "  in forward scope: " + scope + "\n") + stack_trace(2)});
  }
}

// NOTE: a node owns the nodes before it, so letting shared_ptr destroy a long chain (an RNN unrolled over 100k
// steps) would recurse once per node and overflow the stack. The outermost destructor on a thread drains a
// list of nodes instead; inner ones only move their edges onto it.
Node::~Node() {
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  for (Edge& e : next_edges)
    if (e.node) pending.push_back(std::move(e.node));
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    n.reset();  // may push more nodes
  }
  draining = false;
}

void Node::run_pre_hooks(TensorList& grads) {
  for (const PreHook& h : pre_hooks) {
    Tensor& g = grads[h.output_nr];
    if (!g.defined()) continue;
    Tensor replaced = h.fn(g);
    if (replaced.defined()) g = std::move(replaced);
  }
  // retain_grad runs last, so the retained gradient is the one the graph uses.
  for (const RetainHook& h : retain_hooks) {
    const Tensor& g = grads[h.output_nr];
    auto impl = h.tensor.lock();
    if (!impl || !g.defined()) continue;
    Tensor t(impl);
    AutogradMeta& m = ensure_meta(t);
    if (!m.grad.defined()) m.grad = GradMode::is_enabled() ? g : ops::clone(g);
    else m.grad = GradMode::is_enabled() ? m.grad + g : ops::add(m.grad, g);
  }
}

TensorList OpNode::apply(TensorList&& grads) {
  KILN_CHECK(backward_ != nullptr || multi_backward_ != nullptr, name(),
             ": backward through the graph a second time, after its saved tensors were freed; pass "
             "retain_graph=true to the first backward (or grad) call to keep them");
  return backward_ ? backward_(grads[0], *this) : multi_backward_(grads, *this);
}

void OpNode::release_saved() {
  backward_ = nullptr;
  multi_backward_ = nullptr;
}

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  version_ = t.version();
  if (is_output) {
    const AutogradMeta* m = meta_of(t);
    output_nr_ = m ? m->output_nr : 0;
    data_ = ops::alias(t);  // the data without the history
  } else if (t.impl()->is_view && !t.impl()->view_base.expired()) {
    // A view of a live tensor: its history can be rebuilt later (a write through another view of the same
    // tensor), and the new history may run through this very node, which would then own itself through
    // data_. Keep an alias with the history as it is now instead: the value saved is the value of then.
    data_ = ops::alias(t);
    if (const Edge e = gradient_edge(t); e.valid()) set_history(data_, e.node, e.input_nr);
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::get(const Node& node) const {
  KILN_CHECK(!released_, node.name(),
             ": backward through the graph a second time, after its saved tensors were freed; pass "
             "retain_graph=true to the first backward (or grad) call to keep them");
  if (!data_.defined()) return data_;
  if (data_.version() != version_) {
    const char* writer = data_.storage()->last_writer();
    detail::throw_error(detail::concat(
        node.name(), " (op #", node.sequence_nr(), "): a tensor of shape ", shape_str(data_.sizes()), " that ",
        node.name(), " saved for backward was modified in place", writer ? " by " : "", writer ? writer : "",
        " after ", node.name(), " used it (it is at version ", data_.version(), ", ", node.name(), " saved version ",
        version_, "). Use the out-of-place op, or clone() the tensor before changing it."));
  }
  if (is_output_ && GradMode::is_enabled()) {
    // Recording backward (create_graph): the saved output takes part in the new graph with its history.
    Tensor t = ops::alias(data_);
    set_history(t, std::const_pointer_cast<Node>(node.shared_from_this()), output_nr_);
    return t;
  }
  return data_;
}

std::string stack_trace(int skip) {
  void* frames[64];
  int n = backtrace(frames, 64);
  char** symbols = backtrace_symbols(frames, n);
  std::ostringstream out;
  for (int i = skip; i < n && symbols; ++i) {
    // glibc's format: "binary(mangled+0x1f) [0xaddr]"
    std::string line = symbols[i];
    auto open = line.find('('), plus = line.find('+', open == std::string::npos ? 0 : open);
    std::string name;
    if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
      std::string mangled = line.substr(open + 1, plus - open - 1);
      int status = 0;
      char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
      name = status == 0 && demangled ? demangled : mangled;
      std::free(demangled);
    }
    out << "  #" << (i - skip) << " " << (name.empty() ? line : name) << "\n";
  }
  std::free(symbols);
  return out.str();
}

}  // namespace kiln::autograd
