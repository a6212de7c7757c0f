// The tensor library linked on its own, every object file of it pulled in (WHOLE_ARCHIVE): the link fails if
// any tensor-layer code calls a Tensor method that the autograd layer defines (x.view(...), a + b) instead of
// its kiln::ops counterpart. It then runs a few raw ops against hand-computed values.
#include <cstdio>

#include "kiln/tensor/ops.h"

int main() {
  using namespace kiln;
  Tensor a = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  Tensor b = ops::view(a, {2, 3});
  Tensor c = ops::mm(b, ops::t(b));  // [[14, 32], [32, 77]]
  Tensor s = ops::sum(ops::mul(c, 2.0));  // 2 * (14 + 32 + 32 + 77) = 310
  double got = s.item<double>();
  if (got != 310.0) {
    std::fprintf(stderr, "tensor_standalone: expected 310, got %g\n", got);
    return 1;
  }
  return 0;
}
