// The "tcp" process group across real processes (tests/distributed/multiprocess.h), meeting through a FileStore:
// every collective against a reference every rank computes from the same deterministic inputs (float64 for
// floats, exact for integers), and every rank's result bits compared with every other rank's.
// The fault tests (peers that die, stop, never join, or call something else) are in tcp_fault_test.cpp.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/factories.h"

namespace kiln::distributed {
namespace {

using kiln::test::rank_check;
using kiln::test::run_ranks;

std::string store_path(const std::string& name) {
  static int counter = 0;
  return testing::TempDir() + "kiln_pg_" + name + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
}

std::shared_ptr<ProcessGroup> make_group(const std::string& path, int rank, int world, ProcessGroupOptions o = {}) {
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
  if (o.timeout == kDefaultTimeout) o.timeout = std::chrono::seconds(20);
  return new_group("tcp", store, rank, world, o);
}

// Rank r's input for a reduction: integers small enough that no sum or product over 8 ranks overflows, floats
// near 1 for products (so a product of 8 stays well conditioned).
Tensor input_for(DType dt, int64_t count, int rank, ReduceOp op) {
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

// Checks every rank holds the same bytes in t (gathered with allgather over the same group).
void check_same_bits(ProcessGroup& pg, const Tensor& t, const std::string& what) {
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
void check_allreduce(ProcessGroup& pg, DType dt, int64_t count, ReduceOp op) {
  const int world = pg.size();
  const std::string what = std::string("allreduce ") + reduce_op_name(op) + " of " + std::to_string(count) + " " +
                           dtype_name(dt) + " in a world of " + std::to_string(world);
  Tensor t = input_for(dt, count, pg.rank(), op);
  pg.allreduce(t, op)->wait();
  const std::vector<double> got = t.to_vector<double>();
  std::vector<std::vector<double>> in;
  for (int r = 0; r < world; ++r) in.push_back(input_for(dt, count, r, op).to_vector<double>());
  const double eps = dt == kFloat64 ? 1e-13 : dt == kFloat32 ? 2e-6 : dt == kBFloat16 ? 3e-2 : dt == kFloat16 ? 4e-3 : 0;
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

ProcessGroupOptions named(const std::string& name, size_t small_message_bytes, size_t segment_bytes = 1 << 19) {
  ProcessGroupOptions o;
  o.name = name;
  o.small_message_bytes = small_message_bytes;
  o.segment_bytes = segment_bytes;
  return o;
}

TEST(ProcessGroupTCP, IsRegistered) {
  const auto names = backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "tcp"), names.end());
}

// A world of one: every collective is the identity (avg divides by 1), and bad arguments fail at the call.
TEST(ProcessGroupTCP, WorldOfOneAndArgumentChecks) {
  const std::string path = store_path("one");
  auto results = run_ranks(1, [&](int rank) {
    auto pg = make_group(path, rank, 1);
    rank_check(pg->backend() == "tcp" && pg->rank() == 0 && pg->size() == 1, "rank and size");
    Tensor t = tensor(std::vector<double>{1.5, -2, 3}, {3}, TensorOptions(kFloat32));
    pg->allreduce(t, ReduceOp::Avg)->wait();
    pg->broadcast(t, 0)->wait();
    pg->barrier()->wait();
    rank_check(t.to_vector<double>() == std::vector<double>{1.5, -2, 3}, "identity");
    const auto throws = [](const std::function<void()>& f, const std::string& part) {
      try {
        f();
      } catch (const Error& e) {
        rank_check(std::string(e.what()).find(part) != std::string::npos, std::string("unexpected error: ") + e.what());
        return;
      }
      rank_check(false, "no error (expected one with '" + part + "')");
    };
    throws([&] { pg->allreduce(zeros({4}, kInt32), ReduceOp::Avg); }, "avg needs a floating dtype");
    throws([&] { pg->allreduce(zeros({4, 3}).t()); }, "must be contiguous");
    throws([&] { pg->broadcast(t, 1); }, "rank 1 is not in a group of size 1");
    throws([&] { pg->allgather({t, t}, t); }, "expected 1 output tensors");
    throws([&] { pg->reduce_scatter(t, {zeros({4})}); }, "input 0 has 4 float32 but the output has 3 float32");
  }, std::chrono::seconds(20));
  kiln::test::expect_all_ok(results);
}

// Worlds 1..8, the counts around the world size, every dtype of the core set and every op, both algorithms:
// "ring" (small_message_bytes 0: always the ring) and "rd" (always recursive doubling) are two groups alive at
// once over one store.
TEST(ProcessGroupTCP, AllreduceMatchesReferenceForEveryWorldCountDtypeAndOp) {
  for (int world = 1; world <= 8; ++world) {
    const std::string path = store_path("allreduce" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto ring = make_group(path, rank, world, named("ring", 0));
      auto rd = make_group(path, rank, world, named("rd", size_t{1} << 30));
      const int64_t n = world;
      for (int64_t count : {int64_t{0}, int64_t{1}, n - 1, n, n + 1, int64_t{97}, int64_t{10000}})
        for (DType dt : {kFloat32, kFloat64, kInt32, kInt64})
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
            if (op == ReduceOp::Avg && !is_floating(dt)) continue;
            if (count == 10000 && op != ReduceOp::Sum && op != ReduceOp::Max) continue;  // keeps the suite short
            check_allreduce(*ring, dt, count, op);
            if (count <= 97) check_allreduce(*rd, dt, count, op);
          }
    }, std::chrono::seconds(90));
    for (const auto& r : results) ASSERT_TRUE(r.ok()) << "world " << world << ": " << r.describe();
  }
}

TEST(ProcessGroupTCP, AllreduceSixteenBitFloatsBytesAndBools) {
  const std::string path = store_path("small_dtypes");
  auto results = run_ranks(5, [&](int rank) {
    auto pg = make_group(path, rank, 5);  // default options: 1000 elements go by recursive doubling
    auto ring = make_group(path, rank, 5, named("ring", 0));
    for (auto* g : {pg.get(), ring.get()}) {
      check_allreduce(*g, kFloat16, 1000, ReduceOp::Sum);
      check_allreduce(*g, kBFloat16, 1000, ReduceOp::Avg);
      check_allreduce(*g, kUInt8, 1000, ReduceOp::Sum);  // wraps modulo 256
      check_allreduce(*g, kUInt8, 1000, ReduceOp::Max);
      check_allreduce(*g, kBool, 1000, ReduceOp::Sum);      // or
      check_allreduce(*g, kBool, 1000, ReduceOp::Product);  // and
    }
  }, std::chrono::seconds(60));
  kiln::test::expect_all_ok(results);
}

// 2^20 + 3 elements through the ring with default segments, and a tiny segment size that cuts every chunk into
// many segments (pipelining across ring steps).
TEST(ProcessGroupTCP, AllreduceLargeAndTinySegments) {
  for (int world : {2, 5}) {
    const std::string path = store_path("large" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto pg = make_group(path, rank, world);
      check_allreduce(*pg, kFloat32, (int64_t{1} << 20) + 3, ReduceOp::Sum);
      auto tiny = make_group(path, rank, world, named("tiny", 0, 64));
      check_allreduce(*tiny, kFloat64, 10007, ReduceOp::Sum);
      check_allreduce(*tiny, kInt32, 1001, ReduceOp::Product);
    }, std::chrono::seconds(90));
    for (const auto& r : results) ASSERT_TRUE(r.ok()) << "world " << world << ": " << r.describe();
  }
}

// A port nobody listens on now (the kernel's pick for a socket closed at once): for a store server that must
// be known before the ranks are forked. Another process could take it in between; it is unlikely in a test.

// Over a TCPStore served by rank 0, behind a PrefixStore: the worker thread reads the store (the failure key)
// while the rank's own thread may use it too.
TEST(ProcessGroupTCP, OverTCPStoreAndPrefixStore) {
  const uint16_t port = find_free_port();
  auto results = run_ranks(3, [&](int rank) {
    auto store = std::make_shared<TCPStore>(TCPStoreOptions{.host = "127.0.0.1", .port = port,
                                                            .is_server = rank == 0, .world_size = 3,
                                                            .timeout = std::chrono::seconds(20)});
    ProcessGroupOptions o = named("over_tcp", 1 << 15);
    o.timeout = std::chrono::seconds(20);
    auto pg = new_group("tcp", std::make_shared<PrefixStore>("job7", store), rank, 3, o);
    check_allreduce(*pg, kFloat64, 5000, ReduceOp::Sum);
    check_allreduce(*pg, kInt64, 100, ReduceOp::Max);
    pg->barrier()->wait();  // rank 0's server must outlive the others' last store call
  }, std::chrono::seconds(30));
  kiln::test::expect_all_ok(results);
}

// Two groups with ops issued back to back without waiting, interleaved: each group's worker keeps its own order.
TEST(ProcessGroupTCP, TwoGroupsInterleaved) {
  const std::string path = store_path("two_groups");
  auto results = run_ranks(4, [&](int rank) {
    auto a = make_group(path, rank, 4, named("a", 1 << 15));
    auto b = make_group(path, rank, 4, named("b", 0, 256));
    std::vector<Tensor> ta, tb;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 6; ++i) {
      ta.push_back(full({300 + i}, static_cast<double>(rank + i), kFloat64));
      tb.push_back(full({5000 + i}, static_cast<double>(2 * rank - i), kFloat64));
      works.push_back(a->allreduce(ta.back()));
      works.push_back(b->allreduce(tb.back(), ReduceOp::Max));
    }
    for (auto& w : works) w->wait();
    for (int i = 0; i < 6; ++i) {
      rank_check(ta[i].to_vector<double>() == std::vector<double>(300 + i, 6.0 + 4 * i), "group a, op " + std::to_string(i));
      rank_check(tb[i].to_vector<double>() == std::vector<double>(5000 + i, 6.0 - i), "group b, op " + std::to_string(i));
    }
  }, std::chrono::seconds(30));
  kiln::test::expect_all_ok(results);
}

// broadcast, reduce, allgather, reduce_scatter, barrier and send/recv against references, worlds 1..8.
TEST(ProcessGroupTCP, OtherCollectivesMatchReferences) {
  for (int world : {1, 2, 3, 4, 7, 8}) {
    const std::string path = store_path("others" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto pg = make_group(path, rank, world, named("g", 1 << 15, 96));
      const std::string w = " (world " + std::to_string(world) + ", rank " + std::to_string(rank) + ")";
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{1000}}) {
        for (int root = 0; root < world; root += 3) {
          Tensor t = input_for(kFloat32, count, rank, ReduceOp::Sum);
          pg->broadcast(t, root)->wait();
          rank_check(t.to_vector<double>() == input_for(kFloat32, count, root, ReduceOp::Sum).to_vector<double>(),
                     "broadcast from " + std::to_string(root) + w);
          Tensor x = input_for(kInt64, count, rank, ReduceOp::Sum), before = x.clone();
          pg->reduce(x, root, ReduceOp::Sum)->wait();
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
        pg->allgather(outs, input_for(kInt32, count, rank, ReduceOp::Sum))->wait();
        for (int r = 0; r < world; ++r)
          rank_check(outs[r].to_vector<double>() == input_for(kInt32, count, r, ReduceOp::Sum).to_vector<double>(),
                     "allgather block " + std::to_string(r) + w);
        // reduce_scatter: rank r's inputs[j] = input_for(count, r * world + j); output = sum over r of block rank.
        std::vector<Tensor> ins;
        for (int j = 0; j < world; ++j) ins.push_back(input_for(kFloat64, count, rank * world + j, ReduceOp::Max));
        Tensor out = empty({count}, kFloat64);
        pg->reduce_scatter(out, ins, ReduceOp::Max)->wait();
        std::vector<double> ref(count, -1e300);
        for (int r = 0; r < world; ++r) {
          auto v = input_for(kFloat64, count, r * world + rank, ReduceOp::Max).to_vector<double>();
          for (int64_t i = 0; i < count; ++i) ref[i] = std::max(ref[i], v[i]);
        }
        rank_check(out.to_vector<double>() == ref, "reduce_scatter max" + w);
      }
      pg->barrier()->wait();
      // send/recv around a ring with two tags, then a reply the other way.
      if (world > 1) {
        const int right = (rank + 1) % world, left = (rank + world - 1) % world;
        Tensor mine = full({100}, static_cast<double>(rank), kFloat32), got = empty({100}, kFloat32);
        Tensor mine2 = full({7}, static_cast<double>(10 * rank), kInt64), got2 = empty({7}, kInt64);
        auto s1 = pg->send(mine, right, 1);
        auto s2 = pg->send(mine2, right, 2);
        pg->recv(got, left, 1)->wait();
        pg->recv(got2, left, 2)->wait();
        s1->wait(), s2->wait();
        rank_check(got.to_vector<double>() == std::vector<double>(100, left), "recv tag 1" + w);
        rank_check(got2.to_vector<double>() == std::vector<double>(7, 10.0 * left), "recv tag 2" + w);
      }
      pg->barrier()->wait();
    }, std::chrono::seconds(60));
    for (const auto& r : results) ASSERT_TRUE(r.ok()) << "world " << world << ": " << r.describe();
  }
}

}  // namespace
}  // namespace kiln::distributed
