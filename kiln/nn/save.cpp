#include "kiln/nn/save.h"

namespace kiln::nn {

void save(const Module& m, const std::string& path, serialize::Metadata metadata) {
  metadata.emplace("format", "pt");
  serialize::save_safetensors(path, m.state_dict(), metadata);
}

LoadResult load(Module& m, const std::string& path, bool strict) {
  serialize::Loaded file = serialize::load_safetensors(path);
  return m.load_state_dict(file.tensors, strict);
}

}  // namespace kiln::nn
