#include "cuda_backend/cublaslt_library.hpp"

#include "core/check.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace sitsrt::cuda {
namespace {

struct Loaded {
  CublasLt api;
  bool ok = false;
  std::string why;
};

template <typename Fn>
bool resolve(void* library, const char* symbol, Fn& fn, std::string& why) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (fn == nullptr) why = std::string("libcublasLt has no ") + symbol;
  return fn != nullptr;
}

Loaded load_library() {
  Loaded out;
#if defined(SITSRT_CUDA_EMULATION)  // the tests' CPU emulator (tests/cuda_emulator/cublaslt.cpp)
#define SITSRT_CUBLASLT_EMULATED(member, symbol) out.api.member = &symbol;
  SITSRT_CUBLASLT_FUNCTIONS(SITSRT_CUBLASLT_EMULATED)
#undef SITSRT_CUBLASLT_EMULATED
  out.ok = true;
  return out;
#endif
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string candidates[] = {soname, "", "/usr/local/cuda/lib64/" + soname};
  if (const char* home = std::getenv("CUDA_HOME")) candidates[1] = std::string(home) + "/lib64/" + soname;
  void* library = nullptr;
  std::string errors;  // each candidate's reason, so a failed load says where it looked
  for (const std::string& name : candidates) {
    if (name.empty()) continue;
    library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    const char* error = dlerror();
    errors += "; " + name + ": " + (error != nullptr ? error : "not found");
  }
  if (library == nullptr) {
    out.why = soname + " could not be loaded" + errors;
    return out;
  }
  CublasLt& a = out.api;
#define SITSRT_CUBLASLT_RESOLVE(member, symbol) &&resolve(library, #symbol, a.member, out.why)
  out.ok = true SITSRT_CUBLASLT_FUNCTIONS(SITSRT_CUBLASLT_RESOLVE);
#undef SITSRT_CUBLASLT_RESOLVE
  return out;  // the library stays loaded for the process's life
}

}  // namespace

const CublasLt* CublasLt::load(std::string* why) {
  static const Loaded loaded = load_library();
  if (!loaded.ok && why != nullptr) *why = loaded.why;
  return loaded.ok ? &loaded.api : nullptr;
}

void check_cublaslt(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  raise(ErrorCode::kInternal, "cuBLASLt: {} failed with status {} ({}:{})", call, static_cast<int>(status), file, line);
}

}  // namespace sitsrt::cuda
