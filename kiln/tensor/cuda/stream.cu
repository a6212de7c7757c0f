// Streams and events (see stream.h).
#include <array>
#include <mutex>
#include <vector>

#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {
constexpr int kMaxDevices = 64;
// Per thread, per device: the current stream (nullptr = the default stream).
thread_local std::array<cudaStream_t, kMaxDevices> tls_current{};
}  // namespace

int current_device() {
  int d = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&d), "current_device");
  return d;
}

Stream Stream::create(int device, int priority) {
  static std::mutex mutex;
  static std::vector<cudaStream_t> made;  // kept so the handles stay valid for the program's life
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority), "Stream::create");
  std::lock_guard<std::mutex> lock(mutex);
  made.push_back(s);
  return Stream{s, device};
}

void Stream::synchronize() const {
  DeviceGuard guard(device);
  KILN_CUDA_CHECK(cudaStreamSynchronize(handle), "Stream::synchronize");
}

bool Stream::query() const {
  DeviceGuard guard(device);
  cudaError_t err = cudaStreamQuery(handle);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(err, "Stream::query");
  return true;
}

Stream current_stream(int device) {
  if (device < 0) device = current_device();
  KILN_CHECK(device < kMaxDevices, "current_stream: device ", device, " is beyond the ", kMaxDevices, " kiln supports");
  return Stream{tls_current[device], device};
}

void set_current_stream(Stream stream) {
  KILN_CHECK(stream.device >= 0 && stream.device < kMaxDevices, "set_current_stream: bad device ", stream.device);
  tls_current[stream.device] = stream.handle;
}

StreamGuard::StreamGuard(Stream stream) : previous_(current_stream(stream.device)) {
  previous_device_ = current_device();
  if (previous_device_ != stream.device) KILN_CUDA_CHECK(cudaSetDevice(stream.device), "StreamGuard");
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
  cudaSetDevice(previous_device_);
}

Event::Event(bool timing) {
  device_ = current_device();
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming), "Event");
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

void Event::record(Stream stream) {
  // CUDA records an event only on a stream of the device it was created on; the error it gives otherwise
  // ("invalid resource handle") would not say which.
  KILN_CHECK(stream.device == device_, "cuda::Event::record: the event was created on cuda:", device_,
             " but the stream is on cuda:", stream.device, "; create the event under that device's guard");
  DeviceGuard guard(stream.device);
  KILN_CUDA_CHECK(cudaEventRecord(event_, stream.handle), "Event::record");
}

void Event::block(Stream stream) const {
  DeviceGuard guard(stream.device);
  KILN_CUDA_CHECK(cudaStreamWaitEvent(stream.handle, event_, 0), "Event::block");
}

void Event::synchronize() const { KILN_CUDA_CHECK(cudaEventSynchronize(event_), "Event::synchronize"); }

bool Event::query() const {
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(err, "Event::query");
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_), "Event::elapsed_ms");
  return ms;
}

}  // namespace kiln::cuda
