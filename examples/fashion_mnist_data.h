// Loading Fashion-MNIST for the examples: Debian's gzipped IDX files, read by kiln's data layer
// (kiln::data::load_mnist, which validates them), as tensors the examples index by hand.
#pragma once

#include <kiln/kiln.h>

#include <string>

namespace fashion_mnist {

using namespace kiln;

// images (N, 28, 28) uint8 -> (N, 784) float32, scaled to [0, 1] then standardized with Fashion-MNIST's
// mean and std (0.2860, 0.3530).
inline Tensor prepare(const Tensor& images) {
  return (images.reshape({images.size(0), -1}).to(kFloat32) / 255.0 - 0.2860) / 0.3530;
}

struct Data {
  Tensor x_train, y_train, x_test, y_test;  // x: (N, 784) float32 (uint8 from load_raw), y: (N) int64
};

// The images as stored, (N, 784) uint8: a quarter of the memory of float32 (55 MB instead of 220 MB for
// both sets), for programs that prepare each batch as they take it.
inline Data load_raw(const std::string& dir) {
  const data::MnistOptions raw{.float_images = false};
  auto split = [&](data::MnistSplit which) {
    std::vector<Tensor> t = data::load_mnist(dir, which, raw)->tensors();  // (N, 1, 28, 28) uint8, (N) int64
    return std::pair{t[0].reshape({t[0].size(0), -1}), t[1]};
  };
  auto [x_train, y_train] = split(data::MnistSplit::Train);
  auto [x_test, y_test] = split(data::MnistSplit::Test);
  return {x_train, y_train, x_test, y_test};
}

// The images prepared once, float32.
inline Data load(const std::string& dir) {
  Data d = load_raw(dir);
  d.x_train = prepare(d.x_train);
  d.x_test = prepare(d.x_test);
  return d;
}

}  // namespace fashion_mnist
