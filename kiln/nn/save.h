// Saving and loading a module's state_dict as a safetensors file, with PyTorch's key names, so a file moves
// between kiln and PyTorch (safetensors.torch.save_file(model.state_dict(), ...) and load_file) as it is.
#pragma once

#include <string>

#include "kiln/nn/module.h"
#include "kiln/serialize/safetensors.h"

namespace kiln::nn {

// Writes m.state_dict() atomically to path (metadata gets "format": "pt", as PyTorch's writer puts it).
void save(const Module& m, const std::string& path, serialize::Metadata metadata = {});
// Loads path into m through load_state_dict (strict: every key must match; shapes always must).
LoadResult load(Module& m, const std::string& path, bool strict = true);

}  // namespace kiln::nn
