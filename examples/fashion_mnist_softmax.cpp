// Trains softmax regression (one linear layer, cross-entropy) on Fashion-MNIST with kiln's tensor library
// alone: the gradients are written out by hand, since autograd is not in kiln yet. For logits z = x W + b and
// p = softmax(z), the mean cross-entropy's gradients are dL/dz = (p - onehot(y)) / B, dL/dW = x^T dL/dz and
// dL/db = sum over the batch of dL/dz.
//
//   fashion_mnist_softmax [data_dir] [epochs]
// data_dir defaults to /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package).
#include <kiln/kiln.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <string>

using namespace kiln;

namespace {

// Reads a gzipped IDX file (big-endian header: magic, dims; then uint8 data) into a uint8 tensor.
// Real programs will use kiln's data layer; this keeps the example self-contained.
Tensor read_idx_gz(const std::string& path, int expected_dims) {
  gzFile f = gzopen(path.c_str(), "rb");
  KILN_CHECK(f != nullptr, "read_idx_gz: cannot open ", path);
  auto read_exact = [&](void* buf, unsigned n) {
    int got = gzread(f, buf, n);
    if (got != static_cast<int>(n)) {
      gzclose(f);
      KILN_CHECK(false, "read_idx_gz: ", path, " is truncated (wanted ", n, " bytes, got ", got, ")");
    }
  };
  auto be32 = [](const unsigned char* b) {
    return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
  };
  unsigned char header[4];
  read_exact(header, 4);
  int dims = header[3];
  if (header[0] != 0 || header[1] != 0 || header[2] != 0x08 || dims != expected_dims) {
    gzclose(f);
    KILN_CHECK(false, "read_idx_gz: ", path, " is not an IDX file of ", expected_dims,
               " dims of uint8 (magic bytes ", int(header[0]), " ", int(header[1]), " ", int(header[2]), " ", dims, ")");
  }
  Shape shape;
  for (int d = 0; d < dims; ++d) {
    unsigned char b[4];
    read_exact(b, 4);
    shape.push_back(be32(b));
  }
  Tensor t = empty(shape, kUInt8);
  read_exact(t.raw_data_ptr(), static_cast<unsigned>(t.numel()));
  gzclose(f);
  return t;
}

// images (N, 28, 28) uint8 -> (N, 784) float32, scaled to [0, 1] then standardized with Fashion-MNIST's
// mean and std (0.2860, 0.3530).
Tensor prepare(const Tensor& images) {
  return (images.reshape({images.size(0), -1}).to(kFloat32) / 255.0 - 0.2860) / 0.3530;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  try {
    Tensor x_train = prepare(read_idx_gz(dir + "/train-images-idx3-ubyte.gz", 3));
    Tensor y_train = read_idx_gz(dir + "/train-labels-idx1-ubyte.gz", 1).to(kInt64);
    Tensor x_test = prepare(read_idx_gz(dir + "/t10k-images-idx3-ubyte.gz", 3));
    Tensor y_test = read_idx_gz(dir + "/t10k-labels-idx1-ubyte.gz", 1).to(kInt64);
    std::printf("Fashion-MNIST: %lld training and %lld test images of %lld pixels\n",
                static_cast<long long>(x_train.size(0)), static_cast<long long>(x_test.size(0)),
                static_cast<long long>(x_train.size(1)));

    const int64_t batch = 64, classes = 10, n = x_train.size(0);
    const double lr = 0.05;
    Tensor w = zeros({x_train.size(1), classes});  // (784, 10)
    Tensor b = zeros({classes});                    // (10)
    Generator gen(0);

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor order = randperm(n, kInt64, &gen);
      double loss_sum = 0;
      int64_t batches = 0;
      for (int64_t start = 0; start < n; start += batch) {
        Tensor idx = order.narrow(0, start, std::min(batch, n - start));
        Tensor xb = index_select(x_train, 0, idx);      // (B, 784)
        Tensor yb = index_select(y_train, 0, idx);      // (B)
        Tensor logits = addmm(b, xb, w);                // (B, 10)
        Tensor logp = log_softmax(logits, 1);
        loss_sum -= gather(logp, 1, yb.unsqueeze(1)).mean().item<double>();
        Tensor dz = (exp(logp) - one_hot(yb, classes).to(kFloat32)) / static_cast<double>(xb.size(0));
        w.sub_(mm(xb.t(), dz), lr);
        b.sub_(dz.sum({0}), lr);
        ++batches;
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Tensor predicted = argmax(addmm(b, x_test, w), 1);
      double accuracy = (predicted == y_test).to(kFloat32).mean().item<double>();
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.2f s\n", epoch, loss_sum / batches,
                  100 * accuracy, seconds);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
