// The emulator's CUDA runtime: the part of the runtime API the backend and its tests call,
// over host memory, on the calling thread. Linked into the emulated test executables in place of
// libcudart: one device (an H100's limits, kMultiprocessors), every stream executing in order as
// it is called (so all work is done when a call returns), stream capture recording the work
// into a graph that cudaGraphLaunch replays. Device allocations are mapped so that their end
// meets an inaccessible page: a kernel that reads or writes past an allocation faults there.
//
// What it does not model: concurrency between streams and the host (a missing synchronisation
// goes unnoticed), memory the device would see stale (caches, fences), registers and static shared
// memory limits, timing.
#include "cuda_emulator/cuda_emulator.hpp"
#include "cuda_emulator/emulator_state.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct CUstream_st {
  bool capturing = false;
  std::vector<std::function<void()>> recorded;
};
struct CUgraph_st {
  std::vector<std::function<void()>> operations;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> operations;
};
struct CUevent_st {};

namespace sitsrt::cuda_emulator {
namespace {

constexpr std::size_t kDeviceMemory = std::size_t{16} << 30;  // what cudaMemGetInfo reports as total

struct Mapping {
  void* base = nullptr;
  std::size_t bytes = 0;  // the whole mapping, guard page included
  std::size_t size = 0;   // what was asked for
};

struct Runtime {
  std::mutex mutex;
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  std::map<void*, Mapping> device;  // by the pointer handed out
  std::size_t device_bytes = 0;
  std::map<const void*, std::size_t> shared_limits;  // kernel -> dynamic shared bytes allowed
  int current_device = 0;
};

Runtime& runtime() {
  static Runtime r;
  return r;
}

std::size_t page_size() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

cudaError_t fail(cudaError_t status, const std::string& what) {
  set_error(status, what);
  return status;
}

cudaError_t device_alloc(void** ptr, std::size_t size) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "cudaMalloc: null pointer");
  if (const cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  if (r.device_bytes + size > kDeviceMemory) {
    return fail(cudaErrorMemoryAllocation,
                "cudaMalloc: " + std::to_string(size) + " bytes past the emulated device's memory");
  }
  // The allocation's end, rounded up to 256 bytes (cudaMalloc's alignment), meets a guard page.
  const std::size_t page = page_size(), rounded = (std::max<std::size_t>(size, 1) + 255) / 256 * 256;
  const std::size_t data_pages = (rounded + page - 1) / page, bytes = (data_pages + 1) * page;
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return fail(cudaErrorMemoryAllocation, "cudaMalloc: the host refused the mapping");
  char* guard = static_cast<char*>(base) + data_pages * page;
  mprotect(guard, page, PROT_NONE);
  void* p = guard - rounded;
  std::memset(p, 0xff, rounded);  // fresh device memory is not zero: NaN for any float read before a write
  r.device[p] = Mapping{base, bytes, size};
  r.device_bytes += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t device_free(void* p) {
  if (p == nullptr) return cudaSuccess;
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  const auto it = r.device.find(p);
  if (it == r.device.end()) return fail(cudaErrorInvalidValue, "cudaFree: not a device allocation");
  munmap(it->second.base, it->second.bytes);
  r.device_bytes -= it->second.size;
  r.device.erase(it);
  return cudaSuccess;
}

// Runs `operation` now, or records it where `stream` is being captured.
cudaError_t on_stream(cudaStream_t stream, std::function<void()> operation) {
  if (const cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  if (!capture(stream, operation)) operation();
  return cudaSuccess;
}

bool any_capture_on_this_thread();

}  // namespace

void set_error(cudaError_t status, const std::string& what, bool sticky) {
  std::fprintf(stderr, "[cuda emulator] %s: %s\n", cudaGetErrorName(status), what.c_str());
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  r.last = status;
  if (sticky) r.sticky = status;
}

void reset_device() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  r.last = cudaSuccess;
  r.sticky = cudaSuccess;
}

cudaError_t sticky_error() noexcept {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  return r.sticky;
}

namespace {
thread_local std::vector<CUstream_st*> t_capturing;  // cudaStreamCaptureModeThreadLocal: this thread's
bool any_capture_on_this_thread() {
  return !t_capturing.empty();
}
}  // namespace

bool capture(cudaStream_t stream, const std::function<void()>& operation) {
  if (stream == nullptr || !stream->capturing) return false;
  stream->recorded.push_back(operation);
  return true;
}

std::size_t max_dynamic_shared(const void* kernel) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  const auto it = r.shared_limits.find(kernel);
  return it != r.shared_limits.end() ? it->second : kDefaultSharedBytes;
}

void launch(const void* kernel, dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
            std::function<void()> body) {
  if (sticky_error() != cudaSuccess) return;
  const unsigned long long threads = static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration, "launch: grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) +
                                                 ", " + std::to_string(grid.z) + ") is empty or too large");
    return;
  }
  if (threads == 0 || threads > 1024 || block.z > 64) {
    set_error(cudaErrorInvalidConfiguration, "launch: a block of " + std::to_string(threads) + " threads");
    return;
  }
  if (const std::size_t allowed = max_dynamic_shared(kernel); shared > allowed) {
    set_error(cudaErrorInvalidValue, "launch: " + std::to_string(shared) + " bytes of dynamic shared memory, " +
                                         std::to_string(allowed) + " allowed for this kernel");
    return;
  }
  const auto run = [grid, block, shared, body = std::move(body)] { run_grid(grid, block, shared, body); };
  if (!capture(stream, run)) run();
}

}  // namespace sitsrt::cuda_emulator

using namespace sitsrt::cuda_emulator;

// --- devices ------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + ")");
  runtime().current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = runtime().current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "sitsrt CUDA emulator (H100 limits)");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = kMultiprocessors;
  prop->totalGlobalMem = kDeviceMemory;
  prop->sharedMemPerBlock = kDefaultSharedBytes;
  prop->sharedMemPerBlockOptin = kMaxSharedBytesOptin;
  prop->maxThreadsPerBlock = 1024;
  prop->warpSize = 32;
  prop->memoryPoolsSupported = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute");
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = kMultiprocessors;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(kMaxSharedBytesOptin);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(kDefaultSharedBytes);
      break;
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      break;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    default:
      return fail(cudaErrorInvalidValue,
                  "cudaDeviceGetAttribute: attribute " + std::to_string(attr) + " is not emulated");
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  *total = kDeviceMemory;
  *free = kDeviceMemory - r.device_bytes;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  return sticky_error();
}

// --- errors -------------------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  const cudaError_t last = r.sticky != cudaSuccess ? r.sticky : r.last;
  r.last = cudaSuccess;
  return last;
}

cudaError_t cudaPeekAtLastError() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  return r.sticky != cudaSuccess ? r.sticky : r.last;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    default:
      return "cudaError (emulated)";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorLaunchFailure:
      return "a kernel failed in the CUDA emulator (its message is on stderr)";
    default:
      return cudaGetErrorName(error);
  }
}

// --- memory -------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (any_capture_on_this_thread()) {
    return fail(cudaErrorStreamCaptureUnsupported, "cudaMalloc while this thread captures a stream");
  }
  return device_alloc(ptr, size);
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  if (stream != nullptr && stream->capturing) {
    return fail(cudaErrorStreamCaptureUnsupported, "cudaMallocAsync into a captured graph is not emulated");
  }
  return device_alloc(ptr, size);
}

cudaError_t cudaFree(void* ptr) {
  return device_free(ptr);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (stream != nullptr && stream->capturing) {
    return fail(cudaErrorStreamCaptureUnsupported, "cudaFreeAsync into a captured graph is not emulated");
  }
  return device_free(ptr);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = std::malloc(std::max<std::size_t>(size, 1));
  return *ptr != nullptr ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaMallocHost");
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  if (any_capture_on_this_thread()) {
    return fail(cudaErrorStreamCaptureImplicit, "a synchronous cudaMemcpy while this thread captures a stream");
  }
  if (const cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind, cudaStream_t stream) {
  return on_stream(stream, [dst, src, count] {
    if (count > 0) std::memmove(dst, src, count);
  });
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (any_capture_on_this_thread()) {
    return fail(cudaErrorStreamCaptureImplicit, "a synchronous cudaMemset while this thread captures a stream");
  }
  if (const cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  return on_stream(stream, [ptr, value, count] { std::memset(ptr, value, count); });
}

// --- streams, events, graphs --------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = new CUstream_st();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream != nullptr && stream->capturing) {
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize on a stream being captured");
  }
  return sticky_error();
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  *status = stream != nullptr && stream->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (stream == nullptr) return fail(cudaErrorStreamCaptureUnsupported, "capturing the legacy stream");
  if (stream->capturing) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: already capturing");
  stream->capturing = true;
  stream->recorded.clear();
  t_capturing.push_back(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (stream == nullptr || !stream->capturing)
    return fail(cudaErrorIllegalState, "cudaStreamEndCapture: not capturing");
  stream->capturing = false;
  std::erase(t_capturing, stream);
  *graph = new CUgraph_st{std::move(stream->recorded)};
  stream->recorded.clear();
  return sticky_error();
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = new CUgraphExec_st{graph->operations};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (const cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  if (stream != nullptr && stream->capturing) {
    stream->recorded.insert(stream->recorded.end(), exec->operations.begin(), exec->operations.end());
    return cudaSuccess;
  }
  for (const auto& operation : exec->operations) operation();
  return sticky_error();
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st();
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
  return sticky_error();
}

cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return sticky_error();
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

// --- kernels ------------------------------------------------------------------------------------

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " + std::to_string(attr) + " is not emulated");
  }
  if (value < 0 || static_cast<std::size_t>(value) > kMaxSharedBytesOptin) {
    return fail(cudaErrorInvalidValue,
                "cudaFuncSetAttribute: " + std::to_string(value) + " bytes of dynamic shared memory");
  }
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  r.shared_limits[func] = static_cast<std::size_t>(value);
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void*) {
  *attr = cudaFuncAttributes{};
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxThreadsPerBlock = 1024;
  attr->maxDynamicSharedSizeBytes = static_cast<int>(kDefaultSharedBytes);
  return cudaSuccess;
}
