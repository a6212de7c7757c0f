// The engine, in the order it works:
//   1. the roots: each output's gradient edge, seeded with its gradient (1 for a one-element output);
//   2. dependencies: for every node reachable from the roots, how many edges lead into it;
//   3. a ready queue of nodes whose dependencies have all run, latest-created first (AccumulateGrad first of
//      all, so leaves get their gradients, and their post-accumulate hooks run, as early as possible);
//   4. each node runs once: its tensor hooks, then apply, then its saved tensors are freed unless
//      retain_graph; every gradient it returns is checked against the input it is for (a broadcast gradient
//      is summed back to the input's shape, a dtype converted) and summed into that input's buffer.
// grad() runs the same loop but captures gradients at its inputs and runs only the nodes that lead to them.
#include "kiln/autograd/engine.h"

#include <limits>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/meta.h"
#include "kiln/autograd/record.h"
#include "kiln/tensor/ops.h"
#include "kiln/tensor/profiler.h"

namespace kiln::autograd {

namespace {

struct Capture {
  uint32_t input_nr;
  size_t index;
};

struct GraphTask {
  bool retain_graph = false;
  bool create_graph = false;
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, TensorList> buffers;
  // grad() only: where to capture gradients, and the nodes from which a capture can be reached.
  bool capturing = false;
  std::unordered_map<Node*, std::vector<Capture>> captures;
  std::unordered_set<Node*> needed;
  std::vector<Tensor> captured;
  // grad_at_edges only: captured nodes end the graph (not run, not passed, their hooks not run).
  bool stop_at_captures = false;
};

bool ends_graph(const GraphTask& task, Node* n) { return task.stop_at_captures && task.captures.count(n) > 0; }

bool is_accumulate_grad(const Node* n) { return dynamic_cast<const AccumulateGrad*>(n) != nullptr; }

uint64_t priority(const Node* n) {
  return is_accumulate_grad(n) ? std::numeric_limits<uint64_t>::max() : n->sequence_nr();
}

// Ready nodes with their priority, worked out once when a node becomes ready (not at every comparison of the
// heap: that was a dynamic_cast per comparison on the engine's hottest path).
using Ready = std::pair<uint64_t, std::shared_ptr<Node>>;
struct LaterFirst {
  bool operator()(const Ready& a, const Ready& b) const { return a.first < b.first; }
};
struct ReadyQueue {
  std::priority_queue<Ready, std::vector<Ready>, LaterFirst> heap;
  void push(const std::shared_ptr<Node>& n) { heap.emplace(priority(n.get()), n); }
  bool empty() const { return heap.empty(); }
  std::shared_ptr<Node> pop() {
    std::shared_ptr<Node> n = heap.top().second;
    heap.pop();
    return n;
  }
};

// True when a gradient of shape `grad` can come from broadcasting a tensor of shape `input`.
bool expandable_to(const Shape& input, const Shape& grad) {
  if (input.size() > grad.size()) return false;
  size_t lead = grad.size() - input.size();
  for (size_t i = 0; i < input.size(); ++i)
    if (input[i] != grad[lead + i] && input[i] != 1) return false;
  return true;
}

bool owned_by_buffer(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.has_internal_overlap() &&
         g.impl()->autograd_meta == nullptr;
}

// Checks and converts a gradient for input `edge.input_nr` of `edge.node`, then sums it into its buffer.
void add_to_buffer(GraphTask& task, const Edge& edge, Tensor grad, const Node* producer, size_t producer_input) {
  const TensorMeta& meta = edge.node->output_meta[edge.input_nr];
  if (grad.sizes() != meta.shape) {
    KILN_CHECK(expandable_to(meta.shape, grad.sizes()), producer ? producer->name() : "backward",
               ": returned a gradient of shape ", shape_str(grad.sizes()), " for input ", producer_input,
               ", a tensor of shape ", shape_str(meta.shape));
    grad = sum_to(grad, meta.shape);
  }
  if (grad.device() != meta.device || grad.dtype() != meta.dtype) grad = grad.to(meta.device, meta.dtype);
  TensorList& buffer = task.buffers[edge.node.get()];
  if (buffer.empty()) buffer.resize(edge.node->output_meta.size());
  Tensor& slot = buffer[edge.input_nr];
  if (!slot.defined()) {
    slot = std::move(grad);
  } else if (!task.create_graph && owned_by_buffer(slot)) {
    ops::add_(slot, grad);
  } else {
    slot = slot + grad;
  }
}

void count_dependencies(GraphTask& task, const std::vector<Node*>& roots) {
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (Node* r : roots)
    if (seen.insert(r).second) stack.push_back(r);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (ends_graph(task, n)) continue;
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++task.dependencies[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
}

// grad(): the nodes from which some captured input can be reached (only those need to run).
void mark_needed(GraphTask& task, const std::vector<Node*>& roots) {
  std::unordered_map<Node*, bool> memo;
  // Iterative post-order: a node is needed if it is captured or any of its next nodes is needed.
  for (Node* root : roots) {
    std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
    if (memo.count(root)) continue;
    memo[root] = false;
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->next_edges.size() && !ends_graph(task, n)) {
        Node* child = n->next_edges[i++].node.get();
        if (child && !memo.count(child)) {
          memo[child] = false;
          stack.push_back({child, 0});
        }
        continue;
      }
      bool need = task.captures.count(n) > 0;
      if (!ends_graph(task, n))
        for (const Edge& e : n->next_edges)
          if (e.valid() && task.needed.count(e.node.get())) need = true;
      if (need) task.needed.insert(n);
      stack.pop_back();
    }
  }
}

void check_finite(const Node& node, size_t input, const Tensor& g) {
  if (!g.defined() || !g.is_floating_point() || g.numel() == 0) return;
  if (ops::all(ops::isfinite(g)).item<bool>()) return;
  bool nan = ops::any(ops::isnan(g)).item<bool>();
  detail::throw_error(detail::concat(
      "anomaly: ", node.name(), " (op #", node.sequence_nr(), ") returned ", nan ? "NaN" : "Inf",
      " in the gradient of its input ", input, " (shape ", shape_str(g.sizes()), "). ", node.name(),
      " was created in forward at:\n", node.anomaly ? node.anomaly->forward_trace : "  (unknown: anomaly mode was off)\n"));
}

void run(GraphTask& task, const std::vector<Edge>& roots, std::vector<Tensor> root_grads) {
  std::vector<Node*> root_nodes;
  for (const Edge& e : roots) root_nodes.push_back(e.node.get());
  count_dependencies(task, root_nodes);
  if (task.capturing) mark_needed(task, root_nodes);
  for (size_t i = 0; i < roots.size(); ++i) add_to_buffer(task, roots[i], std::move(root_grads[i]), nullptr, i);

  ReadyQueue ready;
  std::unordered_set<Node*> queued;
  for (const Edge& e : roots)
    if (task.dependencies[e.node.get()] == 0 && queued.insert(e.node.get()).second) ready.push(e.node);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.pop();
    TensorList grads;
    if (auto it = task.buffers.find(node.get()); it != task.buffers.end()) {
      grads = std::move(it->second);
      task.buffers.erase(it);
    } else {
      grads.resize(node->output_meta.size());
    }
    if (ends_graph(task, node.get())) {
      for (const Capture& c : task.captures[node.get()]) task.captured[c.index] = grads[c.input_nr];
      continue;
    }
    node->run_pre_hooks(grads);

    if (task.capturing) {
      if (auto it = task.captures.find(node.get()); it != task.captures.end())
        for (const Capture& c : it->second) task.captured[c.index] = grads[c.input_nr];
      // Only what leads to a captured input runs, and a leaf's grad is never touched.
      if (!task.needed.count(node.get()) || is_accumulate_grad(node.get())) continue;
    }

    TensorList outputs;
    bool any_defined = false;
    for (const Tensor& g : grads) any_defined |= g.defined();
    if (any_defined) {
      for (size_t i = 0; i < grads.size(); ++i)
        if (!grads[i].defined()) {
          const TensorMeta& m = node->output_meta[i];
          grads[i] = zeros(m.shape, TensorOptions(m.dtype).device(m.device));
        }
      GradModeGuard mode(task.create_graph);
      std::optional<profiler::detail::Scope> profiled;  // the node is one event of a recording profiler
      if (profiler::detail::recording(profiler::Kind::Backward)) [[unlikely]]
        profiled.emplace(profiler::Kind::Backward, std::string(node->name()) + " backward");
      if (node->anomaly) {
        try {
          outputs = node->apply(std::move(grads));
        } catch (const Error& e) {
          detail::throw_error(detail::concat(e.what(), "\n", node->name(), " (op #", node->sequence_nr(),
                                             ") was created in forward at:\n", node->anomaly->forward_trace));
        }
      } else {
        outputs = node->apply(std::move(grads));
      }
    }
    if (!task.retain_graph) node->release_saved();
    if (outputs.empty()) outputs.resize(node->next_edges.size());
    KILN_CHECK(outputs.size() == node->next_edges.size(), node->name(), ": backward returned ", outputs.size(),
               " gradients for ", node->next_edges.size(), " inputs");

    for (size_t i = 0; i < outputs.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (task.capturing && !task.needed.count(e.node.get())) continue;
      if (outputs[i].defined()) {
        if (AnomalyMode::is_enabled()) check_finite(*node, i, outputs[i]);
        add_to_buffer(task, e, std::move(outputs[i]), node.get(), i);
      }
      if (--task.dependencies[e.node.get()] == 0 && queued.insert(e.node.get()).second) ready.push(e.node);
    }
  }
}

// Root edges and seed gradients for backward/grad.
void make_roots(const char* api, const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                std::vector<Edge>& roots, std::vector<Tensor>& grads) {
  KILN_CHECK(!outputs.empty(), api, ": no outputs given");
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), api, ": got ", grad_outputs.size(),
             " gradients for ", outputs.size(), " outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    KILN_CHECK(out.defined(), api, ": output ", i, " is undefined");
    Edge e = gradient_edge(out);
    KILN_CHECK(e.valid(), api, ": output ", i, " (shape ", shape_str(out.sizes()),
               ") does not require grad and has no grad_fn: nothing it depends on requires grad, or it was "
               "computed under NoGradGuard");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      KILN_CHECK(out.numel() == 1, api, ": a gradient is needed for output ", i, " of shape ",
                 shape_str(out.sizes()), ": only a one-element output gets the implicit gradient 1");
      g = ones_like(out);
    } else {
      KILN_CHECK(g.sizes() == out.sizes(), api, ": the gradient for output ", i, " has shape ",
                 shape_str(g.sizes()), ", the output has shape ", shape_str(out.sizes()));
    }
    roots.push_back(std::move(e));
    grads.push_back(std::move(g));
  }
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  GraphTask task;
  task.retain_graph = retain_graph || create_graph;
  task.create_graph = create_graph;
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  make_roots("backward", outputs, grad_outputs, roots, grads);
  run(task, roots, std::move(grads));
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  GraphTask task;
  task.retain_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.capturing = true;
  task.captured.resize(inputs.size());
  std::vector<Edge> input_edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].defined(), "grad: input ", i, " is undefined");
    Edge e = gradient_edge(inputs[i]);
    KILN_CHECK(e.valid(), "grad: input ", i, " (shape ", shape_str(inputs[i].sizes()), ") does not require grad");
    task.captures[e.node.get()].push_back({e.input_nr, i});
    input_edges.push_back(std::move(e));  // keeps leaf accumulators alive during the run
  }
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  make_roots("grad", outputs, grad_outputs, roots, grads);
  run(task, roots, std::move(grads));
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(allow_unused || task.captured[i].defined(), "grad: input ", i, " (shape ",
               shape_str(inputs[i].sizes()),
               ") was not used to compute the outputs; pass allow_unused=true to get an undefined gradient for it");
  }
  return task.captured;
}

namespace internal {

std::vector<Tensor> grad_at_edges(const std::vector<Tensor>& outputs, const std::vector<Edge>& edges,
                                  const std::vector<Tensor>& grad_outputs, bool create_graph) {
  GraphTask task;
  task.retain_graph = create_graph;
  task.create_graph = create_graph;
  task.capturing = true;
  task.stop_at_captures = true;
  task.captured.resize(edges.size());
  for (size_t i = 0; i < edges.size(); ++i) {
    KILN_CHECK(edges[i].valid(), "grad_at_edges: edge ", i, " leads nowhere");
    task.captures[edges[i].node.get()].push_back({edges[i].input_nr, i});
  }
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  make_roots("grad_at_edges", outputs, grad_outputs, roots, grads);
  run(task, roots, std::move(grads));
  return task.captured;
}

}  // namespace internal

}  // namespace kiln::autograd
