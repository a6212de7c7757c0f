#include "kiln/tensor/error.h"

namespace kiln::detail {

void throw_error(std::string message) { throw Error(std::move(message)); }

void assert_fail(const char* cond, const char* file, int line, const std::string& message) {
  throw Error(concat("internal error (a bug in kiln): ", cond, " failed at ", file, ":", line,
                     message.empty() ? "" : ": ", message));
}

}  // namespace kiln::detail
