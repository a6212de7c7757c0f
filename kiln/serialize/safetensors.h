// safetensors: the weight format shared with PyTorch and the Hugging Face tools.
//
// A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the tensor data:
//   {"__metadata__": {"key": "value", ...},
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// Offsets count from the first byte after the header; every tensor is little-endian, row-major and packed.
//
// Writing mirrors the reference writer (the Rust `safetensors` crate behind the Python package): tensors are
// laid out by descending element size, then by name, and the JSON is padded with spaces to a multiple of 8
// bytes, so every tensor starts aligned for its dtype. Files go through a temporary file in the same
// directory, fsync and rename: a crash or error leaves either the old file or the new one, never half of one.
//
// Reading validates everything before any tensor is made, as the reference reader does and a little more:
// the header must fit in the file and under 100,000,000 bytes, be UTF-8 JSON with no repeated key, tensors
// must tile the data region exactly (no overlap, no gap, no trailing byte), each tensor's byte count must be
// numel * element size, and BOOL bytes must be 0 or 1. Every failure is a kiln::Error that names the file and,
// where there is one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor/tensor.h"

namespace kiln::serialize {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

// The reference reader refuses headers over this many bytes; so does kiln.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The safetensors name of a dtype ("F32", "BF16", "BOOL", ...).
const char* safetensors_dtype_name(DType dtype);

// One tensor as the header describes it. begin/end are byte offsets into the data region.
struct TensorInfo {
  std::string name;
  DType dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct LoadOptions {
  // Map the file (private, copy-on-write) and return tensors that view the mapping instead of reading
  // into kiln-owned memory. The mapping lives until the last such tensor is gone. A tensor whose data is not
  // aligned for its dtype in the file (never the case for files written by kiln or the reference writer) is
  // copied instead. Writing into a mapped tensor changes only this process's copy, never the file.
  // NOTE: the file must not be truncated while mapped (a SIGBUS on access, as with any mmap); replacing it
  // by rename, as save_safetensors does, is safe.
  bool mmap = false;
};

struct Loaded {
  TensorMap tensors;
  Metadata metadata;
};

// Writes `tensors` (any dtype, device and layout; copied to contiguous CPU memory first) and `metadata`
// atomically to `path`. A tensor may not be named "__metadata__"; names and metadata must be UTF-8.
void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});
// The bytes save_safetensors would write.
std::vector<uint8_t> to_bytes(const TensorMap& tensors, const Metadata& metadata = {});

Loaded load_safetensors(const std::string& path, LoadOptions options = {});
// Reads a whole file image from memory (tensors are copies; `bytes` may go away afterwards).
Loaded from_bytes(const uint8_t* data, size_t size);
inline Loaded from_bytes(const std::vector<uint8_t>& bytes) { return from_bytes(bytes.data(), bytes.size()); }

// An opened, validated file, mapped once: list what it holds, then load only the tensors wanted.
//   SafetensorsFile f("model.safetensors");
//   for (const auto& info : f.tensors()) std::cout << info.name << shape_str(info.shape) << "\n";
//   Tensor w = f.load("layers.0.weight");
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::string& path() const { return path_; }
  // In data order (by begin offset).
  const std::vector<TensorInfo>& tensors() const;
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // an error naming the tensor when absent
  const Metadata& metadata() const;

  // A view of the mapping (copy = false, when aligned) or a kiln-owned copy (copy = true). Either stays valid
  // after this object is gone.
  Tensor load(const std::string& name, bool copy = false) const;
  TensorMap load_all(bool copy = false) const;

 private:
  struct State;
  std::string path_;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::serialize
