// DeviceStatsMonitor: the device's memory, and the host's CPU and memory, around training batches, sent to the
// loggers; Lightning's DeviceStatsMonitor with its keys, "DeviceStatsMonitor.on_train_batch_start/<stat>" and
// "DeviceStatsMonitor.on_train_batch_end/<stat>", logged at the global step when it reaches a multiple of
// log_every_n_steps (as ThroughputMonitor logs). Unlike Lightning's it does not read the stats around
// validation and test batches: the evaluation runs' memory shows in the peaks the next training batch reads.
//
// The host's stats (on the CPU; on a GPU too with cpu_stats), from Linux's /proc (a stat that cannot be read is
// left out):
//   cpu_percent       how busy all of the machine's CPUs were since the last logged batch's end (or since
//                     fit started), in % of their time: other processes' work counts too, as in psutil's.
//                     Linux counts CPU time in ticks of 10 ms, so it needs a few of them between logs
//   cpu_vm_percent    the machine's memory in use, in % (MemTotal less MemAvailable)
//   cpu_swap_percent  swap in use, in % (0 without swap)
//   process_rss_mib   this process's resident memory, MiB (not in Lightning)
// A GPU's stats, from kiln's caching allocator (cuda::memory_stats; Lightning's come from PyTorch's):
//   allocated_bytes, reserved_bytes, peak_allocated_bytes, peak_reserved_bytes, active_blocks, segments,
//   allocations, cache_hits, device_mallocs, device_frees, oom_retries, ooms
// On the CPU, what kiln's tensors hold (cpu_memory_stats; not in Lightning): allocated_bytes,
// peak_allocated_bytes (since the start or cpu_reset_peak_memory_stats), ooms (allocations refused).
// Only rank 0 has loggers; every rank keeps its own numbers in last_metrics().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct DeviceStatsMonitorOptions {
  // The host's stats beside a GPU's (on the CPU they are the device's, and always read).
  bool cpu_stats = false;
};

// The numbers one reading of Linux's /proc gives. Absent: the file or field could not be read.
struct HostStats {
  std::optional<uint64_t> cpu_busy, cpu_total;  // cumulative jiffies of all CPUs (/proc/stat's first line)
  std::optional<double> vm_percent, swap_percent, rss_mib;
};
HostStats read_host_stats();
// cpu_percent between two readings: the busy share of the jiffies that passed (absent if either lacks them or
// none passed).
std::optional<double> cpu_percent_between(const HostStats& before, const HostStats& after);

class DeviceStatsMonitor : public Callback {
 public:
  explicit DeviceStatsMonitor(DeviceStatsMonitorOptions options = {}) : options_(options) {}
  std::string state_key() const override { return "DeviceStatsMonitor"; }
  // Every stat as last read, under its logged key, on every rank (logged or not).
  const std::map<std::string, double>& last_metrics() const { return last_metrics_; }

  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                            int64_t batch_idx) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const data::Batch& batch,
                          int64_t batch_idx) override;

 private:
  // The stats now, under "DeviceStatsMonitor.<hook>/".
  std::map<std::string, double> read(Trainer& trainer, const std::string& hook);
  DeviceStatsMonitorOptions options_;
  HostStats previous_;                      // the last logged batch end's reading, for cpu_percent
  std::map<std::string, double> at_start_;  // this batch's start, when it may be logged
  int64_t last_logged_step_ = 0;
  std::map<std::string, double> last_metrics_;
};

}  // namespace kiln::trainer
