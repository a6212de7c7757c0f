// IDX reading and writing, and load_mnist.
#include "kiln/data/idx.h"

#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace kiln::data {

namespace {

bool is_gzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

std::string gunzip(const std::string& in, const std::string& path, const char* op) {
  z_stream zs{};
  // 16 + MAX_WBITS: gzip framing only (the caller saw the magic), header and CRC checked by zlib.
  KILN_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, op, ": ", path, ": zlib could not start inflating");
  std::string out;
  size_t pos = 0;
  char buf[1 << 16];
  int ret = Z_OK;
  // Concatenated gzip members (what `cat a.gz b.gz` makes) are one stream, as gunzip reads them.
  while (pos < in.size()) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
    zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size() - pos, 1u << 30));
    size_t before = zs.avail_in;
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof(buf);
      ret = inflate(&zs, Z_NO_FLUSH);
      if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) {
        std::string msg = zs.msg ? zs.msg : "error " + std::to_string(ret);
        inflateEnd(&zs);
        KILN_CHECK(false, op, ": ", path, ": corrupt gzip data (", msg, ")");
      }
      out.append(buf, sizeof(buf) - zs.avail_out);
    } while (zs.avail_out == 0 && ret != Z_STREAM_END);
    pos += before - zs.avail_in;
    if (ret == Z_STREAM_END) {
      // Another member follows only if it starts with the magic; anything else is trailing garbage.
      if (pos < in.size()) {
        if (!is_gzip(in.substr(pos, 2))) {
          inflateEnd(&zs);
          KILN_CHECK(false, op, ": ", path, ": ", in.size() - pos, " bytes of trailing garbage after the gzip stream");
        }
        inflateReset(&zs);
      }
    } else if (before == zs.avail_in) {
      break;  // no progress: the input ended mid-stream
    }
  }
  inflateEnd(&zs);
  KILN_CHECK(ret == Z_STREAM_END, op, ": ", path, ": the gzip stream is truncated (ends before its trailer)");
  return out;
}

uint32_t be32(const unsigned char* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

struct IdxType {
  unsigned char code;
  const char* name;
  size_t size;  // bytes per element in the file
  DType dtype;  // the tensor's dtype
};
constexpr IdxType kIdxTypes[] = {
    {0x08, "uint8", 1, kUInt8},     {0x09, "int8", 1, kInt32},      {0x0B, "int16", 2, kInt32},
    {0x0C, "int32", 4, kInt32},     {0x0D, "float32", 4, kFloat32}, {0x0E, "float64", 8, kFloat64},
};

// Big-endian element i of `src` as T.
template <typename T, typename Raw>
void decode(const unsigned char* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    for (size_t k = 0; k < sizeof(Raw); ++k) bits = bits << 8 | src[i * sizeof(Raw) + k];
    Raw raw;
    std::memcpy(&raw, &bits, sizeof(Raw));  // NOTE: little-endian host assumed (static_assert below)
    dst[i] = static_cast<T>(raw);
  }
}
static_assert(std::endian::native == std::endian::little, "the IDX decoder assumes a little-endian host");

}  // namespace

std::string read_maybe_gzipped(const std::string& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), op, ": cannot open ", path, " (", std::strerror(errno), ")");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  KILN_CHECK(!in.bad(), op, ": error reading ", path);
  return is_gzip(bytes) ? gunzip(bytes, path, op) : bytes;
}

Tensor read_idx(const std::string& path) {
  std::string bytes = read_maybe_gzipped(path, "read_idx");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  KILN_CHECK(bytes.size() >= 4, "read_idx: ", path, ": file is ", bytes.size(), " bytes, too short for the 4-byte magic");
  KILN_CHECK(p[0] == 0 && p[1] == 0, "read_idx: ", path, ": bad magic: an IDX file starts with two zero bytes, got 0x",
             std::hex, int(p[0]), " 0x", int(p[1]));
  const IdxType* type = nullptr;
  for (const auto& t : kIdxTypes)
    if (t.code == p[2]) type = &t;
  KILN_CHECK(type != nullptr, "read_idx: ", path, ": bad magic: unknown type code 0x", std::hex, int(p[2]),
             " (expected 0x08, 0x09, 0x0b, 0x0c, 0x0d or 0x0e)");
  int dims = p[3];
  KILN_CHECK(dims >= 1, "read_idx: ", path, ": the header says 0 dims");
  size_t header = 4 + 4 * static_cast<size_t>(dims);
  KILN_CHECK(bytes.size() >= header, "read_idx: ", path, ": truncated header: ", dims, " dims need ", header,
             " header bytes, the file has ", bytes.size());
  Shape shape;
  uint64_t numel = 1;
  for (int d = 0; d < dims; ++d) {
    uint32_t s = be32(p + 4 + 4 * d);
    shape.push_back(s);
    // NOTE: the product of up to 255 32-bit sizes overflows 64 bits; check before multiplying.
    KILN_CHECK(s == 0 || numel <= (uint64_t{1} << 62) / s / type->size, "read_idx: ", path, ": sizes ", shape_str(shape),
               "... overflow (more elements than any file can hold)");
    numel *= s;
  }
  uint64_t want = numel * type->size, have = bytes.size() - header;
  KILN_CHECK(have >= want, "read_idx: ", path, ": truncated data: shape ", shape_str(shape), " of ", type->name, " needs ", want,
             " bytes after the header, the file has ", have);
  KILN_CHECK(have == want, "read_idx: ", path, ": ", have - want, " bytes of trailing garbage after the ", want,
             " data bytes of shape ", shape_str(shape));
  Tensor t = empty(shape, type->dtype);
  const unsigned char* src = p + header;
  int64_t n = static_cast<int64_t>(numel);
  switch (type->code) {
    case 0x08: std::memcpy(t.raw_data_ptr(), src, numel); break;
    case 0x09: decode<int32_t, int8_t>(src, n, t.data_ptr<int32_t>()); break;
    case 0x0B: decode<int32_t, int16_t>(src, n, t.data_ptr<int32_t>()); break;
    case 0x0C: decode<int32_t, int32_t>(src, n, t.data_ptr<int32_t>()); break;
    case 0x0D: decode<float, float>(src, n, t.data_ptr<float>()); break;
    case 0x0E: decode<double, double>(src, n, t.data_ptr<double>()); break;
  }
  return t;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  unsigned char code = 0;
  for (const auto& type : kIdxTypes)
    if (type.dtype == t.dtype() && (type.code == 0x08 || type.size == dtype_size(t.dtype()))) code = type.code;
  KILN_CHECK(code != 0, "write_idx: ", path, ": dtype ", t.dtype(), " has no IDX type (uint8, int32, float32, float64)");
  KILN_CHECK(t.dim() >= 1 && t.dim() <= 255, "write_idx: ", path, ": IDX holds 1 to 255 dims, got shape ", shape_str(t.sizes()));
  std::string out = {0, 0, static_cast<char>(code), static_cast<char>(t.dim())};
  for (int64_t s : t.sizes()) {
    KILN_CHECK(s <= 0xffffffffll, "write_idx: ", path, ": size ", s, " does not fit IDX's 32 bits");
    for (int k = 3; k >= 0; --k) out.push_back(static_cast<char>((s >> (8 * k)) & 0xff));
  }
  Tensor c = t.cpu().contiguous();
  const auto* src = static_cast<const unsigned char*>(c.raw_data_ptr());
  size_t es = c.element_size();
  for (int64_t i = 0; i < c.numel(); ++i)
    for (size_t k = es; k-- > 0;) out.push_back(static_cast<char>(src[i * es + k]));  // to big-endian
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    KILN_CHECK(f != nullptr, "write_idx: cannot open ", path, " for writing");
    int wrote = gzwrite(f, out.data(), static_cast<unsigned>(out.size()));
    int closed = gzclose(f);
    KILN_CHECK(wrote == static_cast<int>(out.size()) && closed == Z_OK, "write_idx: error writing ", path);
    return;
  }
  std::ofstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "write_idx: cannot open ", path, " for writing (", std::strerror(errno), ")");
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  KILN_CHECK(f.good(), "write_idx: error writing ", path);
}

std::shared_ptr<TensorDataset> load_mnist(const std::string& dir, MnistSplit split, MnistOptions options) {
  std::string stem = split == MnistSplit::Train ? "train" : "t10k";
  auto find = [&](const std::string& name) {
    for (const std::string& p : {dir + "/" + name + ".gz", dir + "/" + name})
      if (std::filesystem::exists(p)) return p;
    KILN_CHECK(false, "load_mnist: neither ", dir, "/", name, ".gz nor ", dir, "/", name, " exists");
    return std::string();
  };
  std::string images_path = find(stem + "-images-idx3-ubyte"), labels_path = find(stem + "-labels-idx1-ubyte");
  Tensor images = read_idx(images_path), labels = read_idx(labels_path);
  KILN_CHECK(images.dtype() == kUInt8 && images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28,
             "load_mnist: ", images_path, ": expected uint8 images of shape (N, 28, 28), got ", images.dtype(), " ",
             shape_str(images.sizes()));
  KILN_CHECK(labels.dtype() == kUInt8 && labels.dim() == 1, "load_mnist: ", labels_path,
             ": expected uint8 labels of shape (N), got ", labels.dtype(), " ", shape_str(labels.sizes()));
  KILN_CHECK(images.size(0) == labels.size(0), "load_mnist: ", images_path, " holds ", images.size(0), " images but ",
             labels_path, " holds ", labels.size(0), " labels");
  images = images.view({images.size(0), 1, 28, 28});
  if (options.float_images) images = images.to(kFloat32) / 255.0;
  return std::make_shared<TensorDataset>(std::vector<Tensor>{images, labels.to(kInt64)});
}

}  // namespace kiln::data
