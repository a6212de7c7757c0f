// Streams and events, for code that includes the CUDA runtime (kernels, .cu files, CUDA-aware programs).
//
// Every kiln kernel launches on the calling thread's current stream of its device: the device's default
// (legacy) stream until a StreamGuard or set_current_stream says otherwise. Work queued on one stream runs in
// order; work on two streams may overlap, and an Event orders them.
//
//   cuda::Stream side = cuda::Stream::create(0);
//   { cuda::StreamGuard g(side); y = x * 2; }      // queued on `side`
//   cuda::Event done; done.record(side);
//   done.block(cuda::current_stream(0));          // later work on the current stream waits for it
#pragma once

#include <cuda_runtime.h>

namespace kiln::cuda {

// A non-owning handle: the stream and the device it belongs to. Streams made by create() live until the
// program ends (they are few and cheap), so a handle never dangles.
struct Stream {
  cudaStream_t handle = nullptr;  // nullptr: the device's default stream
  int device = 0;

  // A new non-blocking stream on `device` (lower priority numbers run first; 0 is the default priority).
  static Stream create(int device, int priority = 0);
  // Blocks the host until all work queued on this stream has finished.
  void synchronize() const;
  // True when all work queued on this stream has finished.
  bool query() const;
  friend bool operator==(const Stream& a, const Stream& b) { return a.handle == b.handle && a.device == b.device; }
};

// The calling thread's current stream on `device` (-1: the current device).
Stream current_stream(int device = -1);
// Makes `stream` current on its device for the calling thread.
void set_current_stream(Stream stream);
// The device's default stream.
inline Stream default_stream(int device) { return Stream{nullptr, device}; }
// The current device (cudaGetDevice, checked).
int current_device();

// Makes `stream` (and its device) current for the guard's lifetime.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  int previous_device_ = 0;
};

// A CUDA event: a marker in a stream that other streams and the host can wait on, and a timer.
class Event {
 public:
  // timing: whether elapsed_ms works (events without timing are cheaper to record and wait on).
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(Stream stream);
  void record() { record(current_stream()); }
  // Later work queued on `stream` waits until this event has happened (the host does not wait).
  void block(Stream stream) const;
  void synchronize() const;  // the host waits
  bool query() const;        // happened?
  // Milliseconds between this event and `end`, both recorded and finished, both made with timing.
  float elapsed_ms(const Event& end) const;
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

}  // namespace kiln::cuda
