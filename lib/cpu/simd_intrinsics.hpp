// <immintrin.h> for the ISA files (*_avx2.cpp, *_avx512*.cpp, *_amx.cpp and their private
// headers), with the one warning workaround they all need: GCC 12's intrinsic headers make their
// "undefined" vectors by self-initialisation, which -Wmaybe-uninitialized / -Wuninitialized report
// at every inlined intrinsic (GCC bug 105593). The pragmas hold for the rest of the including
// file, so include this before any intrinsic is used.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
