// DistributedDataParallel (ddp.h): the model check and broadcast at construction, the per-parameter hooks that
// fill buckets and issue them in order, and finalize, which waits and writes the averages back.
#include "kiln/distributed/ddp.h"


#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_set>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/meta.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/indexing.h"
#include "kiln/tensor/ops/reduce.h"

namespace kiln::distributed {

namespace {

size_t mib_to_bytes(double mib) { return mib <= 0 ? 0 : static_cast<size_t>(mib * 1024.0 * 1024.0); }

// One line per parameter and buffer: what has to match across ranks.
std::string describe_model(const nn::Module& module) {
  std::ostringstream out;
  for (const auto& [name, t] : module.named_parameters())
    out << "parameter '" << name << "' " << dtype_name(t.dtype()) << " " << shape_str(t.sizes())
        << (t.requires_grad() ? " requiring grad" : " not requiring grad") << "\n";
  for (const auto& [name, t] : module.named_buffers())
    out << "buffer '" << name << "' " << dtype_name(t.dtype()) << " " << shape_str(t.sizes()) << "\n";
  return out.str();
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  KILN_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  KILN_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  KILN_CHECK(options_.bucket_cap_mb >= 0 && options_.first_bucket_cap_mb >= 0,
             "DistributedDataParallel: bucket_cap_mb (", options_.bucket_cap_mb, ") and first_bucket_cap_mb (",
             options_.first_bucket_cap_mb, ") must be >= 0");
  verify_same_model();
  std::vector<Tensor> state;
  for (auto& [name, t] : module_->state_dict()) state.push_back(t);  // parameters and persistent buffers
  broadcast_from_rank0(state);

  std::vector<Tensor> tensors;
  for (auto& [name, t] : module_->named_parameters()) {
    if (!t.requires_grad()) {
      left_out_.emplace_back(name, t);
      continue;
    }
    KILN_CHECK(t.is_floating_point(), "DistributedDataParallel: parameter '", name, "' requires grad but has dtype ",
               dtype_name(t.dtype()), "; gradients are averaged, which needs a floating dtype");
    Param p;
    p.name = name, p.tensor = t;
    params_.push_back(std::move(p));
    tensors.push_back(t);
  }
  const auto specs = assign_buckets(tensors, mib_to_bytes(options_.first_bucket_cap_mb),
                                    mib_to_bytes(options_.bucket_cap_mb));
  for (size_t b = 0; b < specs.size(); ++b) {
    Bucket bucket;
    bucket.spec = specs[b];
    const Tensor& first = params_[bucket.spec.params.front()].tensor;
    bucket.buffer = zeros({bucket.spec.numel}, TensorOptions(bucket.spec.dtype).device(first.device()));
    for (size_t j = 0; j < bucket.spec.params.size(); ++j) {
      Param& p = params_[bucket.spec.params[j]];
      p.bucket = b;
      p.slot = bucket.buffer.narrow(0, bucket.spec.offsets[j], p.tensor.numel()).view(p.tensor.sizes());
    }
    buckets_.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].hook = params_[i].tensor.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_gradient(i); });
}

DistributedDataParallel::~DistributedDataParallel() {
  // A bucket still in flight keeps its buffer alive through its Work; only the hooks must go, they point here.
  for (auto& p : params_) p.tensor.remove_hook(p.hook);
}

// Every rank's description, gathered (lengths first: allgather needs equal sizes), compared with rank 0's; the
// error is the same on every rank, so all of them fail at once instead of some waiting on the others.
void DistributedDataParallel::verify_same_model() {
  const int world = group_->size();
  if (world == 1) return;
  const std::string mine = describe_model(*module_);
  Tensor length = full({1}, static_cast<int64_t>(mine.size()), TensorOptions(kInt64));
  std::vector<Tensor> lengths;
  for (int r = 0; r < world; ++r) lengths.push_back(empty({1}, TensorOptions(kInt64)));
  group_->allgather(lengths, length)->wait();
  int64_t longest = 1;
  for (const auto& l : lengths) longest = std::max(longest, l.item<int64_t>());
  Tensor text = zeros({longest}, TensorOptions(kUInt8));
  std::copy(mine.begin(), mine.end(), text.data_ptr<uint8_t>());
  std::vector<Tensor> texts;
  for (int r = 0; r < world; ++r) texts.push_back(empty({longest}, TensorOptions(kUInt8)));
  group_->allgather(texts, text)->wait();

  auto text_of = [&](int r) {
    const auto* p = texts[r].data_ptr<uint8_t>();
    return std::string(p, p + lengths[r].item<int64_t>());
  };
  const std::vector<std::string> reference = split_lines(text_of(0));
  for (int r = 1; r < world; ++r) {
    const std::vector<std::string> other = split_lines(text_of(r));
    for (size_t i = 0; i < std::max(reference.size(), other.size()); ++i) {
      if (i < reference.size() && i < other.size() && reference[i] == other[i]) continue;
      const std::string a = i < reference.size() ? reference[i] : "nothing more";
      const std::string b = i < other.size() ? other[i] : "nothing more";
      KILN_CHECK(false, "DistributedDataParallel: the ranks' models differ: entry ", i, " is ", a, " on rank 0 but ",
                 b, " on rank ", r, " (every rank must build the same model)");
    }
  }
}

// Coalesced: one flat buffer per dtype, so a model's hundreds of small tensors cost a few collectives.
void DistributedDataParallel::broadcast_from_rank0(const std::vector<Tensor>& tensors) {
  if (group_->size() == 1 || tensors.empty()) return;
  NoGradGuard no_grad;
  std::map<DType, std::vector<Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.dtype()].push_back(t);
  const bool root = group_->rank() == 0;
  for (auto& [dtype, group] : by_dtype) {
    int64_t total = 0;
    for (const auto& t : group) total += t.numel();
    Tensor flat = empty({total}, TensorOptions(dtype).device(group.front().device()));
    int64_t offset = 0;
    if (root)
      for (const auto& t : group) flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t), offset += t.numel();
    group_->broadcast(flat, 0)->wait();
    offset = 0;
    if (!root)
      for (const auto& t : group) t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes())), offset += t.numel();
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  before_forward();
  Tensor out = (*module_)(x);
  after_forward(out);
  return out;
}

void DistributedDataParallel::before_forward() {
  if (round_active_) {
    const std::string message =
        options_.find_unused_parameters
            ? "DistributedDataParallel: forward: the last backward's gradients were never finalized; call "
              "finalize() after backward and before optimizer.step()"
            : missing_gradients_error();
    reset_round();
    KILN_CHECK(false, message);
  }
  if (options_.broadcast_buffers) broadcast_from_rank0(module_->buffers());
}

void DistributedDataParallel::after_forward(const Tensor& out) {
  have_forward_unused_ = false;
  for (auto& p : params_) p.forward_unused = false;
  if (options_.find_unused_parameters && require_sync_ && autograd::GradMode::is_enabled()) find_forward_unused(out);
}

// The parameters the output's graph reaches are those whose AccumulateGrad nodes it leads to; the others will
// get no gradient from this output's backward.
void DistributedDataParallel::find_forward_unused(const Tensor& output) {
  std::unordered_set<const TensorImpl*> reached;
  if (output.defined() && output.is_leaf() && output.requires_grad()) reached.insert(output.impl());
  std::vector<std::shared_ptr<autograd::Node>> stack;
  std::unordered_set<const autograd::Node*> seen;
  if (output.defined() && output.grad_fn()) stack.push_back(output.grad_fn());
  while (!stack.empty()) {
    std::shared_ptr<autograd::Node> node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (const auto* acc = dynamic_cast<const autograd::AccumulateGrad*>(node.get())) reached.insert(acc->leaf().impl());
    for (const auto& edge : node->next_edges)
      if (edge.valid() && !seen.count(edge.node.get())) stack.push_back(edge.node);
  }
  for (auto& p : params_) p.forward_unused = !reached.count(p.tensor.impl());
  have_forward_unused_ = true;
}

void DistributedDataParallel::on_gradient(size_t index) {
  if (!require_sync_) return;  // no_sync: the gradient stays in .grad, to be all-reduced with the next ones
  if (!round_active_) begin_round();
  Param& p = params_[index];
  KILN_CHECK(!p.arrived, "DistributedDataParallel: parameter '", p.name, "' got a gradient ",
             p.forward_unused ? "although the last forward's output does not depend on it"
                              : "twice before finalize(); call finalize() between synced backward passes, or "
                                "accumulate inside no_sync()");
  {
    NoGradGuard no_grad;
    p.slot.copy_(p.tensor.grad());
  }
  mark_arrived(index, true);
  if (buckets_ready_ == buckets_.size()) finalize();  // the whole backward is in: no need to wait for the user
}

void DistributedDataParallel::begin_round() {
  // A parameter left out of the buckets that has since been made trainable would train on each rank's own
  // gradient, the ranks drifting apart without an error.
  for (const auto& [name, t] : left_out_) {
    KILN_CHECK(!t.requires_grad(), "DistributedDataParallel: parameter '", name, "' did not require grad when "
               "DDP was made, so it is in no bucket, but it does now: its gradient would not be averaged over "
               "the ranks. Make the DDP after unfreezing it (in the Trainer: unfreeze in the module's "
               "constructor, freeze later, as BackboneFinetuning does)");
  }
  round_active_ = true;
  next_launch_ = 0, buckets_ready_ = 0;
  for (auto& b : buckets_) b.pending = b.spec.params.size(), b.work.reset();
  for (auto& p : params_) p.arrived = false, p.used = false, p.frozen = !p.tensor.requires_grad();
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].frozen) params_[i].slot.zero_(), mark_arrived(i, false);
  }
  if (have_forward_unused_) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].forward_unused && !params_[i].frozen) params_[i].slot.zero_(), mark_arrived(i, false);
  }
  have_forward_unused_ = false;
}

void DistributedDataParallel::mark_arrived(size_t index, bool used) {
  Param& p = params_[index];
  p.arrived = true, p.used = used;
  if (--buckets_[p.bucket].pending == 0) {
    ++buckets_ready_;
    if (options_.overlap) launch_ready_buckets();
  }
}

// Strictly in bucket order: every rank issues the same collectives in the same order whatever order its
// backward happened to finish the buckets in.
void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = group_->allreduce(b.buffer, ReduceOp::Avg);
  }
}

std::string DistributedDataParallel::missing_gradients_error() const {
  std::string names;
  size_t count = 0;
  for (const auto& p : params_)
    if (!p.arrived) names += (count++ ? ", '" : "'") + p.name + "'";
  return detail::concat("DistributedDataParallel: ", count == 1 ? "parameter " : "parameters ", names,
                        " got no gradient in the last backward on rank ", group_->rank(),
                        ", so the buckets holding ", count == 1 ? "it" : "them", " were never all-reduced. Every "
                        "parameter that requires grad must take part in the loss; construct DDP with "
                        "find_unused_parameters = true if some do not");
}

void DistributedDataParallel::finalize() {
  if (!round_active_) return;
  if (buckets_ready_ < buckets_.size()) {
    if (!options_.find_unused_parameters) {
      const std::string message = missing_gradients_error();
      reset_round();
      KILN_CHECK(false, message);
    }
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!params_[i].arrived) params_[i].slot.zero_(), mark_arrived(i, false);
  }
  launch_ready_buckets();
  // find_unused_parameters: which parameters some rank used, so that those no rank used keep their .grad.
  Tensor used_by;
  std::shared_ptr<Work> used_work;
  if (options_.find_unused_parameters) {
    used_by = zeros({static_cast<int64_t>(params_.size())}, TensorOptions(kInt32));
    for (size_t i = 0; i < params_.size(); ++i) used_by.data_ptr<int32_t>()[i] = params_[i].used ? 1 : 0;
    used_work = group_->allreduce(used_by, ReduceOp::Sum);
  }
  try {
    for (auto& b : buckets_) b.work->wait();
    if (used_work) used_work->wait();
  } catch (...) {
    reset_round();
    throw;
  }
  NoGradGuard no_grad;
  // A parameter frozen here went in as zeros, so its average is zero unless some rank did not freeze it. That
  // rank's gradient for it was averaged with this rank's zeros, so this rank raises an error naming it; the
  // other ranks, which cannot tell, fail at their next collective once this one stops (their one update with
  // the watered-down gradient dies with the job). No extra communication, which is also why a bucket whose
  // parameters are all frozen is still all-reduced. A rank whose unfrozen copy had an exactly zero gradient
  // goes unseen, and loses nothing. One host read covers them all (on a GPU, one synchronization), and a
  // bucket frozen whole (a frozen backbone) is checked as one tensor.
  std::vector<Tensor> frozen_nonzero;
  for (const Bucket& b : buckets_) {
    size_t frozen = 0;
    for (size_t k : b.spec.params) frozen += params_[k].frozen;
    if (frozen == b.spec.params.size()) {
      frozen_nonzero.push_back(any(b.buffer != 0).reshape({1}));
    } else if (frozen > 0) {
      for (size_t k : b.spec.params)
        if (params_[k].frozen) frozen_nonzero.push_back(any(params_[k].slot != 0).reshape({1}));
    }
  }
  if (!frozen_nonzero.empty() && any(cat(frozen_nonzero)).item<bool>()) {
    const Param& p = *std::find_if(params_.begin(), params_.end(),
                                   [](const Param& q) { return q.frozen && any(q.slot != 0).item<bool>(); });
    reset_round();
    KILN_CHECK(false, "DistributedDataParallel: parameter '", p.name, "' is frozen (requires_grad false) on rank ",
               group_->rank(), ", but another rank sent a gradient for it in this round: every rank must freeze "
               "the same parameters (that rank's update of it was averaged with this rank's zeros)");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    if (p.frozen || (used_by.defined() && used_by.data_ptr<int32_t>()[i] == 0)) continue;
    if (p.tensor.grad().defined()) p.tensor.grad().copy_(p.slot);
    else p.tensor.set_grad(p.slot.clone());
  }
  reset_round();
}

// One round of the usual machinery (begin_round, mark_arrived, finalize) fed from .grad instead of from
// backward's hooks: the buckets launch and are waited for as after a synced backward, a failure drains them,
// and find_unused_parameters' rule applies (a parameter no rank has a gradient for keeps none).
void DistributedDataParallel::allreduce_accumulated_gradients() {
  KILN_CHECK(!round_active_, "DistributedDataParallel: allreduce_accumulated_gradients() while a synced backward's ",
             "buckets are still open; call finalize() first");
  have_forward_unused_ = false;  // every accumulated gradient counts, whatever the last forward reached
  begin_round();
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].frozen) continue;  // begin_round counted it
      const Tensor& g = params_[i].tensor.grad();
      if (g.defined()) params_[i].slot.copy_(g);
      else params_[i].slot.zero_();
      mark_arrived(i, g.defined());
    }
  }
  finalize();
}

// Buckets still in flight are waited for (errors dropped: the caller is already reporting one), so that the
// next round never writes into a buffer the group's thread is reading.
void DistributedDataParallel::reset_round() {
  for (auto& b : buckets_) {
    if (b.work) {
      try {
        b.work->wait();
      } catch (...) {
      }
    }
    b.work.reset();
  }
  round_active_ = false;
  next_launch_ = 0, buckets_ready_ = 0;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> layout;
  for (const auto& b : buckets_) {
    layout.emplace_back();
    for (size_t k : b.spec.params) layout.back().push_back(params_[k].name);
  }
  return layout;
}

}  // namespace kiln::distributed
