#include "kiln/distributed/sync_batch_norm.h"

#include <string>

#include "kiln/nn/normalization.h"

namespace kiln::distributed {

int64_t convert_sync_batchnorm(nn::Module& module, const std::shared_ptr<ProcessGroup>& group) {
  KILN_CHECK(group != nullptr, "convert_sync_batchnorm: no process group given");
  int64_t converted = 0;
  std::weak_ptr<ProcessGroup> weak = group;
  module.apply([&](nn::Module& m) {
    auto* bn = dynamic_cast<nn::BatchNormImpl*>(&m);
    if (bn == nullptr) return;
    const std::string layer = m.type_name();
    bn->set_cross_process_sum([weak, layer](Tensor& t) {
      auto pg = weak.lock();
      KILN_CHECK(pg != nullptr, layer, " (synchronized batch norm): its process group no longer exists; call "
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
