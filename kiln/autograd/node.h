// The graph that backward walks: nodes (one per recorded op), edges, and the tensors nodes save.
//
// Forward records, for each op on tensors that require grad, a Node whose next_edges point at the nodes that
// produced its inputs (or, for leaves, at their AccumulateGrad node). backward runs the nodes from the
// output back to the leaves; Node::apply maps the gradients of a node's outputs to those of its inputs.
//
// Ownership runs one way: a tensor owns its grad_fn, a node owns the nodes of its inputs. A node never owns
// the tensors it produced (SavedTensor keeps only their data), so graphs free themselves with their outputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "kiln/tensor/tensor.h"

namespace kiln::autograd {

class Node;
using TensorList = std::vector<Tensor>;
// A hook on a tensor's gradient: returns a replacement, or an undefined Tensor to keep the gradient.
using TensorHook = std::function<Tensor(const Tensor&)>;

// Input `input_nr` of `node`: where a gradient goes. An empty edge (no node) drops the gradient.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// What a gradient must look like: shape, dtype and device of a tensor the node produced (or of a leaf).
struct TensorMeta {
  Shape shape;
  DType dtype = kFloat32;
  Device device = kCPU;
  static TensorMeta of(const Tensor& t) { return {t.sizes(), t.dtype(), t.device()}; }
  std::string str() const;
};

// Where forward created a node, kept in anomaly mode: a stack trace of the forward call.
struct AnomalyInfo {
  std::string forward_trace;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(const char* name);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The op's name ("mul", "sum", "AccumulateGrad" or a custom Function's name).
  const char* name() const { return name_; }
  // Forward order: later nodes have larger numbers; backward runs ready nodes largest first.
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Gradients of the outputs in (one per output, undefined when no gradient reached it and the node has no
  // other), gradients of the inputs out (one per next edge; undefined means zero).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Frees what the node saved for backward; a later apply is an error (backward through the graph twice).
  virtual void release_saved() {}
  // Tensor hooks of the node's outputs, run by the engine on their gradients before apply.
  virtual void run_pre_hooks(TensorList& grad_outputs);

  bool needs_input_grad(size_t input) const { return input < next_edges.size() && next_edges[input].valid(); }

  std::vector<Edge> next_edges;          // one per input of the op
  std::vector<TensorMeta> output_meta;   // one per output of the op
  std::unique_ptr<AnomalyInfo> anomaly;  // set in anomaly mode

  // Hooks of non-leaf outputs (tensor.register_hook, retain_grad); leaves keep theirs in AutogradMeta.
  struct PreHook {
    unsigned id;
    uint32_t output_nr;
    TensorHook fn;
  };
  std::vector<PreHook> pre_hooks;
  struct RetainHook {
    uint32_t output_nr;
    std::weak_ptr<TensorImpl> tensor;
  };
  std::vector<RetainHook> retain_hooks;

 private:
  const char* name_;
  uint64_t sequence_nr_;
};

// The node of a built-in op with one output: its backward is a closure written right under the op's forward
// (kiln/autograd/functions/*.cpp). Releasing the node destroys the closure and what it captured.
class OpNode final : public Node {
 public:
  using Backward = std::function<TensorList(const Tensor& grad, const OpNode& node)>;
  // An op with several outputs (split, chunk, unbind): one gradient per output, undefined where none reached it.
  using MultiBackward = std::function<TensorList(const TensorList& grads, const OpNode& node)>;
  OpNode(const char* name, Backward backward) : Node(name), backward_(std::move(backward)) {}
  OpNode(const char* name, MultiBackward backward) : Node(name), multi_backward_(std::move(backward)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  void release_saved() override;

 private:
  Backward backward_;
  MultiBackward multi_backward_;
};

// A tensor an op keeps for its backward, with the version of its storage at the time: backward refuses to
// use it if an in-place op has changed it since. An op's own output is kept as data only (no history), or the
// output would own the node that owns the output.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  // The saved tensor, checked against in-place changes. `node` is the node unpacking it (for messages, and to
  // give a saved output its history back when backward itself is recorded: create_graph).
  Tensor get(const Node& node) const;
  void reset() { data_ = Tensor(); released_ = true; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool released_ = false;
};

// Lists the nodes this thread makes while it lives, by sequence number (activation checkpointing: the nodes of
// one segment, whatever other threads record meanwhile). Recorders nest; a node goes to the innermost.
class NodeRecorder {
 public:
  NodeRecorder();
  ~NodeRecorder();
  NodeRecorder(const NodeRecorder&) = delete;
  NodeRecorder& operator=(const NodeRecorder&) = delete;
  // Stops listing (the list stays readable); the destructor stops it if this has not. Innermost first.
  void stop();
  bool made(const Node& node) const { return made_.count(node.sequence_nr()) > 0; }

 private:
  friend class Node;
  NodeRecorder* outer_;
  bool active_ = true;
  std::unordered_set<uint64_t> made_;
};

// The calling thread's stack, one demangled frame per line, skipping the innermost `skip` (anomaly mode).
std::string stack_trace(int skip);

}  // namespace kiln::autograd
