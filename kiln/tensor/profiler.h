// The profiler: where the time of a run goes, per kernel, per backward node and per named stretch of code.
//
//   profiler::Profiler prof;                 // records from here
//   for (...) train_step();
//   prof.stop();
//   std::cout << prof.table();               // per name: calls, total, self, mean, max
//   prof.write_chrome_trace("trace.json");   // a timeline: open it in Perfetto or chrome://tracing
//
// It records three kinds of event:
// - kernel: every call through the dispatch table, named by its op ("add", "bmm", "conv2d"; "add (cuda)");
// - backward: every autograd node the engine runs, named by its op ("mul backward", "AccumulateGrad backward");
// - range: a named stretch of code, `profiler::Range r("load");`. The Trainer's actions are ranges.
// Events nest on each thread, so an event's self time is its time less that of the events that ran inside it
// on the same thread: a backward node's self time is the bookkeeping around its kernels.
//
// Times are the host's wall clock. CUDA kernels run asynchronously: a CUDA kernel's event is its launch, unless
// Options::synchronize_cuda makes each one wait for the device (slower, but then it is the kernel's own time).
// With no profiler recording, a kernel call pays one relaxed atomic load; one profiler records at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tensor/device.h"

namespace kiln::profiler {

enum class Kind : uint8_t { Kernel, Backward, Range };
const char* kind_name(Kind kind);  // "kernel", "backward", "range"

struct Options {
  bool kernels = true;    // record kernel calls
  bool backward = true;   // record the autograd engine's nodes
  // Wait for the device after every CUDA kernel, so that its event times the kernel rather than its launch.
  bool synchronize_cuda = false;
  // The timeline keeps at most this many events (the summary counts every event; the rest are counted as
  // dropped). An event takes about 64 bytes.
  size_t max_trace_events = 1'000'000;
  // Nanoseconds from any fixed origin; steady_clock when null. Tests give a fake clock.
  int64_t (*clock_ns)() = nullptr;
};

// One event of the timeline. thread: 0 for the thread that started the profiler, then 1, 2, ... in the order
// threads first recorded; depth: how many of this profiler's events enclose it on its thread.
struct Event {
  std::string name;
  Kind kind = Kind::Range;
  int thread = 0;
  int depth = 0;
  int64_t start_ns = 0;     // since the profiler started
  int64_t duration_ns = 0;
};

// Every event of one name and kind, together.
struct Summary {
  std::string name;
  Kind kind = Kind::Range;
  int64_t calls = 0;
  int64_t total_ns = 0;  // the events' time, nested events included
  int64_t self_ns = 0;   // less the time of the events nested in them
  int64_t max_ns = 0;    // the longest event's total
  double mean_ns() const { return calls > 0 ? static_cast<double>(total_ns) / static_cast<double>(calls) : 0.0; }
};

namespace detail {
struct Session;
}

class Profiler {
 public:
  // Starts recording; throws if another profiler is recording.
  explicit Profiler(Options options = {});
  ~Profiler();  // stops
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Stops recording (events still open then are not counted). The results below stay readable; reading them
  // while recording gives what has been recorded so far.
  void stop();
  bool recording() const;

  // By self time, largest first (ties by name).
  std::vector<Summary> summary() const;
  // The timeline, in the order events started (by thread for equal starts).
  std::vector<Event> events() const;
  int64_t event_count() const;    // every event recorded, the dropped ones included
  int64_t dropped_events() const;  // not in events(): past max_trace_events
  // From the start to stop() (or to now, while recording).
  int64_t wall_ns() const;

  // The summary as a table, the first max_rows rows (0: all). Self % is of wall_ns(): with several threads
  // recording, the column can sum past 100%.
  std::string table(size_t max_rows = 25) const;
  // The timeline as Chrome's trace event format (JSON), written to path. Throws with the path and the reason
  // if it cannot be written.
  void write_chrome_trace(const std::string& path) const;

 private:
  std::shared_ptr<detail::Session> session_;
};

namespace detail {
// Which kinds the running profiler records: bit (1 << Kind). Zero when none records.
extern std::atomic<unsigned> g_recording;
inline bool recording(Kind kind) {
  return (g_recording.load(std::memory_order_relaxed) & (1u << static_cast<unsigned>(kind))) != 0;
}

// Times one event from construction to destruction, if the profiler records its kind when it starts.
class Scope {
 public:
  Scope(Kind kind, std::string name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 protected:
  std::shared_ptr<Session> session_;  // null: not recording
  std::string name_;
  Kind kind_;
  int64_t start_ns_ = 0;
};

// A kernel call: waits for the device at its end when the profiler says to and the kernel ran on a GPU.
class KernelScope : public Scope {
 public:
  KernelScope(const char* op, Device device);
  ~KernelScope();

 private:
  Device device_;
};
}  // namespace detail

// A named range: recorded from construction to destruction when a profiler is recording.
//   { profiler::Range r("augment"); ... }
class Range {
 public:
  explicit Range(std::string_view name) {
    if (detail::recording(Kind::Range)) [[unlikely]] scope_.emplace(Kind::Range, std::string(name));
  }

 private:
  std::optional<detail::Scope> scope_;
};

// Whether ranges are being recorded: lets a caller skip building a name nobody will read.
inline bool recording_ranges() { return detail::recording(Kind::Range); }

}  // namespace kiln::profiler
