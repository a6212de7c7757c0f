// The checks every process-group backend must pass, on a ProcessGroup& whatever moves the bytes: forked ranks
// (process_group_test.cpp, collectives_test.cpp) and mpirun's ranks (mpi_process_group_test.cpp) run the same
// ones. Each rank computes the reference itself from the deterministic inputs of every rank (float64 for
// floats, exact for integers); results are also compared bit for bit across ranks (check_same_bits). A failed
// check throws (rank_check), so it reaches the parent from a forked child as well as from an mpirun rank.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "distributed/multiprocess.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/factories.h"

namespace kiln::test {

using distributed::ProcessGroup;
using distributed::ReduceOp;

// Rank r's input for a reduction: integers small enough that no sum or product over 8 ranks overflows, floats
// near 1 for products (so a product of 8 stays well conditioned).
inline Tensor input_for(DType dt, int64_t count, int rank, ReduceOp op) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const double s = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank);
    if (dt == kBool) v[i] = ((i + rank) % 3) == 0;
    else if (op == ReduceOp::Product) v[i] = is_floating(dt) ? 1 + 0.05 * s : static_cast<double>((i + rank) % 3) - 1;
    else if (is_floating(dt)) v[i] = s * (1 + rank % 3);
    else if (dt == kUInt8) v[i] = static_cast<double>((i * 7 + rank * 13) % 23);
    else v[i] = static_cast<double>((i * 7 + rank * 13) % 11) - 5;
  }
  return tensor(v, {count}, TensorOptions(dt));
}

// The rounding a result of dtype dt may carry per combine (0: exact).
inline double dtype_eps(DType dt) {
  return dt == kFloat64 ? 1e-13 : dt == kFloat32 ? 2e-6 : dt == kBFloat16 ? 3e-2 : dt == kFloat16 ? 4e-3 : 0;
}

// Checks every rank holds the same bytes in t (gathered with allgather over the same group).
inline void check_same_bits(ProcessGroup& pg, const Tensor& t, const std::string& what) {
  if (t.nbytes() == 0) return;
  Tensor bytes = from_buffer(t.raw_data_ptr(), {static_cast<int64_t>(t.nbytes())}, kUInt8);
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(empty({static_cast<int64_t>(t.nbytes())}, kUInt8));
  pg.allgather(all, bytes)->wait();
  for (int r = 0; r < pg.size(); ++r)
    rank_check(std::memcmp(all[r].raw_data_ptr(), t.raw_data_ptr(), t.nbytes()) == 0,
               what + ": rank " + std::to_string(r) + "'s result bits differ from rank " + std::to_string(pg.rank()) + "'s");
}

// Allreduce of input_for(...) against the reference, then the same-bits check.
inline void check_allreduce(ProcessGroup& pg, DType dt, int64_t count, ReduceOp op) {
  const int world = pg.size();
  const std::string what = pg.backend() + " allreduce " + reduce_op_name(op) + " of " + std::to_string(count) + " " +
                           dtype_name(dt) + " in a world of " + std::to_string(world);
  Tensor t = input_for(dt, count, pg.rank(), op);
  pg.allreduce(t, op)->wait();
  const std::vector<double> got = t.to_vector<double>();
  std::vector<std::vector<double>> in;
  for (int r = 0; r < world; ++r) in.push_back(input_for(dt, count, r, op).to_vector<double>());
  const double eps = dtype_eps(dt);
  for (int64_t i = 0; i < count; ++i) {
    double ref = in[0][i], scale = std::abs(in[0][i]);
    for (int r = 1; r < world; ++r) {
      const double x = in[r][i];
      scale += std::abs(x);
      if (dt == kBool) ref = (op == ReduceOp::Sum || op == ReduceOp::Max) ? (ref || x) : (ref && x);
      else if (op == ReduceOp::Sum || op == ReduceOp::Avg) ref += x;
      else if (op == ReduceOp::Product) ref *= x;
      else if (op == ReduceOp::Min) ref = std::min(ref, x);
      else ref = std::max(ref, x);
    }
    if (op == ReduceOp::Avg) ref /= world, scale /= world;
    if (dt == kUInt8) ref = std::fmod(ref, 256.0);
    if (op == ReduceOp::Product) scale = std::abs(ref) * world;
    const double tol = eps * (world + 1) * (1 + scale);
    if (!(std::abs(got[i] - ref) <= tol))  // (the message is built only on failure: a million elements pass)
      rank_check(false, what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", reference " +
                            std::to_string(ref));
  }
  check_same_bits(pg, t, what);
}

// Every op on the counts around the world size and a few larger ones, the four core dtypes; the largest count
// only for sum and max (keeps the suites short).
inline void check_allreduce_sweep(ProcessGroup& pg, int64_t largest = 4099) {
  const int64_t n = pg.size();
  for (int64_t count : {int64_t{0}, int64_t{1}, n - 1, n + 1, int64_t{97}, largest})
    for (DType dt : {kFloat32, kFloat64, kInt32, kInt64})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
        if (op == ReduceOp::Avg && !is_floating(dt)) continue;
        if (count == largest && op != ReduceOp::Sum && op != ReduceOp::Max) continue;
        check_allreduce(pg, dt, count, op);
      }
}

// The narrow dtypes: bytes (wrapping sums), bools (sum = or, product = and), and, where the backend has them,
// 16-bit floats.
inline void check_allreduce_narrow_dtypes(ProcessGroup& pg, bool sixteen_bit_floats) {
  if (sixteen_bit_floats) {
    check_allreduce(pg, kFloat16, 1000, ReduceOp::Sum);
    check_allreduce(pg, kBFloat16, 1000, ReduceOp::Avg);
  }
  check_allreduce(pg, kUInt8, 1000, ReduceOp::Sum);  // wraps modulo 256
  check_allreduce(pg, kUInt8, 1000, ReduceOp::Max);
  check_allreduce(pg, kBool, 1000, ReduceOp::Sum);      // or
  check_allreduce(pg, kBool, 1000, ReduceOp::Product);  // and
}

// broadcast, reduce, allgather, reduce_scatter, barrier and send/recv (two tags, a ring) against references.
inline void check_other_collectives(ProcessGroup& pg) {
  const int world = pg.size(), rank = pg.rank();
  const std::string w = " (" + pg.backend() + ", world " + std::to_string(world) + ", rank " + std::to_string(rank) + ")";
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{1000}}) {
    for (int root = 0; root < world; root += 3) {
      Tensor t = input_for(kFloat32, count, rank, ReduceOp::Sum);
      pg.broadcast(t, root)->wait();
      rank_check(t.to_vector<double>() == input_for(kFloat32, count, root, ReduceOp::Sum).to_vector<double>(),
                 "broadcast from " + std::to_string(root) + w);
      Tensor x = input_for(kInt64, count, rank, ReduceOp::Sum), before = x.clone();
      pg.reduce(x, root, ReduceOp::Sum)->wait();
      std::vector<double> ref(count, 0.0);
      for (int r = 0; r < world; ++r) {
        auto v = input_for(kInt64, count, r, ReduceOp::Sum).to_vector<double>();
        for (int64_t i = 0; i < count; ++i) ref[i] += v[i];
      }
      rank_check(x.to_vector<double>() == (rank == root ? ref : before.to_vector<double>()),
                 "reduce to " + std::to_string(root) + w);
    }
    std::vector<Tensor> outs;
    for (int r = 0; r < world; ++r) outs.push_back(empty({count}, kInt32));
    pg.allgather(outs, input_for(kInt32, count, rank, ReduceOp::Sum))->wait();
    for (int r = 0; r < world; ++r)
      rank_check(outs[r].to_vector<double>() == input_for(kInt32, count, r, ReduceOp::Sum).to_vector<double>(),
                 "allgather block " + std::to_string(r) + w);
    // reduce_scatter: rank r's inputs[j] = input_for(count, r * world + j); output = max over r of block rank.
    std::vector<Tensor> ins;
    for (int j = 0; j < world; ++j) ins.push_back(input_for(kFloat64, count, rank * world + j, ReduceOp::Max));
    Tensor out = empty({count}, kFloat64);
    pg.reduce_scatter(out, ins, ReduceOp::Max)->wait();
    std::vector<double> ref(count, -1e300);
    for (int r = 0; r < world; ++r) {
      auto v = input_for(kFloat64, count, r * world + rank, ReduceOp::Max).to_vector<double>();
      for (int64_t i = 0; i < count; ++i) ref[i] = std::max(ref[i], v[i]);
    }
    rank_check(out.to_vector<double>() == ref, "reduce_scatter max" + w);
  }
  pg.barrier()->wait();
  // send/recv around a ring with two tags, both sends issued before the recvs.
  if (world > 1) {
    const int right = (rank + 1) % world, left = (rank + world - 1) % world;
    Tensor mine = full({100}, static_cast<double>(rank), kFloat32), got = empty({100}, kFloat32);
    Tensor mine2 = full({7}, static_cast<double>(10 * rank), kInt64), got2 = empty({7}, kInt64);
    auto s1 = pg.send(mine, right, 1);
    auto s2 = pg.send(mine2, right, 2);
    pg.recv(got, left, 1)->wait();
    pg.recv(got2, left, 2)->wait();
    s1->wait(), s2->wait();
    rank_check(got.to_vector<double>() == std::vector<double>(100, left), "recv tag 1" + w);
    rank_check(got2.to_vector<double>() == std::vector<double>(7, 10.0 * left), "recv tag 2" + w);
    // Receives issued before the sends, nothing waited for in between (PyTorch's irecv then isend): a recv
    // must not hold up the send queued behind it, which its peer's recv is waiting for.
    Tensor got3 = empty({100}, kFloat32);
    auto r3 = pg.recv(got3, left, 3);
    auto s3 = pg.send(mine, right, 3);
    r3->wait(), s3->wait();
    rank_check(got3.to_vector<double>() == std::vector<double>(100, left), "recv before send" + w);
    // Two recvs from one peer with different tags, the second waited for first, and the message the first
    // waits for sent only after that: each tag's recv completes on its own.
    Tensor got4 = empty({100}, kFloat32), got5 = empty({100}, kFloat32);
    auto r4 = pg.recv(got4, left, 4);
    auto r5 = pg.recv(got5, left, 5);
    auto s5 = pg.send(mine, right, 5);
    r5->wait();
    auto s4 = pg.send(mine, right, 4);
    r4->wait(), s4->wait(), s5->wait();
    rank_check(got4.to_vector<double>() == std::vector<double>(100, left) &&
                   got5.to_vector<double>() == std::vector<double>(100, left),
               "recvs of two tags out of order" + w);
    // A ring of sends issued before the recvs, each far larger than a socket's buffers: every rank's send
    // needs its right neighbour to read while that neighbour's own send is still going.
    Tensor big = arange(0, 3 << 20, 1, kFloat32).add_(static_cast<double>(rank));
    Tensor big_got = empty({3 << 20}, kFloat32);
    auto s6 = pg.send(big, right, 6);
    auto r6 = pg.recv(big_got, left, 6);
    s6->wait(), r6->wait();
    rank_check(big_got.to_vector<double>() ==
                   arange(0, 3 << 20, 1, kFloat32).add_(static_cast<double>(left)).to_vector<double>(),
               "a ring of large sends issued first" + w);
  }
  pg.barrier()->wait();
}

// Two groups of the same ranks with ops issued back to back without waiting, interleaved: each group keeps its
// own order (sums and maxima of known inputs, exact in float64).
inline void check_two_groups_interleaved(ProcessGroup& a, ProcessGroup& b) {
  const int rank = a.rank(), world = a.size();
  std::vector<Tensor> ta, tb;
  std::vector<std::shared_ptr<distributed::Work>> works;
  for (int i = 0; i < 6; ++i) {
    ta.push_back(full({300 + i}, static_cast<double>(rank + i), kFloat64));
    tb.push_back(full({5000 + i}, static_cast<double>(2 * rank - i), kFloat64));
    works.push_back(a.allreduce(ta.back()));
    works.push_back(b.allreduce(tb.back(), ReduceOp::Max));
  }
  for (auto& w : works) w->wait();
  for (int i = 0; i < 6; ++i) {
    const double sum = world * (world - 1) / 2.0 + world * i, max = 2.0 * (world - 1) - i;
    rank_check(ta[i].to_vector<double>() == std::vector<double>(300 + i, sum), "group a, op " + std::to_string(i));
    rank_check(tb[i].to_vector<double>() == std::vector<double>(5000 + i, max), "group b, op " + std::to_string(i));
  }
}

// Throws unless f throws a kiln::Error whose message contains `part`.
inline void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
  } catch (const Error& e) {
    rank_check(std::string(e.what()).find(part) != std::string::npos, std::string("unexpected error: ") + e.what());
    return;
  }
  rank_check(false, "no error (expected one with '" + part + "')");
}

// A world of one: every collective is the identity (avg divides by 1), and bad arguments fail at the call.
inline void check_world_of_one_and_argument_errors(ProcessGroup& pg) {
  rank_check(pg.rank() == 0 && pg.size() == 1, "rank and size");
  Tensor t = tensor(std::vector<double>{1.5, -2, 3}, {3}, TensorOptions(kFloat32));
  pg.allreduce(t, ReduceOp::Avg)->wait();
  pg.broadcast(t, 0)->wait();
  pg.barrier()->wait();
  rank_check(t.to_vector<double>() == std::vector<double>{1.5, -2, 3}, "identity");
  expect_error([&] { pg.allreduce(zeros({4}, kInt32), ReduceOp::Avg); }, "avg needs a floating dtype");
  expect_error([&] { pg.allreduce(zeros({4, 3}).t()); }, "must be contiguous");
  expect_error([&] { pg.broadcast(t, 1); }, "rank 1 is not in a group of size 1");
  expect_error([&] { pg.reduce(t, -1); }, "reduce: rank -1 is not in a group of size 1");
  expect_error([&] { pg.send(t, 1); }, "send: rank 1 is not in a group of size 1");
  expect_error([&] { pg.send(t, 0); }, "send: rank 0 cannot send to itself");
  expect_error([&] { pg.recv(t, 0); }, "recv: rank 0 cannot receive from itself");
  expect_error([&] { pg.allgather({t, t}, t); }, "expected 1 output tensors");
  expect_error([&] { pg.reduce_scatter(t, {zeros({4})}); }, "input 0 has 4 float32 but the output has 3 float32");
}

// A fixed series of ops on deterministic inputs; returns every result, for comparing two backends fed the
// same inputs (compare_results).
inline std::vector<Tensor> collective_results(ProcessGroup& pg) {
  const int world = pg.size(), rank = pg.rank();
  std::vector<Tensor> results;
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kUInt8}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
      if (op == ReduceOp::Avg && !is_floating(dt)) continue;
      Tensor t = input_for(dt, 777, rank, op);
      pg.allreduce(t, op)->wait();
      results.push_back(t);
      Tensor r = input_for(dt, 50, rank + 7, op);
      pg.reduce(r, world - 1, op)->wait();
      results.push_back(r);
    }
    std::vector<Tensor> ins;
    for (int j = 0; j < world; ++j) ins.push_back(input_for(dt, 300, rank * world + j, ReduceOp::Sum));
    Tensor out = empty({300}, TensorOptions(dt));
    pg.reduce_scatter(out, ins, ReduceOp::Sum)->wait();
    results.push_back(out);
    std::vector<Tensor> outs;
    for (int j = 0; j < world; ++j) outs.push_back(empty({30}, TensorOptions(dt)));
    pg.allgather(outs, input_for(dt, 30, rank, ReduceOp::Sum))->wait();
    results.insert(results.end(), outs.begin(), outs.end());
    Tensor b = input_for(dt, 40, rank, ReduceOp::Sum);
    pg.broadcast(b, world / 2)->wait();
    results.push_back(b);
  }
  return results;
}

// a and b from collective_results of two backends: integers equal, floats within their rounding (the backends
// may sum in different orders).
inline void compare_results(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what,
                            int world) {
  rank_check(a.size() == b.size(), what + ": different numbers of results");
  for (size_t k = 0; k < a.size(); ++k) {
    rank_check(a[k].dtype() == b[k].dtype() && a[k].numel() == b[k].numel(), what + ": result " + std::to_string(k) + " differs in shape");
    const auto x = a[k].to_vector<double>(), y = b[k].to_vector<double>();
    const double eps = dtype_eps(a[k].dtype()) * 4 * (world + 1);
    for (size_t i = 0; i < x.size(); ++i)
      if (!(std::abs(x[i] - y[i]) <= eps * (1 + std::abs(x[i]))))
        rank_check(false, what + ": result " + std::to_string(k) + " (" + dtype_name(a[k].dtype()) + "), element " +
                              std::to_string(i) + ": " + std::to_string(x[i]) + " against " + std::to_string(y[i]));
  }
}

}  // namespace kiln::test
