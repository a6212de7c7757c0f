#include "kiln/optim/save.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "kiln/serialize/safetensors.h"

namespace kiln::optim {

void save(const Optimizer& opt, const std::string& path) {
  OptimizerState state = opt.state_dict();
  serialize::Metadata metadata{{"kiln.optimizer", opt.name()}};
  for (const auto& [key, value] : state.scalars) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", value);  // 17 digits: any double, exactly
    metadata.emplace(key, buf);
  }
  serialize::save_safetensors(path, state.tensors, metadata);
}

void load(Optimizer& opt, const std::string& path) {
  serialize::Loaded file = serialize::load_safetensors(path);
  auto kind = file.metadata.find("kiln.optimizer");
  KILN_CHECK(kind != file.metadata.end(), "optim::load: \"", path, "\" holds no optimizer state (no kiln.optimizer "
             "entry in its metadata)");
  KILN_CHECK(kind->second == opt.name(), "optim::load: \"", path, "\" holds the state of ", kind->second,
             ", not of ", opt.name());
  OptimizerState state;
  state.tensors = std::move(file.tensors);
  for (const auto& [key, text] : file.metadata) {
    if (key == "kiln.optimizer") continue;
    char* end = nullptr;
    errno = 0;
    double value = std::strtod(text.c_str(), &end);
    KILN_CHECK(end != text.c_str() && *end == '\0' && errno != ERANGE, "optim::load: \"", path, "\": ", key,
               " is \"", text, "\", not a number");
    state.scalars.emplace(key, value);
  }
  opt.load_state_dict(state);
}

}  // namespace kiln::optim
