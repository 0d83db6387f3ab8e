// Layering probe (tests/CMakeLists.txt): the ops layer is backend-neutral, so compiled with its
// include directories this must fail; with the CPU backend's (which implements ops over the
// kernels) it must compile.
#include "cpu/cpu_context.hpp"
