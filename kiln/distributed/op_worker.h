// OpWorker: the op queue and threads of a process group built on another engine (mpi, gloo).
//
// A group checks an op's arguments on the caller's thread, then hands its body here; the worker thread runs
// the bodies one at a time, in issue order, and each call gets a Work at once. A body either finishes its op
// (a collective: the engine's call returns when it is done) or posts it and returns a Completion, the part
// that waits for it (a send or a recv: waiting on the worker would hold up the ops behind it, among them the
// send the peer is waiting for; two ranks that each send to the other before receiving, or each receive
// before sending, would wait on each other forever). Completions run on a thread per stream (see enqueue),
// in issue order within it: a recv's completion never waits behind a send's, whose peer may only post the
// matching recv once this recv is done. A completer's thread ends after half a second without work (point to
// point has one per peer and tag), and the worker starts a new one when its stream has work again.
//
// Failure: a body or completion that throws fails its Work with "<op> #<seq>: rank R: <what>". The engines
// cannot tell which later op is still safe after a failure (a collective that timed out may still be running
// in MPI, a gloo pair that saw an error is closed), so the first failure sticks: every later op of the group
// fails at once, naming it. A group that failed is not usable again.
//
// Spreading a failure (FailureSharing, optional; gloo uses it, MPI leaves it to mpirun, which ends every rank
// when one dies): the first failure is reported through the store (GroupFailure, group_failure.h), so the
// other ranks name its cause, and the group's connections are ended (FailureSharing::close), so each peer
// waiting on this rank sees them end at once and fails in turn. A rank that waits on no such peer learns it
// from the store: while any op is in flight, a watcher thread reads the report about every half second, and
// on finding one fails every op in flight or queued with "<op> #<seq>: rank R stopped because rank Q failed:
// ...", then ends the connections too (the engine's calls waiting on them fail; those of an engine that cannot
// be interrupted go on to their deadline, keeping their tensors, which they may still write).
//
// The simpler sibling of tcp's queue (tcp/process_group_tcp.cpp), which also runs ops on waiting callers'
// threads: the engines here have their own threads and locks, so the op runs on the worker alone.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distributed/group_failure.h"
#include "kiln/distributed/process_group.h"

namespace kiln::distributed {

class ThreadedWork;

// Blocks SIGPIPE for the calling thread while it lives, and for the threads it starts meanwhile (they inherit
// its signal mask): the engines write to sockets without MSG_NOSIGNAL (gloo's pairs use writev), so a peer
// that dies would otherwise kill this process with SIGPIPE instead of failing the op with EPIPE. On leaving, a
// SIGPIPE raised meanwhile in this thread is consumed before the old mask returns.
class BlockSigpipe {
 public:
  BlockSigpipe();
  ~BlockSigpipe();
  BlockSigpipe(const BlockSigpipe&) = delete;
  BlockSigpipe& operator=(const BlockSigpipe&) = delete;

 private:
  bool was_blocked_ = false;
};

// The waiting half of an op that a body posted (empty: the body finished the op itself).
using Completion = std::function<void()>;

// Argument checks every queued backend makes on the caller's thread, naming the backend and the op.
void check_cpu_tensor(const Tensor& t, const std::string& backend, const std::string& what);
// tensors: size() tensors each with the dtype and element count of `like` (allgather's outputs, reduce_scatter's
// inputs); `role` names them ("output", "input").
void check_tensor_list(const std::vector<Tensor>& tensors, const Tensor& like, int size, const std::string& backend,
                       const std::string& what, const std::string& role);

// How a group's failures reach its other ranks (see above). Every member may be empty.
struct FailureSharing {
  std::shared_ptr<GroupFailure> reports;  // the store protocol; empty: nothing is reported or watched for
  // Ends the group's connections (the engine's calls waiting on them fail, the peers see them end). Called
  // once, on the worker, a completer or the watcher thread: when an op of this rank first fails, or when the
  // watcher finds another rank's report.
  std::function<void()> close;
  // Adds to an engine's error what it leaves out (gloo names a peer by an address only: which ranks' connections
  // had ended).
  std::function<std::string(const std::string&)> explain;
};

class OpWorker {
 public:
  // `backend` and `rank` name this group in errors.
  OpWorker(std::string backend, int rank, FailureSharing sharing = {});
  // Runs what is queued (each op bounded by its own deadline), then joins the threads.
  ~OpWorker();
  OpWorker(const OpWorker&) = delete;
  OpWorker& operator=(const OpWorker&) = delete;

  // Queues `body` as "<op> #<seq><suffix>". Sequence numbers count per `stream` in issue order: "" for the
  // collectives, e.g. "send 3" for the sends to rank 3 (point to point is matched per peer, not by the
  // group's collectives). `body` receives the op's full name (for its own error messages).
  // `completer` names the thread its completion waits on (empty: `stream`'s); point to point gives each
  // (peer, tag) its own, so that waiting for one tag's message never holds up another's.
  std::shared_ptr<Work> enqueue(const std::string& op, const std::string& stream, const std::string& suffix,
                                std::function<Completion(const std::string& name)> body,
                                const std::string& completer = {});

  // Runs everything queued and joins the threads; later enqueues are errors. The group calls this before it
  // tears down what the bodies use. Idempotent.
  void stop();

 private:
  struct Task;
  struct Completer;  // one stream's completions and the thread that runs them
  void run_worker();
  void run_completer(Completer& c);
  void run_watcher();  // only with FailureSharing::reports
  // Joins and forgets the completers whose threads ended idle. Called by the worker with mutex_ held.
  void reap_idle_completers();
  // `task` threw `what`: fails its Work with "<backend> <op>: rank R: <what>" (another rank's report, when the
  // store has one, becomes the cause), or, after an earlier failure, with one naming that first failure; the
  // first failure is recorded for every later op. Closes the connections the first time (FailureSharing).
  void fail(Task& task, std::string what);
  // Fails `task`'s Work, unrun, because the group failed before it.
  void fail_after_failure(Task& task);
  // The message of op `name` failing because of the group's first failure. Called with mutex_ held.
  std::string failed_earlier(const std::string& name) const;

  std::string backend_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Task>> ops_;
  bool stop_ = false, worker_done_ = false;
  std::map<std::string, uint64_t> seq_;  // per stream
  std::map<std::string, std::unique_ptr<Completer>> completers_;  // per stream, made by the worker thread
  std::string failure_;                  // the first failure's message
  FailureSharing sharing_;
  bool closed_ = false;                  // sharing_.close was called
  bool reporting_ = false;               // fail() is reporting this rank's first failure to the store
  std::vector<std::weak_ptr<ThreadedWork>> live_;  // Works not known to be complete: the watcher's to fail
  bool watcher_stop_ = false;
  std::condition_variable watcher_cv_;
  std::thread worker_, watcher_;
};

}  // namespace kiln::distributed
