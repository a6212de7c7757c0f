// error_of(f): the message of the kiln::Error that f throws, or "(no error)": for tests that check an error's
// words. One definition for every test directory (each unity build would otherwise carry its own).
#pragma once

#include <string>

#include "kiln/tensor/error.h"

namespace kiln::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kiln::test
