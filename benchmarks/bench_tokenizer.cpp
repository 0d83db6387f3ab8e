// Tokenizer throughput: SentencePiece and byte-level BPE encode/decode on about 1 MB of
// synthetic text with 262,144-entry synthetic vocabularies (tests/support/synthetic_vocab.hpp),
// plus the real stories260K vocabulary when the shared model is there. Prints MB/s, the median
// of --repeats runs after one warm-up. There is no physical floor to compare with: the
// reference point is the 1 MB/s the project requires of SentencePiece at this vocabulary size.
#include "formats/gguf.hpp"
#include "support/synthetic_vocab.hpp"
#include "tokenizer/tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

using namespace sitsrt;

namespace {

double median_seconds(int repeats, const std::function<void()>& run) {
  run();  // warm-up
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

void measure(const std::string& name, const Tokenizer& tokenizer, const std::string& text, int repeats) {
  std::vector<std::int32_t> ids;
  const double encode_s = median_seconds(repeats, [&] { ids = tokenizer.encode(text, false); });
  std::string decoded;
  const double decode_s = median_seconds(repeats, [&] { decoded = tokenizer.decode(ids, true); });
  const double mb = static_cast<double>(text.size()) / 1e6;
  fmt::print("{:<34} {:>8} {:>10} {:>11.2f} {:>11.1f} {:>9}\n", name, tokenizer.vocab().size(), ids.size(), mb / encode_s,
             mb / decode_s, decoded == text ? "yes" : "NO");
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
  }
  test::Rng rng(2024);
  const std::vector<std::string> words = test::random_words(rng, 60000);
  const std::string text = test::synthetic_text(rng, words, 1 << 20);
  fmt::print("text: {} bytes, median of {} runs\n", text.size(), repeats);
  fmt::print("{:<34} {:>8} {:>10} {:>11} {:>11} {:>9}\n", "tokenizer", "vocab", "tokens", "enc MB/s", "dec MB/s",
             "roundtrip");

  const auto spm = make_tokenizer(test::synthetic_spm_vocab(rng, words, 262144), "synthetic");
  measure("SentencePiece (synthetic 262k)", *spm, text, repeats);
  const auto bpe = make_tokenizer(test::synthetic_bpe_vocab(words, 262144), "synthetic");
  measure("byte-level BPE, llama3 (synth. 262k)", *bpe, text, repeats);

  const std::string stories = std::string(SITSRT_SHARED_DIR) + "/models/stories260K.gguf";
  if (std::filesystem::exists(stories)) {
    measure("SentencePiece (stories260K)", *load_tokenizer(stories), text, repeats);
  }
  return 0;
}
