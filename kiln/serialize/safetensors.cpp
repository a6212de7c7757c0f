// Reading and writing safetensors files: atomic writes, plain reads, and mapped reads.
//
// All three readers (load_safetensors, from_bytes, SafetensorsFile) validate the whole header through
// detail::parse_header before making a single tensor, so a corrupt file fails early with one message.
#include "kiln/serialize/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "kiln/serialize/header.h"
#include "kiln/serialize/json.h"
#include "kiln/tensor/ops.h"

namespace kiln::serialize {

namespace {

std::string sys_error() { return std::strerror(errno); }

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(), fd_ = o.fd_, o.fd_ = -1;
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Closes and reports close's own error (it can carry a deferred write error).
  int close_checked() {
    int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

Fd open_for_reading(const std::string& path, const std::string& where, uint64_t& size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  KILN_CHECK(fd.get() >= 0, where, ": cannot open: ", sys_error());
  struct stat st;
  KILN_CHECK(::fstat(fd.get(), &st) == 0, where, ": cannot stat: ", sys_error());
  KILN_CHECK(S_ISREG(st.st_mode), where, ": not a regular file");
  size = static_cast<uint64_t>(st.st_size);
  KILN_CHECK(size >= 8, where, ": file is ", size, " bytes, shorter than the 8-byte header length");
  return fd;
}

void read_exact(int fd, uint64_t offset, void* dst, uint64_t n, const std::string& where) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    KILN_CHECK(r >= 0, where, ": read failed: ", sys_error());
    KILN_CHECK(r > 0, where, ": file ended early (was it truncated while reading?)");
    p += r, offset += static_cast<uint64_t>(r), n -= static_cast<uint64_t>(r);
  }
}

void write_all(int fd, const void* src, size_t n, const std::string& where) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    KILN_CHECK(w > 0, where, ": write failed: ", w < 0 ? sys_error() : "no progress");
    p += w, n -= static_cast<size_t>(w);
  }
}

// What a writer needs: the padded header and, in data order, a contiguous CPU tensor per entry.
struct Prepared {
  std::string header;
  std::vector<Tensor> data;
};

Prepared prepare(const TensorMap& tensors, const Metadata& metadata, const std::string& where) {
  std::vector<TensorInfo> infos;
  std::map<std::string, Tensor> cpu;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(t.defined(), where, ": tensor ", json::quote(name), " is undefined");
    TensorInfo info;
    info.name = name;
    info.dtype = t.dtype();
    info.shape = t.sizes();
    infos.push_back(std::move(info));
    cpu[name] = ops::contiguous(ops::to(t, kCPU));
  }
  Prepared p;
  p.header = detail::build_header(infos, metadata, where);
  for (const auto& info : infos) p.data.push_back(cpu.at(info.name));
  return p;
}

void put_u64_le(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Writes through `body` into a temporary file beside `path`, syncs it and renames it over `path`; on any
// failure the temporary is removed and `path` is left as it was.
void write_atomically(const std::string& path, const std::string& where, const std::function<void(int)>& body) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  Fd fd;
  for (int attempt = 0; attempt < 100 && fd.get() < 0; ++attempt) {
    tmp = ::kiln::detail::concat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    // 0666 so that the file ends up with the permissions umask allows, as a plain create would.
    fd = Fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (fd.get() < 0 && errno != EEXIST) break;
  }
  KILN_CHECK(fd.get() >= 0, where, ": cannot create a temporary file in ", dir.string(), ": ", sys_error());
  try {
    body(fd.get());
    KILN_CHECK(::fsync(fd.get()) == 0, where, ": fsync failed: ", sys_error());
    KILN_CHECK(fd.close_checked() == 0, where, ": close failed: ", sys_error());
    KILN_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, where, ": cannot rename the temporary file over it: ",
               sys_error());
  } catch (...) {
    fd.reset();
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable once the directory entry is; a failure here leaves the new file in place.
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  KILN_CHECK(dfd.get() >= 0 && ::fsync(dfd.get()) == 0, where, ": written, but syncing directory ", dir.string(),
             " failed: ", sys_error());
}

std::string load_where(const std::string& path) { return "load_safetensors: " + json::quote(path); }

// A kiln-owned tensor holding a copy of `n` bytes at `src` (validated: BOOL bytes must be 0 or 1).
Tensor copy_tensor(const TensorInfo& info, const uint8_t* src, const std::string& where) {
  Tensor t = empty(info.shape, info.dtype);
  uint64_t n = info.end - info.begin;
  if (info.dtype == kBool) detail::check_bool_bytes(src, n, where, info.name);
  if (n) std::memcpy(t.raw_data_ptr(), src, n);
  return t;
}

// A whole file mapped privately; unmapped when the last tensor viewing it (or the last SafetensorsFile) goes.
struct Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, size);
  }
};

}  // namespace

struct SafetensorsFile::State {
  std::shared_ptr<Mapping> mapping;
  detail::Header header;
  std::map<std::string, size_t> index;  // name -> position in header.tensors
  std::string where;
};

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  std::string where = "save_safetensors: " + json::quote(path);
  Prepared p = prepare(tensors, metadata, where);
  write_atomically(path, where, [&](int fd) {
    uint8_t len[8];
    put_u64_le(len, p.header.size());
    write_all(fd, len, 8, where);
    write_all(fd, p.header.data(), p.header.size(), where);
    for (const auto& t : p.data) write_all(fd, t.raw_data_ptr(), t.nbytes(), where);
  });
}

std::vector<uint8_t> to_bytes(const TensorMap& tensors, const Metadata& metadata) {
  Prepared p = prepare(tensors, metadata, "to_bytes");
  size_t total = 8 + p.header.size();
  for (const auto& t : p.data) total += t.nbytes();
  std::vector<uint8_t> out(total);
  put_u64_le(out.data(), p.header.size());
  std::memcpy(out.data() + 8, p.header.data(), p.header.size());
  size_t at = 8 + p.header.size();
  for (const auto& t : p.data) {
    if (t.nbytes()) std::memcpy(out.data() + at, t.raw_data_ptr(), t.nbytes());
    at += t.nbytes();
  }
  return out;
}

Loaded from_bytes(const uint8_t* data, size_t size) {
  const std::string where = "from_bytes";
  KILN_CHECK(size >= 8, where, ": buffer is ", size, " bytes, shorter than the 8-byte header length");
  uint64_t n = detail::header_length(data, size, where);
  detail::Header h =
      detail::parse_header(std::string_view(reinterpret_cast<const char*>(data) + 8, n), size, where);
  Loaded out;
  out.metadata = std::move(h.metadata);
  for (const auto& info : h.tensors)
    out.tensors[info.name] = copy_tensor(info, data + h.data_start + info.begin, where);
  return out;
}

Loaded load_safetensors(const std::string& path, LoadOptions options) {
  if (options.mmap) {
    SafetensorsFile f(path);
    Loaded out;
    out.tensors = f.load_all();
    out.metadata = f.metadata();
    return out;
  }
  std::string where = load_where(path);
  uint64_t size = 0;
  Fd fd = open_for_reading(path, where, size);
  uint8_t len[8];
  read_exact(fd.get(), 0, len, 8, where);
  uint64_t n = detail::header_length(len, size, where);
  std::string json(n, '\0');
  read_exact(fd.get(), 8, json.data(), n, where);
  detail::Header h = detail::parse_header(json, size, where);

  Loaded out;
  out.metadata = std::move(h.metadata);
  for (const auto& info : h.tensors) {
    // Straight into the tensor's own (64-byte aligned) memory: no second copy of the file.
    Tensor t = empty(info.shape, info.dtype);
    uint64_t bytes = info.end - info.begin;
    read_exact(fd.get(), h.data_start + info.begin, t.raw_data_ptr(), bytes, where);
    if (info.dtype == kBool) detail::check_bool_bytes(static_cast<const uint8_t*>(t.raw_data_ptr()), bytes, where, info.name);
    out.tensors[info.name] = std::move(t);
  }
  return out;
}

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), state_(std::make_shared<State>()) {
  state_->where = load_where(path);
  const std::string& where = state_->where;
  uint64_t size = 0;
  Fd fd = open_for_reading(path, where, size);
  auto m = std::make_shared<Mapping>();
  // PROT_WRITE with MAP_PRIVATE: kiln tensors are writable, and a write must copy the page, not crash or
  // reach the file.
  m->base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
  KILN_CHECK(m->base != MAP_FAILED, where, ": mmap failed: ", sys_error());
  m->size = size;
  const auto* bytes = static_cast<const uint8_t*>(m->base);
  uint64_t n = detail::header_length(bytes, size, where);
  state_->header = detail::parse_header(std::string_view(reinterpret_cast<const char*>(bytes) + 8, n), size, where);
  state_->mapping = std::move(m);
  for (size_t i = 0; i < state_->header.tensors.size(); ++i) state_->index[state_->header.tensors[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return state_->header.tensors; }
const Metadata& SafetensorsFile::metadata() const { return state_->header.metadata; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors()) out.push_back(t.name);
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return state_->index.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = state_->index.find(name);
  KILN_CHECK(it != state_->index.end(), state_->where, ": no tensor named ", json::quote(name), " (the file holds ",
             tensors().size(), " tensors)");
  return tensors()[it->second];
}

Tensor SafetensorsFile::load(const std::string& name, bool copy) const {
  const TensorInfo& ti = info(name);
  auto* src = static_cast<uint8_t*>(state_->mapping->base) + state_->header.data_start + ti.begin;
  bool aligned = reinterpret_cast<uintptr_t>(src) % dtype_size(ti.dtype) == 0;
  if (copy || !aligned || ti.begin == ti.end) return copy_tensor(ti, src, state_->where);
  if (ti.dtype == kBool) detail::check_bool_bytes(src, ti.end - ti.begin, state_->where, ti.name);
  // The deleter owns a reference to the mapping: the last tensor viewing it unmaps it.
  return from_blob(src, ti.shape, ti.dtype, [m = state_->mapping](void*) {});
}

TensorMap SafetensorsFile::load_all(bool copy) const {
  TensorMap out;
  for (const auto& t : tensors()) out[t.name] = load(t.name, copy);
  return out;
}

}  // namespace kiln::serialize
