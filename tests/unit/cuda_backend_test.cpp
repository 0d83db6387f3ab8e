// The CUDA backend on a GPU: every kernel against the CPU reference of the same op on fresh
// random data (output buffers poisoned with NaN before each run), the paged quantized KV store
// byte for byte against the CPU's, and whole models against the CPU backend. Every case skips
// visibly ("SKIPPED: [cuda] ...") where no CUDA device is usable, as on CI and development
// machines; benchmarks/gpu/device_check.sh runs them on a GPU.
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/elementwise/elementwise.hpp"
#include "cpu/elementwise/norm.hpp"
#include "cpu/elementwise/rope.hpp"
#include "cpu/logits/logit_kernels.hpp"
#include "cuda_backend/cuda_backend_factory.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/cuda_kernels.hpp"
#include "cuda_backend/device_allocator.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/planar_weights.hpp"
#include "cuda_backend/prefill_gemm.hpp"
#include "model/random_model.hpp"
#include "support/cuda_device.hpp"
#include "support/model_files.hpp"
#include "support/random.hpp"
#include "support/skip.hpp"

#include <sitsrt/engine.hpp>

#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

using namespace sitsrt;

namespace {

// Device memory for a test: filled from the host, or poisoned with NaN (0xff bytes). Both wait for
// the device, so kernels on any stream (the backend's is non-blocking, unordered with the legacy
// stream these copies use) see the contents.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    SITSRT_CUDA_CHECK(cudaMalloc(&ptr_, std::max<std::size_t>(n, 1) * sizeof(T)));
    poison();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { static_cast<void>(cudaFree(ptr_)); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void poison() {
    SITSRT_CUDA_CHECK(cudaMemset(ptr_, 0xff, n_ * sizeof(T)));
    SITSRT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void upload(const std::vector<T>& host) {
    SITSRT_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    SITSRT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  [[nodiscard]] std::vector<T> download() const {
    SITSRT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(n_);
    SITSRT_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  [[nodiscard]] T* get() const noexcept { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  std::size_t n_ = 0;
};

// |got - want| <= abs + rel * scale per element, with the index of the first miss.
void check_close(const std::vector<float>& got, const std::vector<double>& want, double abs_tol,
                 const std::vector<double>& scale, double rel_tol, const char* what) {
  REQUIRE(got.size() >= want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double bound = abs_tol + rel_tol * scale[i];
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound)) {
      FAIL(what << ": element " << i << " is " << got[i] << ", expected " << want[i] << " within " << bound);
    }
  }
}

// y (m rows, ldy apart) against the double products of the decoded weights (n x k) and x (m
// rows, ldx apart): within 1e-6 + rel_tol * sum |products| per output (2e-6: float sums of exact products);
// y's padding past n stays poisoned.
void check_matmul(const std::vector<float>& y, std::int64_t ldy, const std::vector<float>& decoded,
                  const std::vector<float>& x, std::int64_t ldx, std::int64_t m, std::int64_t n, std::int64_t k,
                  const char* what, double rel_tol = 2e-6) {
  std::vector<float> got;
  std::vector<double> want, scale;
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (std::int64_t e = 0; e < k; ++e) {
        const double p = static_cast<double>(decoded[static_cast<std::size_t>(j * k + e)]) *
                         x[static_cast<std::size_t>(r * ldx + e)];
        sum += p;
        magnitude += std::fabs(p);
      }
      got.push_back(y[static_cast<std::size_t>(r * ldy + j)]);
      want.push_back(sum);
      scale.push_back(magnitude);
    }
    for (std::int64_t j = n; j < ldy; ++j) REQUIRE(std::isnan(y[static_cast<std::size_t>(r * ldy + j)]));
  }
  check_close(got, want, 1e-6, scale, rel_tol, what);
}

// Stored rows -> the planar layout the backend uploads planar formats in.
std::vector<std::uint8_t> planar_matrix(DType format, const std::vector<std::uint8_t>& stored, std::int64_t rows,
                                        std::int64_t cols) {
  const cuda::PlanarGeometry g = cuda::planar_geometry(format, rows, cols);
  const std::size_t stride = row_bytes(format, cols);
  std::vector<std::uint8_t> planes(stored.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    cuda::planar_pack_row(format, stored.data() + static_cast<std::size_t>(r) * stride, cols,
                          planes.data() + r * g.code_row_bytes, planes.data() + g.scales_of(r));
  }
  return planes;
}

struct PlanarShape {
  std::int64_t n, k;
  std::vector<std::int64_t> ms;  // rows of x
};

// The split tensor-core decode's scratch for one launch (planar_split_need's, partials poisoned,
// counters zero), and the check that a launch left its counters zero.
class SplitScratch {
 public:
  explicit SplitScratch(cuda::PlanarSplitNeed need)
      : partials_(static_cast<std::size_t>(need.partial_floats)),
        counters_(std::vector<unsigned>(static_cast<std::size_t>(need.counters), 0u)),
        scratch_{partials_.get(), need.partial_floats, counters_.get(), need.counters} {}
  SplitScratch(DType format, std::span<const cuda::PlanarTarget> targets, std::int64_t k, std::int64_t m,
               cuda::PlanarEpilogue kind = cuda::PlanarEpilogue::kNone)
      : SplitScratch(cuda::planar_split_need(format, targets, k, m, kind, cuda::PlanarPath::kTensorCores)) {}
  [[nodiscard]] const cuda::PlanarSplitScratch* get() const noexcept { return &scratch_; }
  [[nodiscard]] bool splits() const noexcept { return scratch_.partial_floats > 0; }
  void require_counters_zero() const {
    for (const unsigned c : counters_.download()) REQUIRE(c == 0u);
  }

 private:
  DeviceArray<float> partials_;
  DeviceArray<unsigned> counters_;
  cuda::PlanarSplitScratch scratch_;
};

// Planar matmuls of `format` (fresh weights of n x k, fresh x) at each shape's row counts, x rows
// k and k + pad apart (vector and scalar loads of x), through `path`, against the double
// reference within 1e-6 + rel_tol * sum |products|; the largest shapes left out under memcheck.
// Fresh random matrices (n rows of k each, normals of 0.05) of `format` in the planar layout on the
// device, one per n (a deque: the arrays neither copy nor move).
std::deque<DeviceArray<std::uint8_t>> random_planar_matrices(DType format, std::span<const std::int64_t> ns,
                                                             std::int64_t k, test::Rng& rng) {
  std::deque<DeviceArray<std::uint8_t>> mats;
  const std::size_t stride = row_bytes(format, k);
  for (const std::int64_t n : ns) {
    std::vector<std::uint8_t> w(stride * static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) {
      const std::vector<float> row = rng.normals(static_cast<std::size_t>(k), 0.05f);
      quantize_row(format, row.data(), w.data() + j * stride, k);
    }
    mats.emplace_back(planar_matrix(format, w, n, k));
  }
  return mats;
}

// split: with the split tensor-core decode's scratch (every tensor-core format takes it at 5+ rows).
void check_planar_shapes(DType format, std::initializer_list<PlanarShape> shapes, std::int64_t pad,
                         cuda::PlanarPath path, double rel_tol, test::Rng& rng, const char* what, bool split = false) {
  for (const PlanarShape& shape : shapes) {
    if (test::cuda_small_shapes() && shape.n * shape.k > (1 << 20)) continue;
    const std::int64_t n = shape.n, k = shape.k;
    const std::size_t stride = row_bytes(format, k);
    std::vector<std::uint8_t> w(stride * static_cast<std::size_t>(n));
    std::vector<float> decoded(static_cast<std::size_t>(n * k));
    for (std::int64_t j = 0; j < n; ++j) {
      const std::vector<float> row = rng.normals(static_cast<std::size_t>(k), 0.05f * static_cast<float>(1 + j % 7));
      quantize_row(format, row.data(), w.data() + j * stride, k);
      dequantize_row(format, w.data() + j * stride, decoded.data() + j * k, k);
    }
    DeviceArray<std::uint8_t> dw(planar_matrix(format, w, n, k));
    for (const std::int64_t m : shape.ms) {
      for (const std::int64_t ldx : {k, k + pad}) {
        const std::int64_t ldy = n + 5;
        std::vector<float> x(static_cast<std::size_t>(m * ldx));
        for (float& v : x) v = rng.normal();
        DeviceArray<float> dx(x), dy(static_cast<std::size_t>(m * ldy));
        const cuda::PlanarTarget target{dw.get(), n, dy.get(), ldy};
        std::optional<SplitScratch> scratch;
        if (split) scratch.emplace(format, std::span{&target, 1}, k, m);
        const bool tensor_cores = cuda::launch_planar_matmul(format, dw.get(), n, k, dx.get(), ldx, m, dy.get(), ldy,
                                                             nullptr, path, split ? scratch->get() : nullptr);
        SITSRT_CUDA_CHECK(cudaGetLastError());
        INFO(name(format) << " n=" << n << " k=" << k << " m=" << m << " ldx=" << ldx
                          << (scratch && scratch->splits() ? " (split)" : ""));
        if (scratch) scratch->require_counters_zero();
        // the path asked for ran (a declined tensor-core launch would pass as the exact one)
        if (path == cuda::PlanarPath::kExact) CHECK_FALSE(tensor_cores);
        if (path == cuda::PlanarPath::kTensorCores && m >= cuda::kMmaMinRows &&
            (split || format == DType::kFP8_E4M3 || format == DType::kQ4_G128)) {
          CHECK(tensor_cores);
        }
        check_matmul(dy.download(), ldy, decoded, x, ldx, m, n, k, what, rel_tol);
      }
    }
  }
}

}  // namespace

TEST_CASE("cuda matmul of every format equals the double reference of its decoded weights", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(101);
  for (const DType format : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                             DType::kQ5_0, DType::kQ5_1, DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ4_K, DType::kQ5_K,
                             DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL}) {
    const bool floats = traits(format).block_size == 1;
    const std::int64_t block = traits(format).block_size;
    for (const std::int64_t k :
         floats ? std::vector<std::int64_t>{256, 70} : std::vector<std::int64_t>{2 * block, 3 * block}) {
      const std::int64_t n = 67;
      const std::size_t stride = row_bytes(format, k);
      std::vector<std::uint8_t> w(stride * static_cast<std::size_t>(n));
      std::vector<float> decoded(static_cast<std::size_t>(n * k));
      for (std::int64_t j = 0; j < n; ++j) {
        const std::vector<float> row = rng.normals(static_cast<std::size_t>(k), 0.05f);
        quantize_row(format, row.data(), w.data() + j * stride, k);
        dequantize_row(format, w.data() + j * stride, decoded.data() + j * k, k);
      }
      DeviceArray<std::uint8_t> dw(w);
      for (const std::int64_t m : {1, 2, 5, 8, 11, 16}) {
        const std::int64_t ldx = k + 3, ldy = n + 5;
        std::vector<float> x(static_cast<std::size_t>(m * ldx));
        for (float& v : x) v = rng.normal();
        DeviceArray<float> dx(x), dy(static_cast<std::size_t>(m * ldy));
        cuda::launch_matmul(format, dw.get(), static_cast<std::int64_t>(stride), n, k, dx.get(), ldx, m, dy.get(), ldy,
                            nullptr);
        SITSRT_CUDA_CHECK(cudaGetLastError());
        INFO(name(format) << " m=" << m << " k=" << k);
        check_matmul(dy.download(), ldy, decoded, x, ldx, m, n, k, "matmul");
      }
    }
  }
}

TEST_CASE("cuda embedding rows (stored and planar) equal dequantize_row exactly", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(102);
  for (const DType format : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                             DType::kQ5_0, DType::kQ5_1, DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ4_K, DType::kQ5_K,
                             DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL}) {
    const std::int64_t vocab = 50, cols = 512;
    const std::size_t stride = row_bytes(format, cols);
    std::vector<std::uint8_t> table(stride * vocab);
    for (std::int64_t t = 0; t < vocab; ++t) {
      const std::vector<float> row = rng.normals(static_cast<std::size_t>(cols));
      quantize_row(format, row.data(), table.data() + t * stride, cols);
    }
    const std::vector<std::int32_t> ids = {3, 49, 0, 17, 17, 8};
    DeviceArray<std::int32_t> di(ids);
    const auto count = static_cast<std::int64_t>(ids.size());
    // the stored blocks, and for the planar formats also the planar layout the backend uploads
    for (const bool planar : {false, true}) {
      if (planar && !cuda::planar_supports(format, cols)) continue;
      DeviceArray<std::uint8_t> dt(planar ? planar_matrix(format, table, vocab, cols) : table);
      DeviceArray<float> out(ids.size() * (cols + 1));
      if (planar) {
        cuda::launch_planar_embed(format, dt.get(), vocab, cols, di.get(), count, out.get(), cols + 1, nullptr);
      } else {
        cuda::launch_embed(format, dt.get(), static_cast<std::int64_t>(stride), cols, di.get(), count, out.get(),
                           cols + 1, nullptr);
      }
      const std::vector<float> got = out.download();
      std::vector<float> want(static_cast<std::size_t>(cols));
      for (std::size_t r = 0; r < ids.size(); ++r) {
        dequantize_row(format, table.data() + ids[r] * stride, want.data(), cols);
        INFO(name(format) << (planar ? " planar" : "") << " row " << r);
        REQUIRE(std::memcmp(got.data() + r * (cols + 1), want.data(), cols * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("cuda planar matmul (every planar format) equals the double reference of the decoded weights",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(104);
  for (const DType format :
       {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16, DType::kIQ4_NL}) {
    const std::int64_t block = std::max<std::int64_t>(traits(format).block_size, 8);  // floats: units of 8
    // odd output counts (a partial last block of outputs), one and several chunks per thread;
    // float4 loads of x and the scalar path
    check_planar_shapes(format,
                        {PlanarShape{67, block, {1, 2, 3, 5, 8, 11, 16}}, PlanarShape{5, 3 * block, {1, 4, 9}},
                         PlanarShape{1029, 4096, {1, 16}}, PlanarShape{130, 14336, {1, 7}}},
                        3, cuda::PlanarPath::kExact, 2e-6, rng, "planar matmul");
  }
}

TEST_CASE(
    "cuda tensor-core decode matmul (every format it takes) equals the double reference within x's hi / lo "
    "rounding",
    "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(107);
  for (const DType format :
       {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
        DType::kIQ4_NL, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16}) {
    const std::int64_t block = std::max<std::int64_t>(traits(format).block_size, 32);
    // odd output counts (partial blocks of 32 and tiles of 16), fewer scale blocks / chunks than
    // warps and many, partial last chunks; 5-8 rows (one n8 tile), 9-16 (two), and steps of
    // several 16-row tiles; and outputs enough for blocks of 32 (two a multiprocessor and more).
    // x within 2^-16 of each value (of its sums, for the offset formats' mins), and float sums in
    // the tensor cores' own order: 6e-5 of sum |products|
    check_planar_shapes(
        format,
        {PlanarShape{67, 3 * block, {5, 8, 9, 16, 21, 47}}, PlanarShape{1029, 4096, {5, 16}},
         PlanarShape{130, 14336, {7, 12}}, PlanarShape{8999, std::max<std::int64_t>(block, 128), {6, 13}}},
        2, cuda::PlanarPath::kTensorCores, 6e-5, rng, "tensor-core decode matmul");
  }
}

TEST_CASE(
    "cuda split tensor-core decode (every format it takes; blocks of 256 rows, slices of the row) equals the "
    "double reference within x's hi / lo rounding",
    "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(110);
  for (const DType format :
       {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
        DType::kIQ4_NL, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16}) {
    // Rows split in 3-16 slices (one block of 256 rows or a few) or in 1-2 (rows of 2-4 granules:
    // scale blocks of FP8 / INT4, chunks of units of the others), partial blocks of rows and warps
    // past n, slices of one 512-element stage and of several (k 14336); 5-8 rows of x (one n8
    // tile), 9-16 (two), and steps of several 16-row tiles; float4 and scalar loads of x.
    const std::int64_t whole_k = std::max<std::int64_t>(traits(format).block_size, 128);
    check_planar_shapes(
        format,
        {PlanarShape{67, 1024, {5, 8, 9, 16, 21, 47}}, PlanarShape{300, 2816, {6, 13}}, PlanarShape{600, whole_k, {7}},
         PlanarShape{67, 14336, {5, 16}}, PlanarShape{1029, 4096, {5, 16}}, PlanarShape{4100, 14336, {16}}},
        2, cuda::PlanarPath::kTensorCores, 6e-5, rng, "split tensor-core decode", true);
    // the scratch launches need: partials where the rows split, none where the blocks of rows
    // alone give every multiprocessor a block (65536 rows: 256 blocks of rows)
    const cuda::PlanarTarget split_rows{nullptr, 300, nullptr, 300}, whole_rows{nullptr, 65536, nullptr, 65536};
    INFO(name(format));
    CHECK(SplitScratch(format, std::span{&split_rows, 1}, 2816, 6).splits());
    CHECK_FALSE(SplitScratch(format, std::span{&whole_rows, 1}, 2816, 7).splits());
    CHECK_FALSE(SplitScratch(format, std::span{&split_rows, 1}, 2816, 4).splits());  // 4 rows: the CUDA cores
  }
  // A scratch smaller than the launch needs is an error, not a write past it.
  const std::int64_t n = 300, k = 2816, m = 6;
  DeviceArray<std::uint8_t> dw(static_cast<std::size_t>(n) * row_bytes(DType::kFP8_E4M3, k));
  DeviceArray<float> dx(static_cast<std::size_t>(m * k)), dy(static_cast<std::size_t>(m * n));
  const cuda::PlanarTarget target{dw.get(), n, dy.get(), n};
  cuda::PlanarSplitNeed need =
      cuda::planar_split_need(DType::kFP8_E4M3, {&target, 1}, k, m, {}, cuda::PlanarPath::kTensorCores);
  REQUIRE(need.partial_floats > 0);
  need.partial_floats -= 1;
  const SplitScratch small(need);
  CHECK_THROWS_AS(cuda::launch_planar_matmul(DType::kFP8_E4M3, dw.get(), n, k, dx.get(), k, m, dy.get(), n, nullptr,
                                             cuda::PlanarPath::kTensorCores, small.get()),
                  Error);
}

TEST_CASE("cuda split decode: Q, K and V of the 8B shape in one launch (different slice counts) give each its own bits",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(111);
  const std::int64_t k = 4096, m = 16;
  const std::int64_t ns[3] = {4096, 1024, 1024};
  for (const DType format : {DType::kFP8_E4M3, DType::kQ4_G128}) {
    const std::deque<DeviceArray<std::uint8_t>> mats = random_planar_matrices(format, ns, k, rng);
    std::vector<float> x(static_cast<std::size_t>(m * k));
    for (float& v : x) v = rng.normal();
    DeviceArray<float> dx(x);
    std::deque<DeviceArray<float>> grouped, alone;
    std::vector<cuda::PlanarTarget> targets;
    std::int64_t slices[3] = {};
    for (int i = 0; i < 3; ++i) {
      grouped.emplace_back(static_cast<std::size_t>(m * ns[i]));
      alone.emplace_back(static_cast<std::size_t>(m * ns[i]));
      targets.push_back({mats[static_cast<std::size_t>(i)].get(), ns[i], grouped.back().get(), ns[i]});
      const cuda::PlanarTarget single{mats[static_cast<std::size_t>(i)].get(), ns[i], alone.back().get(), ns[i]};
      const SplitScratch scratch(format, std::span{&single, 1}, k, m);
      slices[i] = scratch.get()->partial_floats / (16 * ns[i]);
      REQUIRE(cuda::launch_planar_matmul(format, single.data, ns[i], k, dx.get(), k, m, single.y, ns[i], nullptr,
                                         cuda::PlanarPath::kTensorCores, scratch.get()));
      scratch.require_counters_zero();
    }
    INFO(name(format) << ": slices " << slices[0] << ", " << slices[1] << ", " << slices[2]);
    CHECK(slices[0] != slices[1]);
    const SplitScratch scratch(format, targets, k, m);
    cuda::launch_planar_group(format, targets, k, dx.get(), k, m, {}, nullptr, cuda::PlanarPath::kTensorCores,
                              scratch.get());
    SITSRT_CUDA_CHECK(cudaGetLastError());
    scratch.require_counters_zero();
    for (std::size_t i = 0; i < 3; ++i) {
      const std::vector<float> a = alone[i].download(), b = grouped[i].download();
      REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
  }
}

// Both tensor-core decodes, unsplit and split (3-6 slices of the row at k 768; FP8 / INT4 g128 also
// whole rows at k 128).
TEST_CASE("cuda tensor-core decode: grouped, residual and SwiGLU launches give each matrix's own bits",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(108);
  const std::int64_t m = 13;
  const std::int64_t ns[3] = {96, 40, 40};  // Q, K, V-like; gate and up take the first two at 96
  struct Run {
    DType format;
    bool split = false;
    std::int64_t k = 768;  // whole super-blocks, 3 per row
  };
  std::vector<Run> runs = {Run{DType::kFP8_E4M3, true, 128}, Run{DType::kQ4_G128, true, 128}};
  for (const DType format : {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K,
                             DType::kQ6_K, DType::kF16}) {
    runs.push_back({format, false});
    runs.push_back({format, true});
  }
  for (const Run& run : runs) {
    const DType format = run.format;
    const bool split = run.split;
    const std::int64_t k = run.k;
    const std::deque<DeviceArray<std::uint8_t>> mats = random_planar_matrices(format, ns, k, rng);
    std::vector<float> x(static_cast<std::size_t>(m * k));
    for (float& v : x) v = rng.normal();
    DeviceArray<float> dx(x);
    // each launch with the split decode's scratch where `split`
    const auto group = [&](std::span<const cuda::PlanarTarget> targets, const cuda::PlanarEpilogueArgs& epilogue) {
      std::optional<SplitScratch> scratch;
      if (split) {
        scratch.emplace(format, targets, k, m, epilogue.kind);
        REQUIRE(scratch->splits() == (k == 768));
      }
      cuda::launch_planar_group(format, targets, k, dx.get(), k, m, epilogue, nullptr, cuda::PlanarPath::kTensorCores,
                                scratch ? scratch->get() : nullptr);
      SITSRT_CUDA_CHECK(cudaGetLastError());
      if (scratch) scratch->require_counters_zero();
    };
    const auto alone = [&](int i, std::int64_t n) {
      DeviceArray<float> dy(static_cast<std::size_t>(m * n));
      const cuda::PlanarTarget target{mats[static_cast<std::size_t>(i)].get(), n, dy.get(), n};
      group({&target, 1}, {});
      return dy.download();
    };
    INFO(name(format) << " k=" << k << (split ? " split" : ""));
    // Q, K, V in one launch
    std::deque<DeviceArray<float>> ys;
    std::vector<cuda::PlanarTarget> targets;
    for (int i = 0; i < 3; ++i) {
      ys.emplace_back(static_cast<std::size_t>(m * ns[i]));
      targets.push_back({mats[static_cast<std::size_t>(i)].get(), ns[i], ys.back().get(), ns[i]});
    }
    group(targets, {});
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> a = alone(i, ns[i]), b = ys[static_cast<std::size_t>(i)].download();
      REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
    // matmul + residual
    std::vector<float> residual(static_cast<std::size_t>(m * ns[0]));
    for (float& v : residual) v = rng.normal();
    DeviceArray<float> dres(residual), dsum(residual.size()), dy0(residual.size());
    cuda::PlanarEpilogueArgs add{cuda::PlanarEpilogue::kAdd, dres.get(), ns[0], dsum.get(), ns[0]};
    const cuda::PlanarTarget first{mats[0].get(), ns[0], dy0.get(), ns[0]};
    group({&first, 1}, add);
    const std::vector<float> q = alone(0, ns[0]), sums = dsum.download();
    REQUIRE(std::memcmp(q.data(), dy0.download().data(), q.size() * sizeof(float)) == 0);
    for (std::size_t i = 0; i < q.size(); ++i) REQUIRE(sums[i] == q[i] + residual[i]);
    // gate (matrix 1 at 40 rows) and up (matrix 2) with SwiGLU
    const auto outputs = static_cast<std::size_t>(m * ns[1]);
    DeviceArray<float> gate(outputs), up(outputs), act(outputs);
    const cuda::PlanarTarget pair[2] = {{mats[1].get(), ns[1], gate.get(), ns[1]},
                                        {mats[2].get(), ns[2], up.get(), ns[2]}};
    cuda::PlanarEpilogueArgs swiglu{cuda::PlanarEpilogue::kSwiGlu, nullptr, 0, act.get(), ns[1]};
    group(pair, swiglu);
    SITSRT_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> g = alone(1, ns[1]), u = alone(2, ns[2]);
    REQUIRE(std::memcmp(g.data(), gate.download().data(), g.size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(u.data(), up.download().data(), u.size() * sizeof(float)) == 0);
    DeviceArray<float> dg(g), du(u), unfused(g.size());  // the unfused SwiGLU node's kernel
    cuda::launch_elementwise(cuda::Elementwise::kSwiGlu, dg.get(), ns[1], du.get(), ns[1], 0.0f, m, ns[1],
                             unfused.get(), ns[1], nullptr);
    const std::vector<float> a = act.download(), b = unfused.download();
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    // GeGLU written over the gate's own buffer (as the backend's fusion may)
    DeviceArray<float> gate2(outputs), up2(outputs);
    const cuda::PlanarTarget pair2[2] = {{mats[1].get(), ns[1], gate2.get(), ns[1]},
                                         {mats[2].get(), ns[2], up2.get(), ns[2]}};
    cuda::PlanarEpilogueArgs geglu{cuda::PlanarEpilogue::kGeGlu, nullptr, 0, gate2.get(), ns[1]};
    group(pair2, geglu);
    DeviceArray<float> unfused_geglu(outputs);
    cuda::launch_elementwise(cuda::Elementwise::kGeGluTanh, dg.get(), ns[1], du.get(), ns[1], 0.0f, m, ns[1],
                             unfused_geglu.get(), ns[1], nullptr);
    const std::vector<float> c = gate2.download(), d = unfused_geglu.download();
    REQUIRE(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(u.data(), up2.download().data(), u.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cuda weights to BF16 (what the prompt GEMMs read) equal the CPU's decode rounded once, every format",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(109);
  const std::int64_t n = 9, k = 512, row0 = 2, rows = 5;  // rows 2..6 of 9
  for (const DType format : {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                             DType::kQ5_1, DType::kIQ4_NL, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16,
                             DType::kBF16, DType::kF32, DType::kQ2_K, DType::kQ3_K}) {
    const std::size_t stride = row_bytes(format, k);
    std::vector<std::uint8_t> w(stride * static_cast<std::size_t>(n));
    std::vector<float> decoded(static_cast<std::size_t>(n * k));
    for (std::int64_t j = 0; j < n; ++j) {
      std::vector<float> row = rng.normals(static_cast<std::size_t>(k), 0.05f * static_cast<float>(1 + j));
      row[static_cast<std::size_t>(j * 31 % k)] *= 30.0f;
      quantize_row(format, row.data(), w.data() + j * stride, k);
      dequantize_row(format, w.data() + j * stride, decoded.data() + j * k, k);
    }
    for (const bool planar : {true, false}) {
      if (planar && !cuda::planar_supports(format, k)) continue;
      INFO(name(format) << (planar ? " planar" : " stored"));
      DeviceArray<std::uint8_t> dw(planar ? planar_matrix(format, w, n, k) : w);
      DeviceArray<std::uint16_t> out(static_cast<std::size_t>(rows * k) + 8);  // poisoned, 8 past the end
      cuda::launch_weights_to_bf16(format, planar, dw.get(), static_cast<std::int64_t>(stride), n, k, row0, rows,
                                   out.get(), nullptr);
      SITSRT_CUDA_CHECK(cudaGetLastError());
      const std::vector<std::uint16_t> got = out.download();
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t e = 0; e < k; ++e) {
          const std::uint16_t want = fp32_to_bf16(decoded[static_cast<std::size_t>((row0 + r) * k + e)]);
          if (got[static_cast<std::size_t>(r * k + e)] != want) {
            FAIL("row " << row0 + r << " element " << e << ": " << got[static_cast<std::size_t>(r * k + e)]
                        << ", expected " << want);
          }
        }
      }
      for (std::size_t i = static_cast<std::size_t>(rows * k); i < got.size(); ++i) REQUIRE(got[i] == 0xffff);
    }
  }
}

TEST_CASE("cuda prefill GEMM (BF16 tensor cores) equals the double reference within BF16 rounding", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(106);
  cuda::CudaContext context(0);
  cuda::DeviceAllocator allocator(context, 0);
  cuda::PrefillGemm gemm(context, allocator);
  struct Case {
    DType format;
    bool planar;
    std::int64_t n, k, m;
  };
  // stored and planar formats; odd output counts; several row chunks of x (16 MiB of BF16 rows:
  // 512 rows of 16384) and of W (64 MiB: 2048 rows of 16384), with partial last chunks
  for (const Case& c : {Case{DType::kF32, false, 67, 256, 48}, Case{DType::kQ8_0, false, 300, 512, 130},
                        Case{DType::kQ4_K, false, 67, 512, 64}, Case{DType::kFP8_E4M3, true, 131, 1024, 77},
                        Case{DType::kQ4_G128, true, 67, 1024, 200}, Case{DType::kQ8_0, true, 70, 512, 49},
                        Case{DType::kQ4_0, false, 2050, 16384, 514}, Case{DType::kQ3_K, false, 67, 512, 60}}) {
    const std::size_t stride = row_bytes(c.format, c.k);
    std::vector<std::uint8_t> w(stride * static_cast<std::size_t>(c.n));
    std::vector<float> decoded(static_cast<std::size_t>(c.n * c.k));
    for (std::int64_t j = 0; j < c.n; ++j) {
      const std::vector<float> row = rng.normals(static_cast<std::size_t>(c.k), 0.05f);
      quantize_row(c.format, row.data(), w.data() + j * stride, c.k);
      dequantize_row(c.format, w.data() + j * stride, decoded.data() + j * c.k, c.k);
    }
    DeviceArray<std::uint8_t> dw(c.planar ? planar_matrix(c.format, w, c.n, c.k) : w);
    const cuda::DeviceWeight weight{dw.get(), c.format, c.n, c.k, static_cast<std::int64_t>(stride), c.planar, {}};
    const std::int64_t ldx = c.k + 3, ldy = c.n + 5;
    std::vector<float> x(static_cast<std::size_t>(c.m * ldx));
    for (float& v : x) v = rng.normal();
    DeviceArray<float> dx(x), dy(static_cast<std::size_t>(c.m * ldy));
    INFO(name(c.format) << (c.planar ? " planar" : "") << " n=" << c.n << " k=" << c.k << " m=" << c.m);
    INFO(gemm.unavailable_reason());
    REQUIRE(gemm.run(weight, dx.get(), ldx, c.m, dy.get(), ldy));
    CHECK(gemm.last_path() == cuda::PrefillGemm::Path::kBf16);  // FP8 here scales each block of 64 apart
    const std::vector<float> y = dy.download();
    // Checked on a sample of rows (the reference is O(m n k) on the host), every output of each.
    for (std::int64_t r = 0; r < c.m; r += std::max<std::int64_t>(1, c.m / 7)) {
      for (std::int64_t j = 0; j < c.n; ++j) {
        double sum = 0, magnitude = 0;
        for (std::int64_t e = 0; e < c.k; ++e) {
          const double p = static_cast<double>(decoded[static_cast<std::size_t>(j * c.k + e)]) *
                           x[static_cast<std::size_t>(r * ldx + e)];
          sum += p;
          magnitude += std::fabs(p);
        }
        const double got = y[static_cast<std::size_t>(r * ldy + j)];
        // BF16 inputs: each product within 2^-8 of its exact value, then float sums
        if (!(std::fabs(got - sum) <= 1e-6 + magnitude / 128.0)) {
          FAIL("row " << r << " output " << j << ": " << got << ", expected " << sum << " within " << magnitude / 128);
        }
      }
      for (std::int64_t j = c.n; j < ldy; ++j) REQUIRE(std::isnan(y[static_cast<std::size_t>(r * ldy + j)]));
    }
  }
}

TEST_CASE(
    "cuda prefill GEMM FP8 x FP8 (per-channel x per-token scales; 128 x 128 block x 128-element block scales) equals "
    "the double reference within E4M3 rounding",
    "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(107);
  cuda::CudaContext context(0);
  if (context.compute_capability() / 10 != 9) {  // cuBLASLt's outer-vector and block FP8 scaling: Hopper only
    SITSRT_SKIP("[cuda] cuBLASLt scales FP8 per channel or block on sm_90 only, this is sm_"
                << context.compute_capability());
  }
  cuda::DeviceAllocator allocator(context, 0);
  cuda::PrefillGemm gemm(context, allocator);
  struct Case {
    std::int64_t n, k, m;
  };
  // Rows of x not a multiple of 8 (block scaling: chunks of whole 8 rows that overlap, whose codes
  // start only 128-byte aligned) and a multiple (one chunk); several chunks of x (16 MiB of E4M3
  // rows: 1024 rows of 16384); outputs a partial band of 128 (1040 = 8 x 128 + 16).
  for (const bool blocks : {false, true}) {
    for (const Case& c :
         {Case{256, 1024, 77}, Case{256, 1024, 64}, Case{1040, 4096, 300}, Case{64, 16384, 1100}, Case{272, 640, 49}}) {
      // Weights as the quantizers make them (the block scales a magnitude per 128 columns apart),
      // their scales found as the backend finds them.
      const std::size_t stride = row_bytes(DType::kFP8_E4M3, c.k);
      std::vector<std::uint8_t> w(stride * static_cast<std::size_t>(c.n));
      std::vector<float> decoded(static_cast<std::size_t>(c.n * c.k)), values(decoded.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = rng.normal() * 0.05f * std::exp2(static_cast<float>(i % static_cast<std::size_t>(c.k) / 128 % 3));
      }
      if (blocks) {
        for (std::int64_t r = 0; r < c.n; r += 128) {
          quantize_band_fp8_block128(values.data() + r * c.k, w.data() + r * stride,
                                     std::min<std::int64_t>(128, c.n - r), c.k);
        }
      } else {
        for (std::int64_t r = 0; r < c.n; ++r) {
          quantize_row_fp8_per_channel(values.data() + r * c.k, w.data() + r * stride, c.k);
        }
      }
      for (std::int64_t j = 0; j < c.n; ++j) {
        dequantize_row(DType::kFP8_E4M3, w.data() + j * stride, decoded.data() + j * c.k, c.k);
      }
      const std::vector<std::uint8_t> planes = planar_matrix(DType::kFP8_E4M3, w, c.n, c.k);
      const cuda::PlanarGeometry g = cuda::planar_geometry(DType::kFP8_E4M3, c.n, c.k);
      const std::optional<std::vector<float>> scales = blocks ? cuda::fp8_block128_scales(planes.data(), g, c.n, c.k)
                                                              : cuda::fp8_channel_scales(planes.data(), g, c.n);
      REQUIRE(scales.has_value());
      REQUIRE(blocks == !cuda::fp8_channel_scales(planes.data(), g, c.n).has_value());
      DeviceArray<std::uint8_t> dw(planes);
      DeviceArray<float> dscales(*scales);
      cuda::DeviceWeight weight{dw.get(), DType::kFP8_E4M3, c.n, c.k, static_cast<std::int64_t>(stride), true, {}};
      (blocks ? weight.block_scales : weight.channel_scales) = dscales.get();
      // y's rows 16-byte aligned (scaled FP8 kernels need it), with padding past n left poisoned.
      const std::int64_t ldx = c.k + 3, ldy = c.n + 4;
      std::vector<float> x(static_cast<std::size_t>(c.m * ldx));
      for (float& v : x) v = rng.normal() * (rng.uniform_int(0, 9) == 0 ? 20.0f : 1.0f);  // some outliers
      DeviceArray<float> dx(x), dy(static_cast<std::size_t>(c.m * ldy));
      const bool ran = gemm.run(weight, dx.get(), ldx, c.m, dy.get(), ldy);
      INFO((blocks ? "blocks" : "channel") << " n=" << c.n << " k=" << c.k << " m=" << c.m << ": "
                                           << gemm.unavailable_reason() << " / " << gemm.fp8_unavailable_reason());
      REQUIRE(ran);
      REQUIRE(gemm.last_path() == (blocks ? cuda::PrefillGemm::Path::kFp8Blocks : cuda::PrefillGemm::Path::kFp8));
      const std::vector<float> y = dy.download();
      // Also against the activations quantized on the host as the kernels do (scale = the row's,
      // or its block of 128's, largest |x| / 448, nearest E4M3): then only the float sums differ
      // (rms over the outputs checked; a wrong scale, scale layout or row mapping is far off).
      double rms_quantized_error = 0, rms_reference = 0;
      const std::int64_t span = blocks ? 128 : c.k;  // the values one activation scale covers
      for (std::int64_t r = 0; r < c.m; r += std::max<std::int64_t>(1, c.m / 7)) {
        std::vector<double> quantized(static_cast<std::size_t>(c.k)), scale_of(static_cast<std::size_t>(c.k));
        for (std::int64_t e0 = 0; e0 < c.k; e0 += span) {
          float amax = 0.0f;
          for (std::int64_t e = e0; e < e0 + span; ++e) {
            amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(r * ldx + e)]));
          }
          const float s = amax / 448.0f;
          for (std::int64_t e = e0; e < e0 + span; ++e) {
            scale_of[static_cast<std::size_t>(e)] = s;
            quantized[static_cast<std::size_t>(e)] =
                static_cast<double>(fp8_e4m3_to_fp32(fp32_to_fp8_e4m3(x[static_cast<std::size_t>(r * ldx + e)] / s))) *
                s;
          }
        }
        for (std::int64_t j = 0; j < c.n; ++j) {
          double sum = 0, magnitude = 0, scaled_weights = 0, sum_quantized = 0;
          for (std::int64_t e = 0; e < c.k; ++e) {
            const double wv = decoded[static_cast<std::size_t>(j * c.k + e)];
            const double p = wv * x[static_cast<std::size_t>(r * ldx + e)];
            sum += p;
            magnitude += std::fabs(p);
            scaled_weights += std::fabs(wv) * scale_of[static_cast<std::size_t>(e)];
            sum_quantized += wv * quantized[static_cast<std::size_t>(e)];
          }
          const double deviation = y[static_cast<std::size_t>(r * ldy + j)] - sum_quantized;
          rms_quantized_error += deviation * deviation;
          rms_reference += sum_quantized * sum_quantized;
          const double got = y[static_cast<std::size_t>(r * ldy + j)];
          // Each activation rounded to E4M3 relative to its scale: within 2^-4 of its value (3
          // mantissa bits), or 2^-10 scales below E4M3's normal range; then float sums.
          const double bound = 1e-5 + magnitude / 16.0 + scaled_weights / 1024.0;
          if (!(std::fabs(got - sum) <= bound)) {
            FAIL("row " << r << " output " << j << ": " << got << ", expected " << sum << " within " << bound);
          }
        }
        for (std::int64_t j = c.n; j < ldy; ++j) REQUIRE(std::isnan(y[static_cast<std::size_t>(r * ldy + j)]));
      }
      CHECK(std::sqrt(rms_quantized_error) <= 1e-3 * std::sqrt(rms_reference));
    }
  }
}

TEST_CASE("cuda FP8 activation rows per block of 128: the host's scales and codes, in the grid's layout",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(108);
  const std::int64_t rows = 7, k = 384, ldx = 390, scales_ld = 8;  // ld past the rows: its padding left alone
  std::vector<float> x(static_cast<std::size_t>(rows * ldx));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = rng.normal() * std::exp2(static_cast<float>(i % 128 % 7) - 3.0f);
  std::fill(x.begin() + 2 * ldx + 128, x.begin() + 2 * ldx + 256, 0.0f);  // a block of zeros: scale 1
  x[4 * ldx + 300] = std::numeric_limits<float>::infinity();              // an infinity: scale 1, saturated
  DeviceArray<float> dx(x);
  DeviceArray<std::uint8_t> codes(static_cast<std::size_t>(rows * k));
  std::vector<float> poison(static_cast<std::size_t>(k / 128 * scales_ld), -5.0f);
  DeviceArray<float> scales(poison);
  cuda::launch_floats_to_fp8_blocks(dx.get(), ldx, rows, k, codes.get(), scales.get(), scales_ld, nullptr);
  const std::vector<std::uint8_t> got_codes = codes.download();
  const std::vector<float> got_scales = scales.download();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < k / 128; ++b) {
      float amax = 0.0f;
      for (std::int64_t e = b * 128; e < b * 128 + 128; ++e)
        amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(r * ldx + e)]));
      const float s = amax > 0.0f && std::isfinite(amax) ? amax / 448.0f : 1.0f;
      CAPTURE(r, b);
      REQUIRE(got_scales[static_cast<std::size_t>(b * scales_ld + r)] == s);
      for (std::int64_t e = b * 128; e < b * 128 + 128; ++e) {
        REQUIRE(got_codes[static_cast<std::size_t>(r * k + e)] ==
                fp32_to_fp8_e4m3(std::clamp(x[static_cast<std::size_t>(r * ldx + e)] / s, -448.0f, 448.0f)));
      }
    }
  }
  for (std::int64_t b = 0; b < k / 128; ++b) {
    for (std::int64_t r = rows; r < scales_ld; ++r)
      REQUIRE(got_scales[static_cast<std::size_t>(b * scales_ld + r)] == -5.0f);
  }
}

TEST_CASE("cuda rms_norm, rope and the elementwise ops match the CPU kernels", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  test::Rng rng(103);
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric);
  const std::int64_t rows = 5, cols = 384, ld = 390;
  std::vector<float> a(static_cast<std::size_t>(rows * ld)), b(a.size()), w = rng.normals(cols);
  for (float& v : a) v = rng.normal() * 2.0f;
  for (float& v : b) v = rng.normal();
  DeviceArray<float> da(a), db(b), dw(w), dout(a.size());

  SECTION("rms_norm") {
    cuda::launch_rms_norm(da.get(), ld, rows, cols, dw.get(), 1e-5f, dout.get(), ld, nullptr);
    const std::vector<float> got = dout.download();
    std::vector<float> want(a.size());
    cpu::rms_norm(ctx, a.data(), ld, rows, cols, w.data(), 1e-5f, want.data(), ld);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto i = static_cast<std::size_t>(r * ld + c);
        REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f * (1.0f + std::fabs(want[i])));
      }
    }
  }
  SECTION("rms_norm + FP8 rows: the norm's bits, and the E4M3 rows and scales the GEMM's own quantization gives") {
    // in place too (y over x), as a layer's norm may run; a row of zeros (scale 1)
    std::vector<float> x = a;
    std::fill(x.begin() + 2 * ld, x.begin() + 3 * ld, 0.0f);
    for (const bool in_place : {false, true}) {
      DeviceArray<float> dx(x), dy(x.size());
      DeviceArray<std::uint8_t> codes(static_cast<std::size_t>(rows * cols)), want_codes(static_cast<std::size_t>(rows * cols));
      DeviceArray<float> scales(static_cast<std::size_t>(rows)), want_scales(static_cast<std::size_t>(rows));
      float* y = in_place ? dx.get() : dy.get();
      cuda::launch_rms_norm(dx.get(), ld, rows, cols, dw.get(), 1e-5f, dout.get(), ld, nullptr);
      cuda::launch_floats_to_fp8_rows(dout.get(), ld, rows, cols, want_codes.get(), want_scales.get(), nullptr);
      cuda::launch_rms_norm_fp8(dx.get(), ld, rows, cols, dw.get(), 1e-5f, y, ld, codes.get(), scales.get(), nullptr);
      const std::vector<float> norm = dout.download(), got = in_place ? dx.download() : dy.download();
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<std::size_t>(r * ld + c);
          REQUIRE(std::memcmp(&got[i], &norm[i], sizeof(float)) == 0);
        }
      }
      REQUIRE(codes.download() == want_codes.download());
      REQUIRE(scales.download() == want_scales.download());
      REQUIRE(scales.download()[2] == 1.0f);
    }
  }
  SECTION("rope: normal and neox, partial rotation, YaRN") {
    for (const bool neox : {false, true}) {
      for (const bool yarn : {false, true}) {
        const std::int64_t n_heads = 6, head_dim = 64, rot = 48;
        cpu::RopeParams p{head_dim, rot,
                          10000.0f, yarn ? 0.25f : 1.0f,
                          nullptr,  neox ? cpu::RopeStyle::kNeox : cpu::RopeStyle::kNormal};
        if (yarn) p.yarn = {true, 512.0, 32.0, 1.0, 1.0};
        std::vector<double> inv(rot / 2);
        double mscale = 1;
        cpu::rope_inverse_frequencies(p, inv.data(), &mscale);
        const std::vector<std::int32_t> positions = {0, 7, 4095, 12, 100000};
        std::vector<float> x(static_cast<std::size_t>(rows * ld));
        for (float& v : x) v = rng.normal();
        // two tensors in one launch (Q and K; the second with fewer heads), as the decode fusion
        std::vector<float> x2(static_cast<std::size_t>(rows * ld));
        for (float& v : x2) v = rng.normal();
        DeviceArray<float> dx(x), dx2(x2);
        DeviceArray<std::int32_t> dp(positions);
        DeviceArray<double> df(inv);
        cuda::RopeTargets targets;
        targets.t[0] = {dx.get(), ld, n_heads};
        targets.t[1] = {dx2.get(), ld, n_heads - 1};
        targets.count = 2;
        cuda::launch_rope(targets, rows, head_dim, rot, neox, dp.get(), df.get(), mscale, nullptr);
        const std::vector<float> got = dx.download(), got2 = dx2.download();
        cpu::rope(ctx, x.data(), ld, rows, n_heads, positions.data(), p);
        cpu::rope(ctx, x2.data(), ld, rows, n_heads - 1, positions.data(), p);
        for (std::size_t i = 0; i < x.size(); ++i) {
          INFO("neox " << neox << " yarn " << yarn << " element " << i);
          REQUIRE(std::fabs(got[i] - x[i]) <= 2e-6f * (1.0f + std::fabs(x[i])));
          REQUIRE(std::fabs(got2[i] - x2[i]) <= 2e-6f * (1.0f + std::fabs(x2[i])));
        }
      }
    }
  }
  SECTION("swiglu, geglu_tanh, add, add_bias, scale, soft_cap") {
    std::vector<float> want(a.size());
    const auto run = [&](cuda::Elementwise op, float scalar, const float* bias) {
      dout.poison();
      cuda::launch_elementwise(op, da.get(), ld, bias != nullptr ? dw.get() : db.get(), ld, scalar, rows, cols,
                               dout.get(), ld, nullptr);
      return dout.download();
    };
    const auto compare = [&](const std::vector<float>& got, const char* what) {
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<std::size_t>(r * ld + c);
          INFO(what << " element " << i);
          REQUIRE(std::fabs(got[i] - want[i]) <= 4e-6f * (1.0f + std::fabs(want[i])));
        }
      }
    };
    cpu::swiglu(ctx, a.data(), ld, b.data(), ld, rows, cols, want.data(), ld);
    compare(run(cuda::Elementwise::kSwiGlu, 0, nullptr), "swiglu");
    cpu::geglu_tanh(ctx, a.data(), ld, b.data(), ld, rows, cols, want.data(), ld);
    compare(run(cuda::Elementwise::kGeGluTanh, 0, nullptr), "geglu_tanh");
    cpu::add(ctx, a.data(), ld, b.data(), ld, rows, cols, want.data(), ld);
    compare(run(cuda::Elementwise::kAdd, 0, nullptr), "add");
    cpu::add_bias(ctx, a.data(), ld, w.data(), rows, cols, want.data(), ld);
    compare(run(cuda::Elementwise::kAddBias, 0, w.data()), "add_bias");
    cpu::scale(ctx, a.data(), ld, 0.37f, rows, cols, want.data(), ld);
    compare(run(cuda::Elementwise::kScale, 0.37f, nullptr), "scale");
    cpu::soft_cap(ctx, a.data(), ld, 1.5f, rows, cols, want.data(), ld);
    compare(run(cuda::Elementwise::kSoftCap, 1.5f, nullptr), "soft_cap");
  }
  SECTION("gather_rows, apart and in place") {
    const std::vector<std::int32_t> pick = {1, 2, 4};
    DeviceArray<std::int32_t> dp(pick);
    cuda::launch_gather_rows(da.get(), ld, dp.get(), 3, cols, dout.get(), ld, false, nullptr);
    const std::vector<float> apart = dout.download();
    cuda::launch_gather_rows(da.get(), ld, dp.get(), 3, cols, da.get(), ld, true, nullptr);
    const std::vector<float> in_place = da.download();
    for (std::size_t r = 0; r < pick.size(); ++r) {
      REQUIRE(std::memcmp(apart.data() + r * ld, a.data() + pick[r] * ld, cols * sizeof(float)) == 0);
      REQUIRE(std::memcmp(in_place.data() + r * ld, a.data() + pick[r] * ld, cols * sizeof(float)) == 0);
    }
  }
}

TEST_CASE(
    "cuda logit summaries equal the CPU's: largest logit, its id and the k best exactly, the sums within 1e-6 (rows of "
    "one and several chunks)",
    "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  const std::unique_ptr<Backend> backend = cuda::make_cuda_backend({});
  const std::int64_t limit = backend->info().logit_summary_k;
  REQUIRE(limit >= 65);
  test::Rng rng(104);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Rows of one kind each: normals, coarse ties with signed zeros, -inf and NaN among them, mostly
  // NaN (fewer numbers than k), all NaN, all -inf, one number.
  const auto make_row = [&](std::int64_t vocab, int kind) {
    std::vector<float> row = rng.normals(static_cast<std::size_t>(vocab), 4.0f);
    for (float& x : row) {
      const int pick = rng.uniform_int(0, 99);
      if (kind == 1) x = std::round(x) * (pick < 50 ? 1.0f : -1.0f);
      if (kind == 2 && pick < 10) x = -inf;
      if (kind == 2 && pick >= 10 && pick < 15) x = nan;
      if ((kind == 3 && pick < 99) || kind == 4) x = nan;
      if (kind == 5) x = -inf;
    }
    if (kind == 6) {
      std::fill(row.begin(), row.end(), nan);
      row[static_cast<std::size_t>(vocab / 2)] = -3.5f;
    }
    return row;
  };
  const std::vector<std::int64_t> vocabs = test::cuda_small_shapes()
                                               ? std::vector<std::int64_t>{7, 8193}
                                               : std::vector<std::int64_t>{1, 7, 1000, 8193, 128256};
  for (const std::int64_t vocab : vocabs) {
    constexpr int kKinds = 7;
    const std::int64_t n_rows = kKinds + 2;  // two more normal rows, left out of the first request
    std::vector<float> logits;
    for (std::int64_t r = 0; r < n_rows; ++r) {
      const std::vector<float> row = make_row(vocab, r < kKinds ? static_cast<int>(r) : 0);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    const std::size_t offset = 256;  // not at the buffer's start
    const std::unique_ptr<BackendBuffer> buffer = backend->allocate(offset + logits.size() * sizeof(float), "logits");
    backend->write(*buffer, offset, std::as_bytes(std::span(logits)));
    for (const std::int64_t k : {std::int64_t{1}, std::int64_t{41}, limit}) {
      CAPTURE(vocab, k);
      std::vector<std::int64_t> rows(kKinds);
      std::iota(rows.begin(), rows.end(), 0);
      std::vector<LogitSummary> got(static_cast<std::size_t>(n_rows));
      backend->summarize_logits(*buffer, offset, n_rows, vocab, rows, k, got);
      LogitSummary want;
      for (const std::int64_t r : rows) {
        CAPTURE(r);
        const std::span<const float> row(logits.data() + r * vocab, static_cast<std::size_t>(vocab));
        cpu::summarize_logits(row, k, want);
        const LogitSummary& g = got[static_cast<std::size_t>(r)];
        CHECK(std::bit_cast<std::uint32_t>(g.max) == std::bit_cast<std::uint32_t>(want.max));
        CHECK(g.argmax == want.argmax);
        CHECK(g.exp_sum == Approx(want.exp_sum).epsilon(1e-6).margin(1e-300));
        CHECK(g.exp_weighted == Approx(want.exp_weighted).epsilon(1e-6).margin(1e-6 * want.exp_sum));
        REQUIRE(g.best.size() == want.best.size());
        for (std::size_t i = 0; i < want.best.size(); ++i) {
          CHECK(g.best[i].id == want.best[i].id);
          CHECK(std::bit_cast<std::uint32_t>(g.best[i].logit) == std::bit_cast<std::uint32_t>(want.best[i].logit));
        }
      }
      // The same row alone gives the same summary, bit for bit.
      std::vector<LogitSummary> alone(static_cast<std::size_t>(n_rows));
      const std::vector<std::int64_t> first = {0};
      backend->summarize_logits(*buffer, offset, 1, vocab, first, k, alone);
      CHECK(std::bit_cast<std::uint64_t>(alone[0].exp_sum) == std::bit_cast<std::uint64_t>(got[0].exp_sum));
      CHECK(std::bit_cast<std::uint64_t>(alone[0].exp_weighted) == std::bit_cast<std::uint64_t>(got[0].exp_weighted));
    }
  }
  std::vector<LogitSummary> out(2);
  const std::unique_ptr<BackendBuffer> small = backend->allocate(64, "logits");
  const std::vector<std::int64_t> row0 = {0};
  CHECK_THROWS_AS(backend->summarize_logits(*small, 0, 2, 16, row0, 4, out), Error);  // 128 bytes of a 64-byte buffer
  CHECK_THROWS_AS(backend->summarize_logits(*small, 0, 1, 16, row0, limit + 1, out), Error);
}
