// A model's parameters as one flat vector and back, as torch.nn.utils.parameters_to_vector and
// vector_to_parameters: for methods that treat the weights as a point in R^n (line searches, evolution
// strategies, weight averaging, second-order tricks).
#pragma once

#include <vector>

#include "kiln/autograd/autograd.h"

namespace kiln::nn {

// The parameters flattened and concatenated in order, in one 1-d tensor (differentiable: gradients flow back to
// each parameter). All on one device and of one dtype; an empty list gives an empty float32 vector.
Tensor parameters_to_vector(const std::vector<Tensor>& params);

// Copies consecutive slices of vec (1-d, exactly as many elements as the parameters hold, on their device) into
// the parameters, in place and outside autograd: the tensors keep their identity, so an optimizer built on them
// goes on with the new values. Converts vec's dtype to each parameter's.
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& params);

}  // namespace kiln::nn
