// FileStore: a Store kept in one file that every process of the job opens (store.h).
//
// Every operation opens the file, takes flock(LOCK_EX), reads the whole table, applies its change, writes the
// table back and closes the file. Opening per operation, not once per object, is what makes the lock exclude
// threads of one process (a flock belongs to an open file description, which threads sharing one fd share) and
// processes forked after the store was made (a child would share the parent's description, and its lock). It
// costs some microseconds a call; no store call is on a hot path. Being lock-per-call, the object has no state
// to guard: it is thread-safe without a mutex.
//
// The file (integers little-endian), validated on every read:
//   "KILNFS1\n"          8 bytes: magic and version
//   u64 payload_bytes    bytes of entries that follow
//   u32 count
//   count x { u32 key_bytes, key, u32 value_bytes, value }
// An empty file is an empty store (just created). Bytes after the payload are ignored: a process killed between
// writing a shorter table and truncating the file leaves them. Anything else that does not parse is a
// kiln::Error naming the file and the byte offset.
//
// Bookkeeping keys (begin with NUL, see store_wire.h):
//   "\0users"   FileStore objects alive on this file; the destructor that takes it to 0 removes the file.
//   "\0joined"  constructors that joined a world_size rendezvous.
// Removing is safe against a process waiting for the lock on the removed file: once it holds the lock, every
// operation checks that the file it locked is still the one at `path` (same inode, still linked), and starts
// over otherwise. A process killed before its destructor leaves the file behind (the count never reaches 0),
// and a later job on the same path would see its keys: give each job a fresh path.
// NOTE: flock on NFS is emulated with fcntl locks (Linux >= 2.6.12), which do not exclude two FileStore
// objects of one process; across processes, which is what a job on a shared file system needs, it holds.
#include "kiln/distributed/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "kiln/distributed/store_wire.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed {

using store_internal::errno_text;
using store_internal::quoted;

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'F', 'S', '1', '\n'};
constexpr size_t kHeaderBytes = 8 + 8 + 4;
const std::string kUsersKey("\0users", 6);
const std::string kJoinedKey("\0joined", 7);

using Table = std::map<std::string, Bytes>;
using Clock = std::chrono::steady_clock;

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_u64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t get_le(const Bytes& in, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(in[pos + i]) << (8 * i);
  return v;
}

Bytes encode(const Table& table) {
  Bytes payload;
  for (const auto& [key, value] : table) {
    put_u32(payload, static_cast<uint32_t>(key.size()));
    payload.insert(payload.end(), key.begin(), key.end());
    put_u32(payload, static_cast<uint32_t>(value.size()));
    payload.insert(payload.end(), value.begin(), value.end());
  }
  Bytes out(kMagic, kMagic + 8);
  put_u64(out, payload.size());
  put_u32(out, static_cast<uint32_t>(table.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Table decode(const Bytes& data, const std::string& path) {
  Table table;
  if (data.empty()) return table;
  auto corrupt = [&](size_t offset, const std::string& what) {
    throw Error(detail::concat("FileStore: ", path, " is corrupt at byte ", offset, ": ", what,
                               " (not a kiln FileStore file, or a process died while writing it)"));
  };
  if (data.size() < kHeaderBytes) corrupt(0, detail::concat(data.size(), " bytes, shorter than the header"));
  if (std::memcmp(data.data(), kMagic, 8) != 0) corrupt(0, "it does not start with \"KILNFS1\\n\"");
  const uint64_t payload = get_le(data, 8, 8);
  const uint64_t count = get_le(data, 16, 4);
  if (payload > data.size() - kHeaderBytes) {
    corrupt(8, detail::concat("the header promises ", payload, " bytes of entries, the file holds ",
                              data.size() - kHeaderBytes));
  }
  const size_t end = kHeaderBytes + payload;
  size_t pos = kHeaderBytes;
  auto field = [&](const char* what) {
    if (end - pos < 4) corrupt(pos, detail::concat("the ", what, "'s length runs past the entries"));
    const uint64_t n = get_le(data, pos, 4);
    if (end - pos - 4 < n) corrupt(pos, detail::concat("a ", what, " of ", n, " bytes runs past the entries"));
    pos += 4 + n;
    return std::make_pair(data.begin() + static_cast<ptrdiff_t>(pos - n), data.begin() + static_cast<ptrdiff_t>(pos));
  };
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = pos;
    auto [kb, ke] = field("key");
    auto [vb, ve] = field("value");
    std::string key(kb, ke);
    if (!table.emplace(std::move(key), Bytes(vb, ve)).second) corrupt(at, "a key appears twice");
  }
  if (pos != end) corrupt(pos, detail::concat("the ", count, " entries end before the ", payload, " payload bytes"));
  return table;
}

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }  // also releases the flock
};

Bytes read_all(int fd, const std::string& path) {
  Bytes data;
  uint8_t buf[1 << 16];
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("FileStore: cannot read " + path + ": " + errno_text(errno));
    if (n == 0) return data;
    data.insert(data.end(), buf, buf + n);
    off += n;
  }
}

void write_all(int fd, const Bytes& data, off_t old_size, const std::string& path) {
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("FileStore: cannot write " + path + ": " + errno_text(errno));
    done += static_cast<size_t>(n);
  }
  // Only shrinking needs it; readers ignore bytes past the payload, so a failure here is harmless.
  if (old_size > static_cast<off_t>(data.size())) (void)!::ftruncate(fd, static_cast<off_t>(data.size()));
}

// What an operation does to the file once it has looked at (and maybe changed) the table.
enum class After { kNothing, kWrite, kRemove };

// Sleeps between polls of a blocking get/wait: 2 ms, doubling to 50 ms, never past the deadline.
class Backoff {
 public:
  explicit Backoff(Clock::time_point deadline) : deadline_(deadline) {}
  // false when the deadline has passed.
  bool sleep() {
    const auto now = Clock::now();
    if (now >= deadline_) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(step_, deadline_ - now));
    step_ = std::min<Clock::duration>(step_ * 2, std::chrono::milliseconds(50));
    return true;
  }

 private:
  Clock::time_point deadline_;
  Clock::duration step_ = std::chrono::milliseconds(2);
};

}  // namespace

struct FileStore::Impl {
  std::string path;
  pid_t owner = 0;  // the process that registered as a user; a forked child must not unregister it

  // Runs `op` on the table with the file locked, and writes or removes the file as it asks.
  void transact(const std::function<After(Table&)>& op) const {
    for (;;) {
      const int raw = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (raw < 0) throw Error("FileStore: cannot open " + path + ": " + errno_text(errno));
      Fd fd{raw};
      while (::flock(fd.fd, LOCK_EX) != 0) {
        if (errno != EINTR) throw Error("FileStore: cannot lock " + path + ": " + errno_text(errno));
      }
      struct stat locked{}, named{};
      if (::fstat(fd.fd, &locked) != 0) throw Error("FileStore: cannot stat " + path + ": " + errno_text(errno));
      // The last user removed the file while we waited for its lock: start over on whatever is at `path` now.
      if (locked.st_nlink == 0 || ::stat(path.c_str(), &named) != 0 || named.st_ino != locked.st_ino ||
          named.st_dev != locked.st_dev) {
        continue;
      }
      Table table = decode(read_all(fd.fd, path), path);
      switch (op(table)) {
        case After::kNothing: break;
        case After::kWrite: write_all(fd.fd, encode(table), locked.st_size, path); break;
        case After::kRemove: ::unlink(path.c_str()); break;
      }
      return;
    }
  }

  int64_t add(const std::string& key, int64_t delta) const {
    int64_t result = 0;
    transact([&](Table& t) {
      auto it = t.find(key);
      try {
        result = store_internal::add_to_counter(it == t.end() ? nullptr : &it->second, key, delta);
      } catch (const Error& e) {
        throw Error(detail::concat("FileStore: ", e.what(), " (file ", path, ")"));
      }
      t[key] = store_internal::format_counter(result);
      return After::kWrite;
    });
    return result;
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    transact([&](Table& t) {
      for (const auto& k : keys) {
        if (!t.count(k)) out.push_back(k);
      }
      return After::kNothing;
    });
    return out;
  }

  // Drops this object's user count, removing the file when it was the last.
  void unregister() const {
    transact([&](Table& t) {
      auto it = t.find(kUsersKey);
      const int64_t users = it == t.end() ? 0 : store_internal::parse_counter(it->second).value_or(1);
      if (users <= 1) return After::kRemove;
      it->second = store_internal::format_counter(users - 1);
      return After::kWrite;
    });
  }
};

FileStore::FileStore(std::string path, int world_size, Duration timeout) : impl_(std::make_unique<Impl>()) {
  KILN_CHECK(!path.empty(), "FileStore: the path is empty");
  KILN_CHECK(world_size == -1 || world_size >= 1, "FileStore(", path, "): world_size is ", world_size,
             ", expected -1 (no rendezvous) or at least 1");
  KILN_CHECK(timeout.count() >= 0, "FileStore(", path, "): negative timeout ", timeout.count(), " ms");
  set_timeout(timeout);
  impl_->path = std::move(path);
  impl_->owner = ::getpid();
  int64_t joined = 0;
  impl_->transact([&](Table& t) {
    int64_t users = 0;
    if (auto it = t.find(kUsersKey); it != t.end()) users = store_internal::parse_counter(it->second).value_or(0);
    t[kUsersKey] = store_internal::format_counter(users + 1);
    return After::kWrite;
  });
  if (world_size < 0) return;
  // From here a failure must give the user count back: no destructor runs for a constructor that throws.
  try {
    const auto deadline = Clock::now() + timeout;
    joined = impl_->add(kJoinedKey, 1);
    Backoff backoff(deadline);
    while (joined < world_size) {
      if (!backoff.sleep()) {
        throw Error(detail::concat("FileStore: rendezvous on ", impl_->path, " timed out after ", timeout.count(),
                                   " ms: ", joined, " of ", world_size, " processes joined"));
      }
      impl_->transact([&](Table& t) {
        auto it = t.find(kJoinedKey);
        joined = it == t.end() ? 0 : store_internal::parse_counter(it->second).value_or(0);
        return After::kNothing;
      });
    }
  } catch (...) {
    try {
      impl_->unregister();
    } catch (...) {
    }
    throw;
  }
}

FileStore::~FileStore() {
  if (::getpid() != impl_->owner) return;
  try {
    impl_->unregister();
  } catch (...) {
    // A destructor cannot report; the file stays behind, as after a crash.
  }
}

void FileStore::set(const std::string& key, const Bytes& value) {
  store_internal::check_user_key("FileStore", "set", key);
  impl_->transact([&](Table& t) {
    t[key] = value;
    return After::kWrite;
  });
}

Bytes FileStore::get(const std::string& key) {
  store_internal::check_user_key("FileStore", "get", key);
  const Duration timeout = Store::timeout();
  Backoff backoff(Clock::now() + timeout);
  for (;;) {
    std::optional<Bytes> value;
    impl_->transact([&](Table& t) {
      if (auto it = t.find(key); it != t.end()) value = it->second;
      return After::kNothing;
    });
    if (value) return std::move(*value);
    if (!backoff.sleep()) {
      throw Error(detail::concat("FileStore: get(", quoted(key), ") on ", impl_->path, " timed out after ",
                                 timeout.count(), " ms: no process set the key"));
    }
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  store_internal::check_user_key("FileStore", "add", key);
  return impl_->add(key, delta);
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  store_internal::check_user_key("FileStore", "compare_set", key);
  Bytes result;
  impl_->transact([&](Table& t) {
    auto it = t.find(key);
    const bool matches = it == t.end() ? expected.empty() : it->second == expected;
    if (!matches) {
      // A missing key that did not match stores nothing, and reads as empty.
      if (it != t.end()) result = it->second;
      return After::kNothing;
    }
    t[key] = desired;
    result = desired;
    return After::kWrite;
  });
  return result;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) store_internal::check_user_key("FileStore", "check", k);
  return impl_->missing(keys).empty();
}

void FileStore::wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) {
  for (const auto& k : keys) store_internal::check_user_key("FileStore", "wait", k);
  const Duration limit = timeout.value_or(Store::timeout());
  Backoff backoff(Clock::now() + limit);
  for (;;) {
    const auto missing = impl_->missing(keys);
    if (missing.empty()) return;
    if (!backoff.sleep()) {
      throw Error(detail::concat("FileStore: wait on ", impl_->path, " timed out after ", limit.count(),
                                 " ms; missing keys: ", store_internal::quoted_list(missing)));
    }
  }
}

bool FileStore::delete_key(const std::string& key) {
  store_internal::check_user_key("FileStore", "delete_key", key);
  bool existed = false;
  impl_->transact([&](Table& t) {
    existed = t.erase(key) > 0;
    return existed ? After::kWrite : After::kNothing;
  });
  return existed;
}

int64_t FileStore::num_keys() {
  int64_t n = 0;
  impl_->transact([&](Table& t) {
    for (const auto& [k, v] : t) n += store_internal::is_internal_key(k) ? 0 : 1;
    return After::kNothing;
  });
  return n;
}

}  // namespace kiln::distributed
