// The tcp backend's pieces without processes or a store: reduction kernels against their reference, the wire
// checks, and every algorithm run by N threads over a mesh of socket pairs, against float64 / exact integer
// references. The multi-process tests (process_group_test.cpp) then cover setup, the worker and faults.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "kiln/distributed/tcp/algorithms.h"
#include "kiln/distributed/group_failure.h"
#include "kiln/distributed/tcp/reduce_kernels.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {
namespace {

// N meshes joined by socket pairs: meshes[r] is rank r's view.
std::vector<std::unique_ptr<Mesh>> socket_mesh(int n) {
  std::vector<std::vector<Socket>> ends(n);
  for (auto& e : ends) e.resize(n);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      auto [a, b] = socket_pair();
      ends[i][j] = std::move(a), ends[j][i] = std::move(b);
    }
  std::vector<std::unique_ptr<Mesh>> meshes;
  for (int r = 0; r < n; ++r) meshes.push_back(std::make_unique<Mesh>(std::move(ends[r]), r, n));
  return meshes;
}

// Runs body(rank, collective) on n threads; returns each rank's error message ("" when it succeeded).
std::vector<std::string> run_threads(int n, FrameHeader header, size_t segment_bytes,
                                     const std::function<void(int, const Collective&)>& body,
                                     Duration timeout = std::chrono::seconds(20)) {
  auto meshes = socket_mesh(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      OpContext ctx{"test op", Clock::now() + timeout, timeout, nullptr};
      try {
        body(r, Collective{*meshes[r], ctx, header, segment_bytes});
      } catch (const std::exception& e) {
        errors[r] = e.what();
        meshes[r]->close_all();  // as the process group does: the peers see EOF instead of waiting
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

double value_of(int rank, int64_t i) { return std::sin(0.37 * static_cast<double>(i) + rank) * (1 + rank % 3); }

TEST(TcpKernels, CombineMatchesReferenceForEveryDtypeAndOp) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-50, 50);
  const int64_t n = 1000;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max}) {
      const size_t es = dtype_size(dt);
      std::vector<uint8_t> a(n * es), b(n * es), out(n * es), ref(n * es);
      visit_dtype(dt, "test", [&]<typename T>() {
        for (int64_t i = 0; i < n; ++i) {
          T x, y;
          if constexpr (std::is_same_v<T, bool>) x = u(gen) > 0, y = u(gen) > 0;
          else x = T(static_cast<float>(u(gen))), y = T(static_cast<float>(u(gen)));
          std::memcpy(a.data() + i * es, &x, es), std::memcpy(b.data() + i * es, &y, es);
        }
      });
      if (is_floating(dt) && dt != kFloat16 && dt != kBFloat16) {  // NaN propagates through min and max
        const double nan = std::nan("");
        if (dt == kFloat32) {
          const float f = static_cast<float>(nan);
          std::memcpy(a.data() + 3 * es, &f, es), std::memcpy(b.data() + 5 * es, &f, es);
        } else {
          std::memcpy(a.data() + 3 * es, &nan, es), std::memcpy(b.data() + 5 * es, &nan, es);
        }
      }
      combine(out.data(), a.data(), b.data(), n, dt, op);
      combine_reference(ref.data(), a.data(), b.data(), n, dt, op);
      EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), out.size())) << dtype_name(dt) << " " << reduce_op_name(op);
    }
  }
}

TEST(TcpKernels, BoolSumIsOrAndProductIsAnd) {
  const bool a[4] = {false, false, true, true}, b[4] = {false, true, false, true};
  bool out[4];
  combine(out, a, b, 4, kBool, ReduceOp::Sum);
  EXPECT_EQ(std::vector<bool>(out, out + 4), (std::vector<bool>{false, true, true, true}));
  combine(out, a, b, 4, kBool, ReduceOp::Product);
  EXPECT_EQ(std::vector<bool>(out, out + 4), (std::vector<bool>{false, false, false, true}));
  EXPECT_THROW(check_reduce_op(ReduceOp::Avg, kInt32, "allreduce"), Error);
}

TEST(TcpFrame, MismatchNamesBothSides) {
  FrameHeader sent, expected;
  sent.kind = expected.kind = OpKind::Allreduce;
  sent.seq = expected.seq = 7;
  sent.count = expected.count = 1000;
  sent.reduce_op = ReduceOp::Sum, expected.reduce_op = ReduceOp::Max;
  try {
    check_frame(sent, expected, 0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "allreduce #7: rank 0 sent sum of 1000 float32, rank 1 expects max of 1000 float32");
  }
  Handshake mine = make_handshake(42, 1, 0, 4, "g"), theirs = make_handshake(43, 0, 1, 4, "g");
  EXPECT_THROW(check_handshake(theirs, mine, 1, 0), Error);
  theirs.job_id = 42;
  EXPECT_NO_THROW(check_handshake(theirs, mine, 1, 0));
  theirs.from_rank = 2;  // a wrong peer answered
  try {
    check_handshake(theirs, mine, 1, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("connected to rank 0 but rank 2 answered"), std::string::npos) << e.what();
  }
}

// Allreduce by both algorithms on n threads: float64 sums against a float64 reference; every rank's bits equal.
void check_allreduce_f64(int world, int64_t count, size_t segment_bytes, bool ring, ReduceOp op) {
  FrameHeader h;
  h.kind = OpKind::Allreduce, h.dtype = kFloat64, h.count = count, h.reduce_op = op;
  std::vector<std::vector<double>> data(world, std::vector<double>(count));
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < count; ++i) data[r][i] = value_of(r, i);
  auto errors = run_threads(world, h, segment_bytes, [&](int r, const Collective& c) {
    if (ring) allreduce_ring(c, data[r].data());
    else allreduce_recursive_doubling(c, data[r].data());
  });
  for (int r = 0; r < world; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  for (int64_t i = 0; i < count; ++i) {
    double ref = op == ReduceOp::Product ? 1 : 0;
    for (int r = 0; r < world; ++r) {
      const double v = value_of(r, i);
      if (op == ReduceOp::Sum || op == ReduceOp::Avg) ref += v;
      else if (op == ReduceOp::Product) ref *= v;
      else if (op == ReduceOp::Min) ref = r == 0 ? v : std::min(ref, v);
      else ref = r == 0 ? v : std::max(ref, v);
    }
    if (op == ReduceOp::Avg) ref /= world;
    ASSERT_NEAR(data[0][i], ref, 1e-12 * (1 + std::abs(ref))) << "element " << i;
  }
  for (int r = 1; r < world; ++r)
    ASSERT_EQ(data[r], data[0]) << "rank " << r << "'s bits differ from rank 0's";
}

TEST(TcpAlgorithms, RingAllreduceManyShapes) {
  for (int world : {1, 2, 3, 4, 5, 8})
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{world - 1}, int64_t{world}, int64_t{world + 1},
                          int64_t{97}, int64_t{10000}}) {
      SCOPED_TRACE("world " + std::to_string(world) + " count " + std::to_string(count));
      check_allreduce_f64(world, count, 1 << 19, true, ReduceOp::Sum);
      check_allreduce_f64(world, count, 24, true, ReduceOp::Sum);  // three elements a segment: many segments
    }
}

TEST(TcpAlgorithms, RecursiveDoublingManyShapes) {
  for (int world : {1, 2, 3, 5, 6, 7, 8})
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{world + 1}, int64_t{97}}) {
      SCOPED_TRACE("world " + std::to_string(world) + " count " + std::to_string(count));
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product})
        check_allreduce_f64(world, count, 1 << 19, false, op);
    }
}

// Integer allreduce is exact whatever the order: the ring and recursive doubling must equal the reference
// algorithm (every buffer to every rank, reduced in rank order) bit for bit, for every op.
TEST(TcpAlgorithms, RingAndRecursiveDoublingEqualTheReferenceOnIntegers) {
  for (int world : {2, 3, 6})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max}) {
      const int64_t count = 1001;
      FrameHeader h;
      h.kind = OpKind::Allreduce, h.dtype = kInt64, h.count = count, h.reduce_op = op;
      std::vector<std::vector<std::vector<int64_t>>> data(3);  // [algorithm][rank][i]
      for (auto& d : data) {
        d.assign(world, std::vector<int64_t>(count));
        for (int r = 0; r < world; ++r)
          for (int64_t i = 0; i < count; ++i) d[r][i] = (i * 2654435761 + r * 40503) % 1000003 - 500000;
      }
      auto errors = run_threads(world, h, 200, [&](int r, const Collective& c) {
        allreduce_reference(c, data[0][r].data());
        allreduce_ring(c, data[1][r].data());
        allreduce_recursive_doubling(c, data[2][r].data());
      });
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(errors[r], "") << "rank " << r;
        ASSERT_EQ(data[1][r], data[0][0]) << "ring, rank " << r << ", " << reduce_op_name(op);
        ASSERT_EQ(data[2][r], data[0][0]) << "recursive doubling, rank " << r << ", " << reduce_op_name(op);
        ASSERT_EQ(data[0][r], data[0][0]) << "reference, rank " << r;
      }
    }
}

TEST(TcpAlgorithms, MismatchedCountFailsOnBothSidesInsteadOfHanging) {
  FrameHeader h;
  h.kind = OpKind::Allreduce, h.dtype = kFloat32, h.count = 10;
  std::vector<std::vector<float>> data(3, std::vector<float>(20, 1.0f));
  auto errors = run_threads(3, h, 1 << 19, [&](int r, const Collective& c) {
    Collective mine = c;
    if (r == 1) mine.header.count = 20;
    allreduce_ring(mine, data[r].data());
  }, std::chrono::seconds(5));
  int named = 0;
  for (const auto& e : errors) named += e.find("sent sum of 20 float32") != std::string::npos ||
                                        e.find("expects sum of 20 float32") != std::string::npos;
  EXPECT_GE(named, 1) << errors[0] << " | " << errors[1] << " | " << errors[2];
  for (int r = 0; r < 3; ++r) EXPECT_NE(errors[r], "") << "rank " << r << " did not fail";
}

// A connection to an address nothing answers (TEST-NET-1, RFC 5737: never routed) gives up at its deadline,
// whether the network drops the attempt (a blocking connect would wait for the kernel's own timeout, minutes)
// or says at once that it is unreachable (retried until the deadline); and a listener's port is reached.
TEST(TcpSocket, ConnectGivesUpAtItsDeadline) {
  const auto start = std::chrono::steady_clock::now();
  try {
    connect_to("192.0.2.1", 9, Clock::now() + std::chrono::milliseconds(400), "test connection");
    ADD_FAILURE() << "connected to 192.0.2.1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test connection: cannot connect to 192.0.2.1:9"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  uint16_t port = 0;
  Socket listener = listen_on("127.0.0.1", &port);
  Socket s = connect_to("127.0.0.1", port, Clock::now() + std::chrono::seconds(5), "loopback");
  Socket accepted = accept_one(listener, Clock::now() + std::chrono::seconds(5), "loopback");
  const char hello[] = "hello";
  char got[sizeof hello] = {};
  send_all(s, hello, sizeof hello, Clock::now() + std::chrono::seconds(5), "loopback send");
  recv_all(accepted, got, sizeof got, Clock::now() + std::chrono::seconds(5), "loopback recv");
  EXPECT_STREQ(got, hello);
}

// The failure protocol every group shares (tcp's collectives and point to point, gloo's OpWorker): the first rank
// to fail writes its report and keeps its own message; a rank failing afterwards takes that report as the cause; a
// rank reading its own report (its other half failed first) says the group failed here; reads of the store are
// spaced by half a second.
TEST(GroupFailure, FirstReportWinsAndBecomesTheOthersCause) {
  const std::string path = testing::TempDir() + "kiln_group_failure_" + std::to_string(getpid());
  std::remove(path.c_str());
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(5));
  GroupFailure r1(store, "g/1/error", 1), r2(store, "g/1/error", 2);

  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(r2.read_report(last), "");
  EXPECT_EQ(r1.first(), "");
  EXPECT_EQ(r1.report("allreduce #3", "allreduce #3: rank 1 timed out"), "allreduce #3: rank 1 timed out");
  EXPECT_EQ(store->get_string("g/1/error"), "rank 1 failed: allreduce #3: rank 1 timed out");
  EXPECT_EQ(r1.first(), "allreduce #3: rank 1 timed out");

  EXPECT_EQ(r2.read_report(last), "") << "read again within half a second";
  last -= std::chrono::seconds(1);
  EXPECT_EQ(r2.read_report(last), "rank 1 failed: allreduce #3: rank 1 timed out");

  EXPECT_EQ(r2.report("recv #0 from rank 1 (tag 2)", "EOF from rank 1"),
            "recv #0 from rank 1 (tag 2): rank 2 stopped because rank 1 failed: allreduce #3: rank 1 timed out "
            "(here: EOF from rank 1)");
  EXPECT_EQ(store->get_string("g/1/error"), "rank 1 failed: allreduce #3: rank 1 timed out") << "first one wins";
  EXPECT_EQ(r1.report("", "send #4 to rank 2 (tag 0): reset"),
            "rank 1: the group failed: allreduce #3: rank 1 timed out (here: send #4 to rank 2 (tag 0): reset)");
  EXPECT_EQ(r1.first(), "allreduce #3: rank 1 timed out") << "the first failure stays the group's";
  std::remove(path.c_str());
}

// A store as a rank sees it that looked for a report a moment before another rank wrote one: check() says
// no key, everything else is the real store's.
class LooksTooEarly final : public Store {
 public:
  explicit LooksTooEarly(std::shared_ptr<Store> s) : s_(std::move(s)) {}
  void set(const std::string& k, const Bytes& v) override { s_->set(k, v); }
  Bytes get(const std::string& k) override { return s_->get(k); }
  int64_t add(const std::string& k, int64_t d) override { return s_->add(k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override { return s_->compare_set(k, e, d); }
  bool check(const std::vector<std::string>&) override { return false; }
  void wait(const std::vector<std::string>& k, std::optional<Duration> t) override { s_->wait(k, t); }
  bool delete_key(const std::string& k) override { return s_->delete_key(k); }
  int64_t num_keys() override { return s_->num_keys(); }

 private:
  std::shared_ptr<Store> s_;
};

// Two ranks failing at once (both neighbours of a dead one): the one whose write comes second learns from the
// write itself that it was not first, and names the first as the cause, though it looked too early to see it.
TEST(GroupFailure, OfTwoRanksFailingAtOnceTheSecondNamesTheFirst) {
  const std::string path = testing::TempDir() + "kiln_group_failure_race_" + std::to_string(getpid());
  std::remove(path.c_str());
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(5));
  GroupFailure first(store, "g/2/error", 1);
  GroupFailure second(std::make_shared<LooksTooEarly>(store), "g/2/error", 3);
  EXPECT_EQ(first.report("allreduce #7", "EOF from rank 2"), "EOF from rank 2");
  EXPECT_EQ(second.report("allreduce #7", "reset by rank 2"),
            "allreduce #7: rank 3 stopped because rank 1 failed: EOF from rank 2 (here: reset by rank 2)");
  EXPECT_EQ(store->get_string("g/2/error"), "rank 1 failed: EOF from rank 2") << "the first report stays";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::distributed::tcp
