// Helpers for the serialize tests: a scratch directory per test, raw bytes of tensors and files, and a
// hand-made safetensors file from a JSON header and data bytes (so corrupt files can be written on purpose).
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/serialize/serialize.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kiln::test {

using Bytes = std::vector<uint8_t>;

// The bytes of t in row-major order (read through kiln's contiguous copy).
inline Bytes tensor_bytes(const Tensor& t) {
  Tensor c = ops::contiguous(ops::to(t, kCPU));
  const auto* p = static_cast<const uint8_t*>(c.raw_data_ptr());
  return Bytes(p, p + c.nbytes());
}

inline Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// 8-byte little-endian length, `header` as is (no padding), then `data`.
inline Bytes make_file(const std::string& header, const Bytes& data = {}) {
  Bytes out(8 + header.size() + data.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// A fresh directory for one test, removed with everything in it afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_serialize_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::filesystem::path dir_;
};

}  // namespace kiln::test
