// The tokenizer.ggml.pre names llama.cpp recognises (src/llama-vocab.cpp, llama_vocab::impl::load)
// and the regexes of each LLAMA_VOCAB_PRE_TYPE_* (the llm_tokenizer_bpe constructor), as of
// llama.cpp 00ad355e. Where llama.cpp quotes the tokenizer.json pattern it adapted for std::regex
// (case-insensitive groups spelled out, \p{Lu} emulated with lookaheads, possessive quantifiers
// made greedy), the original is used: PCRE2 runs it, and it is what the model's tokenizer does.
// Code points in character classes are written \x{...}. docs/tokenizers.md lists where llama.cpp's
// own regex engine gives other pieces.
#include "tokenizer/pre_tokenizer.hpp"

#include "core/check.hpp"

#include <array>

namespace sitsrt::detail {
namespace {

using Patterns = std::vector<std::string_view>;

// GPT-2's encoder.py pattern without its final "\s+", as llama.cpp lists it (the alternative
// is redundant: a lone whitespace before a non-space then stays between matches, one piece).
constexpr std::string_view kGpt2Short = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCjkKana = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr std::string_view kCjkHangul = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// DeepSeek V3's word pattern: ASCII punctuation may lead an ASCII word; \p{P}/\p{S} runs.
constexpr std::string_view kDeepSeek3Words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kPoro = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

const Patterns kDefaultSet = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Short, R"(\p{N}+)", R"([0-9][0-9][0-9])"};
const Patterns kGpt2Set = {kGpt2Short};
const Patterns kGpt2Published = {kGpt2};
const Patterns kLlama3Set = {kLlama3};
const Patterns kQwen2Set = {kQwen2};
const Patterns kQwen35Set = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s+(?!\S)|\s+)"};
const Patterns kJais2Set = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S))"
    R"(|\s{1,2}(?!\S)|\s{1})"};
const Patterns kDeepSeekLlmSet = {
    R"([\r\n])",
    // Cased letters (Lu, Ll, Lt) of the Unicode version DeepSeek's tokenizer was built with.
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5})"
    R"(\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD})"
    R"(\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15})"
    R"(\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB})"
    R"(\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D})"
    R"(\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
    R"(\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})"
    R"(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})"
    R"(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
    R"(\s+$)",
    kCjkHangul,
    R"(\p{N}+)"};
const Patterns kDeepSeek3Set = {R"(\p{N}{1,3})", kCjkKana, kDeepSeek3Words};
const Patterns kSpark25Set = {
    R"(\p{N}{1,3})", kCjkKana,
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n])"
    R"(|\s+(?!\S)|\s+)",
    R"(\p{N})"};
const Patterns kYoutuSet = {
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)"
    R"(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+)"
    R"(|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const Patterns kDeepSeekCoderSet = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"};
const Patterns kFalconSet = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Short, R"([0-9][0-9][0-9])"};
const Patterns kStarCoderSet = {R"(\p{N})", kGpt2Short};
const Patterns kPoroSet = {kPoro};
const Patterns kVikingSet = {kPoro, R"(\p{N})"};
const Patterns kTekkenSet = {
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const Patterns kChameleonSet = {R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", R"(([\t\n]|    |  ))",
                                R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2Short};
const Patterns kGpt4oSet = {kGpt4o};
const Patterns kTinyAyaSet = {R"(\d{1,3}(?=(?:\d{3})*\b))", kGpt4o};
// tokenization_kimi.py's pattern; its class intersections ([...&&[^\p{Han}]]) as lookaheads.
const Patterns kKimiK2Set = {
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// A zero-width match splits: digit runs cut into groups of three from the right.
const Patterns kSuperBpeSet = {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"};
const Patterns kBailingMoeSet = {
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"};
const Patterns kSeedCoderSet = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const Patterns kUfakzekaSet = {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// llama.cpp's "\p{AFMoE_digits}" splitter: digit runs in groups of three from the right.
const Patterns kAfmoeSet = {
    R"(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))",
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F})"
    R"(\x{2F00}-\x{2FDF}\x{0E00}-\x{0E7F}\x{0E80}-\x{0EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F})"
    R"(\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)",
    kDeepSeek3Words};
const Patterns kLagunaSet = {
    R"([^\n]+|[\n]+)",
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const Patterns kExaoneMoeSet = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?)"
    R"(|\s*[\r\n]|\s+(?!\S)|\s+)"};
const Patterns kMiniCpm5Set = {
    R"(\p{N}{1,3})",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// SentencePiece-style BPE over raw UTF-8: only newlines split (merges never cross them).
const Patterns kLinesSet = {R"([^\n]+|[\n]+)"};
const Patterns kWhitespaceSet = {R"(\S+)"};

enum class Raw { kNo, kEscaped, kPlain };

struct Entry {
  std::string_view name;
  const Patterns* patterns;
  bool ignore_merges = false;
  bool add_bos = false;
  Raw raw = Raw::kNo;
  bool gemma4 = false;  // newline runs whole, BOS forced
};

// In llama.cpp's order (load()); "gpt2" is GPT-2's published pattern, not a llama.cpp name.
const std::array kEntries = {
    Entry{"default", &kDefaultSet},
    Entry{"gpt2", &kGpt2Published},
    Entry{"minicpm5", &kMiniCpm5Set, true},
    Entry{"llama3", &kLlama3Set, true, true},
    Entry{"llama-v3", &kLlama3Set, true, true},
    Entry{"llama-bpe", &kLlama3Set, true, true},
    Entry{"falcon3", &kLlama3Set, true, true},
    Entry{"falcon-h1", &kLlama3Set, true, true},
    Entry{"pixtral", &kLlama3Set, true, true},
    Entry{"midm-2.0", &kLlama3Set, true, true},
    Entry{"lfm2", &kLlama3Set, true, true},
    Entry{"jina-v5-nano", &kLlama3Set, true, true},
    Entry{"deepseek-llm", &kDeepSeekLlmSet},
    Entry{"deepseek-coder", &kDeepSeekCoderSet},
    Entry{"deepseek-v3", &kDeepSeek3Set},
    Entry{"spark2_5", &kSpark25Set},
    Entry{"youtu", &kYoutuSet, true},
    Entry{"falcon", &kFalconSet},
    Entry{"mpt", &kGpt2Set},
    Entry{"starcoder", &kStarCoderSet},
    Entry{"gpt-2", &kGpt2Set},
    Entry{"phi-2", &kGpt2Set},
    Entry{"jina-es", &kGpt2Set},
    Entry{"jina-de", &kGpt2Set},
    Entry{"gigachat", &kGpt2Set},
    Entry{"jina-v2-es", &kGpt2Set},
    Entry{"jina-v2-de", &kGpt2Set},
    Entry{"a.x-4.0", &kGpt2Set},
    Entry{"mellum", &kGpt2Set},
    Entry{"modern-bert", &kGpt2Set},
    Entry{"jais-2", &kJais2Set},
    Entry{"gemma4", &kLinesSet, false, false, Raw::kEscaped, true},
    Entry{"granite-embed-multi-311m", &kLinesSet, false, false, Raw::kEscaped, true},
    Entry{"sarvam-moe", &kLinesSet, false, false, Raw::kEscaped},
    Entry{"jina-v1-en", &kGpt2Set},
    Entry{"jina-v2-code", &kGpt2Set},
    Entry{"roberta-bpe", &kGpt2Set},
    Entry{"whitespace", &kWhitespaceSet, false, false, Raw::kPlain},
    Entry{"refact", &kStarCoderSet},
    Entry{"command-r", &kStarCoderSet},
    Entry{"qwen2", &kQwen2Set},
    Entry{"deepseek-r1-qwen", &kQwen2Set},
    Entry{"kormo", &kQwen2Set},
    Entry{"f2llmv2", &kQwen2Set},
    Entry{"qwen35", &kQwen35Set},
    Entry{"stablelm2", &kQwen2Set},
    Entry{"olmo", &kGpt2Set},
    Entry{"dbrx", &kLlama3Set},
    Entry{"smaug-bpe", &kLlama3Set},
    Entry{"poro-chat", &kPoroSet},
    Entry{"glm4", &kLlama3Set},
    Entry{"chatglm-bpe", &kLlama3Set},
    Entry{"viking", &kVikingSet},
    Entry{"jais", &kGpt2Set},
    Entry{"tekken", &kTekkenSet, true, true},
    Entry{"smollm", &kStarCoderSet},
    Entry{"codeshell", &kStarCoderSet},
    Entry{"bloom", &kPoroSet},
    Entry{"gpt3-finnish", &kPoroSet},
    Entry{"exaone", &kStarCoderSet},
    Entry{"exaone4", &kGpt2Set},
    Entry{"exaone-moe", &kExaoneMoeSet},
    Entry{"chameleon", &kChameleonSet, false, true},
    Entry{"minerva-7b", &kStarCoderSet},
    Entry{"megrez", &kQwen2Set},
    Entry{"gpt-4o", &kGpt4oSet},
    Entry{"llama4", &kGpt4oSet},
    Entry{"kanana2", &kGpt4oSet},
    Entry{"talkie", &kGpt4oSet},
    Entry{"granite-embed-multi-97m", &kGpt4oSet, true},
    Entry{"tiny_aya", &kTinyAyaSet},
    Entry{"cohere2moe", &kTinyAyaSet},
    Entry{"superbpe", &kSuperBpeSet},
    Entry{"trillion", &kGpt2Set},
    Entry{"granite-docling", &kGpt2Set},
    Entry{"bailingmoe", &kBailingMoeSet},
    Entry{"bailingmoe2", &kBailingMoeSet},
    Entry{"llada-moe", &kBailingMoeSet},
    Entry{"seed-coder", &kSeedCoderSet},
    Entry{"hunyuan", &kQwen2Set},
    Entry{"hunyuan-dense", &kDeepSeek3Set},
    Entry{"hy_v4", &kDeepSeek3Set},
    Entry{"joyai-llm", &kDeepSeek3Set},
    Entry{"kimi-k2", &kKimiK2Set},
    Entry{"ufakzeka", &kUfakzekaSet},
    Entry{"grok-2", &kQwen2Set},
    Entry{"afmoe", &kAfmoeSet},
    Entry{"laguna", &kLagunaSet},
    Entry{"minimax-m2", &kGpt4oSet},
    Entry{"solar-open", &kQwen2Set},
    Entry{"mellum2", &kStarCoderSet},
};

const Entry* find_entry(std::string_view pre) {
  for (const Entry& entry : kEntries) {
    if (entry.name == pre) return &entry;
  }
  return nullptr;
}

}  // namespace

std::string_view gpt2_pattern() noexcept { return kGpt2; }

std::vector<std::string_view> pre_tokenizer_names() {
  std::vector<std::string_view> names;
  for (const Entry& entry : kEntries) names.push_back(entry.name);
  return names;
}

std::optional<PreTokenizerSpec> find_pre_tokenizer(std::string_view pre) {
  const Entry* entry = find_entry(pre);
  if (entry == nullptr) return std::nullopt;
  PreTokenizerSpec spec;
  spec.patterns.assign(entry->patterns->begin(), entry->patterns->end());
  spec.ignore_merges = entry->ignore_merges;
  spec.add_bos = entry->add_bos || entry->gemma4;
  spec.raw_utf8 = entry->raw != Raw::kNo;
  spec.escape_spaces = entry->raw == Raw::kEscaped;
  spec.newline_runs_whole = entry->gemma4;
  spec.force_bos = entry->gemma4;
  return spec;
}

PreTokenizerSpec pre_tokenizer_spec(std::string_view pre, std::string_view source) {
  if (std::optional<PreTokenizerSpec> spec = find_pre_tokenizer(pre)) return *std::move(spec);
  std::string supported;
  for (const std::string_view name : pre_tokenizer_names()) supported += (supported.empty() ? "" : ", ") + std::string(name);
  raise(ErrorCode::kUnsupported, "{}: pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; supported: {}", source,
        pre, supported);
}

std::vector<std::string> pre_tokenizer_patterns(std::string_view pre, std::string_view source) {
  std::vector<std::string> patterns;
  for (const std::string_view pattern : pre_tokenizer_spec(pre, source).patterns) patterns.emplace_back(pattern);
  return patterns;
}

}  // namespace sitsrt::detail
