// launch() and `kiln launch` on small shell commands: what each rank finds in its environment (read back with
// rank_info_from_env, the reader the ranks of a real job use), how output is prefixed, and how the job ends
// when a rank fails, is killed, cannot start, or the launcher is signalled. Every test is bounded to a few
// seconds: a rank that should be stopped sleeps 60 s, so a launcher that fails to stop it fails the timing check
// instead of passing slowly.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "distributed/multiprocess.h"
#include "kiln/distributed/env.h"
#include "kiln/distributed/launch.h"
#include "kiln/tensor/error.h"
#include "kiln/trainer/checkpoint.h"
#include "tools/tools_test_util.h"

namespace kiln::distributed {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// What one launch() printed and returned, and how long it took.
struct Job {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

std::string read_back(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

Job run_job(int nproc, const std::string& script, milliseconds grace = std::chrono::seconds(5), uint16_t port = 0) {
  LaunchOptions o;
  o.nproc = nproc;
  o.command = {"sh", "-c", script};
  o.grace_period = grace;
  o.master_port = port;
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  o.out_fd = ::fileno(out);
  o.err_fd = ::fileno(err);
  Job job;
  const auto start = Clock::now();
  job.code = launch(o);
  job.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  job.out = read_back(out);
  job.err = read_back(err);
  return job;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

using kiln::test::contains;

// Each rank prints its whole environment; read back through rank_info_from_env, it must give that rank's
// place, and every rank the same store address.
TEST(Launch, EveryRankSeesItsPlaceAndOneSharedPort) {
  const Job job = run_job(3, "env");
  ASSERT_EQ(job.code, 0) << job.err;
  std::map<int, std::map<std::string, std::string>> env;  // rank -> its variables, from its prefixed lines
  const std::regex line(R"(\[rank (\d+)\] ([A-Za-z_][A-Za-z0-9_]*)=(.*))");
  for (const std::string& l : lines_of(job.out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) env[std::stoi(m[1])][m[2]] = m[3];
  }
  ASSERT_EQ(env.size(), 3u) << job.out;
  std::set<uint16_t> ports;
  for (auto& [rank, vars] : env) {
    const std::optional<RankInfo> info = rank_info_from_env([&vars](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->source, "torchrun");
    EXPECT_EQ(info->rank, rank);
    EXPECT_EQ(info->world_size, 3);
    EXPECT_EQ(info->local_rank, rank);
    EXPECT_EQ(info->local_world_size, 3);
    EXPECT_EQ(info->master_addr, "127.0.0.1");
    ports.insert(info->master_port);
  }
  // Ranks share the cores unless the user chose a thread count.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    for (auto& [rank, vars] : env) EXPECT_EQ(vars["OMP_NUM_THREADS"], std::to_string(std::max(1u, cores / 3)));
  }
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_NE(*ports.begin(), 29500) << "expected a free port, not the default";
  EXPECT_TRUE(contains(job.err, "MASTER_PORT=" + std::to_string(*ports.begin()))) << job.err;
}

TEST(Launch, GivenAddressAndPortReachTheRanks) {
  LaunchOptions o;
  o.nproc = 2;
  o.master_addr = "localhost";
  o.master_port = 29611;
  o.command = {"sh", "-c", "echo \"$MASTER_ADDR:$MASTER_PORT\""};
  std::FILE* out = std::tmpfile();
  o.out_fd = ::fileno(out);
  std::FILE* err = std::tmpfile();
  o.err_fd = ::fileno(err);
  EXPECT_EQ(launch(o), 0);
  const std::string text = read_back(out);
  std::fclose(err);
  EXPECT_TRUE(contains(text, "[rank 0] localhost:29611\n")) << text;
  EXPECT_TRUE(contains(text, "[rank 1] localhost:29611\n")) << text;
}

TEST(Launch, FreePortsCanBeBound) {
  const uint16_t a = find_free_port();
  EXPECT_GT(a, 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << "port " << a;
  ::close(fd);
}

TEST(Launch, PrefixesEveryLineAndFlushesAPartialLastLine) {
  const Job job = run_job(1, "printf 'a\\n\\nb'; printf 'e1\\ne2' >&2");
  EXPECT_EQ(job.code, 0);
  EXPECT_EQ(job.out, "[rank 0] a\n[rank 0] \n[rank 0] b\n");
  EXPECT_TRUE(contains(job.err, "[rank 0] e1\n[rank 0] e2\n")) << job.err;
}

// Each rank writes every line in two pieces with a pause between them, so a launcher that forwarded bytes as
// they came would put other ranks' output in the middle of lines.
TEST(Launch, LinesOfDifferentRanksNeverMix) {
  const Job job =
      run_job(4, "for i in 1 2 3 4 5; do printf \"$RANK-begin-\"; sleep 0.02; echo \"$RANK-end-$i\"; done");
  ASSERT_EQ(job.code, 0) << job.err;
  std::map<int, int> count;
  const std::regex line(R"(\[rank (\d)\] (\d)-begin-(\d)-end-\d)");
  for (const std::string& l : lines_of(job.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << "a mixed line: '" << l << "'\n" << job.out;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[1], m[3]);
    ++count[std::stoi(m[1])];
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(count[r], 5) << "rank " << r;
}

// A folder under the system's temporary directory for one test's files, removed at the end.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("kiln_launch_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

// Whether process `pid` has ended, waiting up to `timeout` for it. NOTE: an orphan that died stays a zombie
// until init reaps it, which some container inits do late or never: a zombie counts as ended.
bool gone(pid_t pid, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');  // "pid (name) S ...": the state follows the name
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z') return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

// The sleeping ranks run their sleep as a child of the rank's shell: stopping the job must stop what a rank
// started too, not only the rank (a leftover sleep would also hold the rank's output pipe open).
TEST(Launch, AFailedRankStopsTheOthersAndGivesItsCode) {
  const ScratchDir dir("fail");
  const std::string d = dir.path.string();
  const Job job = run_job(3,
                          "if [ \"$RANK\" = 1 ]; then sleep 0.3; echo bye; exit 3; fi; "
                          "sleep 60 & echo $! > \"" + d + "/sleep-$RANK\"; wait",
                          std::chrono::seconds(10));
  EXPECT_EQ(job.code, 3);
  EXPECT_LT(job.seconds, 8.0) << "the sleeping ranks were not stopped by SIGTERM";
  EXPECT_TRUE(contains(job.err, "rank 1 exited with code 3")) << job.err;
  EXPECT_TRUE(contains(job.out, "[rank 1] bye\n")) << job.out;
  for (int r : {0, 2}) {
    std::ifstream in(dir.path / ("sleep-" + std::to_string(r)));
    pid_t sleep_pid = 0;
    ASSERT_TRUE(in >> sleep_pid) << "rank " << r << " wrote no pid";
    EXPECT_TRUE(gone(sleep_pid, std::chrono::seconds(1))) << "rank " << r << "'s sleep " << sleep_pid << " still runs";
  }
}

// The rank's shell and its sleep both ignore SIGTERM: only SIGKILL, after the grace period, ends them.
TEST(Launch, ARankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const Job job = run_job(2, "if [ \"$RANK\" = 1 ]; then sleep 0.2; exit 5; fi; trap '' TERM; sleep 60",
                          milliseconds(500));
  EXPECT_EQ(job.code, 5);
  EXPECT_GT(job.seconds, 0.6);
  EXPECT_LT(job.seconds, 8.0);  // bounds are generous: CI machines are loaded
  EXPECT_TRUE(contains(job.err, "rank(s) 0 still running 500 ms")) << job.err;
}

TEST(Launch, ASignalKilledRankGives128PlusTheSignal) {
  const Job job = run_job(2, "if [ \"$RANK\" = 0 ]; then kill -SEGV $$; fi; sleep 60");
  EXPECT_EQ(job.code, 128 + SIGSEGV);
  EXPECT_LT(job.seconds, 8.0);
  EXPECT_TRUE(contains(job.err, "rank 0 was killed by SIGSEGV")) << job.err;
}

TEST(Launch, ACommandThatCannotRunIs127) {
  LaunchOptions o;
  o.nproc = 2;
  o.command = {"kiln-test-no-such-command", "--flag"};
  std::FILE* err = std::tmpfile();
  o.err_fd = ::fileno(err);
  const auto start = Clock::now();
  EXPECT_EQ(launch(o), 127);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 8.0);
  const std::string text = read_back(err);
  EXPECT_TRUE(contains(text, "cannot run 'kiln-test-no-such-command' (rank 0): No such file or directory")) << text;
}

TEST(Launch, BadOptionsAreErrors) {
  LaunchOptions o;
  o.command = {"true"};
  o.nproc = 0;
  EXPECT_THROW(launch(o), kiln::Error);
  o.nproc = 1;
  o.command.clear();
  EXPECT_THROW(launch(o), kiln::Error);
}

// SIGTERM sent to the launcher reaches every rank (each records it in a file) and the launcher exits
// 128 + SIGTERM. The launcher runs in a child process here, so the signal does not hit the test runner.
TEST(Launch, SigtermToTheLauncherReachesEveryRank) {
  const ScratchDir scratch("sigterm");
  const std::filesystem::path& dir = scratch.path;
  const std::string d = dir.string();
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchOptions o;
    o.nproc = 2;
    o.command = {"sh", "-c",
                 "trap 'echo $RANK > \"" + d + "/term-$RANK\"; exit 0' TERM; touch \"" + d +
                     "/up-$RANK\"; while :; do sleep 0.05; done"};
    o.out_fd = o.err_fd = ::open("/dev/null", O_WRONLY);
    ::_exit(launch(o));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline && !(std::filesystem::exists(dir / "up-0") && std::filesystem::exists(dir / "up-1"))) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ::kill(launcher, SIGTERM);
  int status = 0;
  while (Clock::now() < deadline + std::chrono::seconds(3) && ::waitpid(launcher, &status, WNOHANG) == 0) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  if (::waitpid(launcher, &status, WNOHANG) == 0) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, &status, 0);
    ADD_FAILURE() << "the launcher did not stop";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << "status " << status;
  EXPECT_TRUE(std::filesystem::exists(dir / "term-0"));
  EXPECT_TRUE(std::filesystem::exists(dir / "term-1"));
}

// `kiln launch` as a user types it, through the command line's own entry point.
TEST(LaunchCli, RunsTheCommandAfterTheDoubleDash) {
  const auto r =
      tools::testing::run_kiln({"launch", "--nproc", "2", "--", "sh", "-c", "echo \"hi $RANK/$WORLD_SIZE\""});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] hi 0/2\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] hi 1/2\n")) << r.out;
}

// --servers S --workers W: S + W ranks, the first S servers, each told S, and their lines named by role.
TEST(LaunchCli, ServersAndWorkersOfAParameterServerJob) {
  const auto r = tools::testing::run_kiln(
      {"launch", "--servers", "2", "--workers", "3", "--", "sh", "-c", "echo \"$RANK/$WORLD_SIZE $KILN_PS_SERVERS\""});
  EXPECT_EQ(r.status, 0) << r.err;
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(contains(r.out, "[server " + std::to_string(k) + "] " + std::to_string(k) + "/5 2\n")) << r.out;
  }
  for (int w = 0; w < 3; ++w) {
    EXPECT_TRUE(contains(r.out, "[worker " + std::to_string(w) + "] " + std::to_string(2 + w) + "/5 2\n")) << r.out;
  }
  EXPECT_TRUE(contains(r.err, "starting 2 servers and 3 workers")) << r.err;
  using tools::testing::run_kiln;
  EXPECT_EQ(run_kiln({"launch", "--servers", "2", "--", "true"}).status, 2);  // no --workers
  EXPECT_EQ(run_kiln({"launch", "--servers", "1", "--workers", "1", "--nproc", "3", "--", "true"}).status, 2);
  EXPECT_EQ(run_kiln({"launch", "--servers", "0", "--workers", "1", "--", "true"}).status, 2);
}

TEST(LaunchCli, ExitStatusAndUsageErrors) {
  using tools::testing::run_kiln;
  EXPECT_EQ(run_kiln({"launch", "--nproc", "2", "sh", "-c", "exit $((RANK * 4))"}).status, 4);
  const auto missing = run_kiln({"launch", "--nproc", "1", "--", "kiln-test-no-such-command"});
  EXPECT_EQ(missing.status, 127);
  EXPECT_TRUE(contains(missing.err, "kiln-test-no-such-command")) << missing.err;
  EXPECT_EQ(run_kiln({"launch", "--", "true"}).status, 2);                         // no --nproc
  EXPECT_EQ(run_kiln({"launch", "--nproc", "0", "--", "true"}).status, 2);
  EXPECT_EQ(run_kiln({"launch", "--nproc", "2x", "--", "true"}).status, 2);
  EXPECT_EQ(run_kiln({"launch", "--nproc", "1", "--master-port", "70000", "--", "true"}).status, 2);
  EXPECT_EQ(run_kiln({"launch", "--nproc", "1", "--bogus", "1", "--", "true"}).status, 2);
  EXPECT_EQ(run_kiln({"launch", "--nproc", "1", "--"}).status, 2);  // no command
  const auto help = run_kiln({"launch", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_TRUE(contains(help.out, "--nproc N")) << help.out;
}

// ---- the main job's command on two ranks ----

#ifdef KILN_CLI_BINARY
// `kiln train` on synthetic data under the launcher, with `sets` added to the small run's settings: the
// launcher's exit code and what the ranks printed (stdout, then stderr).
struct TrainJob {
  int code = 0;
  std::string out, err;
};
TrainJob launch_train(LaunchOptions o, const std::string& root, const std::vector<std::string>& sets) {
  o.command = {KILN_CLI_BINARY, "train",
               "--set", "trainer.default_root_dir=" + root, "--set", "trainer.enable_progress_bar=false",
               "--set", "model.name=mlp", "--set", "model.hidden=[32]",
               "--set", "data.name=synthetic", "--set", "data.num_samples=600", "--set", "data.num_features=8",
               "--set", "data.val_size=100", "--set", "data.batch_size=16", "--set", "data.num_classes=3",
               "--set", "optimizer.lr=0.01"};
  o.command.insert(o.command.end(), sets.begin(), sets.end());
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  o.out_fd = ::fileno(out);
  o.err_fd = ::fileno(err);
  TrainJob job;
  job.code = launch(o);
  job.out = read_back(out);
  job.err = read_back(err);
  return job;
}

// `kiln launch --nproc 2 -- kiln train --set trainer.strategy=ddp` as a user runs it, on synthetic data: both
// ranks train, rank 0 alone writes the run folder and reports the test accuracy, the launcher returns 0.
TEST(LaunchCli, TheTrainerRunsDataParallelUnderKilnLaunch) {
  const ScratchDir dir("ddp_train");
  LaunchOptions o;
  o.nproc = 2;
  const TrainJob job = launch_train(o, dir.path.string(),
                                    {"--set", "trainer.strategy=ddp", "--set", "trainer.max_epochs=2"});
  ASSERT_EQ(job.code, 0) << job.out << job.err;
  EXPECT_TRUE(contains(job.out, "[rank 0] final test accuracy")) << job.out;
  EXPECT_FALSE(contains(job.out, "[rank 1] final test accuracy")) << job.out;
  EXPECT_TRUE(std::filesystem::exists(dir.path / "kiln" / "version_0" / "metrics.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir.path / "kiln" / "version_0" / "checkpoints" / "last.ckpt"));
  EXPECT_FALSE(std::filesystem::exists(dir.path / "kiln" / "version_1"));
}

// `kiln launch --servers 1 --workers 2 -- kiln train --set trainer.strategy=parameter_server`, then the same
// job resumed from its last checkpoint for one more epoch: worker 0 alone reports, the servers exit cleanly.
TEST(LaunchCli, TheTrainerRunsOnAParameterServerUnderKilnLaunch) {
  const ScratchDir dir("ps_train");
  for (const std::string epochs : {"1", "2"}) {
    LaunchOptions o;
    o.nproc = 3;
    o.servers = 1;
    std::vector<std::string> sets{"--set", "trainer.strategy=parameter_server", "--set", "trainer.ps.mode=async",
                                  "--set", "trainer.max_epochs=" + epochs};
    if (epochs == "2") sets.insert(sets.end(), {"--ckpt", "last"});
    const TrainJob job = launch_train(o, dir.path.string(), sets);
    ASSERT_EQ(job.code, 0) << job.out << job.err;
    EXPECT_TRUE(contains(job.out, "[worker 0] final test accuracy")) << job.out;
    EXPECT_FALSE(contains(job.out, "[worker 1] final test accuracy")) << job.out;
    EXPECT_FALSE(contains(job.out, "[server 0] final test accuracy")) << job.out;
  }
  const trainer::Checkpoint last =
      trainer::load_checkpoint(dir.path / "kiln" / "version_0" / "checkpoints" / "last.ckpt");
  EXPECT_EQ(last.get_int("trainer.epoch"), 2);
  EXPECT_EQ(last.get_int("ps.num_servers"), 1);
}

// Ctrl-C on `kiln launch --nproc 2 -- kiln train` (strategy ddp): the launcher passes SIGINT to both ranks, which
// stop together at an optimizer step; rank 0 writes on_exception.ckpt and says how to go on; the job exits
// 128 + SIGINT. Resumed from that checkpoint to the end of the epoch after, the run's weights equal those of
// the same run never stopped, bit for bit.
TEST(LaunchCli, CtrlCStopsTheRanksAtAStepAndTheRunResumesExactly) {
  const ScratchDir dir("ctrl_c");
  const std::string root = (dir.path / "stopped").string();
  const std::vector<std::string> ddp{"--set", "trainer.strategy=ddp", "--set", "trainer.seed=3"};
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchOptions o;
    o.nproc = 2;
    std::vector<std::string> sets = ddp;
    sets.insert(sets.end(), {"--set", "trainer.max_epochs=1000", "--set", "callbacks.checkpoint.every_n_train_steps=3"});
    const TrainJob job = launch_train(o, root, sets);
    std::ofstream(dir.path / "job.txt") << job.out << job.err;
    ::_exit(job.code);
  }
  // Once a step's checkpoint shows training is under way: Ctrl-C, which a terminal sends to the launcher.
  const std::filesystem::path ckpts = std::filesystem::path(root) / "kiln" / "version_0" / "checkpoints";
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && !std::filesystem::exists(ckpts / "last.ckpt")) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ::kill(launcher, SIGINT);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  std::ifstream in(dir.path / "job.txt");
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGINT) << "status " << status << "\n" << said;
  EXPECT_TRUE(contains(said, "[rank 0] kiln train: Trainer: interrupted by SIGINT in epoch ")) << said;
  EXPECT_TRUE(contains(said, "--ckpt " + (ckpts / "on_exception.ckpt").string())) << said;
  const trainer::Checkpoint stopped = trainer::load_checkpoint(ckpts / "on_exception.ckpt");
  const std::string epochs = std::to_string(stopped.get_int("trainer.epoch") + 1);

  std::vector<std::string> resume = ddp;
  resume.insert(resume.end(), {"--set", "trainer.max_epochs=" + epochs, "--ckpt", (ckpts / "on_exception.ckpt").string()});
  const TrainJob resumed = launch_train(LaunchOptions{.nproc = 2}, root, resume);
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  std::vector<std::string> straight = ddp;
  straight.insert(straight.end(), {"--set", "trainer.max_epochs=" + epochs});
  const std::string straight_root = (dir.path / "straight").string();
  const TrainJob through = launch_train(LaunchOptions{.nproc = 2}, straight_root, straight);
  ASSERT_EQ(through.code, 0) << through.out << through.err;

  const trainer::Checkpoint got = trainer::load_checkpoint(ckpts / "last.ckpt");
  const trainer::Checkpoint want =
      trainer::load_checkpoint(std::filesystem::path(straight_root) / "kiln" / "version_0" / "checkpoints" / "last.ckpt");
  EXPECT_EQ(got.get_int("trainer.global_step"), want.get_int("trainer.global_step"));
  const auto want_model = want.tensor_section("model");
  ASSERT_FALSE(want_model.empty());
  for (const auto& [name, t] : got.tensor_section("model")) {
    ASSERT_TRUE(want_model.count(name)) << name;
    EXPECT_TRUE(t.equal(want_model.at(name))) << name << " differs from the run never stopped";
  }
}
#endif

}  // namespace
}  // namespace kiln::distributed

