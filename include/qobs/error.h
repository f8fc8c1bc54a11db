// qobs error types (R0.5).
//
// One exception class per failure kind of the reference. Each derives from the
// standard exception that a binding layer maps to the matching Python type without a
// custom translator (std::invalid_argument -> ValueError); the Python package adds
// translators only for the kinds Python names differently (NotImplementedError,
// KeyError, AssertionError, TypeError).
#pragma once

#include <stdexcept>
#include <string>

namespace qobs {

/// A value or option is invalid (reference: ValueError / pydantic ValidationError).
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A tensor cannot be viewed in the requested shape (reference: RuntimeError of a
/// reshape). Derives from InvalidArgument: a caller that catches bad input catches it.
class ShapeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// A feature or format combination the reference does not implement
/// (reference: NotImplementedError).
class NotImplementedError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// An operation was called in a state that does not allow it, e.g. get_qparams()
/// without statistics (reference: AssertionError).
class PreconditionError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// A registry lookup failed: unknown observer or preset name (reference: KeyError).
class UnknownName : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

/// A value of the wrong type, e.g. an integer tensor where a float one is needed.
class TypeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A file could not be read or written, or is corrupt.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace qobs
