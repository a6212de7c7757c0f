// Checkpoint: everything a run needs to go on exactly where it stopped, in one safetensors file.
//
// Tensors (model weights, optimizer state) are safetensors tensors; everything else (progress counters, RNG
// states, scheduler and callback state, hyperparameters) is text in the safetensors metadata, numbers written
// so that they read back bit for bit. The file is therefore readable by any safetensors tool, and its weights
// load in PyTorch under their PyTorch names with the "model." prefix stripped.
//
// Keys, by prefix:
//   model.<name>                 tensor  the module's state_dict
//   optimizer.<i>.<key>          tensor  optimizer i's state tensors (OptimizerState.tensors)
//   optimizer.<i>.<key>          text    its numbers (OptimizerState.scalars)
//   scheduler.<i>.<key>          text    scheduler i's state
//   trainer.<key>                text    progress: epoch, global_step, batch_in_epoch, ...
//   rng.<key>                    text    the default generator's seed and offset, the loaders' positions
//   callbacks.<state_key>.<key>  text    each callback's checkpoint_state()
//   datamodule.<key>             text    the DataModule's state_dict() (a fit given one, data_module.h)
//   datamodule_at_build.<key>    text    its state_dict() when the loaders in use were built (the epoch they
//                                        were built for: trainer.datamodule_loaders_epoch)
//   hparams.<key>                text    the module's hyperparameters
//   ps.shard.<k>.values          tensor  parameter server k's shard (strategy parameter_server), and
//   ps.shard.<k>.optimizer.<key> both    its optimizer's state; ps.num_servers (text) says how many
//   kiln.format, kiln.checksum   text    "kiln-checkpoint/1" and a CRC-32C of everything else
// A weights-only checkpoint (save_weights_only) holds model.*, hparams.*, trainer.epoch, trainer.global_step
// and trainer.weights_only = "1", and whatever on_save_checkpoint hooks add.
//
// Writing goes through a temporary file, fsync and rename (serialize::save_safetensors), so a crash at any
// moment leaves the previous file intact. Reading checks the safetensors structure, then the format tag, then
// the checksum over every tensor's bytes and every metadata entry: a truncated or corrupted file is a
// kiln::Error that names it, never a silently wrong resume.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/serialize/safetensors.h"

namespace kiln::trainer {

inline constexpr const char* kCheckpointFormat = "kiln-checkpoint/1";

struct Checkpoint {
  serialize::TensorMap tensors;
  serialize::Metadata metadata;
  // Where it was read from ("" for one built in memory): error messages name it.
  std::string path;

  void set(const std::string& key, std::string value) { metadata[key] = std::move(value); }
  void set_int(const std::string& key, int64_t value);
  void set_uint(const std::string& key, uint64_t value);
  void set_double(const std::string& key, double value);  // exact: reads back bit for bit

  bool has(const std::string& key) const { return metadata.count(key) != 0; }
  // The value of `key`: a kiln::Error naming the key and the file when absent or not a number of that kind.
  const std::string& get(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  double get_double(const std::string& key) const;

  // The entries whose key starts with "<prefix>.", with that prefix removed.
  std::map<std::string, std::string> section(const std::string& prefix) const;
  serialize::TensorMap tensor_section(const std::string& prefix) const;
};

// CRC-32C of every tensor (name, dtype, shape, bytes) and every metadata entry except kiln.checksum.
uint32_t checkpoint_checksum(const Checkpoint& checkpoint);

// Writes the checkpoint atomically to `path` (creating its folder), stamping kiln.format and kiln.checksum.
void save_checkpoint(const Checkpoint& checkpoint, const std::string& path);
// Reads and verifies a checkpoint written by save_checkpoint.
Checkpoint load_checkpoint(const std::string& path);

// The most recently written last.ckpt anywhere under `root` that a fit can resume from ("" when there is none):
// what ckpt_path "last" resumes from. Weights-only ones (save_weights_only) are passed over; the newest of those
// goes to *weights_only when it is given, so that a caller can say why nothing was found.
std::string find_last_checkpoint(const std::string& root, std::string* weights_only = nullptr);

}  // namespace kiln::trainer
