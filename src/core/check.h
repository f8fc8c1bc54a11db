// QOBS_CHECK: validate user input once, at the library boundary, by throwing (never
// assert, which NDEBUG removes, and never abort); the kernels then trust their input.
// Messages name the tensor or option, the offending value and the rule id (docs/RULES.md).
#pragma once

#include <sstream>
#include <string>

#include "qobs/error.h"

namespace qobs::detail {

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  os.precision(9);
  (os << ... << parts);
  return os.str();
}

}  // namespace qobs::detail

/// Throws ErrorType with the concatenation of the message parts when cond is false.
#define QOBS_CHECK(cond, ErrorType, ...)                               \
  do {                                                                 \
    if (!(cond)) throw ErrorType(::qobs::detail::concat(__VA_ARGS__)); \
  } while (0)

#define QOBS_THROW(ErrorType, ...) throw ErrorType(::qobs::detail::concat(__VA_ARGS__))

#ifdef NDEBUG
#define QOBS_DASSERT(cond) ((void)0)
#else
#include <cassert>
#define QOBS_DASSERT(cond) assert(cond)
#endif
