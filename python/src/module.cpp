// sitsrt._sitsrt: the compiled half of the sitsrt package (the idiomatic API is python/sitsrt/).
#include "convert.hpp"
#include "errors.hpp"

#include <sitsrt/version.hpp>

PYBIND11_MODULE(_sitsrt, m) {
  m.doc() = "libsitsrt bindings (use the sitsrt package, not this module)";
  m.attr("__version__") = sitsrt::kVersion;
  sitsrt::python::register_errors(m);
  sitsrt::python::bind_types(m);
  sitsrt::python::bind_engine(m);
  sitsrt::python::bind_request(m);
  sitsrt::python::bind_audit(m);
}
