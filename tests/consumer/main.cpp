// Links the installed kiln and checks one matrix product, and its gradient, against numbers worked out by hand.
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  using namespace kiln;
  Tensor a = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor(std::vector<float>{7, 8, 9, 10, 11, 12}, {3, 2});
  std::vector<float> c = matmul(a, b).to_vector<float>();
  // [[1*7+2*9+3*11, 1*8+2*10+3*12], [4*7+5*9+6*11, 4*8+5*10+6*12]]
  const float expected[] = {58, 64, 139, 154};
  for (int i = 0; i < 4; ++i) {
    if (c[i] != expected[i]) {
      std::printf("consumer: element %d is %f, expected %f\n", i, c[i], expected[i]);
      return 1;
    }
  }
  // And through autograd: d sum(a b) / d a[i][j] = sum_k b[j][k] = 15, 19, 23 in every row.
  a.requires_grad_();
  matmul(a, b).sum().backward();
  std::vector<float> g = a.grad().to_vector<float>();
  const float expected_grad[] = {15, 19, 23, 15, 19, 23};
  for (int i = 0; i < 6; ++i) {
    if (g[i] != expected_grad[i]) {
      std::printf("consumer: gradient element %d is %f, expected %f\n", i, g[i], expected_grad[i]);
      return 1;
    }
  }
  std::printf("consumer: %s\n", matmul(a, b).str().c_str());
  return 0;
}
