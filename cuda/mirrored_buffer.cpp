#include "cuda_backend/mirrored_buffer.hpp"

#include "cuda_backend/cuda_check.hpp"

namespace sitsrt::cuda {

MirroredBuffer::MirroredBuffer(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes,
                               std::string_view what)
    : context_(context), allocator_(allocator), bytes_(bytes) {
  context_.make_current();
  void* host = nullptr;
  SITSRT_CUDA_CHECK(cudaMallocHost(&host, bytes));
  host_ = static_cast<std::byte*>(host);
  try {
    device_ = allocator_.allocate(bytes, what);
  } catch (...) {
    static_cast<void>(cudaFreeHost(host_));
    throw;
  }
}

MirroredBuffer::~MirroredBuffer() {
  static_cast<void>(cudaSetDevice(context_.device()));
  static_cast<void>(cudaStreamSynchronize(context_.stream()));
  static_cast<void>(cudaFreeHost(host_));
  allocator_.deallocate(device_, bytes_);
}

}  // namespace sitsrt::cuda
