// Converts a Hugging Face model directory to a GGUF file that llama.cpp-compatible readers
// (and this library) load: llama.cpp's metadata keys and tensor names, Llama/Mistral Q/K rows
// permuted back to GGUF's adjacent-pair rope convention, Gemma 3 norms stored as 1 + w, Llama 3
// rope scaling as rope_freqs.weight. 2-D weights are written in the requested type (a matrix
// whose rows are not whole blocks of it falls back to f16), or with no type each in the type it
// is served in (a quantized checkpoint's linears in FP8 E4M3 / INT4 g128, libsitsrt-only GGUF
// types, bytes copied); vectors are f32.
#pragma once

#include "core/dtype.hpp"
#include "core/output_file.hpp"
#include "core/quant_blocks.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace sitsrt {

struct HfConvertSummary {
  std::string architecture;  // GGUF general.architecture
  std::size_t tensors = 0;
  std::int64_t parameters = 0;
  std::uint64_t bytes = 0;       // tensor bytes written
  std::size_t fallback_f16 = 0;  // matrices written as f16 because rows are not whole blocks
};

// progress(done_tensors, total_tensors). Throws sitsrt::Error naming the directory/key/tensor;
// the output file is written atomically (see gguf::Writer::write). The output target is checked
// before anything is read: it is never a file of the input directory (config.json, the index,
// the safetensors shards; compared by inode, whatever `output_options` says), never a
// non-regular file, and replaces an existing file only when output_options.replace_existing.
// fp8_scaling: with type kFP8_E4M3, how matrices converted from another type are scaled (per
// block of 64, per row, or per 128 x 128 block: the last two the FP8 x FP8 prefill's weights on
// Hopper).
HfConvertSummary convert_hf_to_gguf(const std::string& directory, const std::string& output, std::optional<DType> type,
                                    int threads, const std::function<void(std::size_t, std::size_t)>& progress = {},
                                    OutputFileOptions output_options = {},
                                    Fp8Scaling fp8_scaling = Fp8Scaling::kSearchedBlock);

}  // namespace sitsrt
