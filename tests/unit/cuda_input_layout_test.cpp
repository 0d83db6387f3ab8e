// The slot layout of the CUDA backend's decode-graph input image (cuda/input_layout.hpp), on the
// host: a replay must find every slot where the capture put it, and must learn when it cannot.
#include "cuda_backend/input_layout.hpp"

#include <catch2/catch.hpp>

#include <vector>

using sitsrt::cuda::InputLayout;

TEST_CASE("input layout: size classes are 16-byte steps to 256, then powers of two", "[cuda-graphs]") {
  CHECK(InputLayout::size_class(0) == 16);
  CHECK(InputLayout::size_class(1) == 16);
  CHECK(InputLayout::size_class(17) == 32);
  CHECK(InputLayout::size_class(256) == 256);
  CHECK(InputLayout::size_class(257) == 512);
  CHECK(InputLayout::size_class(4096) == 4096);
  CHECK(InputLayout::size_class(4097) == 8192);
}

TEST_CASE("input layout: a replay follows the recorded offsets while its slots stay in class", "[cuda-graphs]") {
  InputLayout layout;
  layout.begin(nullptr);  // the capture: ids, positions + frequencies, an attention blob
  const std::vector<std::size_t> asks = {4, 600, 1000, 20};
  std::vector<std::size_t> offsets;
  for (const std::size_t bytes : asks) offsets.push_back(*layout.reserve(bytes, 1 << 20));
  REQUIRE(layout.fits());
  CHECK(offsets == std::vector<std::size_t>{0, 16, 16 + 1024, 16 + 1024 + 1024});
  const std::vector<std::size_t> recorded = layout.recorded();
  CHECK(layout.used() == 16 + 1024 + 1024 + 32);

  // The same slots, smaller or equal within their classes: the same offsets.
  layout.begin(&recorded);
  for (std::size_t i = 0; i < asks.size(); ++i) {
    const std::size_t bytes = i == 2 ? 513 : asks[i];
    CHECK(layout.reserve(bytes, 1 << 20) == offsets[i]);
  }
  CHECK(layout.fits());

  // A block table past its class: that slot and the step do not fit.
  layout.begin(&recorded);
  CHECK(layout.reserve(4, 1 << 20) == offsets[0]);
  CHECK(layout.reserve(600, 1 << 20) == offsets[1]);
  CHECK_FALSE(layout.reserve(1025, 1 << 20).has_value());
  CHECK_FALSE(layout.reserve(20, 1 << 20).has_value());
  CHECK_FALSE(layout.fits());

  // Fewer or more slots than recorded: not the captured step.
  layout.begin(&recorded);
  for (std::size_t i = 0; i + 1 < asks.size(); ++i) static_cast<void>(layout.reserve(asks[i], 1 << 20));
  CHECK_FALSE(layout.fits());
  layout.begin(&recorded);
  for (const std::size_t bytes : asks) static_cast<void>(layout.reserve(bytes, 1 << 20));
  CHECK_FALSE(layout.reserve(16, 1 << 20).has_value());
  CHECK_FALSE(layout.fits());
}

TEST_CASE("input layout: a recording past the image's capacity says so and how much it asked", "[cuda-graphs]") {
  InputLayout layout;
  layout.begin(nullptr);
  CHECK(layout.reserve(3000, 4096) == 0u);
  CHECK_FALSE(layout.reserve(3000, 4096).has_value());
  CHECK_FALSE(layout.fits());
  CHECK(layout.asked() == 8192);  // what the image must grow past
  layout.begin(nullptr);          // a new step starts clean
  CHECK(layout.reserve(100, 4096) == 0u);
  CHECK(layout.fits());
}
