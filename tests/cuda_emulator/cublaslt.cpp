// The emulator's cuBLASLt: the entry points cuda/cublaslt_library.hpp lists, computing
// D = alpha op(A) op(B) + beta C on the host (products summed in double, rounded to float once),
// so the prompt GEMMs' code (chunks of W and x, FP8 activation plans, resident activations, the
// algorithm cache, the scale pointers per chunk) runs under the emulated tests against their
// double references. Operands BF16, E4M3 or float, column-major with leading dimensions; scale
// modes as cuBLASLt 12.9 on Hopper takes them:
//  - OUTER_VEC_32F: a float per row of op(A) / per column of op(B);
//  - BLK128x128_32F (A): a float per 128 x 128 block of A as stored (K x N), the grid column-major
//    with each column of K / 128 floats padded to a multiple of 4;
//  - VEC128_32F (B): a float per 128 values of each column of op(B), (K / 128) rows of N floats,
//    each row's N together.
// Those two layouts are the ones prefill_gemm writes, taken on trust: public code disagrees on
// VEC128's (some keeps each column's K / 128 floats together instead), and only a device decides
// (the FP8 x FP8 GEMM case of cuda_backend_test against its double reference). Everything else in
// a GEMM's setup is checked here. The heuristic always finds an algorithm: a device's refusals (a
// shape without a block-scaled kernel) are not modelled.
#include "cuda_emulator/emulator_state.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

struct cublasLtContext {};

namespace {

struct MatmulDesc {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  std::int32_t a_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  std::int32_t b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
};

struct Layout {
  cudaDataType type = CUDA_R_32F;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
};

MatmulDesc* desc_of(cublasLtMatmulDesc_t d) {
  return reinterpret_cast<MatmulDesc*>(d);
}
const Layout* layout_of(cublasLtMatrixLayout_t l) {
  return reinterpret_cast<const Layout*>(l);
}

template <typename T>
bool take(const void* buf, std::size_t size, T& out) {
  if (buf == nullptr || size != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

// Element (r, c) of a column-major matrix of `type` as a double.
double element(const void* base, const Layout& l, std::uint64_t r, std::uint64_t c) {
  const std::uint64_t i = r + c * static_cast<std::uint64_t>(l.ld);
  switch (l.type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[i];
    case CUDA_R_16BF: {
      const std::uint16_t bits = static_cast<const std::uint16_t*>(base)[i];
      return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
    }
    case CUDA_R_8F_E4M3: {
      __nv_fp8_e4m3 v;
      v.__x = static_cast<const std::uint8_t*>(base)[i];
      return static_cast<float>(v);
    }
    default:
      return 0.0;
  }
}

bool supported(cudaDataType type) {
  return type == CUDA_R_32F || type == CUDA_R_16BF || type == CUDA_R_8F_E4M3;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new MatmulDesc());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc_of(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, std::size_t size) {
  MatmulDesc& d = *desc_of(desc);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = take(buf, size, d.transa);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = take(buf, size, d.transb);
      break;
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
      ok = take(buf, size, d.a_scale_mode);
      break;
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
      ok = take(buf, size, d.b_scale_mode);
      break;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      ok = take(buf, size, d.a_scale);
      break;
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      ok = take(buf, size, d.b_scale);
      break;
    default:
      ok = false;  // not emulated: the caller learns it as a device would refuse it
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, std::uint64_t rows,
                                          std::uint64_t cols, std::int64_t ld) {
  if (!supported(type) || ld < static_cast<std::int64_t>(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout_of(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  *preference = reinterpret_cast<cublasLtMatmulPreference_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete reinterpret_cast<int*>(preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void* buf, std::size_t) {
  return buf != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* found) {
  *found = 0;
  if (requested < 1 || desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc_handle, const void* alpha_ptr, const void* a,
                              cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                              const void* beta_ptr, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t*, void*, std::size_t,
                              cudaStream_t stream) {
  const MatmulDesc desc = *desc_of(desc_handle);
  const Layout la = *layout_of(a_layout), lb = *layout_of(b_layout), lc = *layout_of(c_layout),
               ld = *layout_of(d_layout);
  const bool ta = desc.transa == CUBLAS_OP_T, tb = desc.transb == CUBLAS_OP_T;
  const std::uint64_t m = ta ? la.cols : la.rows, k = ta ? la.rows : la.cols;
  const std::uint64_t n = tb ? lb.rows : lb.cols, kb = tb ? lb.cols : lb.rows;
  if (k != kb || ld.rows != m || ld.cols != n || lc.rows != m || lc.cols != n || ld.type != CUDA_R_32F ||
      lc.type != CUDA_R_32F) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool a_blocks = desc.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const bool b_blocks = desc.b_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  if ((a_blocks || b_blocks) && (k % 128 != 0 || ta == false || tb == true)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float alpha = *static_cast<const float*>(alpha_ptr), beta = *static_cast<const float*>(beta_ptr);
  if (sitsrt::cuda_emulator::sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  const std::function<void()> run = [=] {
    // op(A) and op(B) decoded once, each row of op(A) and column of op(B) contiguous
    std::vector<float> rows_a(m * k), cols_b(n * k);
    for (std::uint64_t i = 0; i < m; ++i) {
      for (std::uint64_t e = 0; e < k; ++e) {
        rows_a[i * k + e] = static_cast<float>(ta ? element(a, la, e, i) : element(a, la, i, e));
      }
    }
    for (std::uint64_t j = 0; j < n; ++j) {
      for (std::uint64_t e = 0; e < k; ++e) {
        cols_b[j * k + e] = static_cast<float>(tb ? element(b, lb, j, e) : element(b, lb, e, j));
      }
    }
    const std::uint64_t span = a_blocks || b_blocks ? 128 : k, spans = k / span, a_ld = (spans + 3) / 4 * 4;
    for (std::uint64_t j = 0; j < n; ++j) {
      const float* col = cols_b.data() + j * k;
      for (std::uint64_t i = 0; i < m; ++i) {
        const float* row = rows_a.data() + i * k;
        double sum = 0.0;
        for (std::uint64_t blk = 0; blk < spans; ++blk) {
          double part = 0.0;  // each product of two floats' values is exact in double
          for (std::uint64_t e = blk * span; e < blk * span + span; ++e) {
            part += static_cast<double>(row[e]) * static_cast<double>(col[e]);
          }
          const double sa = a_blocks ? desc.a_scale[(i / 128) * a_ld + blk] : 1.0;
          const double sb = b_blocks ? desc.b_scale[blk * n + j] : 1.0;
          sum += part * sa * sb;
        }
        if (desc.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) sum *= desc.a_scale[i];
        if (desc.b_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) sum *= desc.b_scale[j];
        double out = alpha * sum;
        if (beta != 0.0f) out += beta * element(c, lc, i, j);
        static_cast<float*>(d)[i + j * static_cast<std::uint64_t>(ld.ld)] = static_cast<float>(out);
      }
    }
  };
  if (!sitsrt::cuda_emulator::capture(stream, run)) run();
  return CUBLAS_STATUS_SUCCESS;
}
