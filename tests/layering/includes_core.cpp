// Layering probe (tests/CMakeLists.txt): a layer sees the layers below it, so compiled with the
// kernels layer's include directories this must compile.
#include "core/check.hpp"
