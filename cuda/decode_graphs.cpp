#include "cuda_backend/decode_graphs.hpp"

#include "cuda_backend/cuda_check.hpp"

#include <sitsrt/error.hpp>

namespace sitsrt::cuda {
namespace {

constexpr std::size_t kImageBytes = 1u << 20;

std::size_t mix(std::size_t h, std::uint64_t v) noexcept {
  return h ^ (static_cast<std::size_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

// Leaves the kernels eager however the scope ends.
struct EagerOnExit {
  CudaKernels& kernels;
  ~EagerOnExit() { kernels.use_staging(); }
};

}  // namespace

std::size_t DecodeGraphKeyHash::operator()(const DecodeGraphKey& k) const noexcept {
  std::size_t h = std::hash<const void*>{}(k.graph);
  for (const std::uint64_t v : {static_cast<std::uint64_t>(k.first), static_cast<std::uint64_t>(k.last),
                                static_cast<std::uint64_t>(k.n_tokens), static_cast<std::uint64_t>(k.n_outputs),
                                static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(k.arena)), k.plan_hash}) {
    h = mix(h, v);
  }
  return h;
}

DecodeGraphs::DecodeGraphs(const CudaContext& context, DeviceAllocator& allocator)
    : context_(context), image_(context, allocator, kImageBytes) {}

DecodeGraphs::~DecodeGraphs() {
  static_cast<void>(cudaSetDevice(context_.device()));
  static_cast<void>(cudaStreamSynchronize(context_.stream()));
  for (auto& [key, entry] : graphs_) destroy(entry);
}

void DecodeGraphs::destroy(Entry& entry) noexcept {
  if (entry.exec != nullptr) static_cast<void>(cudaGraphExecDestroy(entry.exec));
  entry.exec = nullptr;
}

bool DecodeGraphs::run(const DecodeGraphKey& key, CudaKernels& kernels, const std::function<void()>& run_nodes,
                       const std::function<void()>& fill_nodes) {
  if (!image_.ensure()) {  // no memory for the input image: eager until there is
    ++stats_.eager;
    return false;
  }
  const auto [it, first_sight] = graphs_.try_emplace(key);
  Entry& entry = it->second;
  if (first_sight || entry.uncapturable) {  // eager once: its constants are copied outside a capture
    ++stats_.eager;
    return false;
  }
  if (entry.exec != nullptr) {
    if (replay(entry, kernels, fill_nodes)) return true;
    destroy(entry);
    --live_;
  }
  if (live_ >= kMaxGraphs || !capture(entry, kernels, run_nodes)) {
    ++stats_.eager;
    return false;
  }
  return true;
}

bool DecodeGraphs::replay(Entry& entry, CudaKernels& kernels, const std::function<void()>& fill_nodes) {
  if (entry.image_generation != image_.generation()) return false;
  image_.begin(&entry.layout);
  {
    const EagerOnExit eager{kernels};
    kernels.use(image_, CudaKernels::Mode::kFillInputs);
    fill_nodes();
  }
  if (!image_.fits() || kernels.constants_generation() != entry.constants_generation) return false;
  launch(entry);
  return true;
}

bool DecodeGraphs::capture(Entry& entry, CudaKernels& kernels, const std::function<void()>& run_nodes) {
  image_.begin(nullptr);
  const std::uint64_t constants = kernels.constants_generation();
  cudaStream_t stream = context_.stream();
  SITSRT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    const EagerOnExit eager{kernels};
    kernels.use(image_, CudaKernels::Mode::kCapture);
    run_nodes();
  } catch (...) {
    // A node that cannot be captured (or a capture the runtime invalidated): this shape runs
    // eagerly from now on, where a real error shows again and reaches the caller.
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) {
      static_cast<void>(cudaGraphDestroy(graph));
    }
    static_cast<void>(cudaGetLastError());
    // Twice: one throw may be a request's bad input, which the eager run reports; a node that
    // cannot be captured throws every time.
    entry.uncapturable = ++entry.failed_captures >= 2;
    return false;
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  const bool usable =
      ended == cudaSuccess && graph != nullptr && image_.fits() && kernels.constants_generation() == constants;
  if (!usable) {
    if (graph != nullptr) static_cast<void>(cudaGraphDestroy(graph));
    static_cast<void>(cudaGetLastError());
    if (!image_.fits()) {
      try {
        image_.grow();          // the next capture of a step this size fits
      } catch (const Error&) {  // no memory for a larger image: this shape stays eager
        entry.uncapturable = true;
      }
    }
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  static_cast<void>(cudaGraphDestroy(graph));
  if (made != cudaSuccess) {  // out of memory or unsupported: this shape stays eager
    static_cast<void>(cudaGetLastError());
    entry.uncapturable = true;
    return false;
  }
  entry.exec = exec;
  entry.layout = image_.recorded();
  entry.image_generation = image_.generation();
  entry.constants_generation = constants;
  ++live_;
  ++stats_.captures;
  launch(entry);
  return true;
}

void DecodeGraphs::launch(const Entry& entry) {
  image_.upload_image();
  SITSRT_CUDA_CHECK(cudaGraphLaunch(entry.exec, context_.stream()));
  ++stats_.replays;
}

}  // namespace sitsrt::cuda
