// Shared by the fuzz targets: which exceptions count as the library rejecting bad input.
#pragma once
#include "qobs/error.h"

namespace qobs::fuzz {

/// Runs f. The library's own error types (include/qobs/error.h) are its documented way
/// of refusing input and are swallowed; anything else (a std::out_of_range from a
/// container, a nlohmann::json type_error, std::bad_alloc, ...) escapes, and libFuzzer
/// reports the uncaught exception as a crash.
template <typename F>
void allow_library_errors(F&& f) {
  try {
    f();
  } catch (const InvalidArgument&) {  // and ShapeError
  } catch (const TypeError&) {
  } catch (const NotImplementedError&) {
  } catch (const PreconditionError&) {
  } catch (const UnknownName&) {
  } catch (const IoError&) {
  }
}

}  // namespace qobs::fuzz
