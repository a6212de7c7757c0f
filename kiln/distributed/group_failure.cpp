// A process group's failure record and store protocol: see group_failure.h.
#include "kiln/distributed/group_failure.h"

namespace kiln::distributed {

GroupFailure::GroupFailure(std::shared_ptr<Store> store, std::string error_key, int rank)
    : store_(std::move(store)), key_(std::move(error_key)), rank_(rank) {}

std::string GroupFailure::report(const std::string& op, const std::string& what) {
  const std::string me = "rank " + std::to_string(rank_);
  std::string message = what;
  try {
    // Written unless a report is there: the value stored afterwards says who was first, also when another rank
    // failed at the same moment.
    const std::string text = me + " failed: " + what;
    const Bytes stored = store_->compare_set(key_, {}, Bytes(text.begin(), text.end()));
    const std::string first(stored.begin(), stored.end());
    if (first != text) {
      const std::string own = me + " failed: ";
      const std::string prefix = op.empty() ? std::string() : op + ": ";
      // This rank's own report (the other half of the group, collectives or point to point, failed first): the
      // group failed here already.
      message = first.rfind(own, 0) == 0
                    ? prefix + me + ": the group failed: " + first.substr(own.size()) + " (here: " + what + ")"
                    : prefix + me + " stopped because " + first + " (here: " + what + ")";
    }
  } catch (const std::exception&) {
    // The store is unreachable too: this rank's own error is all there is to report.
  }
  record(message);
  return message;
}

std::string GroupFailure::read_report(std::chrono::steady_clock::time_point& last_read) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_read < std::chrono::milliseconds(500)) return {};
  last_read = now;
  if (!store_->check({key_})) return {};
  return store_->get_string(key_);
}

void GroupFailure::record(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_.empty()) first_ = message;
}

std::string GroupFailure::first() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return first_;
}

}  // namespace kiln::distributed
