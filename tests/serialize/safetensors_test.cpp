// safetensors round trips (every dtype, every layout, 0-dim and empty tensors, exact 16-bit float bit
// patterns), metadata, mapped loads and their lifetime, SafetensorsFile, and atomic writes.
#include <signal.h>
#include <sys/resource.h>

#include <random>

#include "serialize/serialize_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using serialize::load_safetensors;
using serialize::LoadOptions;
using serialize::save_safetensors;
using serialize::TensorMap;

class SafetensorsTest : public ScratchDir {};

// Every tensor of `expected` is in `got` with the same dtype, shape and bytes, and nothing else is.
void expect_same_tensors(const TensorMap& got, const TensorMap& expected, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (const auto& [name, t] : expected) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": missing " << name;
    EXPECT_EQ(it->second.dtype(), t.dtype()) << what << ": " << name;
    EXPECT_EQ(it->second.sizes(), t.sizes()) << what << ": " << name;
    EXPECT_TRUE(it->second.is_contiguous()) << what << ": " << name;
    EXPECT_EQ(tensor_bytes(it->second), tensor_bytes(t)) << what << ": " << name;
  }
}

// Saves, then loads three ways (plain, mapped, from bytes) and checks each gives back `tensors` exactly.
void expect_round_trip(const std::string& path, const TensorMap& tensors, const serialize::Metadata& metadata = {}) {
  save_safetensors(path, tensors, metadata);
  auto plain = load_safetensors(path);
  auto mapped = load_safetensors(path, LoadOptions{.mmap = true});
  auto mem = serialize::from_bytes(read_file(path));
  expect_same_tensors(plain.tensors, tensors, "plain load");
  expect_same_tensors(mapped.tensors, tensors, "mapped load");
  expect_same_tensors(mem.tensors, tensors, "from_bytes");
  EXPECT_EQ(plain.metadata, metadata);
  EXPECT_EQ(mapped.metadata, metadata);
  EXPECT_EQ(mem.metadata, metadata);
  EXPECT_EQ(serialize::to_bytes(tensors, metadata), read_file(path)) << "to_bytes and save_safetensors differ";
}

TEST_F(SafetensorsTest, RoundTripsEveryDTypeAndLayout) {
  std::mt19937 rng(7);
  TensorMap tensors;
  for (DType d : kAllDTypes) {
    std::string dn = dtype_name(d);
    tensors[dn + ".matrix"] = random_tensor({3, 5}, d, rng);
    tensors[dn + ".scalar"] = random_tensor({}, d, rng);
    tensors[dn + ".empty"] = empty({0, 3}, d);
    tensors[dn + ".empty_mid"] = empty({3, 0, 2}, d);
    tensors[dn + ".rank4"] = random_tensor({2, 1, 3, 2}, d, rng);
  }
  expect_round_trip(path("all.safetensors"), tensors);

  // Non-contiguous inputs are written in row-major order of their logical shape.
  for (Layout l : kLayouts) {
    TensorMap views;
    for (DType d : kAllDTypes) views[dtype_name(d)] = random_tensor({4, 3}, d, rng, l);
    for (const auto& [n, t] : views) ASSERT_EQ(t.is_contiguous(), l == Layout::Contiguous || l == Layout::Offset) << n;
    expect_round_trip(path("layout.safetensors"), views);
    auto back = load_safetensors(path("layout.safetensors"));
    for (const auto& [n, t] : views)
      EXPECT_EQ(values(back.tensors.at(n)), values(t)) << layout_name(l) << " " << n;  // an independent reader
  }
  // An expanded tensor (stride 0) is written as its full logical content.
  TensorMap expanded{{"e", ops::expand(random_tensor({1, 3}, kFloat32, rng), {4, 3})}};
  expect_round_trip(path("expand.safetensors"), expanded);
}

TEST_F(SafetensorsTest, SixteenBitFloatsKeepEveryBitPattern) {
  // All 65536 patterns, NaN payloads, signed zeros, subnormals and infinities included.
  std::vector<uint16_t> bits(65536);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  TensorMap tensors{{"f16", from_buffer(bits.data(), {256, 256}, kFloat16)},
                    {"bf16", from_buffer(bits.data(), {65536}, kBFloat16)}};
  expect_round_trip(path("bits.safetensors"), tensors);
  auto back = load_safetensors(path("bits.safetensors"), LoadOptions{.mmap = true});
  for (const char* n : {"f16", "bf16"}) {
    Bytes b = tensor_bytes(back.tensors.at(n));
    ASSERT_EQ(b.size(), 2 * bits.size());
    EXPECT_EQ(std::memcmp(b.data(), bits.data(), b.size()), 0) << n;
  }
}

TEST_F(SafetensorsTest, MetadataRoundTrips) {
  std::mt19937 rng(3);
  TensorMap tensors{{"w", random_tensor({2, 2}, kFloat32, rng)}};
  serialize::Metadata meta{{"format", "pt"},
                           {"quote\"back\\slash", "line\nbreak\ttab\x01"},
                           {"unicode", "\xc3\xbcn\xc3\xaf \xe2\x82\xac \xf0\x9f\x98\x80"},
                           {"", "empty key"},
                           {"empty value", ""}};
  expect_round_trip(path("meta.safetensors"), tensors, meta);
  // No metadata: no "__metadata__" entry at all (as the reference writer does).
  expect_round_trip(path("nometa.safetensors"), tensors);
  Bytes b = read_file(path("nometa.safetensors"));
  EXPECT_EQ(std::string(b.begin(), b.end()).find("__metadata__"), std::string::npos);
  // A file with no tensors at all.
  expect_round_trip(path("none.safetensors"), {}, {{"only", "metadata"}});
  EXPECT_EQ(serialize::to_bytes({}), (Bytes{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '}));
}

TEST_F(SafetensorsTest, WrittenLayoutMatchesTheReferenceWriter) {
  // Descending element size, then name; header padded with spaces to 8 bytes; so every tensor is aligned.
  std::mt19937 rng(5);
  TensorMap tensors{{"a_u8", random_tensor({3}, kUInt8, rng)},    {"b_f16", random_tensor({3}, kFloat16, rng)},
                    {"c_f64", random_tensor({1}, kFloat64, rng)}, {"d_bool", random_tensor({1}, kBool, rng)},
                    {"e_i32", random_tensor({1}, kInt32, rng)},   {"f_i64", random_tensor({1}, kInt64, rng)}};
  save_safetensors(path("layout.safetensors"), tensors);
  serialize::SafetensorsFile f(path("layout.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"f_i64", "c_f64", "e_i32", "b_f16", "a_u8", "d_bool"}));
  Bytes b = read_file(path("layout.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  EXPECT_EQ(n % 8, 0u);
  std::string header(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // only spaces after the JSON
  for (const auto& info : f.tensors()) EXPECT_EQ((8 + n + info.begin) % dtype_size(info.dtype), 0u) << info.name;
}

TEST_F(SafetensorsTest, RejectsWhatCannotBeWritten) {
  std::mt19937 rng(1);
  Tensor t = random_tensor({2}, kFloat32, rng);
  expect_error([&] { save_safetensors(path("x.safetensors"), {{"__metadata__", t}}); }, {"__metadata__"});
  expect_error([&] { save_safetensors(path("x.safetensors"), {{"undef", Tensor()}}); }, {"\"undef\"", "undefined"});
  expect_error([&] { save_safetensors(path("x.safetensors"), {{"bad\xff", t}}); }, {"not valid UTF-8"});
  expect_error([&] { save_safetensors(path("x.safetensors"), {{"t", t}}, {{"k", "\xc0\x80"}}); }, {"\"k\"", "UTF-8"});
  EXPECT_TRUE(listing().empty());
}

// ---- mapped loads ----

bool mapped_in_this_process(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(path) != std::string::npos) return true;
  return false;
}

TEST_F(SafetensorsTest, MappedTensorsOutliveTheFileAndUnmapWithTheLast) {
  std::mt19937 rng(11);
  TensorMap tensors{{"a", random_tensor({64, 64}, kFloat32, rng)}, {"b", random_tensor({5}, kInt64, rng)}};
  std::string p = path("m.safetensors");
  save_safetensors(p, tensors);
  Tensor a, b;
  {
    auto loaded = load_safetensors(p, LoadOptions{.mmap = true});
    a = loaded.tensors.at("a");
    b = loaded.tensors.at("b");
  }
  // The tensors view the mapping (not a copy): the file stays mapped while they live.
  ASSERT_TRUE(std::filesystem::exists("/proc/self/maps"));
  EXPECT_TRUE(mapped_in_this_process(p));
  // Replacing and removing the file does not disturb them (rename leaves the old inode to the mapping).
  save_safetensors(p, {{"a", zeros({64, 64})}});
  EXPECT_EQ(tensor_bytes(a), tensor_bytes(tensors.at("a")));
  std::filesystem::remove(p);
  EXPECT_EQ(tensor_bytes(a), tensor_bytes(tensors.at("a")));
  EXPECT_EQ(tensor_bytes(b), tensor_bytes(tensors.at("b")));
  a = Tensor();
  EXPECT_TRUE(mapped_in_this_process(p));  // b still holds it
  b = Tensor();
  EXPECT_FALSE(mapped_in_this_process(p));
}

TEST_F(SafetensorsTest, WritingAMappedTensorLeavesTheFileAlone) {
  std::mt19937 rng(2);
  TensorMap tensors{{"w", random_tensor({8, 8}, kFloat32, rng)}};
  std::string p = path("w.safetensors");
  save_safetensors(p, tensors);
  Bytes before = read_file(p);
  auto mapped = load_safetensors(p, LoadOptions{.mmap = true});
  ops::fill_(mapped.tensors.at("w"), 5.0);
  EXPECT_EQ(values(mapped.tensors.at("w")), std::vector<double>(64, 5.0));
  EXPECT_EQ(read_file(p), before);
  expect_same_tensors(load_safetensors(p, LoadOptions{.mmap = true}).tensors, tensors, "reloaded");
}

TEST_F(SafetensorsTest, MisalignedTensorsAreCopiedWhenMapped) {
  // A hand-made file whose 9-byte header leaves the F32 data at file offset 17, misaligned for float.
  float vals[2] = {1.5f, -2.25f};
  Bytes data(8);
  std::memcpy(data.data(), vals, 8);
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  if (header.size() % 2 == 0) header += ' ';  // 8 + N odd: misaligned for float
  ASSERT_NE((8 + header.size()) % 4, 0u);
  write_file(path("odd.safetensors"), make_file(header, data));
  auto mapped = load_safetensors(path("odd.safetensors"), LoadOptions{.mmap = true});
  Tensor x = mapped.tensors.at("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.raw_data_ptr()) % alignof(float), 0u);
  EXPECT_EQ(values(x), (std::vector<double>{1.5, -2.25}));
}

TEST_F(SafetensorsTest, SafetensorsFileListsAndLoadsLazily) {
  std::mt19937 rng(4);
  TensorMap tensors{{"layers.0.weight", random_tensor({4, 3}, kBFloat16, rng)},
                    {"layers.0.bias", random_tensor({4}, kFloat32, rng)},
                    {"step", random_tensor({}, kInt64, rng)}};
  std::string p = path("model.safetensors");
  save_safetensors(p, tensors, {{"epoch", "3"}});
  Tensor bias;
  {
    serialize::SafetensorsFile f(p);
    EXPECT_EQ(f.path(), p);
    EXPECT_EQ(f.tensors().size(), 3u);
    EXPECT_TRUE(f.contains("step"));
    EXPECT_FALSE(f.contains("nope"));
    EXPECT_EQ(f.info("layers.0.weight").dtype, kBFloat16);
    EXPECT_EQ(f.info("layers.0.weight").shape, (Shape{4, 3}));
    EXPECT_EQ(f.metadata().at("epoch"), "3");
    bias = f.load("layers.0.bias");
    Tensor copy = f.load("layers.0.weight", /*copy=*/true);
    EXPECT_EQ(tensor_bytes(copy), tensor_bytes(tensors.at("layers.0.weight")));
    expect_same_tensors(f.load_all(), tensors, "load_all");
    expect_error([&] { f.load("nope"); }, {p, "no tensor named \"nope\""});
  }
  EXPECT_EQ(tensor_bytes(bias), tensor_bytes(tensors.at("layers.0.bias")));
}

// ---- atomic writes ----

TEST_F(SafetensorsTest, FailedWriteLeavesTheOldFileAndNoTemporary) {
  std::mt19937 rng(9);
  std::string p = path("ckpt.safetensors");
  save_safetensors(p, {{"old", random_tensor({16}, kFloat32, rng)}});
  Bytes old = read_file(p);

  // A write that fails halfway: the file-size limit stops it after 4 KiB with EFBIG.
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    save_safetensors(p, {{"new", zeros({100000})}});
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("write failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_file(p), old);
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"});

  // The rename fails when the target is a directory: nothing is left behind.
  std::filesystem::create_directory(path("adir"));
  expect_error([&] { save_safetensors(path("adir"), {{"x", zeros({2})}}); }, {"adir", "rename"});
  EXPECT_EQ(listing(), (std::vector<std::string>{"adir", "ckpt.safetensors"}));
  // No directory to put the temporary in.
  expect_error([&] { save_safetensors(path("missing/x.safetensors"), {{"x", zeros({2})}}); },
               {"cannot create a temporary file"});

  // A successful save replaces the file and leaves only it.
  save_safetensors(p, {{"new", zeros({3})}});
  EXPECT_EQ(load_safetensors(p).tensors.count("new"), 1u);
  EXPECT_EQ(listing(), (std::vector<std::string>{"adir", "ckpt.safetensors"}));
}

}  // namespace
}  // namespace kiln::test
