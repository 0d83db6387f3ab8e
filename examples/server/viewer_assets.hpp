// The trace viewer's files (examples/trace-viewer/), embedded into the server at build time
// (embed_assets.cmake) so that `sitsrt serve` serves /viewer/ without any install path.
#pragma once

#include <span>
#include <string_view>

namespace sitsrt::server {

struct StaticAsset {
  std::string_view name;          // file name, e.g. "index.html"
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view bytes;
};

std::span<const StaticAsset> viewer_assets();

}  // namespace sitsrt::server
