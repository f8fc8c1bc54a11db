// _qobs: the pybind11 translation layer between Python and the qobs C++ core.
//
// A translator, nothing more: the bind_*.cc files (binding.h) convert Python objects to
// qobs types and back (convert.cc), release the GIL around work, and call the public API
// (include/qobs). It holds no arithmetic and no defaults of its own: every default comes
// from the C++ structs, every check from the core. Conveniences (reference-compatible signatures, enums, returning torch
// tensors for torch input) live in python/qobs/*.py.
//
// One bind_*.cc file per part of the API (pybind11's multi-file pattern); this file
// registers the error translator and calls them, in the order their types are needed.
#include <pybind11/pybind11.h>

#include <exception>

#include "binding.h"

namespace py = pybind11;

namespace {

/// The error translator: qobs's exception kinds to the Python types the reference
/// raises (R0.5). Order matters: TypeError and ShapeError derive from
/// std::invalid_argument and must be matched before the generic ValueError case.
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const qobs::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const qobs::InvalidArgument& e) {  // incl. ShapeError
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const qobs::NotImplementedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what());
  } catch (const qobs::PreconditionError& e) {
    PyErr_SetString(PyExc_AssertionError, e.what());
  } catch (const qobs::UnknownName& e) {
    PyErr_SetString(PyExc_KeyError, e.what());
  } catch (const qobs::IoError& e) {
    PyErr_SetString(PyExc_OSError, e.what());
  }
}

}  // namespace

PYBIND11_MODULE(_qobs, m) {
  m.doc() = "qobs C++ core (translation layer; use the `qobs` package)";
  py::register_exception_translator(&translate);
  qobs_ext::bind_tensor(m);
  qobs_ext::bind_args(m);
  qobs_ext::bind_qparams(m);
  qobs_ext::bind_statistics(m);
  qobs_ext::bind_importance(m);
  qobs_ext::bind_observers(m);
  qobs_ext::bind_cuda(m);
  m.attr("__version__") = QOBS_VERSION;
}
