// kiln::Error and the checks that raise it.
//
// User mistakes (a wrong shape, a bad dim, an unsupported dtype) throw kiln::Error with a message that names
// the op, the values involved and what was expected: "matmul: shapes (3,4) and (5,6) do not match: 4 != 5".
// KILN_CHECK builds that message only when the check fails, so checks cost a branch on the hot path.
// Internal invariants (things no user input can break) use KILN_ASSERT, which names file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation the device (or a memory limit set on it) could not serve. Code that can shrink its work and
// try again (the batch-size finder) catches this one apart from the rest.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] void throw_error(std::string message);
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& message);

}  // namespace detail
}  // namespace kiln

// KILN_CHECK(cond, "op: ", what, ...): throws kiln::Error(concat(...)) when cond is false.
#define KILN_CHECK(cond, ...)                                      \
  do {                                                             \
    if (!(cond)) [[unlikely]] {                                    \
      ::kiln::detail::throw_error(::kiln::detail::concat(__VA_ARGS__)); \
    }                                                              \
  } while (0)

// KILN_ASSERT(cond, ...): an internal invariant; failing it is a bug in kiln, reported with file:line.
#define KILN_ASSERT(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::kiln::detail::assert_fail(#cond, __FILE__, __LINE__, ::kiln::detail::concat("" __VA_OPT__(,) __VA_ARGS__)); \
    }                                                                                       \
  } while (0)
