// Checkpoints: exact round trips of every kind of entry, corruption and truncation caught on load, atomic
// replacement, and exact resume: a run interrupted anywhere (by an error in-process, or by SIGKILL in a child
// process) and resumed from its last checkpoint ends with the same weights, bit for bit, as one never stopped.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainer/resume_net.h"

namespace kiln::test {
namespace {

using trainer::Checkpoint;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

Checkpoint sample_checkpoint() {
  Checkpoint c;
  c.tensors["model.w"] = arange(12).to(kFloat32).view({3, 4}) * 0.1;
  c.tensors["model.idx"] = arange(5);
  c.tensors["optimizer.0.state.0.exp_avg"] = full({2, 2}, 1.5, kBFloat16);
  c.set_int("trainer.global_step", -7);
  c.set_uint("rng.default.offset", UINT64_MAX);
  for (double v : {0.1, 1.0 / 3.0, -0.0, 5e-324, 1.7976931348623157e308}) {
    c.set_double("numbers." + std::to_string(c.metadata.size()), v);
  }
  c.set_double("numbers.inf", INFINITY);
  c.set_double("numbers.nan", NAN);
  c.set("text", "any \"text\" \n with ünïcode");
  return c;
}

TEST(Checkpoint, RoundTripsEveryEntryExactly) {
  TempDir dir;
  const Checkpoint c = sample_checkpoint();
  trainer::save_checkpoint(c, dir / "sub/a.ckpt");  // makes the folder
  const Checkpoint back = trainer::load_checkpoint(dir / "sub/a.ckpt");
  ASSERT_EQ(back.tensors.size(), c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    const Tensor& u = back.tensors.at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(u.contiguous().raw_data_ptr(), t.contiguous().raw_data_ptr(), t.nbytes()), 0) << name;
  }
  for (const auto& [key, value] : c.metadata) {
    if (key.rfind("numbers.", 0) == 0) {
      EXPECT_EQ(bits_of(back.get_double(key)), bits_of(c.get_double(key))) << key << " = " << value;
    } else {
      EXPECT_EQ(back.get(key), value) << key;
    }
  }
  EXPECT_EQ(back.get_int("trainer.global_step"), -7);
  EXPECT_EQ(back.get_uint("rng.default.offset"), UINT64_MAX);
  EXPECT_EQ(back.section("numbers").size(), 7u);
  EXPECT_EQ(back.tensor_section("model").size(), 2u);
}

TEST(Checkpoint, EveryCorruptedByteIsCaught) {
  TempDir dir;
  trainer::save_checkpoint(sample_checkpoint(), dir / "a.ckpt");
  const std::vector<char> good = read_bytes(dir / "a.ckpt");
  // Flip one bit at positions spread over the header and the data: each must fail to load, by the
  // safetensors validation (a broken header) or by the checksum (anything else). Never a silent load.
  int caught_by_checksum = 0;
  for (size_t pos = 8; pos < good.size(); pos += 7) {
    std::vector<char> bad = good;
    bad[pos] ^= 0x10;
    write_bytes(dir / "bad.ckpt", bad);
    try {
      trainer::load_checkpoint(dir / "bad.ckpt");
      ADD_FAILURE() << "a flipped bit at byte " << pos << " of " << good.size() << " was not noticed";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("bad.ckpt"), std::string::npos) << msg;
      if (msg.find("corrupted") != std::string::npos) ++caught_by_checksum;
    }
  }
  EXPECT_GT(caught_by_checksum, 0);
}

TEST(Checkpoint, TruncatedAndForeignFilesAreClearErrors) {
  TempDir dir;
  trainer::save_checkpoint(sample_checkpoint(), dir / "a.ckpt");
  std::vector<char> bytes = read_bytes(dir / "a.ckpt");
  for (size_t keep : {size_t{0}, size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    write_bytes(dir / "short.ckpt", std::vector<char>(bytes.begin(), bytes.begin() + static_cast<long>(keep)));
    EXPECT_THROW(trainer::load_checkpoint(dir / "short.ckpt"), Error) << "kept " << keep << " bytes";
  }
  serialize::save_safetensors(dir / "weights.safetensors", {{"w", ones({2})}});
  try {
    trainer::load_checkpoint(dir / "weights.safetensors");
    ADD_FAILURE() << "a plain safetensors file loaded as a checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a kiln checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_THROW(trainer::load_checkpoint(dir / "missing.ckpt"), Error);
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousFileWhole) {
  TempDir dir;
  trainer::save_checkpoint(sample_checkpoint(), dir / "a.ckpt");
  const std::vector<char> before = read_bytes(dir / "a.ckpt");
  Checkpoint bad = sample_checkpoint();
  bad.tensors["__metadata__"] = ones({1});  // a name safetensors forbids: the save fails
  EXPECT_THROW(trainer::save_checkpoint(bad, dir / "a.ckpt"), Error);
  EXPECT_EQ(read_bytes(dir / "a.ckpt"), before);
  for (const auto& entry : std::filesystem::directory_iterator(dir.str())) {
    EXPECT_EQ(entry.path().filename(), "a.ckpt") << "left behind: " << entry.path();
  }
}

// ---- exact resume, in process ----

struct Interrupt : std::runtime_error {
  Interrupt() : std::runtime_error("interrupted by the test") {}
};

// Throws at the end of training batch number `at` (counted over the whole run), like a crash there.
struct CrashAt : trainer::Callback {
  int64_t at, seen = 0;
  explicit CrashAt(int64_t a) : at(a) {}
  std::string state_key() const override { return "CrashAt"; }
  void on_train_batch_end(trainer::Trainer&, trainer::TrainModule&, const Tensor&, const data::Batch&,
                          int64_t) override {
    if (++seen == at) throw Interrupt();
  }
};

std::vector<std::vector<float>> run_uninterrupted(const std::string& root, const ResumeRun& run) {
  manual_seed(42);
  ResumeNet m;
  auto train = resume_train_loader(run);
  auto val = resume_val_loader();
  auto o = resume_options(root, run);
  o.callbacks = {std::make_shared<SaveEveryStep>(root + "/last.ckpt")};
  trainer::Trainer(o).fit(m, *train, val.get());
  return weights_of(m);
}

// The run from the start, saving `ckpt` after every step, until it crashes at the end of batch `crash_at`.
void crash_run(const ResumeRun& run, const std::string& root, const std::string& ckpt, int64_t crash_at) {
  manual_seed(42);
  ResumeNet m;
  auto train = resume_train_loader(run);
  auto val = resume_val_loader();
  auto o = resume_options(root, run);
  o.callbacks = {std::make_shared<SaveEveryStep>(ckpt), std::make_shared<CrashAt>(crash_at)};
  EXPECT_THROW(trainer::Trainer(o).fit(m, *train, val.get()), Interrupt);
}

TEST(ExactResume, ResumingAfterACrashAnywhereGivesTheSameWeightsBitForBit) {
  const ResumeRun run;
  TempDir ref_dir;
  const auto want = run_uninterrupted(ref_dir.str(), run);
  // Batch 12 ends epoch 0; 13 is mid-accumulation (the checkpoint is one batch back); 18 is right after a
  // validation in the middle of epoch 1; 30 is late in the last epoch.
  for (int64_t crash_at : {1, 12, 13, 18, 30}) {
    TempDir dir;
    const std::string ckpt = dir / "last.ckpt";
    crash_run(run, dir.str(), ckpt, crash_at);
    if (!std::filesystem::exists(ckpt)) {
      ASSERT_EQ(crash_at, 1);  // crashed before the first optimizer step: nothing to resume, start over
    }
    // Whatever the generator holds now must not matter, unless there is nothing to resume from: then the run
    // starts over and must start from the same weights.
    manual_seed(std::filesystem::exists(ckpt) ? 999 : 42);
    ResumeNet m;
    auto train = resume_train_loader(run);
    auto val = resume_val_loader();
    auto o = resume_options(dir.str(), run);
    o.callbacks = {std::make_shared<SaveEveryStep>(ckpt)};
    trainer::Trainer t(o);
    t.fit(m, *train, val.get(), std::filesystem::exists(ckpt) ? ckpt : "");
    EXPECT_EQ(t.global_step(), 18);
    EXPECT_EQ(weights_of(m), want) << "crashed at batch " << crash_at;
  }
}

// precision 16-mixed: the loss scale is part of the state. Float16 overflows in the first steps here (the
// scaled gradients of this regression exceed 65504), so steps are skipped and the scale backs off; a resume
// that started the scale over would skip other steps and end elsewhere.
TEST(ExactResume, A16MixedRunResumesItsLossScale) {
  ResumeRun run;
  run.precision = "16-mixed";
  run.workers = 0;
  TempDir ref_dir;
  double final_scale = 0;
  std::vector<std::vector<float>> want;
  {
    manual_seed(42);
    ResumeNet m;
    auto train = resume_train_loader(run);
    auto val = resume_val_loader();
    auto o = resume_options(ref_dir.str(), run);
    trainer::Trainer t(o);
    t.fit(m, *train, val.get());
    ASSERT_NE(t.grad_scaler(), nullptr);
    final_scale = t.grad_scaler()->get_scale();
    want = weights_of(m);
  }
  EXPECT_LT(final_scale, 65536.0);  // it backed off: the state this test is about
  for (int64_t crash_at : {6, 20}) {
    TempDir dir;
    const std::string ckpt = dir / "last.ckpt";
    crash_run(run, dir.str(), ckpt, crash_at);
    EXPECT_TRUE(trainer::load_checkpoint(ckpt).has("grad_scaler.scale"));
    manual_seed(999);
    ResumeNet m;
    auto train = resume_train_loader(run);
    auto val = resume_val_loader();
    trainer::Trainer t(resume_options(dir.str(), run));
    t.fit(m, *train, val.get(), ckpt);
    EXPECT_EQ(t.grad_scaler()->get_scale(), final_scale) << "crashed at batch " << crash_at;
    EXPECT_EQ(weights_of(m), want) << "crashed at batch " << crash_at;
  }
}

TEST(ExactResume, LastFindsTheNewestCheckpointAndACorruptOneStopsTheRun) {
  const ResumeRun run;
  TempDir dir;
  {
    manual_seed(42);
    ResumeNet m;
    auto train = resume_train_loader(run);
    auto o = resume_options(dir.str(), run);
    o.callbacks = {std::make_shared<SaveEveryStep>(dir / "run/last.ckpt"), std::make_shared<CrashAt>(20)};
    EXPECT_THROW(trainer::Trainer(o).fit(m, *train), Interrupt);
  }
  std::vector<char> bytes = read_bytes(dir / "run/last.ckpt");
  bytes[bytes.size() - 3] ^= 1;  // one bit of a weight
  write_bytes(dir / "run/last.ckpt", bytes);
  ResumeNet m;
  auto train = resume_train_loader(run);
  auto o = resume_options(dir.str(), run);
  o.callbacks = {std::make_shared<SaveEveryStep>(dir / "run/last.ckpt")};
  try {
    trainer::Trainer(o).fit(m, *train, nullptr, "last");
    ADD_FAILURE() << "resumed from a corrupted checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(dir / "run/last.ckpt"), bytes);  // not overwritten by the failed run
}

TEST(ExactResume, AModuleThatDoesNotMatchTheCheckpointIsAClearError) {
  const ResumeRun run;
  TempDir dir;
  {
    manual_seed(42);
    ResumeNet m;
    auto train = resume_train_loader(run);
    auto o = resume_options(dir.str(), run);
    o.max_epochs = 1;
    o.callbacks = {std::make_shared<SaveEveryStep>(dir / "last.ckpt")};
    trainer::Trainer(o).fit(m, *train);
  }
  Regressor other;
  auto train = loader(regression_data(16), 4);
  try {
    trainer::Trainer(quiet(dir.str())).fit(other, *train, nullptr, dir / "last.ckpt");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos) << e.what();
  }
}

// ---- exact resume across SIGKILL ----

// Runs the child (resume_child.cpp) with `args`; if kill_after_first_checkpoint_ms >= 0, SIGKILLs it that many
// ms after its first checkpoint appears. Returns true when the child was killed, false when it exited 0.
bool run_child(const std::vector<std::string>& args, int kill_after_first_checkpoint_ms, const std::string& ckpt) {
  std::vector<char*> argv{const_cast<char*>(KILN_RESUME_CHILD)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (kill_after_first_checkpoint_ms >= 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(ckpt) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kill_after_first_checkpoint_ms));
    kill(pid, SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return true;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed, status " << status;
  return false;
}

TEST(ExactResume, SigkillMidRunThenResumeGivesTheSameWeightsBitForBit) {
  TempDir ref;
  ASSERT_FALSE(run_child({ref.str(), ref / "final.safetensors", "fresh", "0"}, -1, ""));
  const auto want = serialize::load_safetensors(ref / "final.safetensors").tensors;
  for (int delay_ms : {0, 40, 120}) {
    TempDir dir;
    const std::string ckpt = dir / "last.ckpt";
    // Each batch sleeps 4 ms, so the run lasts well over the delays: the kill lands mid-run, at a moment the
    // test does not choose (possibly while a checkpoint is being written).
    EXPECT_TRUE(run_child({dir.str(), dir / "final.safetensors", "fresh", "4"}, delay_ms, ckpt))
        << "the child finished before the kill at " << delay_ms << " ms";
    EXPECT_FALSE(std::filesystem::exists(dir / "final.safetensors"));
    // Killed again during the first resume, then resumed to the end.
    run_child({dir.str(), dir / "final.safetensors", "resume", "4"}, 30, ckpt);
    ASSERT_FALSE(run_child({dir.str(), dir / "final.safetensors", "resume", "0"}, -1, ckpt));
    const auto got = serialize::load_safetensors(dir / "final.safetensors").tensors;
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) {
      const Tensor& u = got.at(name);
      ASSERT_EQ(u.nbytes(), t.nbytes()) << name;
      EXPECT_EQ(std::memcmp(u.raw_data_ptr(), t.raw_data_ptr(), t.nbytes()), 0)
          << name << " differs after a kill at " << delay_ms << " ms";
    }
  }
}

}  // namespace
}  // namespace kiln::test
