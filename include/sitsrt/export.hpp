// Symbol visibility for the public API. The library is compiled with hidden visibility;
// only declarations marked SITSRT_API are exported from the shared library.
#pragma once

#if defined(_WIN32)
#define SITSRT_API
#else
#define SITSRT_API __attribute__((visibility("default")))
#endif
