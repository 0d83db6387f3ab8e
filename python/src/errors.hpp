// The one place where sitsrt::Error becomes a Python exception (sitsrt.Error and a subclass per
// ErrorCode); see errors.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace sitsrt::python {

// Creates sitsrt._sitsrt.Error and its subclasses and registers the translator.
void register_errors(pybind11::module_& m);

}  // namespace sitsrt::python
