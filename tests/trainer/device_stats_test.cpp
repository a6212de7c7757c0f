// DeviceStatsMonitor on the CPU: which keys it logs and at which steps, each stat within its range, the
// process's resident memory against the kernel's own peak of it (/proc/self/status' VmHWM, another file than
// the one the monitor reads), and cpu_percent against a step that keeps one thread busy. The cpu_percent
// arithmetic is checked on readings made up here.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/tensor/allocator.h"
#include "kiln/trainer/device_stats_monitor.h"
#include "trainer/callbacks_test_util.h"
#include "trainer/trainer_test_util.h"

namespace kiln::trainer::callbacks_testing {
namespace device_stats_tests {  // named: this target is built as one unit

// The kernel's peak resident memory of this process, in MiB (VmHWM in /proc/self/status).
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    double kib = 0;
    fields >> kib;
    return kib / 1024.0;
  }
  return -1;
}

TEST(DeviceStatsMonitor, LogsTheHostsStatsAroundTheLoggedTrainingBatches) {
  TempDir dir;
  Data d;  // 2 batches an epoch
  auto monitor = std::make_shared<DeviceStatsMonitor>();
  auto logger = std::make_shared<RecordingLogger>();
  logger->dir = dir.str();
  TrainerOptions o = quiet(dir, 5, {monitor});
  o.loggers = {logger};
  o.log_every_n_steps = 4;
  Regression m;
  cpu_reset_peak_memory_stats();  // earlier tests' peaks out of the way
  Trainer(o).fit(m, *d.train, d.val.get());

  for (const std::string hook : {"on_train_batch_start", "on_train_batch_end"}) {
    const std::string p = "DeviceStatsMonitor." + hook + "/";
    EXPECT_EQ(logger->steps_with(p + "process_rss_mib"), (std::vector<int64_t>{4, 8})) << hook;
    for (const auto& [step, rss] : logger->series(p + "process_rss_mib")) {
      EXPECT_GT(rss, 1.0) << hook << " at " << step;
      // Units and source: the peak read afterwards bounds every earlier reading (1 MiB of slack: the kernel
      // may fold a thread's cached page counts into its peak a little late).
      EXPECT_LE(rss, peak_rss_mib() + 1.0) << hook << " at " << step;
    }
    for (const char* percent : {"cpu_vm_percent", "cpu_swap_percent", "cpu_percent"}) {
      for (const auto& [step, value] : logger->series(p + percent)) {
        EXPECT_GE(value, 0.0) << p + percent;
        EXPECT_LE(value, 100.0) << p + percent;
      }
    }
    EXPECT_GT(monitor->last_metrics().at(p + "cpu_vm_percent"), 0.0);
  }
  EXPECT_EQ(logger->steps_with("DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent"), (std::vector<int64_t>{4, 8}));
  // On the CPU the device's memory is what kiln's tensors hold: at least the dataset's two tensors, the model's
  // weight and bias, and the batch's two (64 bytes each as the allocator rounds them; the gradients are set to
  // none before the batch's end); its peak since the fit began at most the peak read now; and no GPU figures.
  const auto& last = monitor->last_metrics();
  const std::string end = "DeviceStatsMonitor.on_train_batch_end/";
  EXPECT_GE(last.at(end + "allocated_bytes"), 6 * 64.0);
  EXPECT_LE(last.at(end + "allocated_bytes"), last.at(end + "peak_allocated_bytes"));
  EXPECT_LE(last.at(end + "peak_allocated_bytes"), static_cast<double>(cpu_memory_stats().peak_allocated_bytes));
  EXPECT_EQ(last.at(end + "ooms"), static_cast<double>(cpu_memory_stats().ooms));
  for (const auto& [name, value] : last) EXPECT_EQ(name.find("reserved"), std::string::npos) << name;
}

// Each training step keeps this thread busy for 60 ms: over the 4 steps between logs all CPUs together were
// at least that busy (other processes can only add to it). Linux counts in 10 ms ticks, so allow half. (On a
// machine of many CPUs this bound is low; the arithmetic, busy against idle, is pinned by the next test.)
TEST(DeviceStatsMonitor, CpuPercentSeesABusyStep) {
  struct Spinning : Regression {
    Tensor training_step(const data::Batch& b, int64_t i) override {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(60);
      volatile uint64_t spins = 0;
      while (std::chrono::steady_clock::now() < until) spins = spins + 1;
      return Regression::training_step(b, i);
    }
  };
  TempDir dir;
  Data d;
  auto monitor = std::make_shared<DeviceStatsMonitor>();
  TrainerOptions o = quiet(dir, 2, {monitor});
  o.log_every_n_steps = 4;
  Spinning m;
  Trainer(o).fit(m, *d.train);
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  ASSERT_EQ(monitor->last_metrics().count("DeviceStatsMonitor.on_train_batch_end/cpu_percent"), 1u);
  EXPECT_GE(monitor->last_metrics().at("DeviceStatsMonitor.on_train_batch_end/cpu_percent"), 0.5 * 100.0 / cpus);
}

TEST(DeviceStatsMonitor, CpuPercentIsTheBusyShareOfTheTicksBetweenTwoReadings) {
  HostStats before, after;
  before.cpu_busy = 100, before.cpu_total = 400;
  after.cpu_busy = 250, after.cpu_total = 600;
  EXPECT_DOUBLE_EQ(*cpu_percent_between(before, after), 75.0);
  EXPECT_FALSE(cpu_percent_between(after, after));            // no tick passed
  EXPECT_FALSE(cpu_percent_between(HostStats{}, after));      // no first reading
  HostStats back = after;                                       // a busy count that went back
  back.cpu_busy = 90, back.cpu_total = 700;
  EXPECT_FALSE(cpu_percent_between(before, back));
  back.cpu_busy = 450, back.cpu_total = 500;                    // idle that went back: more busy than time
  EXPECT_DOUBLE_EQ(*cpu_percent_between(before, back), 100.0);
  const HostStats now = read_host_stats();                    // Linux has every field
  EXPECT_TRUE(now.cpu_total && now.cpu_busy && now.vm_percent && now.swap_percent && now.rss_mib);
  EXPECT_LE(*now.cpu_busy, *now.cpu_total);
}

}  // namespace device_stats_tests
}  // namespace kiln::trainer::callbacks_testing
