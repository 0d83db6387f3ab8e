// cuBLASLt, loaded when first needed (dlopen) rather than linked: a build with the CUDA backend
// then loads and runs where the toolkit's libcublasLt is not on the library path (the CPU
// backend, or CUDA without the prefill GEMMs, which fall back to the decode kernels).
#pragma once

#include <cublasLt.h>

#include <string>

namespace sitsrt::cuda {

// The entry points used, as (member, symbol): declared and resolved from this one list.
#define SITSRT_CUBLASLT_FUNCTIONS(X)                                \
  X(create, cublasLtCreate)                                         \
  X(destroy, cublasLtDestroy)                                       \
  X(matmul_desc_create, cublasLtMatmulDescCreate)                   \
  X(matmul_desc_destroy, cublasLtMatmulDescDestroy)                 \
  X(matmul_desc_set_attribute, cublasLtMatmulDescSetAttribute)      \
  X(matrix_layout_create, cublasLtMatrixLayoutCreate)               \
  X(matrix_layout_destroy, cublasLtMatrixLayoutDestroy)             \
  X(preference_create, cublasLtMatmulPreferenceCreate)              \
  X(preference_destroy, cublasLtMatmulPreferenceDestroy)            \
  X(preference_set_attribute, cublasLtMatmulPreferenceSetAttribute) \
  X(algo_get_heuristic, cublasLtMatmulAlgoGetHeuristic)             \
  X(matmul, cublasLtMatmul)

struct CublasLt {
#define SITSRT_CUBLASLT_MEMBER(member, symbol) decltype(&symbol) member = nullptr;
  SITSRT_CUBLASLT_FUNCTIONS(SITSRT_CUBLASLT_MEMBER)
#undef SITSRT_CUBLASLT_MEMBER

  // The library (libcublasLt.so.<major> of the toolkit built against), loaded once; null with
  // `why` set when it cannot be loaded or lacks a symbol.
  [[nodiscard]] static const CublasLt* load(std::string* why = nullptr);
};

// Throws sitsrt::Error naming the call and cuBLASLt's status unless it succeeded.
void check_cublaslt(cublasStatus_t status, const char* call, const char* file, int line);
#define SITSRT_CUBLASLT_CHECK(call) ::sitsrt::cuda::check_cublaslt((call), #call, __FILE__, __LINE__)

}  // namespace sitsrt::cuda
