// Layering probe (tests/CMakeLists.txt): compiled with the core layer's include directories it
// must fail, as core may not see an upper layer; with the runtime layer's it must compile.
#include "runtime/sampler.hpp"
