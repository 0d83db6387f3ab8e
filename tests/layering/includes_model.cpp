// Layering probe (tests/CMakeLists.txt): compiled with the kernels layer's include directories
// it must fail, as the kernels may not see the model layer; with the model layer's it must compile.
#include "model/model_spec.hpp"
