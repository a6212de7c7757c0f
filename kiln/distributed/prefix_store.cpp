// PrefixStore: another store's keys, seen through "<prefix>/" (store.h). Process groups and subsystems that
// share one store each take a prefix, so "rank0" of one group is "pg0/rank0" in the store and cannot meet
// "pg1/rank0".
//
// Forwarding choices where store.h is silent:
//   - num_keys forwards as is: it counts every key of the underlying store, not only this prefix's (neither
//     store can count by prefix without scanning, and PyTorch's PrefixStore does the same).
//   - The timeout: a PrefixStore starts with its store's timeout and then has its own (set_timeout is not
//     virtual, so it cannot reach the underlying store). wait without a timeout uses this store's; get forwards
//     directly while the two agree, and otherwise waits for the key with this store's timeout first.
//   - Errors come from the underlying store and name the full key ("pg0/rank0"), which is what one looks for
//     in the store when debugging.
#include "kiln/distributed/store.h"

#include "kiln/tensor/error.h"

namespace kiln::distributed {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  KILN_CHECK(store_ != nullptr, "PrefixStore(\"", prefix_, "\"): no underlying store");
  set_timeout(store_->timeout());
}

void PrefixStore::set(const std::string& k, const Bytes& value) { store_->set(key(k), value); }

Bytes PrefixStore::get(const std::string& k) {
  if (Store::timeout() != store_->timeout()) store_->wait({key(k)}, Store::timeout());
  return store_->get(key(k));
}

int64_t PrefixStore::add(const std::string& k, int64_t delta) { return store_->add(key(k), delta); }

Bytes PrefixStore::compare_set(const std::string& k, const Bytes& expected, const Bytes& desired) {
  return store_->compare_set(key(k), expected, desired);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key(k));
  return store_->check(full);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key(k));
  store_->wait(full, timeout.value_or(Store::timeout()));
}

bool PrefixStore::delete_key(const std::string& k) { return store_->delete_key(key(k)); }

int64_t PrefixStore::num_keys() { return store_->num_keys(); }

}  // namespace kiln::distributed
