#include "kiln/nn/param_vector.h"

#include "kiln/tensor/error.h"

namespace kiln::nn {

Tensor parameters_to_vector(const std::vector<Tensor>& params) {
  if (params.empty()) return kiln::empty({0});
  std::vector<Tensor> flat;
  flat.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    KILN_CHECK(p.defined(), "parameters_to_vector: parameter ", i, " is undefined");
    KILN_CHECK(p.device() == params[0].device() && p.dtype() == params[0].dtype(), "parameters_to_vector: parameter ",
               i, " is ", p.dtype(), " on ", p.device(), ", parameter 0 ", params[0].dtype(), " on ",
               params[0].device(), ": expected one dtype and one device");
    flat.push_back(p.reshape({-1}));
  }
  return cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& params) {
  KILN_CHECK(vec.defined() && vec.dim() == 1, "vector_to_parameters: expected a 1-d vector, got ",
             vec.defined() ? shape_str(vec.sizes()) : std::string("an undefined tensor"));
  int64_t total = 0;
  for (const Tensor& p : params) total += p.numel();
  KILN_CHECK(vec.numel() == total, "vector_to_parameters: the vector has ", vec.numel(), " elements, the ",
             params.size(), " parameters hold ", total);
  NoGradGuard no_grad;
  int64_t at = 0;
  for (const Tensor& p : params) {
    KILN_CHECK(vec.device() == p.device(), "vector_to_parameters: the vector is on ", vec.device(),
               ", a parameter on ", p.device());
    p.copy_(vec.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
}

}  // namespace kiln::nn
