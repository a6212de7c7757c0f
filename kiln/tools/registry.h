// Models and datasets a program adds to `kiln train`: register them by name, then hand the command line to
// run_cli, and every command (train, eval, predict, export, bench, lr-find, scale-batch-size, generate) takes
// `model.name: <yours>` or `data.name: <yours>` in a run.yaml, with the arguments under `model.args` and
// `data.args`. This is what LightningCLI does for a LightningModule, without Python:
//
//   int main(int argc, char** argv) {
//     kiln::tools::register_model("wide-mlp", {
//         .build = [](const kiln::tools::Args& args, const kiln::tools::DataInfo& data) {
//           const int64_t width = args.get<int64_t>("width", 256);  // model.args.width, 256 when not given
//           ...return a module mapping a batch of inputs to (N, data.num_classes) scores...
//         },
//         .doc = "one wide hidden layer"});
//     return kiln::tools::run_cli({argv + 1, argv + argc});
//   }
//
//   ./my_trainer train --config run.yaml --set model.name=wide-mlp --set model.args.width=512
//
// The arguments are checked as strictly as the built-in keys: a wrong type names the key, what was found and
// where it was written ("model.args.width: expected an integer, found 'wide' (run.yaml line 7)"), and an
// argument the model never read is an error, not a silent no-op (a misspelt `widht` would otherwise train the
// default). The config a checkpoint carries includes the arguments, so eval, predict and export rebuild the same
// model; they need the program that registered it (the stock `kiln` says which name it does not know).
//
// Register before the first config is loaded, from one thread (main, as above); registration is not a static
// initializer's job: the order of those across files is unspecified.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/tools/datasets.h"
#include "kiln/tools/models.h"
#include "kiln/tools/run_config.h"
#include "kiln/trainer/config.h"

namespace kiln::tools {

// The arguments of one registered model or dataset: the mapping under model.args or data.args, read with
// types and defaults. Each get() marks its key as used; see check_all_used().
class Args {
 public:
  // `name` is where the mapping lives ("model.args"), for messages; `mapping` a YAML mapping (or null).
  Args(std::string name, trainer::yaml::Node mapping);

  // The value of `key` as a T, or `fallback` when the mapping has no such key. T is any type a config key can
  // have: bool, int, int64_t, double, std::string, std::vector of those, std::optional of those, or
  // trainer::yaml::Node for the value as written (unchecked: prefer sub() for a nested mapping).
  template <typename T>
  T get(std::string_view key, T fallback) const {
    const trainer::yaml::Node* value = find(key);
    return value ? read<T>(key, *value) : fallback;
  }
  // The nested mapping under `key` as Args of its own ("model.args.block"), empty when not given: read its
  // keys as these, and check_all_used() checks them too.
  const Args& sub(std::string_view key) const;
  // The value of `key` as a T; an error naming the key when it is missing.
  template <typename T>
  T required(std::string_view key) const {
    return read<T>(key, find_required(key));
  }
  bool contains(std::string_view key) const { return mapping_.is_mapping() && mapping_.find(key) != nullptr; }
  // Every key as written, in order.
  std::vector<std::string> keys() const;
  const std::string& name() const { return name_; }

  // Throws when the mapping (or a sub() of it) has a key no get(), required() or sub() asked for, naming it and
  // `owner` (the model or dataset that was built):
  // "model.args.widht (run.yaml line 7): model 'wide-mlp' has no argument 'widht' (it read width)".
  void check_all_used(const std::string& owner) const;

 private:
  const trainer::yaml::Node* find(std::string_view key) const;
  const trainer::yaml::Node& find_required(std::string_view key) const;
  template <typename T>
  T read(std::string_view key, const trainer::yaml::Node& value) const {
    if constexpr (std::is_same_v<T, trainer::yaml::Node>) {
      return value;
    } else {
      trainer::ConfigKey spec;  // no choices, no minimum: the model checks its own ranges
      return trainer::config_detail::Codec<T>::read(value, spec, name_ + "." + std::string(key));
    }
  }

  std::string name_;
  trainer::yaml::Node mapping_;
  mutable std::set<std::string, std::less<>> used_;
  mutable std::map<std::string, std::unique_ptr<Args>, std::less<>> subs_;
};

struct ModelSpec {
  // Builds the model from its arguments and the data's shape. A classifier maps a batch of inputs
  // (N, *data.input_shape) to scores (N, data.num_classes); a language model (below) must derive from
  // LanguageModel and map (N, S) token ids to (N, S, data.num_classes).
  std::function<std::shared_ptr<nn::Module>(const Args& args, const DataInfo& data)> build;
  std::string doc;  // one line, shown by `kiln train --help`
  bool language_model = false;  // takes token sequences (data.name text, or a dataset of tokens)
};

struct DatasetSpec {
  // Builds the splits. `config` is the whole data section: a dataset may use data.path, data.seed,
  // data.val_size and data.normalize as the built-in ones do (kiln itself neither normalizes nor augments a
  // registered dataset), and its own keys under data.args; the built-in datasets' other keys
  // (random_crop_padding, horizontal_flip, label_column, num_samples, num_features, num_classes, block_size)
  // must stay at their defaults, as must the built-in models' keys (model.hidden ... model.dropout) for a
  // registered model: set, they would be ignored. train is required; val and test may be null (no
  // validation; `kiln eval --split test` then says there is no test split).
  // info.input_shape is one example's shape, info.num_classes the number of classes (labels 0 .. K-1, int64),
  // info.tokens whether examples are token sequences for a language model.
  std::function<DataSplits(const Args& args, const RunConfig::Data& config)> build;
  std::string doc;
};

// Adds a model or dataset under `name` (letters, digits, '-' and '_'). Throws when the name is a built-in's,
// was registered already, or the spec has no build function.
void register_model(const std::string& name, ModelSpec spec);
void register_dataset(const std::string& name, DatasetSpec spec);

// The built-in names (model.name mlp ... lstm-lm, data.name fashion-mnist ... text).
const std::vector<std::string>& builtin_models();
const std::vector<std::string>& builtin_datasets();
// The names registered so far, sorted (not the built-ins).
std::vector<std::string> registered_models();
std::vector<std::string> registered_datasets();
// The spec registered under `name`, or null.
const ModelSpec* find_registered_model(std::string_view name);
const DatasetSpec* find_registered_dataset(std::string_view name);

// Whether model `name` (built-in or registered) takes token sequences.
bool is_language_model(std::string_view name);

// Forgets every registration (for tests, between runs: the specs find_registered_* returned are gone).
void clear_registry();

}  // namespace kiln::tools
