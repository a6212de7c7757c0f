// The profiler: times and nesting against a fake clock whose every reading the test sets (so self and total
// times are known exactly), kernel events against the ops the test runs, threads, the event limit, and the
// Chrome trace against the format written out by hand.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using profiler::Kind;

// The fake clock: reads what the test last set.
std::atomic<int64_t> g_fake_now{0};
int64_t fake_clock() { return g_fake_now.load(); }
void set_now(int64_t t) { g_fake_now.store(t); }

profiler::Options fake_clock_options() {
  profiler::Options o;
  o.clock_ns = fake_clock;
  return o;
}

const profiler::Summary* find_row(const std::vector<profiler::Summary>& rows, const std::string& name, Kind kind) {
  for (const auto& r : rows)
    if (r.name == name && r.kind == kind) return &r;
  return nullptr;
}

// The row's call count; -1 when no event of that name and kind was recorded.
int64_t calls_of(const std::vector<profiler::Summary>& rows, const std::string& name, Kind kind) {
  const profiler::Summary* r = find_row(rows, name, kind);
  return r != nullptr ? r->calls : -1;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Profiler, SelfTimeIsTotalLessNestedEvents) {
  set_now(100);
  profiler::Profiler prof(fake_clock_options());
  {
    set_now(110);
    profiler::Range a("a");
    {
      set_now(130);
      profiler::Range b("b");
      set_now(160);
    }
    {
      set_now(170);
      profiler::Range b("b");
      set_now(175);
    }
    set_now(200);
  }
  {
    set_now(250);
    profiler::Range c("c");
    set_now(260);
  }
  set_now(300);
  prof.stop();
  set_now(400);  // after stop: nothing more counts
  { profiler::Range late("late"); }

  EXPECT_EQ(prof.wall_ns(), 200);
  EXPECT_EQ(prof.event_count(), 4);
  const auto rows = prof.summary();
  ASSERT_EQ(rows.size(), 3u);
  // By self time: a (90 - 30 - 5 = 55), b (30 + 5), c (10).
  EXPECT_EQ(rows[0].name, "a");
  EXPECT_EQ(rows[0].calls, 1);
  EXPECT_EQ(rows[0].total_ns, 90);
  EXPECT_EQ(rows[0].self_ns, 55);
  EXPECT_EQ(rows[1].name, "b");
  EXPECT_EQ(rows[1].calls, 2);
  EXPECT_EQ(rows[1].total_ns, 35);
  EXPECT_EQ(rows[1].self_ns, 35);
  EXPECT_EQ(rows[1].max_ns, 30);
  EXPECT_DOUBLE_EQ(rows[1].mean_ns(), 17.5);
  EXPECT_EQ(rows[2].name, "c");
  EXPECT_EQ(rows[2].self_ns, 10);

  const auto events = prof.events();
  ASSERT_EQ(events.size(), 4u);
  const std::pair<const char*, int64_t> expected[] = {{"a", 10}, {"b", 30}, {"b", 70}, {"c", 150}};
  const int depths[] = {0, 1, 1, 0};
  const int64_t durations[] = {90, 30, 5, 10};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(events[i].name, expected[i].first) << i;
    EXPECT_EQ(events[i].start_ns, expected[i].second) << i;
    EXPECT_EQ(events[i].depth, depths[i]) << i;
    EXPECT_EQ(events[i].duration_ns, durations[i]) << i;
    EXPECT_EQ(events[i].thread, 0) << i;
    EXPECT_EQ(events[i].kind, Kind::Range) << i;
  }
}

TEST(Profiler, RecordsEachKernelCallByOpAndDevice) {
  Tensor x = randn({8, 8});
  Tensor y = randn({8, 8});
  profiler::Profiler prof;
  for (int i = 0; i < 3; ++i) (void)x.exp();
  for (int i = 0; i < 2; ++i) (void)(x + y);
  (void)matmul(x, y);
  prof.stop();
  const auto rows = prof.summary();
  EXPECT_EQ(calls_of(rows, "exp", Kind::Kernel), 3);
  EXPECT_EQ(calls_of(rows, "add", Kind::Kernel), 2);
  EXPECT_EQ(calls_of(rows, "bmm", Kind::Kernel), 1);
  for (const auto& r : rows) {
    EXPECT_EQ(r.kind, Kind::Kernel) << r.name;
    EXPECT_GE(r.total_ns, 0);
    EXPECT_EQ(r.self_ns, r.total_ns) << r.name << ": a CPU kernel runs no other kernel";
  }
}

TEST(Profiler, OptionsChooseWhatIsRecorded) {
  Tensor x = randn({4});
  x.requires_grad_();
  profiler::Options o;
  o.kernels = false;
  o.backward = false;
  profiler::Profiler prof(o);
  {
    profiler::Range r("step");
    (x * x).sum().backward();
  }
  prof.stop();
  const auto rows = prof.summary();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "step");
  EXPECT_EQ(rows[0].self_ns, rows[0].total_ns);
}

TEST(Profiler, BackwardNodesAreEventsWithTheirKernelsInside) {
  Tensor x = randn({16});
  x.requires_grad_();
  Tensor y = (x * x).sum();
  profiler::Profiler prof;
  y.backward();
  prof.stop();
  const auto rows = prof.summary();
  EXPECT_EQ(calls_of(rows, "mul backward", Kind::Backward), 1);
  EXPECT_EQ(calls_of(rows, "sum backward", Kind::Backward), 1);
  EXPECT_EQ(calls_of(rows, "AccumulateGrad backward", Kind::Backward), 1);
  const auto* mul = find_row(rows, "mul backward", Kind::Backward);
  ASSERT_NE(mul, nullptr);
  // mul's backward multiplies (g * x, twice, or g * 2x): its kernels run inside it, one level down.
  const auto events = prof.events();
  int64_t mul_start = -1, mul_end = -1;
  for (const auto& e : events)
    if (e.name == "mul backward") mul_start = e.start_ns, mul_end = e.start_ns + e.duration_ns;
  int kernels_inside = 0;
  int64_t inside_ns = 0;
  for (const auto& e : events) {
    if (e.kind == Kind::Kernel && e.start_ns >= mul_start && e.start_ns + e.duration_ns <= mul_end) {
      ++kernels_inside;
      inside_ns += e.duration_ns;
      EXPECT_EQ(e.depth, 1) << e.name;
    }
  }
  EXPECT_GE(kernels_inside, 1);
  EXPECT_EQ(mul->self_ns, mul->total_ns - inside_ns);
}

TEST(Profiler, OneRecordsAtATime) {
  profiler::Profiler first;
  try {
    profiler::Profiler second;
    FAIL() << "a second profiler started while one records";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already recording"), std::string::npos) << e.what();
  }
  first.stop();
  profiler::Profiler third;  // after a stop, a new one may start
  EXPECT_TRUE(third.recording());
  EXPECT_FALSE(first.recording());
}

TEST(Profiler, NothingIsRecordedWithoutAProfiler) {
  { profiler::Range r("before"); }
  EXPECT_FALSE(profiler::recording_ranges());
  profiler::Profiler prof;
  EXPECT_TRUE(profiler::recording_ranges());
  prof.stop();
  EXPECT_FALSE(profiler::recording_ranges());
  EXPECT_EQ(prof.event_count(), 0);
}

TEST(Profiler, TheTimelineStopsAtItsLimitAndTheSummaryCountsOn) {
  profiler::Options o;
  o.max_trace_events = 2;
  profiler::Profiler prof(o);
  for (int i = 0; i < 5; ++i) profiler::Range r("r");
  prof.stop();
  EXPECT_EQ(prof.events().size(), 2u);
  EXPECT_EQ(prof.dropped_events(), 3);
  EXPECT_EQ(prof.event_count(), 5);
  ASSERT_EQ(prof.summary().size(), 1u);
  EXPECT_EQ(prof.summary()[0].calls, 5);
}

TEST(Profiler, ThreadsNestSeparately) {
  constexpr int kThreads = 4, kIters = 500;
  profiler::Profiler prof;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kIters; ++i) {
        profiler::Range outer("outer");
        profiler::Range inner("inner");
      }
    });
  }
  for (auto& t : threads) t.join();
  prof.stop();
  const auto rows = prof.summary();
  const auto* outer = find_row(rows, "outer", Kind::Range);
  const auto* inner = find_row(rows, "inner", Kind::Range);
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(outer->calls, kThreads * kIters);
  EXPECT_EQ(inner->calls, kThreads * kIters);
  // Each outer's only child is its own thread's inner.
  EXPECT_EQ(outer->self_ns, outer->total_ns - inner->total_ns);
  std::vector<int> per_thread(kThreads + 1, 0);
  for (const auto& e : prof.events()) {
    ASSERT_GE(e.thread, 1);  // thread 0 started the profiler and recorded nothing
    ASSERT_LE(e.thread, kThreads);
    EXPECT_EQ(e.depth, e.name == "inner" ? 1 : 0);
    ++per_thread[e.thread];
  }
  for (int t = 1; t <= kThreads; ++t) EXPECT_EQ(per_thread[t], 2 * kIters) << t;
}

TEST(Profiler, ChromeTraceIsTheEventsInTraceEventFormat) {
  set_now(1000);
  profiler::Profiler prof(fake_clock_options());
  {
    set_now(1500);
    profiler::Range outer("step \"1\"\\");
    {
      set_now(2750);
      profiler::Range inner("load");
      set_now(4000);
    }
    set_now(1'000'002'123);  // the outer range: 1'000'000'623 ns
  }
  prof.stop();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiln_profiler_trace_" + std::to_string(::getpid()) + ".json")).string();
  prof.write_chrome_trace(path);
  const std::string got = read_file(path);
  std::filesystem::remove(path);
  const std::string want =
      "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"dropped_events\": 0}, \"traceEvents\": [\n"
      "{\"name\": \"step \\\"1\\\"\\\\\", \"cat\": \"range\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, "
      "\"ts\": 0.500, \"dur\": 1000000.623},\n"
      "{\"name\": \"load\", \"cat\": \"range\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, "
      "\"ts\": 1.750, \"dur\": 1.250}\n"
      "]}\n";
  EXPECT_EQ(got, want);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Profiler, TraceToAMissingFolderNamesThePath) {
  profiler::Profiler prof;
  prof.stop();
  try {
    prof.write_chrome_trace("/nonexistent-kiln-dir/trace.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-kiln-dir/trace.json"), std::string::npos) << e.what();
  }
}

TEST(Profiler, TableListsRowsBySelfTime) {
  set_now(0);
  profiler::Profiler prof(fake_clock_options());
  for (const auto& [name, dur] : std::vector<std::pair<std::string, int64_t>>{{"short", 1000}, {"long", 5000}, {"mid", 3000}}) {
    profiler::Range r(name);
    set_now(g_fake_now.load() + dur);
  }
  prof.stop();
  const std::string all = prof.table(0);
  const size_t lon = all.find("long"), mid = all.find("mid"), sho = all.find("short");
  ASSERT_NE(lon, std::string::npos) << all;
  ASSERT_NE(mid, std::string::npos) << all;
  ASSERT_NE(sho, std::string::npos) << all;
  EXPECT_LT(lon, mid);
  EXPECT_LT(mid, sho);
  EXPECT_NE(all.find("profile: 0.009 ms of wall time, 3 events"), std::string::npos) << all;
  // long: 5 us of 9 us of wall time.
  EXPECT_NE(all.find("55.6%"), std::string::npos) << all;
  const std::string top = prof.table(1);
  EXPECT_EQ(top.find("mid"), std::string::npos) << top;
  EXPECT_NE(top.find("... 2 more names"), std::string::npos) << top;
}

}  // namespace
}  // namespace kiln
