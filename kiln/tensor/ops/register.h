// The functions that install kiln's built-in kernels into the dispatch table, one per op family and device.
// dispatch.cpp calls them, in this order, the first time the table is used.
#pragma once

namespace kiln::detail {

void register_copy_cpu_kernels();
void register_random_cpu_kernels();
void register_unary_cpu_kernels();
void register_binary_cpu_kernels();
void register_activation_cpu_kernels();
void register_reduce_cpu_kernels();
void register_softmax_cpu_kernels();
void register_along_dim_cpu_kernels();
void register_linalg_cpu_kernels();
void register_decomposition_cpu_kernels();
void register_indexing_cpu_kernels();
void register_conv_cpu_kernels();
void register_adaptive_pool_cpu_kernels();
void register_pad_cpu_kernels();
void register_optim_cpu_kernels();
void register_cross_entropy_cpu_kernels();
void register_ctc_cpu_kernels();
void register_embedding_bag_cpu_kernels();
void register_grid_sample_cpu_kernels();
void register_resize_taps_cpu_kernels();
void register_normalization_cpu_kernels();

#ifdef KILN_WITH_CUDA
void register_cuda_kernels();  // kiln/tensor/cuda: device memory, copies, and the CUDA kernels so far
#endif

}  // namespace kiln::detail
