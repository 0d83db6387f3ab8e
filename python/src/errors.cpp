// sitsrt::Error -> Python: one exception class per ErrorCode, all subclasses of sitsrt.Error
// (itself a RuntimeError). Codes that name a Python concept also derive from the built-in one,
// so `except ValueError` / `except OSError` / `except MemoryError` work as a Python user expects.
#include "errors.hpp"

#include "convert.hpp"

#include <sitsrt/error.hpp>

#include <array>

namespace py = pybind11;

namespace sitsrt::python {
namespace {

struct ErrorClass {
  ErrorCode code;
  const char* name;
  PyObject* extra_base;  // a built-in base besides sitsrt.Error, or nullptr
  const char* doc;
};

PyObject* g_base = nullptr;
std::array<PyObject*, 7> g_classes{};

}  // namespace

void register_errors(py::module_& m) {
  g_base = PyErr_NewExceptionWithDoc("sitsrt._sitsrt.Error",
                                     "Base of every error the runtime reports; .code names the kind.",
                                     PyExc_RuntimeError, nullptr);
  m.add_object("Error", py::handle(g_base));
  const std::array<ErrorClass, 7> classes{{
      {ErrorCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError,
       "A parameter or option is out of range."},
      {ErrorCode::kInvalidModel, "InvalidModelError", nullptr,
       "A model file is malformed, truncated or inconsistent."},
      {ErrorCode::kUnsupported, "UnsupportedError", nullptr,
       "Valid input that this build cannot handle (tensor type, architecture, ISA)."},
      {ErrorCode::kIo, "IOError", PyExc_OSError, "The operating system refused a file operation."},
      {ErrorCode::kOutOfMemory, "OutOfMemoryError", PyExc_MemoryError,
       "An allocation or a memory budget could not be satisfied."},
      {ErrorCode::kRejected, "RejectedError", nullptr,
       "The engine refused the request (e.g. an open circuit breaker, a different model)."},
      {ErrorCode::kInternal, "InternalError", nullptr, "A broken invariant inside the library (a bug)."},
  }};
  for (const ErrorClass& c : classes) {
    py::tuple bases = c.extra_base ? py::tuple(py::make_tuple(py::handle(g_base), py::handle(c.extra_base)))
                                   : py::tuple(py::make_tuple(py::handle(g_base)));
    const std::string qualified = std::string("sitsrt._sitsrt.") + c.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    std::string code = to_string(c.code);  // "invalid model" -> "invalid_model"
    for (char& ch : code) ch = ch == ' ' ? '_' : ch;
    PyObject_SetAttrString(cls, "code", py::str(code).ptr());
    g_classes[static_cast<std::size_t>(c.code)] = cls;
    m.add_object(c.name, py::handle(cls));
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PythonSinkError& e) {
      // KeyboardInterrupt, SystemExit, ... raised in a sink come out as themselves; other
      // exceptions as RejectedError caused by them.
      const py::object& original = e.exception();
      if (!PyObject_IsInstance(original.ptr(), PyExc_Exception)) {
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(original.ptr())), original.ptr());
        return;
      }
      PyObject* cls = g_classes[static_cast<std::size_t>(ErrorCode::kRejected)];
      py::object error = py::reinterpret_steal<py::object>(PyObject_CallFunction(cls, "s", e.what()));
      if (!error) return;  // the call set its own exception
      PyException_SetCause(error.ptr(), original.inc_ref().ptr());
      PyErr_SetObject(cls, error.ptr());
    } catch (const Error& e) {
      const auto index = static_cast<std::size_t>(e.code());
      PyObject* cls = index < g_classes.size() && g_classes[index] ? g_classes[index] : g_base;
      PyErr_SetString(cls, e.what());
    }
  });
}

}  // namespace sitsrt::python
