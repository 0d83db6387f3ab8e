// Where a loaded model runs: the devices, what each holds against its budget, and which layers
// form each pipeline stage. Today every engine has one CPU device and one stage; the memory-aware
// partitioner fills the same structure for several devices (see docs/architecture.md).
#pragma once

#include <sitsrt/export.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt {

struct PlanDevice {
  std::string name;                    // "cpu0"
  std::string kind;                    // "cpu"
  std::string detail;                  // e.g. "avx512vnni, 2 threads"
  std::uint64_t budget_bytes = 0;      // activations + KV caches; 0: unlimited
  std::uint64_t weight_bytes = 0;      // weights this device reads (mmapped on CPU)
  std::uint64_t kv_bytes_per_request = 0;          // KV cache of one request at full context
  std::uint64_t activation_bytes_per_request = 0;  // activation arena of one request
};

struct PlanStage {
  std::string device;         // a PlanDevice::name
  std::int32_t first_layer = 0;
  std::int32_t last_layer = -1;  // inclusive; -1 with first_layer 0: no transformer blocks
  bool embedding = false;     // holds the token embedding lookup
  bool output_head = false;   // holds the final norm and the output projection
  std::uint64_t weight_bytes = 0;
};

struct DevicePlan {
  std::vector<PlanDevice> devices;
  std::vector<PlanStage> stages;  // in execution order
  std::int64_t context_length = 0;
  [[nodiscard]] SITSRT_API std::string to_table() const;
  [[nodiscard]] SITSRT_API std::string to_json() const;
};

}  // namespace sitsrt
