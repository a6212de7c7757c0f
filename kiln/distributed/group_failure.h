// GroupFailure: a process group's first failure, and how it spreads through the store. One protocol for every
// place that runs ops: the tcp backend's collectives (tcp/process_group_tcp.cpp) and point-to-point engine
// (tcp/p2p.cpp), and the OpWorker of the gloo backend (op_worker.h):
//
//   - The first rank to fail writes "rank R failed: <what>" under the group's error key (compare-and-set: the
//     first writer wins), then closes its connections, so its peers see EOF at once.
//   - A rank whose op then fails on that EOF finds the report in the store and fails with it ("rank Q stopped
//     because rank R failed: ..."): the report is the cause, what it saw only the consequence.
//   - A rank waiting in an op reads the key about every half second (read_report), so it learns of a failure
//     it has no connection to see.
//
// The first failure recorded here also fails every later op of the group, collective or point to point. The
// class itself only keeps the record and talks to the store; closing connections is the backend's.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/distributed/store.h"

namespace kiln::distributed {

class GroupFailure {
 public:
  // error_key: a key of this group alone (tcp: Mesh::store_keys() + "/error"); rank: this rank, for the messages.
  GroupFailure(std::shared_ptr<Store> store, std::string error_key, int rank);

  // This rank's op `op` ("" when no single op failed) failed with its own error `what`. Writes `what` to the store
  // unless a report is there already, in which case the report becomes the message (with `what` after it, as
  // "here"). Records and returns the message for `op`. A store that cannot be reached leaves `what` as it is.
  std::string report(const std::string& op, const std::string& what);

  // The report in the store ("" when none), read at most every half second: `last_read` keeps the time of the
  // last read. Store errors propagate.
  std::string read_report(std::chrono::steady_clock::time_point& last_read);

  // Keeps `message` as the group's failure unless one is kept already.
  void record(const std::string& message);
  std::string first() const;  // "" while the group is healthy
  int rank() const { return rank_; }

 private:
  std::shared_ptr<Store> store_;
  const std::string key_;
  const int rank_;
  mutable std::mutex mutex_;
  std::string first_;
};

}  // namespace kiln::distributed
