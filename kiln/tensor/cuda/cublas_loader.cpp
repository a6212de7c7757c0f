// Opens cuBLAS on first use and resolves the entry points kiln calls (see cublas_loader.h for why).
#include "kiln/tensor/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "kiln/tensor/error.h"

#ifndef KILN_CUDA_LIBRARY_DIR
#define KILN_CUDA_LIBRARY_DIR ""
#endif

namespace kiln::cuda {

namespace {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
// The soname of the cuBLAS these headers belong to: libcublas.so.13 for CUDA 13.
constexpr const char* kSoname = "libcublas.so." KILN_STR(CUBLAS_VER_MAJOR);

void* open_library() {
  std::string why;
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  why = dlerror();
  const std::string dir = KILN_CUDA_LIBRARY_DIR;
  if (!dir.empty()) {
    const std::string path = dir + "/" + kSoname;
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    why += "; " + std::string(dlerror());
  }
  detail::throw_error(detail::concat("cuBLAS: cannot open ", kSoname, (dir.empty() ? "" : " (nor in " + dir + ")"),
                                     ", which matrix products on the GPU need: ", why,
                                     ". Install the CUDA toolkit's cuBLAS or put its folder in LD_LIBRARY_PATH"));
}

template <typename F>
void resolve(void* lib, F& slot, const char* name) {
  dlerror();
  void* p = dlsym(lib, name);
  KILN_CHECK(p != nullptr, "cuBLAS: ", kSoname, " has no ", name, " (", dlerror(), "): a cuBLAS older than the ",
             "headers kiln was built with?");
  slot = reinterpret_cast<F>(p);
}

CublasApi load() {
  void* lib = open_library();
  CublasApi api{};
  try {
    resolve(lib, api.create, "cublasCreate_v2");
    resolve(lib, api.set_stream, "cublasSetStream_v2");
    resolve(lib, api.set_workspace, "cublasSetWorkspace_v2");
    resolve(lib, api.set_math_mode, "cublasSetMathMode");
    resolve(lib, api.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
    resolve(lib, api.get_property, "cublasGetProperty");
    resolve(lib, api.status_string, "cublasGetStatusString");
    resolve(lib, api.status_name, "cublasGetStatusName");
  } catch (...) {
    dlclose(lib);
    throw;
  }
  return api;  // the library stays open for the process's life
}

}  // namespace

const CublasApi& cublas() {
  // A mutex and a flag, not std::call_once: libstdc++'s call_once over pthread_once is not reliable when the
  // function throws (GCC bug 66146), and a failed load should be tried again on the next call.
  static std::mutex mutex;
  static CublasApi api;
  static std::atomic<bool> loaded{false};
  if (loaded.load(std::memory_order_acquire)) return api;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded.load(std::memory_order_relaxed)) {
    api = load();
    loaded.store(true, std::memory_order_release);
  }
  return api;
}

}  // namespace kiln::cuda
