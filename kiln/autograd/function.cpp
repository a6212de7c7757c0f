#include "kiln/autograd/function.h"

namespace kiln::autograd {

std::vector<Tensor> AutogradContext::get_saved_variables() const {
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  KILN_CHECK(node_ != nullptr || saved_.empty(), "get_saved_variables: called outside backward");
  for (const SavedTensor& s : saved_) out.push_back(s.get(*node_));
  return out;
}

}  // namespace kiln::autograd
