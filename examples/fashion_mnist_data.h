// Loading Fashion-MNIST for the examples: Debian's gzipped IDX files into float tensors. Real programs will use
// kiln's data layer; this keeps the examples self-contained.
#pragma once

#include <kiln/kiln.h>
#include <zlib.h>

#include <string>

namespace fashion_mnist {

using namespace kiln;

// Reads a gzipped IDX file (big-endian header: magic, dims; then uint8 data) into a uint8 tensor.
inline Tensor read_idx_gz(const std::string& path, int expected_dims) {
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
inline Tensor prepare(const Tensor& images) {
  return (images.reshape({images.size(0), -1}).to(kFloat32) / 255.0 - 0.2860) / 0.3530;
}


struct Data {
  Tensor x_train, y_train, x_test, y_test;  // x: (N, 784) float32 (uint8 from load_raw), y: (N) int64
};

// The images as stored, (N, 784) uint8: a quarter of the memory of float32 (55 MB instead of 220 MB for
// both sets), for programs that prepare each batch as they take it.
inline Data load_raw(const std::string& dir) {
  auto flat = [](const Tensor& images) { return images.reshape({images.size(0), -1}); };
  return {flat(read_idx_gz(dir + "/train-images-idx3-ubyte.gz", 3)),
          read_idx_gz(dir + "/train-labels-idx1-ubyte.gz", 1).to(kInt64),
          flat(read_idx_gz(dir + "/t10k-images-idx3-ubyte.gz", 3)),
          read_idx_gz(dir + "/t10k-labels-idx1-ubyte.gz", 1).to(kInt64)};
}

// The images prepared once, float32.
inline Data load(const std::string& dir) {
  Data d = load_raw(dir);
  d.x_train = prepare(d.x_train);
  d.x_test = prepare(d.x_test);
  return d;
}

}  // namespace fashion_mnist
