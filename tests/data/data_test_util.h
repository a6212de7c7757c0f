// Helpers for the data layer's tests: a scratch directory and raw file writing.
#pragma once

#include <gtest/gtest.h>
#include <kiln/data/data.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace kiln::test {

// A fresh directory under the system temp dir, removed with its contents at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
             (info ? std::string(info->name()) : "x"));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// gzip-compresses `bytes` with zlib (independently of kiln's writer).
inline std::string gzip_bytes(const std::string& bytes) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, bytes.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Big-endian bytes of an unsigned value.
inline std::string be(uint64_t v, int bytes) {
  std::string s;
  for (int k = bytes - 1; k >= 0; --k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  return s;
}

// An IDX header: magic (0, 0, type, dims) and the sizes.
inline std::string idx_header(unsigned char type, std::vector<uint32_t> sizes) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(sizes.size())};
  for (uint32_t v : sizes) s += be(v, 4);
  return s;
}

}  // namespace kiln::test
