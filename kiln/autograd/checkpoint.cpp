#include "kiln/autograd/checkpoint.h"

#include <memory>
#include <set>
#include <unordered_set>
#include <utility>

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/engine.h"
#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/meta.h"
#include "kiln/autograd/node.h"
#include "kiln/tensor/rng.h"

namespace kiln::autograd {

namespace {

using EdgeKey = std::pair<const Node*, uint32_t>;

bool is_leaf(const Node* n) { return dynamic_cast<const AccumulateGrad*>(n) != nullptr; }

// Where the segment's graph (the nodes `segment` saw made), as reached from outputs, leaves it: edges into
// leaves (a leaf's accumulator may be new, yet the leaf is not) and into nodes made before. Each edge once, in
// the order found.
std::vector<Edge> boundary(const std::vector<Tensor>& outputs, const NodeRecorder& segment) {
  std::vector<Edge> found;
  std::set<EdgeKey> seen_edges;
  std::unordered_set<const Node*> seen_nodes;
  std::vector<const Node*> stack;
  auto visit = [&](const Edge& e) {
    if (!e.valid()) return;
    const Node* n = e.node.get();
    if (is_leaf(n) || !segment.made(*n)) {
      if (seen_edges.insert({n, e.input_nr}).second) found.push_back(e);
    } else if (seen_nodes.insert(n).second) {
      stack.push_back(n);
    }
  };
  for (const Tensor& out : outputs) visit(gradient_edge(out));
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) visit(e);
  }
  return found;
}

std::string describe(const Edge& e) {
  if (const auto* acc = dynamic_cast<const AccumulateGrad*>(e.node.get()))
    return detail::concat("a leaf of shape ", shape_str(acc->leaf().sizes()));
  return detail::concat("output ", e.input_nr, " of ", e.node->name(), " (op #", e.node->sequence_nr(), ")");
}

// Runs the segment as both runs must see it: its inputs' histories made first (a stale view gets its node now,
// not as the segment's first op), every node it makes noted, and a cast cache of its own under autocast (a
// cast made before the segment would otherwise be reused by one run and not the other).
struct SegmentRun {
  std::vector<Tensor> outputs;
  std::unique_ptr<NodeRecorder> nodes;  // stopped: the nodes the run made
};

SegmentRun run_segment(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined()) (void)gradient_edge(t);
  autocast::OwnCastCache own_casts;
  SegmentRun run;
  run.nodes = std::make_unique<NodeRecorder>();
  run.outputs = fn(inputs);
  run.nodes->stop();
  return run;
}

// Puts the default generator back to the state it had when made.
class RngRestore {
 public:
  RngRestore() : seed_(default_generator().seed()), offset_(default_generator().offset()) {}
  ~RngRestore() { default_generator().set_state(seed_, offset_); }
  RngRestore(const RngRestore&) = delete;
  RngRestore& operator=(const RngRestore&) = delete;

 private:
  uint64_t seed_, offset_;
};

class CheckpointNode final : public Node {
 public:
  CheckpointNode(CheckpointFn fn, const std::vector<Tensor>& inputs, CheckpointOptions options, uint64_t seed,
                 uint64_t offset)
      : Node("checkpoint"), fn_(std::move(fn)), options_(options), seed_(seed), offset_(offset),
        autocast_(autocast_state()) {
    for (const Tensor& t : inputs) inputs_.emplace_back(t, false);
  }

  // Which outputs of the first run had a history (only those get gradients).
  std::vector<bool> differentiable;

  TensorList apply(TensorList&& grads) override {
    KILN_CHECK(!released_, "checkpoint: backward through the segment a second time, after its saved inputs were "
               "freed; pass retain_graph=true to the first backward (or grad) call to keep them");
    std::vector<Tensor> inputs;
    for (const SavedTensor& s : inputs_) inputs.push_back(s.get(*this));

    // The segment again, recorded this time, as the first run saw the world.
    SegmentRun run;
    {
      RngRestore restore;
      if (options_.preserve_rng_state) default_generator().set_state(seed_, offset_);
      GradModeGuard grad_on(true);
      AutocastGuard autocast(autocast_.device, autocast_.dtype, autocast_.enabled);
      run = run_segment(fn_, inputs);
    }
    const std::vector<Tensor>& outputs = run.outputs;
    KILN_CHECK(outputs.size() == differentiable.size(), "checkpoint: the segment returned ", outputs.size(),
               " tensors when recomputed in backward, ", differentiable.size(), " the first time");

    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const bool has_history = gradient_edge(outputs[i]).valid();
      KILN_CHECK(has_history == differentiable[i], "checkpoint: output ", i, " of the segment ",
                 has_history ? "requires" : "does not require", " grad when recomputed in backward, but ",
                 has_history ? "did not" : "did", " the first time; the segment must compute the same thing both "
                 "times");
      if (!has_history) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(grads[i].defined() ? grads[i] : zeros_like(outputs[i]));
    }
    if (roots.empty()) return TensorList(next_edges.size());

    // The recomputed graph must leave the segment where the first one did, or gradients would go astray.
    std::set<EdgeKey> expected;
    for (const Edge& e : next_edges) expected.insert({e.node.get(), e.input_nr});
    std::set<EdgeKey> reached;
    for (const Edge& e : boundary(roots, *run.nodes)) {
      KILN_CHECK(expected.count({e.node.get(), e.input_nr}), "checkpoint: the segment, recomputed in backward, "
                 "used ", describe(e), ", which its first run did not use; the segment must compute the same "
                 "thing both times (the same parameters and inputs; random draws repeat only with "
                 "preserve_rng_state)");
      reached.insert({e.node.get(), e.input_nr});
    }
    for (const Edge& e : next_edges)
      KILN_CHECK(reached.count({e.node.get(), e.input_nr}), "checkpoint: the segment, recomputed in backward, did "
                 "not use ", describe(e), ", which its first run used; the segment must compute the same thing "
                 "both times");

    return internal::grad_at_edges(roots, next_edges, root_grads, GradMode::is_enabled());
  }

  void release_saved() override {
    inputs_.clear();
    fn_ = nullptr;
    released_ = true;
  }

 private:
  CheckpointFn fn_;
  std::vector<SavedTensor> inputs_;
  CheckpointOptions options_;
  uint64_t seed_, offset_;
  AutocastState autocast_;
  bool released_ = false;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs, CheckpointOptions options) {
  KILN_CHECK(fn != nullptr, "checkpoint: no function given");
  if (!GradMode::is_enabled()) return fn(inputs);

  const uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  SegmentRun run = run_segment(fn, inputs);
  std::vector<Tensor>& outputs = run.outputs;
  std::vector<Tensor> with_history;
  for (const Tensor& out : outputs)
    if (gradient_edge(out).valid()) with_history.push_back(out);
  if (with_history.empty()) return outputs;  // nothing the segment read requires grad

  auto node = std::make_shared<CheckpointNode>(fn, inputs, options, seed, offset);
  node->next_edges = boundary(with_history, *run.nodes);
  with_history.clear();
  // The outputs keep their data but trade the segment's graph for the node, which frees that graph (and the
  // intermediates it saved) once nothing else holds it.
  for (Tensor& out : outputs) {
    node->output_meta.push_back(TensorMeta::of(out));
    const bool has_history = gradient_edge(out).valid();
    node->differentiable.push_back(has_history);
    if (has_history) out = out.detach();
  }
  // An output whose data something else still holds once the segment's graph is gone (an input or parameter
  // returned as it is or as a view, two views of one result) is copied: written in place, it would change that
  // other tensor behind autograd's back, since the node cannot record views of what it does not own.
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!node->differentiable[i]) continue;
    Tensor& out = outputs[i];
    if (out.storage().use_count() > 1) out = out.clone();
    set_history(out, node, static_cast<uint32_t>(i));
  }
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, CheckpointOptions options) {
  KILN_CHECK(fn != nullptr, "checkpoint: no function given");
  std::vector<Tensor> out = checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                                       {input}, options);
  return out[0];
}

}  // namespace kiln::autograd
