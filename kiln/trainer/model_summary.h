// ModelSummary: a table of a module's layers (name, type, parameters, size) and its totals, printed when fit()
// starts, as Lightning's ModelSummary callback:
//
//     | Name | Type       | Params  | Size (MB)
//   --------------------------------------------
//   0 | net  | Sequential | 407,050 | 1.628
//   --------------------------------------------
//   407,050   Trainable params
//   0         Non-trainable params
//   407,050   Total params
//   1.628     Total estimated model params size (MB)
//
// A layer's count includes its sublayers'. Sizes are the parameters' bytes (numel times element size) in
// MB of 10^6 bytes; buffers (BatchNorm's running statistics) are not parameters and are not counted.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct LayerSummary {
  std::string name;  // dotted, as named_modules ("net.0")
  std::string type;  // the module's type_name ("Linear")
  int64_t params = 0;
  int64_t bytes = 0;
};

struct ModuleSummary {
  std::vector<LayerSummary> layers;  // depth first, down to max_depth
  int64_t trainable_params = 0, non_trainable_params = 0, total_params = 0;
  int64_t total_bytes = 0;
};

// The layers of `module` down to `max_depth` (1: its children; -1: every level; 0: none) and its totals.
ModuleSummary summarize(const nn::Module& module, int max_depth = 1);
// The table above, as text.
std::string model_summary(const nn::Module& module, int max_depth = 1);

struct ModelSummaryOptions {
  int max_depth = 1;
  std::FILE* out = stdout;
};

class ModelSummary : public Callback {
 public:
  explicit ModelSummary(ModelSummaryOptions options = {});
  const ModelSummaryOptions& options() const { return options_; }
  std::string state_key() const override { return "ModelSummary"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;

 private:
  ModelSummaryOptions options_;
};

}  // namespace kiln::trainer
