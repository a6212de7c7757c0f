// Corrupt safetensors files: each defect, planted on purpose, gives a kiln::Error that names the file (and the
// tensor), through every reader: plain load, mapped load and from_bytes. Then truncations and random byte
// flips of a valid file, which must load or fail cleanly, never crash.
#include <random>

#include "serialize/serialize_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using serialize::load_safetensors;
using serialize::LoadOptions;

class CorruptionTest : public ScratchDir {
 protected:
  // Writes `bytes` and checks that all three readers fail with every one of `parts` in the message (plus the
  // file's path, or "from_bytes").
  void expect_corrupt(const Bytes& bytes, std::initializer_list<std::string> parts) {
    std::string p = path("bad.safetensors");
    write_file(p, bytes);
    for (bool mmap : {false, true}) {
      SCOPED_TRACE(mmap ? "mapped" : "plain");
      expect_error([&] { load_safetensors(p, LoadOptions{.mmap = mmap}); }, {p});
      expect_error([&] { load_safetensors(p, LoadOptions{.mmap = mmap}); }, parts);
    }
    SCOPED_TRACE("from_bytes");
    expect_error([&] { serialize::from_bytes(bytes); }, {"from_bytes"});
    expect_error([&] { serialize::from_bytes(bytes); }, parts);
  }
};

Bytes f32_bytes(int n) { return Bytes(static_cast<size_t>(4 * n), 0); }

TEST_F(CorruptionTest, FileAndHeaderLength) {
  for (size_t n = 0; n < 8; ++n) expect_corrupt(Bytes(n, 0), {"shorter than the 8-byte header length"});
  Bytes b = make_file("{}");
  b[0] = 200;  // N = 200 in a 10-byte file
  expect_corrupt(b, {"header length 200 runs past the end of the file (10 bytes)"});
  b = make_file("{}");
  b[5] = 1;  // N = 2^40 + 2
  expect_corrupt(b, {"over the limit of 100000000 bytes"});
  b.assign(8, 0xff);  // N = 2^64 - 1
  expect_corrupt(b, {"over the limit"});
  // A header exactly at the limit is not rejected for its size (only for running past this small file).
  b = make_file("{}");
  uint64_t cap = serialize::kMaxHeaderBytes;
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(cap >> (8 * i));
  expect_corrupt(b, {"runs past the end of the file"});
}

TEST_F(CorruptionTest, HeaderNotJsonObject) {
  expect_corrupt(make_file(R"({"a":)"), {"header is not valid JSON", "expected a value"});
  expect_corrupt(make_file(R"({"a":{"dtype":"F32"} x)"), {"header is not valid JSON", "at byte"});
  expect_corrupt(make_file("[1, 2]"), {"header is an array, not a JSON object"});
  expect_corrupt(make_file("\"str\""), {"not a JSON object"});
  expect_corrupt(make_file(""), {"header is not valid JSON"});
  expect_corrupt(make_file("{\"\xff\":1}"), {"not valid UTF-8"});
  expect_corrupt(make_file("{\"a\x01\":1}"), {"control character"});
  expect_corrupt(make_file(R"({"\ud800":1})"), {"surrogate"});
  expect_corrupt(make_file(std::string(10000, '[') + std::string(10000, ']')), {"nesting deeper than 64"});
  expect_corrupt(make_file(R"({"a":tru})"), {"unexpected 't'"});
  expect_corrupt(make_file(R"({"a":01})"), {"header is not valid JSON"});
}

TEST_F(CorruptionTest, DuplicateKeys) {
  std::string t = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_corrupt(make_file("{\"a\":" + t + ",\"a\":" + t + "}", f32_bytes(1)), {"duplicate key \"a\""});
  expect_corrupt(make_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes(1)),
                 {"duplicate key \"dtype\""});
  expect_corrupt(make_file(R"({"__metadata__":{"k":"1","k":"2"}})"), {"duplicate key \"k\""});
}

TEST_F(CorruptionTest, TensorEntries) {
  auto one = [](const std::string& entry, int floats = 1) {
    return make_file("{\"w\":" + entry + "}", f32_bytes(floats));
  };
  expect_corrupt(one("[]"), {"tensor \"w\"", "entry is an array, not an object"});
  expect_corrupt(one(R"({"shape":[1],"data_offsets":[0,4]})"), {"tensor \"w\"", "missing \"dtype\""});
  expect_corrupt(one(R"({"dtype":"F32","data_offsets":[0,4]})"), {"tensor \"w\"", "missing \"shape\""});
  expect_corrupt(one(R"({"dtype":"F32","shape":[1]})"), {"tensor \"w\"", "missing \"data_offsets\""});
  // dtype
  expect_corrupt(one(R"({"dtype":"F33","shape":[1],"data_offsets":[0,4]})"), {"tensor \"w\"", "unknown dtype \"F33\""});
  expect_corrupt(one(R"({"dtype":"float32","shape":[1],"data_offsets":[0,4]})"), {"unknown dtype \"float32\""});
  expect_corrupt(one(R"({"dtype":"I8","shape":[4],"data_offsets":[0,4]})"), {"tensor \"w\"", "I8 is not supported"});
  expect_corrupt(one(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})"), {"dtype is a number, not a string"});
  // shape
  expect_corrupt(one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), {"tensor \"w\"", "shape entry -1 is not a non-negative integer"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})"), {"shape entry 1.0 is not"});
  expect_corrupt(one(R"({"dtype":"F32","shape":["1"],"data_offsets":[0,4]})"), {"shape entry is a string"});
  expect_corrupt(one(R"({"dtype":"F32","shape":1,"data_offsets":[0,4]})"), {"shape is a number, not an array"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]})"), {"shape entry 9223372036854775808 is too large"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})"), {"has too many elements"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]})", 0), {"has too many elements"});
  // offsets
  expect_corrupt(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4.0]})"), {"tensor \"w\"", "data_offsets end 4.0 is not a non-negative integer"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[1],"data_offsets":[-0,4]})"), {"data_offsets begin -0 is not"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[1],"data_offsets":["0",4]})"), {"data_offsets begin is a string"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})"), {"array of two integers"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"), {"array of two integers"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]})"), {"data_offsets end 18446744073709551616 is not"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[0],"data_offsets":[4,0]})"), {"tensor \"w\"", "begin 4 is after end 0"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), {"tensor \"w\"", "end 8 is past the end of the data (4 bytes)"});
  expect_corrupt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), {"tensor \"w\"", "hold 4 bytes, but shape (2) of F32 needs 8"});
  expect_corrupt(one(R"({"dtype":"F64","shape":[1],"data_offsets":[0,4]})"), {"needs 8"});
}

TEST_F(CorruptionTest, TensorsMustTileTheData) {
  auto two = [](const std::string& a_offsets, const std::string& b_offsets, int floats) {
    return make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":)" + a_offsets +
                         R"(},"b":{"dtype":"F32","shape":[1],"data_offsets":)" + b_offsets + "}}",
                     f32_bytes(floats));
  };
  expect_corrupt(two("[0,4]", "[0,4]", 1), {"tensor \"b\"", "overlap tensor \"a\""});
  expect_corrupt(two("[0,4]", "[2,6]", 2), {"overlap"});
  expect_corrupt(two("[0,4]", "[8,12]", 3), {"tensor \"b\"", "leaves 4 unused bytes"});
  expect_corrupt(two("[4,8]", "[8,12]", 3), {"tensor \"a\"", "leaves 4 unused bytes"});
  expect_corrupt(two("[0,4]", "[4,8]", 3), {"4 trailing bytes after the last tensor"});
  expect_corrupt(make_file("{}", Bytes{1}), {"1 trailing bytes"});
  // An empty tensor inside another's bytes is an overlap too.
  expect_corrupt(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                           f32_bytes(2)),
                 {"tensor \"e\"", "overlap"});
  // Out of order in the JSON is fine: only the byte ranges matter.
  std::string p = path("ok.safetensors");
  write_file(p, two("[4,8]", "[0,4]", 2));
  EXPECT_EQ(load_safetensors(p).tensors.size(), 2u);
}

TEST_F(CorruptionTest, Metadata) {
  expect_corrupt(make_file(R"({"__metadata__":{"k":1}})"), {"__metadata__ value of \"k\" is a number, not a string"});
  expect_corrupt(make_file(R"({"__metadata__":{"k":null}})"), {"value of \"k\" is null"});
  expect_corrupt(make_file(R"({"__metadata__":["k"]})"), {"__metadata__ is an array, not an object"});
  // null means no metadata, as in the reference reader.
  std::string p = path("null.safetensors");
  write_file(p, make_file(R"({"__metadata__":null})"));
  EXPECT_TRUE(load_safetensors(p).metadata.empty());
}

TEST_F(CorruptionTest, BoolBytesMustBeZeroOrOne) {
  expect_corrupt(make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", Bytes{1, 0, 2}),
                 {"tensor \"m\"", "BOOL element 2 is byte 2"});
}

TEST_F(CorruptionTest, NotAFile) {
  expect_error([&] { load_safetensors(path("nothing.safetensors")); }, {"nothing.safetensors", "cannot open"});
  expect_error([&] { serialize::SafetensorsFile f(path("nothing.safetensors")); }, {"cannot open"});
  expect_error([&] { load_safetensors(dir_.string()); }, {"not a regular file"});
}

// Every truncation and many random byte changes of a valid file: each loads or throws kiln::Error, and a
// load that succeeds after a change in the header still matches the header's own claims.
TEST_F(CorruptionTest, TruncationsAndByteFlipsNeverCrash) {
  std::mt19937 rng(17);
  serialize::TensorMap tensors{{"a", random_tensor({2, 3}, kFloat32, rng)}, {"b", random_tensor({3}, kBool, rng)},
                               {"c", random_tensor({}, kInt64, rng)}};
  Bytes good = serialize::to_bytes(tensors, {{"k", "v"}});
  std::string p = path("f.safetensors");
  for (size_t n = 0; n < good.size(); ++n) {
    Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(serialize::from_bytes(cut), Error) << "truncated to " << n;
    if (n % 7 == 0) {
      write_file(p, cut);
      EXPECT_THROW(load_safetensors(p), Error) << n;
      EXPECT_THROW(load_safetensors(p, LoadOptions{.mmap = true}), Error) << n;
    }
  }
  std::uniform_int_distribution<size_t> pos(0, good.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int loaded = 0, failed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes b = good;
    int flips = 1 + trial % 3;
    for (int k = 0; k < flips; ++k) b[pos(rng)] = static_cast<uint8_t>(byte(rng));
    try {
      auto r = serialize::from_bytes(b);
      ++loaded;
      for (const auto& [name, t] : r.tensors) ASSERT_EQ(t.nbytes(), static_cast<size_t>(t.numel()) * t.element_size());
    } catch (const Error&) {
      ++failed;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(loaded, 0);  // flips in the data region (other than bool bytes) are just different values
}

}  // namespace
}  // namespace kiln::test
