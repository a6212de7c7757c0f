// What is particular to the "tcp" process group, across real processes (tests/distributed/multiprocess.h),
// meeting through a FileStore: both all-reduce algorithms (ring, recursive doubling) over worlds 1..8, tiny
// segments, a TCPStore behind a PrefixStore. The checks are collective_checks.h's; the checks every backend
// shares run over every backend in collectives_test.cpp. The fault tests (peers that die, stop, never join, or
// call something else) are in tcp_fault_test.cpp.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "distributed/collective_checks.h"
#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "kiln/distributed/process_group.h"
#include "kiln/tensor/factories.h"

namespace kiln::distributed {
namespace {

using kiln::test::check_allreduce;
using kiln::test::rank_check;
using kiln::test::run_ranks;

std::string pg_store(const std::string& name) { return kiln::test::fresh_temp_path("pg_" + name); }

std::shared_ptr<ProcessGroup> make_group(const std::string& path, int rank, int world, ProcessGroupOptions o = {}) {
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
  if (o.timeout == kDefaultTimeout) o.timeout = std::chrono::seconds(20);
  return new_group("tcp", store, rank, world, o);
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

// Worlds 1..8, the counts around the world size, every dtype of the core set and every op, both algorithms:
// "ring" (small_message_bytes 0: always the ring) and "rd" (always recursive doubling) are two groups alive at
// once over one store.
TEST(ProcessGroupTCP, AllreduceMatchesReferenceForEveryWorldCountDtypeAndOp) {
  for (int world = 1; world <= 8; ++world) {
    const std::string path = pg_store("allreduce" + std::to_string(world));
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
  const std::string path = pg_store("small_dtypes");
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
    const std::string path = pg_store("large" + std::to_string(world));
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

// Point to point (p2p.h): a send completes once its bytes are in the kernel's buffers, whether or not its recv
// is posted yet, so sends waited for before any recv (a ring of 8 MiB messages, far past the socket buffers)
// do not deadlock; recvs match by tag, oldest first, whatever order they are posted in; collectives issued
// between them are unaffected; empty messages travel too.
TEST(ProcessGroupTCP, PointToPointSendsCompleteBeforeTheirRecvsAndMatchByTag) {
  const std::string path = pg_store("p2p");
  auto results = run_ranks(3, [&](int rank) {
    auto pg = make_group(path, rank, 3);
    const int right = (rank + 1) % 3, left = (rank + 2) % 3;
    const std::string r = "rank " + std::to_string(rank) + ": ";
    const int64_t n = 2 << 20;  // 8 MiB of float32
    Tensor big = arange(0, n, 1, kFloat32).add_(static_cast<double>(rank));
    pg->send(big, right, 0)->wait();  // before any recv is posted anywhere
    // Three tags sent 1, 2, 3 (two messages with tag 2), received 3, 2, 1; a collective in between.
    std::vector<std::shared_ptr<Work>> sends;
    for (int tag : {1, 2, 2, 3})
      sends.push_back(pg->send(full({tag * 10}, static_cast<double>(100 * rank + tag + (sends.size() == 2 ? 50 : 0)),
                                    kInt64),
                               right, tag));
    Tensor sum = full({4}, static_cast<double>(rank), kFloat64);
    pg->allreduce(sum)->wait();
    rank_check(sum.to_vector<double>() == std::vector<double>(4, 3.0), r + "allreduce between the sends");
    for (int tag : {3, 2, 1}) {
      Tensor got = empty({tag * 10}, kInt64);
      pg->recv(got, left, tag)->wait();
      rank_check(got.to_vector<double>() == std::vector<double>(tag * 10, 100.0 * left + tag),
                 r + "tag " + std::to_string(tag));
    }
    Tensor second = empty({20}, kInt64);
    pg->recv(second, left, 2)->wait();  // the second message with tag 2
    rank_check(second.to_vector<double>() == std::vector<double>(20, 100.0 * left + 52), r + "tag 2, second");
    for (auto& w : sends) w->wait();
    Tensor got = empty({n}, kFloat32);
    pg->recv(got, left, 0)->wait();
    rank_check(got.to_vector<double>() == arange(0, n, 1, kFloat32).add_(static_cast<double>(left)).to_vector<double>(),
               r + "the large message");
    // Many recvs issued back to back for messages already here: each issue must reach the engine (a wakeup
    // lost between taking the inbox and sleeping would leave a recv never admitted).
    std::vector<std::shared_ptr<Work>> many;
    for (int k = 0; k < 300; ++k) many.push_back(pg->send(full({1}, static_cast<double>(k), kInt32), right, 7));
    for (auto& w : many) w->wait();
    pg->barrier()->wait();
    std::vector<Tensor> into(300);
    many.clear();
    for (int k = 0; k < 300; ++k) many.push_back(pg->recv(into[k] = empty({1}, kInt32), left, 7));
    for (int k = 0; k < 300; ++k) {
      many[k]->wait();
      rank_check(into[k].item<double>() == k, r + "message " + std::to_string(k) + " of 300 with tag 7");
    }
    Tensor none = empty({0}, kFloat32);
    auto s = pg->send(none, right, 9);
    pg->recv(empty({0}, kFloat32), left, 9)->wait();
    s->wait();
    pg->barrier()->wait();
  }, std::chrono::seconds(60));
  kiln::test::expect_all_ok(results);
}

// A peer that finishes: what it sent before it destroyed its group (a send not even waited for included: the
// destructor delivers it) is still received after it left, and its leaving does not fail the group; a recv of
// a message it never sent fails at once, not at the deadline.
TEST(ProcessGroupTCP, PointToPointFromAPeerThatHasLeft) {
  const std::string path = pg_store("p2p_left");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    if (rank == 1) {
      auto unwaited = pg->send(full({1000}, 7.0, kFloat32), 0, 1);
      pg->send(full({3}, 8.0, kInt32), 0, 2)->wait();
      pg.reset();
      FileStore(path).set("left", "1");
      return;
    }
    FileStore(path).wait({"left"}, std::chrono::seconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 1's EOF has come
    Tensor b = empty({3}, kInt32), a = empty({1000}, kFloat32);
    pg->recv(b, 1, 2)->wait();
    pg->recv(a, 1, 1)->wait();
    rank_check(a.to_vector<double>() == std::vector<double>(1000, 7.0) &&
                   b.to_vector<double>() == std::vector<double>(3, 8.0),
               "rank 0: what rank 1 sent before it left");
    rank_check(!FileStore(path).check({"default/1/error"}), "rank 0: a peer's leaving failed the group");
    const auto start = std::chrono::steady_clock::now();
    try {
      pg->recv(empty({1}, kFloat32), 1, 3)->wait();
      rank_check(false, "rank 0: a recv from a rank that has left succeeded");
    } catch (const Error& e) {
      rank_check(std::string(e.what()).find("without sending this message") != std::string::npos,
                 std::string("rank 0: ") + e.what());
    }
    rank_check(std::chrono::steady_clock::now() - start < std::chrono::seconds(5), "rank 0: the recv failed late");
  }, std::chrono::seconds(40));
  kiln::test::expect_all_ok(results);
}

}  // namespace
}  // namespace kiln::distributed
