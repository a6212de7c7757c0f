// The "nccl" process group: every op on CUDA tensors against a float64 (or exact integer) reference that every
// rank computes from the same deterministic inputs, every dtype, the argument errors and the timeout path.
//
// Each test runs its ranks as forked processes (multiprocess.h), one GPU per rank. CUDA must not be initialized
// before a fork (the children could not use it), so the test process itself never touches CUDA: it counts the
// GPUs in a forked child too. A world needs as many GPUs as ranks (NCCL refuses two ranks on one GPU): on one
// GPU only worlds of one run. Without a GPU (or without NCCL in the build) the GPU tests skip.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "distributed/collective_checks.h"
#include "distributed/multiprocess.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/factories.h"
#if KILN_WITH_CUDA
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#endif

namespace kiln::distributed {
namespace {

using kiln::test::rank_check;
using kiln::test::run_ranks;

bool nccl_built() {
  const auto names = backends();
  return std::find(names.begin(), names.end(), "nccl") != names.end();
}

// The number of CUDA devices, asked in a child process so that this one stays free of CUDA.
int gpu_count() {
  static const int count = [] {
    const pid_t pid = fork();
    if (pid == 0) _exit(std::min(cuda::device_count(), 100));
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
    return WEXITSTATUS(status);
  }();
  return count;
}

// Rank r's GPU. worlds() keeps every world within the GPUs there are, so this is r itself; the modulo only keeps
// the mapping defined.
int device_of(int rank) { return rank % std::max(gpu_count(), 1); }

// The worlds this machine can run: 1, and as many ranks as GPUs (up to 4) when there are several.
std::vector<int> worlds() {
  std::vector<int> w{1};
  if (gpu_count() >= 2) w.push_back(std::min(gpu_count(), 4));
  return w;
}

std::string store_path(const std::string& name) { return kiln::test::fresh_temp_path("nccl_" + name); }

std::shared_ptr<ProcessGroup> make_group(const std::string& path, int rank, int world, ProcessGroupOptions o = {}) {
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
  if (o.timeout == kDefaultTimeout) o.timeout = std::chrono::seconds(30);
  return new_group("nccl", store, rank, world, o);
}

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!nccl_built()) GTEST_SKIP() << "this build has no nccl backend";
    if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  // Runs body(rank) in each of `world` ranks (rank r on cuda:device_of(r)) and expects every rank to succeed.
  // Each rank makes its GPU current before its first op: an op without a tensor (barrier) runs on the current
  // device, which would be cuda:0 in every rank, and NCCL refuses two ranks on one GPU.
  void run(int world, const std::function<void(int)>& body) {
    kiln::test::expect_all_ok(run_ranks(
        world,
        [&](int rank) {
#if KILN_WITH_CUDA
          cuda::DeviceGuard guard(device_of(rank));
#endif
          body(rank);
        },
        std::chrono::seconds(120)));
  }
};

using kiln::test::expect_error;

const std::vector<DType> kDTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool};

// Rank r's input, as float64 values exactly representable in dt: integers small enough that no sum or product
// over 4 ranks overflows (uint8 products stay in {1, 2}), floats near 1 for products.
std::vector<double> input_values(DType dt, int64_t count, int rank, ReduceOp op) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const double s = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank);
    if (dt == kBool) v[i] = ((i + rank) % 3) == 0;
    else if (op == ReduceOp::Product) v[i] = is_floating(dt) ? 1 + 0.05 * s : dt == kUInt8 ? (i + rank) % 2 + 1 : (i + rank) % 3 - 1;
    else if (is_floating(dt)) v[i] = s * (1 + rank % 3);
    else if (dt == kUInt8) v[i] = static_cast<double>((i * 7 + rank * 13) % 23);
    else v[i] = static_cast<double>((i * 7 + rank * 13) % 11) - 5;
  }
  // Rounded to dt: the reference starts from exactly what the ranks send.
  return tensor(v, {count}, TensorOptions(dt)).to_vector<double>();
}

Tensor on_gpu(const std::vector<double>& v, DType dt, int device) {
  return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(dt)).to(Device::cuda(device));
}

// The reduction over ranks of input_values(...), in float64 (bool: sum and max are "or", product and min "and").
std::vector<double> reference(DType dt, int64_t count, int world, ReduceOp op) {
  std::vector<double> ref = input_values(dt, count, 0, op);
  for (int r = 1; r < world; ++r) {
    const std::vector<double> x = input_values(dt, count, r, op);
    for (int64_t i = 0; i < count; ++i) {
      if (dt == kBool) ref[i] = (op == ReduceOp::Sum || op == ReduceOp::Max) ? (ref[i] || x[i]) : (ref[i] && x[i]);
      else if (op == ReduceOp::Sum || op == ReduceOp::Avg) ref[i] += x[i];
      else if (op == ReduceOp::Product) ref[i] *= x[i];
      else if (op == ReduceOp::Min) ref[i] = std::min(ref[i], x[i]);
      else ref[i] = std::max(ref[i], x[i]);
    }
  }
  if (op == ReduceOp::Avg) for (double& x : ref) x /= world;
  return ref;
}

// got == ref within the dtype's rounding (exactly for integers and bool).
void check_close(const Tensor& got_gpu, const std::vector<double>& ref, DType dt, int world, const std::string& what) {
  const std::vector<double> got = got_gpu.cpu().to_vector<double>();
  rank_check(got.size() == ref.size(), what + ": wrong element count");
  const double eps = dt == kFloat64 ? 1e-13 : dt == kFloat32 ? 2e-6 : dt == kBFloat16 ? 1.6e-2 : dt == kFloat16 ? 2e-3 : 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = eps * (world + 1) * std::max(1.0, std::abs(ref[i]) * world);
    if (!(std::abs(got[i] - ref[i]) <= tol))
      rank_check(false, what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", reference " +
                            std::to_string(ref[i]));
  }
}

std::string describe(const char* op, DType dt, int world, ReduceOp red = ReduceOp::Sum) {
  return std::string(op) + " " + reduce_op_name(red) + " of " + dtype_name(dt) + " in a world of " + std::to_string(world);
}

// Without a GPU: the group is made without touching CUDA, and CPU tensors are refused at the call.
TEST(ProcessGroupNCCL, RefusesCpuTensors) {
  if (!nccl_built()) GTEST_SKIP() << "this build has no nccl backend";
  auto pg = make_group(store_path("cpu"), 0, 1);
  EXPECT_EQ(pg->backend(), "nccl");
  Tensor t = zeros({3});
  for (const auto& [op, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"allreduce (nccl)", [&] { pg->allreduce(t); }},
           {"broadcast (nccl)", [&] { pg->broadcast(t, 0); }},
           {"reduce (nccl)", [&] { pg->reduce(t, 0); }},
           {"allgather (nccl)", [&] { pg->allgather({t}, t); }},
           {"reduce_scatter (nccl)", [&] { pg->reduce_scatter(t, {t}); }},
           {"send (nccl)", [&] { pg->send(t, 0); }},
           {"recv (nccl)", [&] { pg->recv(t, 0); }}}) {
    try {
      call();
      ADD_FAILURE() << op << ": a CPU tensor was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(op + ": the nccl backend needs CUDA tensors, got one on cpu"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(NcclTest, AllreduceEveryDTypeAndOp) {
  for (int world : worlds()) {
    const std::string path = store_path("allreduce");
    run(world, [&](int rank) {
      auto pg = make_group(path, rank, world);
      for (DType dt : kDTypes) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
          if (op == ReduceOp::Avg && !is_floating(dt)) continue;
          const int64_t count = 1029;  // not a multiple of anything NCCL splits by
          Tensor t = on_gpu(input_values(dt, count, rank, op), dt, device_of(rank));
          pg->allreduce(t, op)->wait();
          check_close(t, reference(dt, count, world, op), dt, world, describe("allreduce", dt, world, op));
        }
      }
      expect_error([&] { pg->allreduce(zeros({4}, TensorOptions(kInt32).device(Device::cuda(device_of(rank)))), ReduceOp::Avg); },
                   "avg needs a floating dtype");
    });
  }
}

TEST_F(NcclTest, BroadcastAndReduceFromEveryRoot) {
  for (int world : worlds()) {
    const std::string path = store_path("rooted");
    run(world, [&](int rank) {
      auto pg = make_group(path, rank, world);
      for (DType dt : kDTypes) {
        for (int root = 0; root < world; ++root) {
          const std::vector<double> mine = input_values(dt, 300, rank, ReduceOp::Sum);
          Tensor t = on_gpu(mine, dt, device_of(rank));
          pg->broadcast(t, root)->wait();
          check_close(t, input_values(dt, 300, root, ReduceOp::Sum), dt, world, describe("broadcast", dt, world));
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
            Tensor u = on_gpu(input_values(dt, 300, rank, op), dt, device_of(rank));
            pg->reduce(u, root, op)->wait();
            // Only root gets the reduction; the others keep their input.
            check_close(u, rank == root ? reference(dt, 300, world, op) : input_values(dt, 300, rank, op), dt, world,
                        describe("reduce", dt, world, op) + " to rank " + std::to_string(root));
          }
        }
      }
    });
  }
}

// Outputs that are rows of one buffer (NCCL writes them directly) and separate tensors (staged, then copied).
TEST_F(NcclTest, AllgatherAndReduceScatterDirectAndStaged) {
  for (int world : worlds()) {
    const std::string path = store_path("gather");
    run(world, [&](int rank) {
      auto pg = make_group(path, rank, world);
      const TensorOptions gpu = TensorOptions(kFloat32).device(Device::cuda(device_of(rank)));
      for (DType dt : kDTypes) {
        // Staged first: the group's first op then copies out of a staging buffer right after NCCL connects,
        // which must wait for NCCL's kernels to be queued (the communicator is nonblocking).
        for (bool direct : {false, true}) {
          const std::string how = direct ? " (one buffer)" : " (separate tensors)";
          Tensor input = on_gpu(input_values(dt, 77, rank, ReduceOp::Sum), dt, device_of(rank));
          Tensor rows = empty({world, 77}, gpu.dtype(dt));
          std::vector<Tensor> outputs;
          for (int r = 0; r < world; ++r) outputs.push_back(direct ? rows.select(0, r) : empty({77}, gpu.dtype(dt)));
          pg->allgather(outputs, input)->wait();
          for (int r = 0; r < world; ++r)
            check_close(outputs[r], input_values(dt, 77, r, ReduceOp::Sum), dt, world, describe("allgather", dt, world) + how);

          // Rank r's inputs[j] is input_values(dt, 77, r * world + j): output j is their reduction over r.
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
            std::vector<Tensor> inputs;
            Tensor in_rows = empty({world, 77}, gpu.dtype(dt));
            for (int j = 0; j < world; ++j) {
              Tensor src = on_gpu(input_values(dt, 77, rank * world + j, op), dt, device_of(rank));
              if (direct) in_rows.select(0, j).copy_(src);
              inputs.push_back(direct ? in_rows.select(0, j) : src);
            }
            Tensor output = empty({77}, gpu.dtype(dt));
            pg->reduce_scatter(output, inputs, op)->wait();
            std::vector<double> ref = input_values(dt, 77, rank, op);
            for (int r = 1; r < world; ++r) {
              const std::vector<double> x = input_values(dt, 77, r * world + rank, op);
              for (size_t i = 0; i < ref.size(); ++i) {
                if (dt == kBool) ref[i] = ref[i] || x[i];
                else ref[i] = op == ReduceOp::Sum ? ref[i] + x[i] : std::max(ref[i], x[i]);
              }
            }
            check_close(output, ref, dt, world, describe("reduce_scatter", dt, world, op) + how);
          }
        }
      }
    });
  }
}

TEST_F(NcclTest, BarrierSendRecvAndArgumentErrors) {
  for (int world : worlds()) {
    const std::string path = store_path("p2p");
    run(world, [&](int rank) {
      auto pg = make_group(path, rank, world);
      const TensorOptions gpu = TensorOptions(kFloat32).device(Device::cuda(device_of(rank)));
      pg->barrier()->wait();
      // A ring: even ranks send first, odd ranks receive first, so no two ranks wait on each other's send.
      if (world > 1) {
        for (DType dt : kDTypes) {
          const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
          Tensor out = on_gpu(input_values(dt, 500, rank, ReduceOp::Sum), dt, device_of(rank));
          Tensor in = empty({500}, gpu.dtype(dt));
          if (rank % 2 == 0) pg->send(out, next)->wait(), pg->recv(in, prev)->wait();
          else pg->recv(in, prev)->wait(), pg->send(out, next)->wait();
          check_close(in, input_values(dt, 500, prev, ReduceOp::Sum), dt, world, describe("send/recv", dt, world));
        }
      }
      pg->barrier()->wait();
      Tensor t = zeros({4}, gpu);
      expect_error([&] { pg->send(t, (rank + 1) % world, 3); }, "NCCL has no tags");
      expect_error([&] { pg->recv(t, (rank + 1) % world, 3); }, "NCCL has no tags");
      expect_error([&] { pg->allreduce(zeros({4, 3}, gpu).t()); }, "needs contiguous tensors");
      expect_error([&] { pg->broadcast(t, world); }, "is not in a group of size");
      expect_error([&] { pg->send(t, rank); }, "cannot send to itself");
      expect_error([&] { pg->recv(t, rank); }, "cannot receive from itself");
      expect_error([&] { pg->allgather({t}, zeros({5}, gpu)); }, world == 1 ? "but expected 5" : "output tensors");
    });
  }
}

#if KILN_WITH_CUDA
// An op that cannot finish (the caller's stream is held by a host callback longer than the group's timeout):
// a bounded wait() says it is still running, the full wait() aborts the communicator and names op, rank and
// sequence number, and the group refuses later ops. The op that finished before stays finished, through the
// abort and the group's destruction.
TEST_F(NcclTest, TimeoutAbortsTheCommunicator) {
  const std::string path = store_path("timeout");
  run(1, [&](int rank) {
    ProcessGroupOptions o;
    o.timeout = std::chrono::milliseconds(500);
    auto pg = make_group(path, rank, 1, o);
    Tensor t = zeros({16}, TensorOptions(kFloat32).device(Device::cuda(device_of(rank))));
    auto finished = pg->allreduce(t);  // seq 0: makes the communicator
    finished->wait();
    const cudaStream_t caller = cuda::current_stream(device_of(rank)).handle;
    rank_check(cudaLaunchHostFunc(caller, [](void*) { std::this_thread::sleep_for(std::chrono::seconds(2)); },
                                  nullptr) == cudaSuccess,
               "cudaLaunchHostFunc");
    auto work = pg->allreduce(t);  // seq 1
    rank_check(!work->is_completed(), "the held op reports completed");
    expect_error([&] { work->wait(std::chrono::milliseconds(50)); }, "is still running after 50 ms");
    expect_error([&] { work->wait(); }, "allreduce #1: rank 0: not done after 500 ms");
    expect_error([&] { pg->allreduce(t); }, "the nccl group failed earlier");
    finished->wait();  // done before the abort: no error
    pg.reset();
    finished->wait();
    rank_check(finished->is_completed(), "a finished op reports not completed after the group was destroyed");
  });
}

// A rank that never joins: the first op (which makes the communicator) waits for it at most the group's
// timeout, then fails naming what it waited for, instead of blocking inside NCCL for good.
TEST_F(NcclTest, ARankThatNeverJoinsFailsTheFirstOpWithinTheTimeout) {
  const std::string path = store_path("never_joins");
  run(1, [&](int rank) {
    ProcessGroupOptions o;
    o.timeout = std::chrono::milliseconds(1500);
    auto pg = make_group(path, 0, 2, o);  // rank 1 of 2 is never started
    Tensor t = zeros({16}, TensorOptions(kFloat32).device(Device::cuda(device_of(0))));
    const auto start = std::chrono::steady_clock::now();
    expect_error([&] { pg->allreduce(t)->wait(); }, "not every rank of the 2 joined within 1500 ms");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rank_check(s < 10, "the failure took " + std::to_string(s) + " s");
    expect_error([&] { pg->allreduce(t); }, "the nccl group failed earlier");  // no second attempt
  });
}
#endif

}  // namespace
}  // namespace kiln::distributed
