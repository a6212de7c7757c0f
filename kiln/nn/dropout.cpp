#include "kiln/nn/dropout.h"

#include "kiln/nn/functional.h"

namespace kiln::nn {

DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

Tensor DropoutImpl::forward(const Tensor& x) { return functional::dropout(x, p_, is_training()); }

}  // namespace kiln::nn
