// sitsrt convert: a Hugging Face model directory (config.json + safetensors) -> GGUF.
#include "commands.hpp"

#include "core/dtype.hpp"
#include "model/hf_convert.hpp"
#include "model/hf_model.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <chrono>

namespace sitsrt::cli {

int convert_command(int argc, char** argv) {
  Args args("sitsrt convert",
            "Convert a Hugging Face model directory (config.json + model.safetensors or a sharded index) to GGUF,\n"
            "with llama.cpp's metadata keys and tensor names. The tokenizer is not converted yet.",
            {{"output", 'o', "FILE",
              "output GGUF path (a new file; an existing regular file only with --force, never "
              "one of the input directory's files)",
              ""},
             {"force", 0, "", "replace an existing output file", ""},
             {"type", 0, "TYPE",
              "2-D weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 fp8_e4m3 fp8-channel (one scale per row) "
              "fp8-block (one scale per 128x128 block) "
              "q4_g128",
              "the checkpoint's torch_dtype; a quantized (FP8, AWQ, GPTQ) checkpoint's linears stay fp8_e4m3 / q4_g128 "
              "(exact; libsitsrt-only GGUF types)"},
             {"threads", 't', "N", "threads for converting and quantizing", "all cores"},
             {"json", 0, "", "print a JSON summary on stdout", ""}});
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  if (args.positional().size() != 1) throw UsageError("pass one Hugging Face model directory");
  const std::string& directory = args.positional()[0];
  if (!is_hf_model_directory(directory))
    throw UsageError(fmt::format("'{}' is not a directory with config.json", directory));
  const auto out = args.get("output");
  if (!out) throw UsageError("no output file: pass -o FILE.gguf");
  std::optional<DType> type;
  Fp8Scaling fp8_scaling = Fp8Scaling::kSearchedBlock;
  if (const auto t = args.get("type")) {
    if (*t == "fp8-channel") fp8_scaling = Fp8Scaling::kPerChannel;
    if (*t == "fp8-block") fp8_scaling = Fp8Scaling::kBlock128;
    type = fp8_scaling != Fp8Scaling::kSearchedBlock ? DType::kFP8_E4M3 : dtype_from_name(*t);
    if (!type) throw UsageError(fmt::format("unknown --type '{}'", *t));
  } else if (const HfConfig config = open_hf_model(directory).config; !config.quantization) {
    const std::string& torch_dtype = config.torch_dtype;
    type = torch_dtype == "float32" ? DType::kF32 : torch_dtype == "bfloat16" ? DType::kBF16 : DType::kF16;
  }  // else: every matrix as it is served (the quantized linears exactly)
  OutputFileOptions output;
  output.replace_existing = args.has("force");
  output.exists_hint = "pass --force to replace it";
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  const HfConvertSummary s = convert_hf_to_gguf(
      directory, *out, type, static_cast<int>(args.get_int("threads", 0, 0, 1024)),
      [&](std::size_t done, std::size_t total) {
        if (tty) fmt::print(stderr, "\rconverting tensors: {}/{}", done, total);
      },
      output, fp8_scaling);
  if (tty) fmt::print(stderr, "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (args.has("json")) {
    const nlohmann::json doc = {{"input", directory},
                                {"output", *out},
                                {"architecture", s.architecture},
                                {"type", fp8_scaling == Fp8Scaling::kPerChannel ? std::string("fp8-channel")
                                         : fp8_scaling == Fp8Scaling::kBlock128 ? std::string("fp8-block")
                                         : type                                 ? std::string(name(*type))
                                                                                : "as-stored"},
                                {"tensors", s.tensors},
                                {"parameters", s.parameters},
                                {"tensor_bytes", s.bytes},
                                {"fallback_f16", s.fallback_f16},
                                {"seconds", seconds}};
    fmt::print("{}\n", doc.dump());
  }
  fmt::print(stderr, "wrote {} ({}, {} tensors, {:.2f} M parameters, {}{}, {:.1f} s)\n", *out, s.architecture,
             s.tensors, static_cast<double>(s.parameters) / 1e6, type ? std::string(name(*type)) : "as stored",
             s.fallback_f16 ? fmt::format(", {} matrices as f16", s.fallback_f16) : "", seconds);
  return 0;
}

}  // namespace sitsrt::cli
