// cuBLAS, opened the first time a GPU product needs it (dlopen) instead of linked into every program.
//
// Loading libcublas loads libcublasLt with it, and the two cost about 150 MB of resident memory at program
// start, before main, whether or not a GPU is ever used (the peak RSS of a bare process: 13.5 MB; with
// libcublasLt.so.13 preloaded: 165 MB). A CUDA build of kiln linked them, so each of its CPU runs paid that
// (the main job, the examples, every rank of a CPU DDP job). Now only a process that multiplies on a GPU
// (or asks `kiln info` for the version) opens them. cuDNN stays linked: its libcudnn.so.9 is a 130 kB loader
// that opens its own parts on demand already.
//
// The library is looked up by its soname (LD_LIBRARY_PATH, the loader's cache, the program's RUNPATH), then
// in the toolkit's folder kiln was built against. A machine without it gets an error naming both and the
// loader's reasons, at the first GPU product.
#pragma once

#include <cublas_v2.h>

namespace kiln::cuda {

// The cuBLAS entry points kiln calls (the _v2 ones, as cublas_v2.h maps them).
struct CublasApi {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetWorkspace_v2) set_workspace;
  decltype(&::cublasSetMathMode) set_math_mode;
  // The library's function (C++ also sees an inline overload taking a cudaDataType compute type).
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasGetProperty) get_property;
  decltype(&::cublasGetStatusString) status_string;
  decltype(&::cublasGetStatusName) status_name;
};

// The table, the library opened on first use; throws kiln::Error if it cannot be opened or lacks an entry.
const CublasApi& cublas();

}  // namespace kiln::cuda
