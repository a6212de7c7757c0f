// The graph behind a tensor in Graphviz DOT, for teaching and debugging:
//   std::ofstream("graph.dot") << kiln::autograd::to_dot(loss);   then: dot -Tsvg graph.dot -o graph.svg
// Each node shows its op name, forward order (#n) and the shapes of what it produced; leaves show their
// shape; arrows run the way data flowed in forward.
#pragma once

#include <string>

#include "kiln/tensor/tensor.h"

namespace kiln::autograd {

std::string to_dot(const Tensor& output);

}  // namespace kiln::autograd
