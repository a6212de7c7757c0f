// The profiler's recording. Each thread keeps a stack of its open events (thread_local), which is how an event
// learns how much of its time its nested events took; a finished event goes to the session under its mutex,
// into the per-name summary and, up to the limit, the timeline. All of that costs only while recording: the
// fast path of a kernel call reads g_recording and nothing else.
#include "kiln/tensor/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/error.h"

namespace kiln::profiler {

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Kernel: return "kernel";
    case Kind::Backward: return "backward";
    case Kind::Range: return "range";
  }
  return "?";
}

namespace detail {

std::atomic<unsigned> g_recording{0};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Session {
  explicit Session(const Options& o) : options(o), clock(o.clock_ns ? o.clock_ns : steady_ns), origin_ns(clock()) {}

  int64_t now() const { return clock() - origin_ns; }
  int thread_index() {  // under mu
    auto [it, inserted] = threads.try_emplace(std::this_thread::get_id(), static_cast<int>(threads.size()));
    return it->second;
  }
  void record(Kind kind, std::string&& name, int depth, int64_t start, int64_t duration, int64_t self) {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped) return;
    ++count;
    const int thread = thread_index();
    Summary& s = by_name[{kind, name}];
    if (s.calls == 0) {
      s.name = name;
      s.kind = kind;
    }
    ++s.calls;
    s.total_ns += duration;
    s.self_ns += self;
    s.max_ns = std::max(s.max_ns, duration);
    if (events.size() < options.max_trace_events) {
      events.push_back(Event{std::move(name), kind, thread, depth, start, duration});
    } else {
      ++dropped;
    }
  }

  const Options options;
  int64_t (*const clock)();
  const int64_t origin_ns;

  mutable std::mutex mu;
  bool stopped = false;
  int64_t stop_ns = 0;
  int64_t count = 0, dropped = 0;
  std::map<std::pair<Kind, std::string>, Summary> by_name;
  std::vector<Event> events;
  std::unordered_map<std::thread::id, int> threads;
};

namespace {

std::mutex g_mu;                    // guards g_current
std::shared_ptr<Session> g_current;  // the recording session, if any

std::shared_ptr<Session> current_session() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_current;
}

// This thread's open events: which session each belongs to, and the time its finished children took.
struct Frame {
  const Session* session;
  int64_t child_ns;
};
thread_local std::vector<Frame> t_open;

}  // namespace

Scope::Scope(Kind kind, std::string name) : kind_(kind) {
  if (!recording(kind)) return;
  session_ = current_session();
  if (!session_) return;
  name_ = std::move(name);
  t_open.push_back(Frame{session_.get(), 0});
  start_ns_ = session_->now();
}

Scope::~Scope() {
  if (!session_) return;
  const int64_t end = session_->now();
  const Frame frame = t_open.back();
  t_open.pop_back();
  const int64_t duration = end - start_ns_;
  int depth = 0;
  for (const Frame& f : t_open) depth += f.session == frame.session;
  if (!t_open.empty() && t_open.back().session == frame.session) t_open.back().child_ns += duration;
  session_->record(kind_, std::move(name_), depth, start_ns_, duration, duration - frame.child_ns);
}

KernelScope::KernelScope(const char* op, Device device)
    : Scope(Kind::Kernel, device.is_cuda() ? std::string(op) + " (cuda)" : std::string(op)), device_(device) {}

KernelScope::~KernelScope() {
  // Before Scope's destructor reads the clock.
  if (session_ && device_.is_cuda() && session_->options.synchronize_cuda) cuda::synchronize(device_.index);
}

}  // namespace detail

// ---- Profiler ----

Profiler::Profiler(Options options) : session_(std::make_shared<detail::Session>(options)) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  KILN_CHECK(detail::g_current == nullptr,
             "profiler: another Profiler is already recording (one records at a time): stop it first");
  {
    std::lock_guard<std::mutex> session_lock(session_->mu);
    session_->thread_index();  // the starting thread is thread 0
  }
  detail::g_current = session_;
  unsigned kinds = 1u << static_cast<unsigned>(Kind::Range);
  if (options.kernels) kinds |= 1u << static_cast<unsigned>(Kind::Kernel);
  if (options.backward) kinds |= 1u << static_cast<unsigned>(Kind::Backward);
  detail::g_recording.store(kinds, std::memory_order_relaxed);
}

Profiler::~Profiler() { stop(); }

void Profiler::stop() {
  {
    std::lock_guard<std::mutex> lock(detail::g_mu);
    if (detail::g_current == session_) {
      detail::g_current.reset();
      detail::g_recording.store(0, std::memory_order_relaxed);
    }
  }
  std::lock_guard<std::mutex> lock(session_->mu);
  if (!session_->stopped) {
    session_->stopped = true;
    session_->stop_ns = session_->now();
  }
}

bool Profiler::recording() const {
  std::lock_guard<std::mutex> lock(session_->mu);
  return !session_->stopped;
}

std::vector<Summary> Profiler::summary() const {
  std::vector<Summary> out;
  {
    std::lock_guard<std::mutex> lock(session_->mu);
    out.reserve(session_->by_name.size());
    for (const auto& [key, s] : session_->by_name) out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const Summary& a, const Summary& b) { return a.self_ns > b.self_ns; });
  return out;
}

std::vector<Event> Profiler::events() const {
  std::vector<Event> out;
  {
    std::lock_guard<std::mutex> lock(session_->mu);
    out = session_->events;
  }
  // Recorded as they end (children before parents); a timeline reads in order of start, parents first.
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.thread != b.thread) return a.thread < b.thread;
    return a.depth < b.depth;
  });
  return out;
}

int64_t Profiler::event_count() const {
  std::lock_guard<std::mutex> lock(session_->mu);
  return session_->count;
}

int64_t Profiler::dropped_events() const {
  std::lock_guard<std::mutex> lock(session_->mu);
  return session_->dropped;
}

int64_t Profiler::wall_ns() const {
  std::lock_guard<std::mutex> lock(session_->mu);
  return session_->stopped ? session_->stop_ns : session_->now();
}

std::string Profiler::table(size_t max_rows) const {
  const std::vector<Summary> rows = summary();
  const int64_t wall = wall_ns();
  const size_t shown = max_rows == 0 ? rows.size() : std::min(rows.size(), max_rows);
  size_t width = 4;
  for (size_t i = 0; i < shown; ++i) width = std::max(width, rows[i].name.size());
  width = std::min<size_t>(width, 60);

  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "profile: %.3f ms of wall time, %lld events, %zu names\n", wall / 1e6,
                static_cast<long long>(event_count()), rows.size());
  out += line;
  std::snprintf(line, sizeof line, "%-8s  %-*s  %10s  %12s  %12s  %7s  %12s  %12s\n", "kind", static_cast<int>(width),
                "name", "calls", "total ms", "self ms", "self %", "mean us", "max us");
  out += line;
  for (size_t i = 0; i < shown; ++i) {
    const Summary& s = rows[i];
    std::snprintf(line, sizeof line, "%-8s  %-*s  %10lld  %12.3f  %12.3f  %6.1f%%  %12.2f  %12.2f\n",
                  kind_name(s.kind), static_cast<int>(width), s.name.c_str(), static_cast<long long>(s.calls),
                  s.total_ns / 1e6, s.self_ns / 1e6, wall > 0 ? 100.0 * s.self_ns / wall : 0.0, s.mean_ns() / 1e3,
                  s.max_ns / 1e3);
    out += line;
  }
  if (shown < rows.size()) out += "... " + std::to_string(rows.size() - shown) + " more names\n";
  return out;
}

namespace {

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Microseconds with nanosecond digits: the trace format's unit.
void append_us(std::string& out, int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  out += buf;
}

}  // namespace

void Profiler::write_chrome_trace(const std::string& path) const {
  const std::vector<Event> evs = events();
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"dropped_events\": ";
  out += std::to_string(dropped_events());
  out += "}, \"traceEvents\": [\n";
  for (size_t i = 0; i < evs.size(); ++i) {
    const Event& e = evs[i];
    out += "{\"name\": ";
    append_json_string(out, e.name);
    out += ", \"cat\": \"";
    out += kind_name(e.kind);
    out += "\", \"ph\": \"X\", \"pid\": 0, \"tid\": ";
    out += std::to_string(e.thread);
    out += ", \"ts\": ";
    append_us(out, e.start_ns);
    out += ", \"dur\": ";
    append_us(out, e.duration_ns);
    out += i + 1 < evs.size() ? "},\n" : "}\n";
  }
  out += "]}\n";

  // Written beside the target and renamed over it: a reader never sees half a trace.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(f.good(), "profiler: cannot write the trace to '", path, "': cannot create '", tmp, "'");
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    f.close();
    KILN_CHECK(!f.fail(), "profiler: writing the trace to '", tmp, "' failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    kiln::detail::throw_error(kiln::detail::concat("profiler: cannot write the trace to '", path, "': ", ec.message()));
  }
}

}  // namespace kiln::profiler
