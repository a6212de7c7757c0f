// nn::init: filling parameters in place, under no grad, as torch.nn.init does. fan_in and fan_out of a weight
// (out, in, k...) are in * prod(k) and out * prod(k).
#pragma once

#include <string>
#include <utility>

#include "kiln/autograd/autograd.h"

namespace kiln::nn::init {

// (fan_in, fan_out) of a weight of at least 2 dims.
std::pair<int64_t, int64_t> fans(const Tensor& w);
// The recommended gain for a nonlinearity: "linear", "conv", "sigmoid" 1; "tanh" 5/3; "relu" sqrt(2);
// "leaky_relu" sqrt(2 / (1 + param^2)); "selu" 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

void uniform_(const Tensor& w, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
void normal_(const Tensor& w, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
void constant_(const Tensor& w, double value);
void zeros_(const Tensor& w);
void ones_(const Tensor& w);
// mode "fan_in" or "fan_out"; bound = gain * sqrt(3 / fan) with gain = calculate_gain(nonlinearity, a).
void kaiming_uniform_(const Tensor& w, double a = 0.0, const std::string& mode = "fan_in",
                      const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
void kaiming_normal_(const Tensor& w, double a = 0.0, const std::string& mode = "fan_in",
                     const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
void xavier_uniform_(const Tensor& w, double gain = 1.0, Generator* gen = nullptr);
void xavier_normal_(const Tensor& w, double gain = 1.0, Generator* gen = nullptr);
// Normal(mean, std) restricted to [a, b], drawn by inverting the normal CDF on a uniform draw.
void trunc_normal_(const Tensor& w, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                   Generator* gen = nullptr);
// A (semi-)orthogonal matrix times gain, as PyTorch's: w seen as (rows, cols) = (size(0), numel / rows) gets the
// Q of the QR factorization of a standard normal matrix (of the transposed shape when rows < cols, so Q is
// never wider than tall), its columns' signs fixed by diag(R) so that Q is uniform over orthogonal matrices.
// Orthonormal columns (rows >= cols) or rows (rows < cols). w needs at least 2 dims.
void orthogonal_(const Tensor& w, double gain = 1.0, Generator* gen = nullptr);

}  // namespace kiln::nn::init
