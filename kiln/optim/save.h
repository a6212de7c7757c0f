// Saving and loading an optimizer's state (its per-parameter tensors and its groups' options) as a safetensors
// file: the tensors as tensors, the numbers as metadata written with 17 significant digits, so every double
// comes back bit for bit and a resumed run matches one that never stopped.
#pragma once

#include <string>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

void save(const Optimizer& opt, const std::string& path);
// Loads path into opt through load_state_dict, which checks it against opt's groups and parameters.
void load(Optimizer& opt, const std::string& path);

}  // namespace kiln::optim
