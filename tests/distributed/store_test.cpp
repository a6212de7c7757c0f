// The Store contract (store.h), run against FileStore and TCPStore alike (a typed suite), and PrefixStore on
// top of both. Multi-process cases fork ranks with run_ranks (multiprocess.h): a child reports failure by
// throwing, so children check with rank_check; the parent then checks totals the children could not fake.
// Each kind keeps a "host" store alive in the parent for the whole test (the file's first user, or the TCP
// server), so children come and go freely. The TCPStore-only cases (ports, connecting, a dying server) are in
// store_tcp_test.cpp, which uses the two helpers defined here (fresh_path).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <filesystem>
#include <thread>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "kiln/distributed/store.h"
#include "tensor/test_util.h"

namespace kiln::distributed::store_testing {

// A path no other test (or test process) uses, in the temp directory; nothing is created there.
std::string fresh_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  const auto name = "kiln_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const auto path = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove(path);
  return path.string();
}

// A port on 127.0.0.1 that was free a moment ago: for tests whose server must start in a child at a port the
// parent chose. (Another program could take it in between; on a test machine that is rare enough.)

}  // namespace kiln::distributed::store_testing

namespace kiln::distributed {
namespace {

using namespace std::chrono_literals;
using test::rank_check;
using test::run_ranks;

// Both kinds offer: start() (the host store), open() (one more store on the same address, in any process),
// and prepare_rendezvous() / open_rank() (a fresh address whose rank 0 is the server where there is one).
struct FileKind {
  static constexpr bool kClientsWaitForAll = true;  // every FileStore constructor waits for the world
  std::string path, rendezvous_path;
  std::unique_ptr<Store> host;
  void start() {
    path = store_testing::fresh_path("store");
    host = std::make_unique<FileStore>(path);
  }
  std::unique_ptr<Store> open(Duration timeout = 5s) { return std::make_unique<FileStore>(path, -1, timeout); }
  void prepare_rendezvous() { rendezvous_path = store_testing::fresh_path("rendezvous"); }
  std::unique_ptr<Store> open_rank(int rank, int world_size, Duration timeout) {
    return std::make_unique<FileStore>(rendezvous_path, world_size, timeout);
  }
};

struct TCPKind {
  static constexpr bool kClientsWaitForAll = false;  // store.h: a client returns once it has registered
  uint16_t port = 0, rendezvous_port = 0;
  std::unique_ptr<TCPStore> host;
  void start() {
    TCPStoreOptions o;
    o.port = 0, o.is_server = true, o.timeout = 5s;
    host = std::make_unique<TCPStore>(o);
    port = host->port();
  }
  std::unique_ptr<Store> open(Duration timeout = 5s) {
    TCPStoreOptions o;
    o.port = port, o.timeout = timeout;
    return std::make_unique<TCPStore>(o);
  }
  void prepare_rendezvous() { rendezvous_port = find_free_port(); }
  std::unique_ptr<Store> open_rank(int rank, int world_size, Duration timeout) {
    TCPStoreOptions o;
    o.port = rendezvous_port, o.is_server = rank == 0, o.world_size = world_size, o.timeout = timeout;
    return std::make_unique<TCPStore>(o);
  }
};

template <class Kind>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { kind_.start(); }
  Kind kind_;
};

struct KindNames {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, FileKind> ? "FileStore" : "TCPStore";
  }
};

using Kinds = ::testing::Types<FileKind, TCPKind>;
TYPED_TEST_SUITE(StoreTest, Kinds, KindNames);

Bytes bytes(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(static_cast<uint8_t>(x));
  return b;
}

TYPED_TEST(StoreTest, SetGetBytesAndStrings) {
  auto store = this->kind_.open();
  store->set("s", std::string("hello"));
  EXPECT_EQ(store->get_string("s"), "hello");
  store->set("empty", Bytes{});
  EXPECT_EQ(store->get("empty"), Bytes{});
  const Bytes binary = bytes({0, 1, 0, 255, 0, 0, 10, 13});
  store->set("binary", binary);
  EXPECT_EQ(store->get("binary"), binary);
  store->set("s", std::string("overwritten"));
  EXPECT_EQ(store->get_string("s"), "overwritten");
  Bytes big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 % 251);
  store->set("big", big);
  EXPECT_EQ(store->get("big"), big);
  // A key with a zero byte inside (not first) is an ordinary key.
  const std::string odd("a\0b", 3);
  store->set(odd, std::string("x"));
  EXPECT_EQ(this->kind_.host->get_string(odd), "x");  // and another store object on the address sees it
}

TYPED_TEST(StoreTest, GetBlocksUntilAnotherProcessSets) {
  auto results = run_ranks(2, [&](int rank) {
    auto store = this->kind_.open();
    if (rank == 1) {
      std::this_thread::sleep_for(300ms);
      store->set("late", std::string("here"));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::string v = store->get_string("late");
    const auto waited = std::chrono::steady_clock::now() - start;
    rank_check(v == "here", "got \"" + v + "\"");
    rank_check(waited >= 200ms, "get returned before the key was set");
  }, 10s);
  test::expect_all_ok(results);
}

TYPED_TEST(StoreTest, AddFromEightProcessesIsExact) {
  auto results = run_ranks(8, [&](int rank) {
    auto store = this->kind_.open();
    int64_t last = 0;
    for (int i = 0; i < 100; ++i) {
      const int64_t now = store->add("counter", 1);
      rank_check(now > last && now <= 800, "add returned " + std::to_string(now) + " after " + std::to_string(last));
      last = now;
    }
  }, 20s);
  test::expect_all_ok(results);
  EXPECT_EQ(this->kind_.host->get_string("counter"), "800");  // counters are decimal text, as in PyTorch
  EXPECT_EQ(this->kind_.host->add("counter", -801), -1);
  EXPECT_EQ(this->kind_.host->add("fresh", 0), 0);
}

TYPED_TEST(StoreTest, AddOnANonIntegerNamesTheKey) {
  this->kind_.host->set("text", std::string("12abc"));
  test::expect_error([&] { this->kind_.host->add("text", 1); }, {"add(\"text\"", "not an integer", "12abc"});
  this->kind_.host->set("n", std::string("41"));
  EXPECT_EQ(this->kind_.host->add("n", 1), 42);
  test::expect_error([&] { this->kind_.host->add("n", INT64_MAX); }, {"add(\"n\"", "(42) would overflow int64"});
  EXPECT_EQ(this->kind_.host->get_string("n"), "42");  // a failed add changes nothing
}

TYPED_TEST(StoreTest, CompareSetSemantics) {
  Store& s = *this->kind_.host;
  const Bytes a = bytes({'a'}), b = bytes({'b'}), c = bytes({'c'});
  // A missing key with a non-empty expected value: nothing is stored, and the result is empty.
  EXPECT_EQ(s.compare_set("k", a, b), Bytes{});
  EXPECT_FALSE(s.check({"k"}));
  // A missing key matches an empty expected value.
  EXPECT_EQ(s.compare_set("k", Bytes{}, a), a);
  EXPECT_EQ(s.get("k"), a);
  EXPECT_EQ(s.compare_set("k", b, c), a);  // mismatch: the current value, unchanged
  EXPECT_EQ(s.compare_set("k", a, c), c);
  EXPECT_EQ(s.get("k"), c);
}

TYPED_TEST(StoreTest, CompareSetHasExactlyOneWinnerPerRound) {
  constexpr int kRanks = 6, kRounds = 10;
  auto results = run_ranks(kRanks, [&](int rank) {
    auto store = this->kind_.open();
    for (int round = 0; round < kRounds; ++round) {
      const std::string mine = "rank" + std::to_string(rank);
      const Bytes desired(mine.begin(), mine.end());
      if (store->compare_set("lock/" + std::to_string(round), Bytes{}, desired) == desired) store->add("winners", 1);
    }
  }, 20s);
  test::expect_all_ok(results);
  EXPECT_EQ(this->kind_.host->get_string("winners"), std::to_string(kRounds));
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(this->kind_.host->get_string("lock/" + std::to_string(round)).rfind("rank", 0), 0u);
  }
}

TYPED_TEST(StoreTest, WaitTimesOutOnTimeNamingTheMissingKeys) {
  auto store = this->kind_.open();
  store->set("present", std::string("1"));
  const auto start = std::chrono::steady_clock::now();
  test::expect_error([&] { store->wait({"present", "absent1", "absent2"}, 300ms); },
                     {"timed out after 300 ms", "\"absent1\"", "\"absent2\""});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 3000ms) << "wait returned far after its timeout";  // generous: CI machines are loaded

  store->set_timeout(200ms);  // get uses the store's timeout
  const auto start2 = std::chrono::steady_clock::now();
  test::expect_error([&] { store->get("never"); }, {"get(\"never\")", "timed out after 200 ms"});
  const auto took2 = std::chrono::steady_clock::now() - start2;
  EXPECT_GE(took2, 190ms);
  EXPECT_LT(took2, 3000ms);
  store->wait({"present"}, 0ms);  // present keys need no time at all
}

TYPED_TEST(StoreTest, WaitReturnsWhenAnotherProcessSetsTheLastKey) {
  auto results = run_ranks(3, [&](int rank) {
    auto store = this->kind_.open();
    if (rank > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * rank));
      store->set("k" + std::to_string(rank), std::string("v"));
      return;
    }
    store->wait({"k1", "k2"}, 5s);
    rank_check(store->check({"k1", "k2"}), "wait returned before both keys existed");
  }, 10s);
  test::expect_all_ok(results);
}

TYPED_TEST(StoreTest, CheckDeleteNumKeys) {
  auto store = this->kind_.open();
  EXPECT_EQ(store->num_keys(), 0);  // the stores' own bookkeeping keys are not counted
  EXPECT_TRUE(store->check({}));
  store->set("a", std::string("1"));
  store->add("b", 5);
  EXPECT_TRUE(store->check({"a", "b"}));
  EXPECT_FALSE(store->check({"a", "c"}));
  EXPECT_EQ(store->num_keys(), 2);
  EXPECT_TRUE(store->delete_key("a"));
  EXPECT_FALSE(store->delete_key("a"));
  EXPECT_FALSE(store->check({"a"}));
  EXPECT_EQ(store->num_keys(), 1);
  EXPECT_EQ(this->kind_.host->num_keys(), 1);
}

TYPED_TEST(StoreTest, ReservedKeysAreRefused) {
  const std::string reserved("\0users", 6);
  test::expect_error([&] { this->kind_.host->set(reserved, std::string("1")); }, {"reserved", "\\x00users"});
  test::expect_error([&] { this->kind_.host->add(reserved, 1); }, {"reserved"});
}

TYPED_TEST(StoreTest, RendezvousAllConstructorsReturn) {
  this->kind_.prepare_rendezvous();
  // Rank r arrives 100 r ms late, so a constructor that waits for the world takes until rank 3 arrives.
  const bool clients_wait = TypeParam::kClientsWaitForAll;
  auto results = run_ranks(4, [&](int rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * rank));
    const auto start = std::chrono::steady_clock::now();
    auto store = this->kind_.open_rank(rank, 4, 5s);
    const auto took = std::chrono::steady_clock::now() - start;
    if (rank == 0 || clients_wait) {
      rank_check(took >= std::chrono::milliseconds(250 - 100 * rank), "returned before the last rank joined");
    }
    store->set("done/" + std::to_string(rank), std::string("1"));
    // The TCP server (rank 0) must outlive its clients' calls.
    if (rank == 0) store->wait({"done/1", "done/2", "done/3"}, 5s);
  }, 15s);
  test::expect_all_ok(results);
}

TYPED_TEST(StoreTest, RendezvousWithAMissingProcessTimesOut) {
  this->kind_.prepare_rendezvous();
  // world_size 3, but only ranks 0 and 1 exist.
  auto results = run_ranks(2, [&](int rank) {
    const auto start = std::chrono::steady_clock::now();
    try {
      auto store = this->kind_.open_rank(rank, 3, 500ms);
    } catch (const Error& e) {
      const auto took = std::chrono::steady_clock::now() - start;
      rank_check(took >= 450ms && took < 5000ms, "the rendezvous failed after an unexpected time");
      throw;
    }
  }, 10s);
  const bool clients_wait = TypeParam::kClientsWaitForAll;
  for (const auto& r : results) {
    const bool should_fail = r.rank == 0 || clients_wait;
    if (!should_fail) {
      EXPECT_TRUE(r.ok()) << r.describe();
      continue;
    }
    EXPECT_TRUE(r.exited && r.status == 1) << r.describe();
    EXPECT_NE(r.message.find("rendezvous"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("of 3 processes joined"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("500 ms"), std::string::npos) << r.message;
  }
}

TYPED_TEST(StoreTest, ThreadsHammeringOneStoreObject) {
  auto store = this->kind_.open();
  constexpr int kThreads = 8, kAdds = 100;
  std::atomic<int> failures{0};
  // One thread blocks in get for a key the last adder sets: a blocked call must not hold up the others.
  std::thread waiter([&] {
    if (store->get_string("all-added") != "yes") ++failures;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        std::string key = "t";  // appended, not "t" + string: GCC 12 warns falsely on that
        key += std::to_string(t);
        key += '/';
        key += std::to_string(i % 5);
        store->set(key, std::to_string(i));
        if (store->get_string(key) != std::to_string(i)) ++failures;
        if (store->add("total", 1) == kThreads * kAdds) store->set("all-added", std::string("yes"));
      }
    });
  }
  for (auto& t : threads) t.join();
  waiter.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store->get_string("total"), std::to_string(kThreads * kAdds));
  EXPECT_EQ(store->num_keys(), 1 + 1 + kThreads * 5);
}

// ---- PrefixStore ----

TYPED_TEST(StoreTest, PrefixStoresDoNotCollide) {
  std::shared_ptr<Store> base = this->kind_.open();
  PrefixStore a("pg0", base), b("pg1", base);
  a.set("rank0", std::string("from a"));
  b.set("rank0", std::string("from b"));
  EXPECT_EQ(a.get_string("rank0"), "from a");
  EXPECT_EQ(b.get_string("rank0"), "from b");
  EXPECT_EQ(base->get_string("pg0/rank0"), "from a");  // the documented key layout
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_TRUE(a.check({"rank0", "n"}));
  EXPECT_FALSE(a.check({"only-b"}));
  b.set("only-b", std::string("x"));
  EXPECT_FALSE(a.check({"only-b"}));
  EXPECT_EQ(a.compare_set("cs", Bytes{}, bytes({1})), bytes({1}));
  EXPECT_FALSE(b.check({"cs"}));
  EXPECT_TRUE(a.delete_key("cs"));
  EXPECT_FALSE(b.delete_key("rank1"));
  test::expect_error([&] { a.wait({"only-b"}, 100ms); }, {"pg0/only-b"});
  EXPECT_EQ(a.num_keys(), base->num_keys());  // forwarded as is: counts every prefix
  a.set_timeout(150ms);                        // a PrefixStore's own timeout bounds its get
  const auto start = std::chrono::steady_clock::now();
  test::expect_error([&] { a.get("never"); }, {"pg0/never", "150 ms"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3000ms);
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.set("k", std::string("v"));
  EXPECT_EQ(base->get_string("outer/inner/k"), "v");
}

// ---- FileStore only ----

TEST(FileStore, CorruptFileIsAClearError) {
  const std::string path = store_testing::fresh_path("corrupt");
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs("this is not a store\n", f);
    std::fclose(f);
  }
  test::expect_error([&] { FileStore s(path); }, {"FileStore: ", path, "is corrupt at byte 0", "KILNFS1"});
  std::filesystem::remove(path);

  // A valid file cut short (a process that died while writing) is caught too.
  {
    FileStore s(path);
    FileStore keep(path);  // a second user, so the file outlives `s`
    s.set("key", std::string("a value of some length"));
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
    test::expect_error([&] { s.get("key"); }, {path, "is corrupt", "bytes of entries"});
    std::filesystem::remove(path);  // so that the destructors, finding no users, leave nothing behind
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(FileStore, TheLastUserRemovesTheFile) {
  const std::string path = store_testing::fresh_path("users");
  auto a = std::make_unique<FileStore>(path);
  auto b = std::make_unique<FileStore>(path);
  a->set("k", std::string("v"));
  a.reset();
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(b->get_string("k"), "v");
  b.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
  // A failed rendezvous gives its user count back: the file does not stay behind.
  test::expect_error([&] { FileStore s(path, 2, 100ms); }, {"rendezvous", "1 of 2 processes joined"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(FileStore, BadArgumentsAreNamed) {
  test::expect_error([] { FileStore s(""); }, {"FileStore: the path is empty"});
  test::expect_error([] { FileStore s(store_testing::fresh_path("bad"), 0); }, {"world_size is 0"});
  test::expect_error([] { FileStore s("/nonexistent-dir-for-kiln/x"); }, {"cannot open", "nonexistent-dir-for-kiln"});
}

}  // namespace
}  // namespace kiln::distributed
