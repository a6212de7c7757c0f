#include "kiln/trainer/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "kiln/serialize/crc32c.h"
#include "kiln/tensor/error.h"

namespace kiln::trainer {

namespace {

constexpr const char* kFormatKey = "kiln.format";
constexpr const char* kChecksumKey = "kiln.checksum";

std::string where(const Checkpoint& c) { return c.path.empty() ? std::string("checkpoint") : "checkpoint " + c.path; }

template <class T>
T parse_number(const Checkpoint& c, const std::string& key, const char* kind) {
  const std::string& text = c.get(key);
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  KILN_CHECK(ec == std::errc() && end == text.data() + text.size(), where(c), ": entry '", key, "' should be ",
             kind, ", found '", text, "'");
  return value;
}

template <class T>
std::string print_number(T value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);  // shortest text that reads back exactly
  KILN_ASSERT(ec == std::errc());
  return std::string(buf, end);
}

}  // namespace

void Checkpoint::set_int(const std::string& key, int64_t value) { set(key, print_number(value)); }
void Checkpoint::set_uint(const std::string& key, uint64_t value) { set(key, print_number(value)); }
void Checkpoint::set_double(const std::string& key, double value) { set(key, print_number(value)); }

const std::string& Checkpoint::get(const std::string& key) const {
  auto it = metadata.find(key);
  KILN_CHECK(it != metadata.end(), where(*this), " has no entry '", key,
             "' (was it written by an older kiln, or by something other than the Trainer?)");
  return it->second;
}
int64_t Checkpoint::get_int(const std::string& key) const { return parse_number<int64_t>(*this, key, "an integer"); }
uint64_t Checkpoint::get_uint(const std::string& key) const {
  return parse_number<uint64_t>(*this, key, "an unsigned integer");
}
double Checkpoint::get_double(const std::string& key) const { return parse_number<double>(*this, key, "a number"); }

std::map<std::string, std::string> Checkpoint::section(const std::string& prefix) const {
  std::map<std::string, std::string> out;
  const std::string p = prefix + ".";
  for (auto it = metadata.lower_bound(p); it != metadata.end() && it->first.compare(0, p.size(), p) == 0; ++it) {
    out.emplace(it->first.substr(p.size()), it->second);
  }
  return out;
}

serialize::TensorMap Checkpoint::tensor_section(const std::string& prefix) const {
  serialize::TensorMap out;
  const std::string p = prefix + ".";
  for (auto it = tensors.lower_bound(p); it != tensors.end() && it->first.compare(0, p.size(), p) == 0; ++it) {
    out.emplace(it->first.substr(p.size()), it->second);
  }
  return out;
}

uint32_t checkpoint_checksum(const Checkpoint& checkpoint) {
  // Each field is followed by a 0 byte or preceded by its length, so that moving bytes from one field to the
  // next changes the sum.
  uint32_t crc = 0;
  auto add = [&](const void* data, size_t size) { crc = serialize::crc32c(data, size, crc); };
  auto add_text = [&](const std::string& s) { add(s.data(), s.size() + 1); };  // includes the trailing 0
  for (const auto& [name, tensor] : checkpoint.tensors) {
    add_text(name);
    add_text(serialize::safetensors_dtype_name(tensor.dtype()));
    const uint64_t dims = tensor.shape().size();
    add(&dims, sizeof dims);
    add(tensor.shape().data(), dims * sizeof(int64_t));
    Tensor bytes = tensor.contiguous().cpu();
    add(bytes.raw_data_ptr(), bytes.nbytes());
  }
  for (const auto& [key, value] : checkpoint.metadata) {
    if (key == kChecksumKey) continue;
    add_text(key);
    add_text(value);
  }
  return crc;
}

void save_checkpoint(const Checkpoint& checkpoint, const std::string& path) {
  Checkpoint stamped;
  stamped.tensors = checkpoint.tensors;
  stamped.metadata = checkpoint.metadata;
  stamped.set(kFormatKey, kCheckpointFormat);
  stamped.set_uint(kChecksumKey, checkpoint_checksum(stamped));
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  serialize::save_safetensors(path, stamped.tensors, stamped.metadata);
}

Checkpoint load_checkpoint(const std::string& path) {
  KILN_CHECK(std::filesystem::exists(path), "checkpoint ", path, " does not exist");
  serialize::Loaded loaded = serialize::load_safetensors(path);  // validates the structure, names the file
  Checkpoint c{std::move(loaded.tensors), std::move(loaded.metadata), path};
  auto format = c.metadata.find(kFormatKey);
  KILN_CHECK(format != c.metadata.end(), "checkpoint ", path,
             ": a safetensors file, but not a kiln checkpoint (no kiln.format entry); to load weights alone use "
             "nn::load");
  KILN_CHECK(format->second == kCheckpointFormat, "checkpoint ", path, ": format '", format->second,
             "', this kiln reads '", kCheckpointFormat, "'");
  const uint64_t stored = c.get_uint(kChecksumKey);
  const uint32_t actual = checkpoint_checksum(c);
  KILN_CHECK(stored == actual, "checkpoint ", path, " is corrupted: its checksum is ", stored,
             " but its contents sum to ", actual, "; it was damaged after it was written");
  return c;
}

std::string find_last_checkpoint(const std::string& root, std::string* weights_only) {
  namespace fs = std::filesystem;
  std::vector<std::pair<fs::file_time_type, std::string>> found;
  std::error_code ec;
  if (weights_only != nullptr) weights_only->clear();
  if (!fs::is_directory(root, ec)) return "";
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it); it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().filename() != "last.ckpt") continue;
    found.emplace_back(it->last_write_time(ec), it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [time, path] : found) {
    bool resumable = true;
    try {
      // The header only: mapped, the tensors' bytes are not read.
      resumable = serialize::load_safetensors(path, {.mmap = true}).metadata.count("trainer.weights_only") == 0;
    } catch (const std::exception&) {
      // Unreadable: the resume reads it and reports what is wrong with it.
    }
    if (resumable) return path;
    if (weights_only != nullptr && weights_only->empty()) *weights_only = path;
  }
  return "";
}

}  // namespace kiln::trainer
