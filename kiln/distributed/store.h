// Stores: the small key-value services processes use to find each other (rendezvous) before they can talk
// directly, and to share a little state afterwards (a failed rank's error, a barrier's counter).
//
//   TCPStore     rank 0 serves on a port (the only fixed port a job needs); clients connect, retrying with
//                backoff until the timeout. What PyTorch's torch.distributed.TCPStore does, on kiln's own wire
//                format.
//   FileStore    every operation is a locked read-modify-write of one file: no ports at all (tests, and jobs on
//                one machine or a shared file system).
//   PrefixStore  puts "<prefix>/" before every key of another store, so groups and subsystems share one store
//                without clashing.
//
// Every blocking call (get, wait) has a deadline: the store's timeout (default 300 s, PyTorch's) unless one is
// given. Running past it is a kiln::Error that names the keys still missing and how long it waited; a store
// that cannot be reached names the address. Values are raw bytes; set/get_string are conveniences; counters
// (add) are decimal text. Stores are safe to share between threads and between processes.
//
// Rendezvous (world_size given): every FileStore constructor waits for the whole world; a TCPStore client
// returns once registered and the server waits for the whole world. The TCPStore server must outlive its
// clients' calls (end a job with a barrier before rank 0 destroys its store): after it exits, client calls
// fail at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::distributed {

using Bytes = std::vector<uint8_t>;
using Duration = std::chrono::milliseconds;
inline constexpr Duration kDefaultTimeout = std::chrono::seconds(300);

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // The value of `key`, waiting until some process sets it (up to the timeout).
  virtual Bytes get(const std::string& key) = 0;
  // Adds `delta` to the integer counter at `key` (a missing key counts as 0) and returns the new value,
  // atomically across processes.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Stores `desired` if the current value equals `expected` (a missing key matches an empty `expected`);
  // returns the value stored afterwards (empty for a key still missing), atomically.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Whether every key exists now (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits until every key exists; a kiln::Error naming the missing ones after `timeout` (default: the store's).
  virtual void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = std::nullopt) = 0;
  // Removes `key`; false when it did not exist.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return {b.begin(), b.end()};
  }
  Duration timeout() const { return Duration(timeout_ms_.load(std::memory_order_relaxed)); }
  void set_timeout(Duration timeout) { timeout_ms_.store(timeout.count(), std::memory_order_relaxed); }

 private:
  // Read by every blocking call, possibly while another thread changes it.
  std::atomic<Duration::rep> timeout_ms_{kDefaultTimeout.count()};
};

struct TCPStoreOptions {
  std::string host = "127.0.0.1";
  // The server's port; 0 on the server picks a free one (read it back with port()).
  uint16_t port = 29500;
  bool is_server = false;
  // With a world size, the server's constructor returns once that many clients (itself included) have
  // connected, and each client's once it has registered: a rendezvous. -1: no waiting.
  int world_size = -1;
  Duration timeout = kDefaultTimeout;
};

class TCPStore : public Store {
 public:
  explicit TCPStore(TCPStoreOptions options);
  ~TCPStore() override;
  uint16_t port() const;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = std::nullopt) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  using Store::set;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class FileStore : public Store {
 public:
  // `path` is shared by every process of the job; world_size as in TCPStoreOptions (-1: no rendezvous).
  explicit FileStore(std::string path, int world_size = -1, Duration timeout = kDefaultTimeout);
  ~FileStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = std::nullopt) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  using Store::set;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = std::nullopt) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  using Store::set;
  const std::shared_ptr<Store>& underlying() const { return store_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace kiln::distributed
