// What kiln knows of CUDA devices. Usable in every build: without CUDA (or without a GPU or its driver)
// there are zero devices.
#pragma once

namespace kiln::cuda {

// The number of usable CUDA devices; 0 in a CPU-only build and on machines without a GPU or driver.
int device_count();
inline bool is_available() { return device_count() > 0; }
// Waits for all work on a device (the current one if -1) to finish.
void synchronize(int device = -1);

}  // namespace kiln::cuda
