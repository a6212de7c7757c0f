// The `kiln` command line: train, eval, predict, export, bench and info, on the built-in models and datasets,
// configured by a YAML file (kiln/tools/run_config.h) with --set overrides; and launch, which starts N local
// ranks of any program with the torchrun-style variables set (kiln/distributed/launch.h).
//
//   kiln train --config configs/fashion_mnist_cnn.yaml [--set trainer.max_epochs=5] [--ckpt last]
//   kiln eval --ckpt runs/.../checkpoints/last.ckpt [--split val]
//   kiln predict --ckpt best.ckpt --output predictions.csv
//   kiln export --ckpt best.ckpt --output model.safetensors
//   kiln bench --config configs/fashion_mnist_cnn.yaml --steps 50 --profile
//   kiln info
//   kiln launch --nproc 4 -- ./my_ddp_program
#pragma once

#include <string>
#include <vector>

namespace kiln::tools {

// Runs one command (args excludes the program name); returns the process exit status. Errors (a bad config
// value, a missing file, a corrupt checkpoint) are printed to stderr as "kiln <command>: error: ..." and give
// status 1; an unknown command or option gives 2.
int run_cli(const std::vector<std::string>& args);

}  // namespace kiln::tools
