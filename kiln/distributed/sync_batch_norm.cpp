#include "kiln/distributed/sync_batch_norm.h"

#include <functional>
#include <string>

#include "kiln/nn/normalization.h"

namespace kiln::distributed {

namespace {
// fn on `m` and every module below it, with its dotted name ("" for m). (named_modules needs a module owned by
// a shared_ptr; the Trainer's module may be anywhere.)
void visit(nn::Module& m, const std::string& name, const std::function<void(nn::Module&, const std::string&)>& fn) {
  fn(m, name);
  for (const auto& [n, child] : m.named_children()) visit(*child, name.empty() ? n : name + "." + n, fn);
}
}  // namespace

int64_t convert_sync_batchnorm(nn::Module& module, const std::shared_ptr<ProcessGroup>& group) {
  KILN_CHECK(group != nullptr, "convert_sync_batchnorm: no process group given");
  int64_t converted = 0;
  std::weak_ptr<ProcessGroup> weak = group;
  visit(module, "", [&](nn::Module& m, const std::string& name) {
    auto* bn = dynamic_cast<nn::BatchNormImpl*>(&m);
    if (bn == nullptr) return;
    const std::string layer = name.empty() ? m.type_name() : name + " (" + m.type_name() + ")";
    bn->set_cross_process_sum([weak, layer](Tensor& t) {
      auto pg = weak.lock();
      KILN_CHECK(pg != nullptr, "synchronized batch norm ", layer, ": its process group no longer exists; call "
                 "distributed::revert_sync_batchnorm on the model to train it in one process");
      pg->allreduce(t, ReduceOp::Sum)->wait();
    });
    ++converted;
  });
  return converted;
}

int64_t revert_sync_batchnorm(nn::Module& module) {
  int64_t reverted = 0;
  module.apply([&](nn::Module& m) {
    auto* bn = dynamic_cast<nn::BatchNormImpl*>(&m);
    if (bn == nullptr || !bn->is_synchronized()) return;
    bn->set_cross_process_sum(nullptr);
    ++reverted;
  });
  return reverted;
}

}  // namespace kiln::distributed
