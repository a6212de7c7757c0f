// TCPStore's own cases, beyond the shared Store contract of store_test.cpp: ports (ephemeral, taken, a wildcard
// host), connecting (before the server exists, to nothing, to something that is not a store) and a server
// that dies under its clients. Times are measured, since "promptly" and "within the timeout" are the point.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "distributed/multiprocess.h"
#include "kiln/distributed/launch.h"
#include "kiln/distributed/store.h"
#include "tensor/test_util.h"

namespace kiln::distributed::store_testing {
}

namespace kiln::distributed {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::rank_check;
using test::run_ranks;

TCPStoreOptions options(uint16_t port, bool is_server, Duration timeout = 5s, int world_size = -1) {
  TCPStoreOptions o;
  o.port = port, o.is_server = is_server, o.timeout = timeout, o.world_size = world_size;
  return o;
}

TEST(TCPStore, EphemeralPortServesClients) {
  TCPStore server(options(0, true));
  ASSERT_NE(server.port(), 0);
  TCPStore client(options(server.port(), false));
  EXPECT_EQ(client.port(), server.port());
  client.set("k", std::string("from the client"));
  EXPECT_EQ(server.get_string("k"), "from the client");
}

TEST(TCPStore, ATakenPortIsAClearError) {
  TCPStore first(options(0, true));
  const std::string port = std::to_string(first.port());
  test::expect_error([&] { TCPStore second(options(first.port(), true)); },
                     {"TCPStore: port " + port + " on 127.0.0.1 is in use (EADDRINUSE)", "another job's store?"});
  first.set("still", std::string("works"));  // the failed server did not disturb the first
  EXPECT_EQ(first.get_string("still"), "works");
}

TEST(TCPStore, AWildcardHostServesItsOwnCallsOverLoopback) {
  TCPStoreOptions o = options(0, true);
  o.host = "0.0.0.0";
  TCPStore server(o);
  server.set("k", std::string("v"));
  TCPStore client(options(server.port(), false));
  EXPECT_EQ(client.get_string("k"), "v");
}

TEST(TCPStore, AClientStartedBeforeTheServerConnectsByRetrying) {
  const uint16_t port = find_free_port();
  auto results = run_ranks(2, [&](int rank) {
    if (rank == 0) {
      std::this_thread::sleep_for(300ms);
      TCPStore server(options(port, true, 5s, 2));  // returns once the client has registered
      rank_check(server.get_string("hello") == "from rank 1", "the client's key did not arrive");
      return;
    }
    const auto start = Clock::now();
    TCPStore client(options(port, false, 5s, 2));
    rank_check(Clock::now() - start >= 250ms, "connected before the server existed?");
    client.set("hello", std::string("from rank 1"));
  }, 10s);
  test::expect_all_ok(results);
}

TEST(TCPStore, NoServerFailsAtTheTimeoutNamingTheAddress) {
  const uint16_t port = find_free_port();
  const auto start = Clock::now();
  test::expect_error([&] { TCPStore client(options(port, false, 300ms)); },
                     {"could not connect to the server at 127.0.0.1:" + std::to_string(port), "within 300 ms",
                      "attempts", "refused"});
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 3000ms);  // generous: CI machines are loaded
}

TEST(TCPStore, SomethingElseOnThePortIsNamed) {
  // A listener that answers like a web server.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread http([fd] {
    const int c = ::accept(fd, nullptr, nullptr);
    const char reply[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
    (void)!::send(c, reply, sizeof reply - 1, MSG_NOSIGNAL);
    ::close(c);
  });
  test::expect_error([&] { TCPStore client(options(ntohs(a.sin_port), false, 2s)); },
                     {"not a kiln TCPStore", "another service on this port?"});
  http.join();
  ::close(fd);
}

TEST(TCPStore, AServerThatDiesFailsClientCallsPromptly) {
  const uint16_t port = find_free_port();
  auto results = run_ranks(2, [&](int rank) {
    if (rank == 0) {
      TCPStore server(options(port, true, 5s));
      server.get("client-ready");
      std::this_thread::sleep_for(200ms);
      ::_exit(0);  // dies without its destructor, as a crashed rank would
    }
    TCPStore client(options(port, false, 30s));
    client.set("client-ready", std::string("1"));
    const auto start = Clock::now();
    try {
      client.get("never-set");  // blocked when the server dies
      rank_check(false, "get returned a value from a dead server");
    } catch (const Error& e) {
      const std::string msg = e.what();
      rank_check(Clock::now() - start < 5000ms, "the blocked get failed only after " + msg);
      rank_check(msg.find("lost the connection to the server at 127.0.0.1:" + std::to_string(port)) !=
                     std::string::npos, "unclear message: " + msg);
    }
    const auto start2 = Clock::now();
    try {
      client.set("after", std::string("1"));  // and a new call fails at once, not after 30 s
      rank_check(false, "set succeeded on a dead server");
    } catch (const Error& e) {
      const std::string msg = e.what();
      rank_check(Clock::now() - start2 < 5000ms, "the next call failed only after a while: " + msg);
      rank_check(msg.find("did the server process exit?") != std::string::npos, "unclear message: " + msg);
    }
  }, 10s);
  test::expect_all_ok(results);
}

TEST(TCPStore, BadOptionsAreNamed) {
  test::expect_error([] { TCPStore s(options(0, false)); }, {"a client needs the server's port"});
  test::expect_error([] { TCPStore s(options(0, true, 1s, 0)); }, {"world_size is 0"});
}

}  // namespace
}  // namespace kiln::distributed
