// The child process of the SIGKILL-and-resume test: trains ResumeNet, checkpointing to ROOT/last.ckpt after
// every optimizer step, and writes the final weights to OUT.
//   kiln_resume_child ROOT OUT fresh|resume SLEEP_MS
// "resume" continues from ROOT/last.ckpt when it exists; SLEEP_MS slows each batch so a kill lands mid-run.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "trainer/resume_net.h"

using namespace kiln;

namespace {
struct Slow : trainer::Callback {
  int ms;
  explicit Slow(int m) : ms(m) {}
  std::string state_key() const override { return "Slow"; }
  void on_train_batch_start(trainer::Trainer&, trainer::TrainModule&, const data::Batch&, int64_t) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s ROOT OUT fresh|resume SLEEP_MS\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1], out = argv[2], mode = argv[3];
  try {
    const test::ResumeRun run;
    manual_seed(42);
    test::ResumeNet m;
    auto train = test::resume_train_loader(run);
    auto val = test::resume_val_loader();
    auto o = test::resume_options(root, run);
    const std::string ckpt = root + "/last.ckpt";
    o.callbacks = {std::make_shared<test::SaveEveryStep>(ckpt), std::make_shared<Slow>(std::atoi(argv[4]))};
    const bool resume = mode == "resume" && std::filesystem::exists(ckpt);
    trainer::Trainer(o).fit(m, *train, val.get(), resume ? ckpt : "");
    nn::save(m, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resume_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
