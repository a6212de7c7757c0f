// IDX files (the MNIST format) and the MNIST / Fashion-MNIST datasets.
//
// An IDX file is a big-endian header (two zero bytes, a type code, the number of dims; then each dim as a
// 32-bit size) followed by the elements, big-endian, row-major. Files may be gzipped (detected by the gzip magic
// bytes, not the name). Everything is validated before a tensor is made: the magic, the dims, sizes that
// overflow, a data section shorter (truncated) or longer (trailing bytes) than the header says, a corrupt gzip
// stream. Each failure is a kiln::Error naming the file and what is wrong.
#pragma once

#include <memory>
#include <string>

#include "kiln/data/dataset.h"

namespace kiln::data {

// Type codes: 0x08 uint8 -> kUInt8, 0x09 int8 -> kInt32, 0x0B int16 -> kInt32, 0x0C int32 -> kInt32,
// 0x0D float32 -> kFloat32, 0x0E float64 -> kFloat64. NOTE: kiln has no int8/int16 dtypes; those widen to int32.
Tensor read_idx(const std::string& path);

// Writes t (uint8, int32, float32 or float64; any shape with at most 255 dims) as IDX, gzipped if asked.
void write_idx(const std::string& path, const Tensor& t, bool gzip = false);

// Reads a whole file, gunzipping it if it starts with the gzip magic. `op` prefixes error messages.
std::string read_maybe_gzipped(const std::string& path, const char* op);

enum class MnistSplit { Train, Test };

struct MnistOptions {
  // true: images as float32 in [0, 1] (value / 255); false: the raw uint8 pixels.
  bool float_images = true;
};

// MNIST or Fashion-MNIST from `dir` holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (Debian ships
// Fashion-MNIST's in /usr/share/datasets/fashion-mnist). Returns a TensorDataset of
// images (N, 1, 28, 28) (float32 or uint8, see MnistOptions) and labels (N) int64.
std::shared_ptr<TensorDataset> load_mnist(const std::string& dir, MnistSplit split, MnistOptions options = {});

}  // namespace kiln::data
