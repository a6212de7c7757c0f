// What the `kiln` commands share (kiln/tools/cli.cpp defines it): their argument parser, and the one mapping of
// a RunConfig onto kiln objects (data, model, loaders, Trainer options). train, eval, predict, launch and info
// live in cli.cpp; export, bench, lr-find, scale-batch-size and generate, which work on a model outside a
// training run, in cli_model.cpp.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/tools/classifier.h"
#include "kiln/tools/datasets.h"
#include "kiln/tools/run_config.h"
#include "kiln/trainer/checkpoint.h"
#include "kiln/trainer/trainer.h"

namespace kiln::tools::cli {

// The command line after the command name: flags with values, --profile, and --help.
struct Flags {
  std::string config, ckpt, split = "test", output, dtype, steps, warmup;
  std::string prompt, tokens, temperature, top_k, seed;  // kiln generate
  std::string min_lr, max_lr;                            // kiln lr-find
  std::string mode, init, max_trials, memory_limit;      // kiln scale-batch-size
  std::vector<std::string> sets;
  bool help = false, profile = false;
};

// A usage error (exit status 2): std::invalid_argument with the message.
[[noreturn]] void usage_error(const std::string& message);
// Parses args[first..]: each flag in `allowed` takes a value (--profile takes none); others are usage errors.
Flags parse_args(const std::vector<std::string>& args, size_t first, const std::vector<std::string>& allowed);
// An integer flag value in [min, max]; anything else (a sign, trailing text, out of range) is a usage error.
int parse_int_flag(const std::string& flag, const std::string& value, int min, int max);

// What a run is made of, built from a config.
struct Run {
  DataSplits data;
  std::shared_ptr<Classifier> module;
  std::unique_ptr<data::DataLoader> train, val, test;
};
Run build_run(const RunConfig& cfg);
trainer::TrainerOptions trainer_options(const RunConfig& cfg);
// The config a checkpoint written by kiln train carries, with the command line's --set applied.
RunConfig config_of_checkpoint(const trainer::Checkpoint& c, const std::vector<std::string>& sets);
// "test/acc 0.9100  test/loss 0.2500"
std::string format_metrics(const std::map<std::string, double>& metrics);

// The commands of cli_model.cpp.
int cmd_export(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_lr_find(const std::vector<std::string>& args);
int cmd_scale_batch_size(const std::vector<std::string>& args);
int cmd_generate(const std::vector<std::string>& args);

}  // namespace kiln::tools::cli
