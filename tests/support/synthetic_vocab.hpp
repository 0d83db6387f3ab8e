// Large synthetic vocabularies and texts for tokenizer speed tests and benchmarks: a
// dictionary of random words (ASCII with some Latin-1 and CJK letters), a SentencePiece
// vocabulary holding every prefix of every "▁word" (so merges run all the way), a byte-level
// BPE vocabulary whose merges build every " word" left to right, and Zipf-like text.
#pragma once

#include "support/random.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/vocabulary.hpp"

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

namespace sitsrt::test {

// Appends the UTF-8 form of a Unicode scalar value (cp < 0x110000, no surrogate).
inline void append_code_point(std::uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The fastest of `runs` calls of `run`, in milliseconds (rides out a busy machine).
inline double best_of_ms(int runs, const std::function<void()>& run) {
  double best = 1e300;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

inline std::vector<std::string> random_words(Rng& rng, std::size_t count) {
  static const std::vector<std::string> kLetters = {
      "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t",
      "u", "v", "w", "x", "y", "z", "e", "a", "o", "i", "\xC3\xA9", "\xC3\xB6", "\xE4\xB8\xAD", "\xE6\x96\x87"};
  std::unordered_set<std::string> seen;
  std::vector<std::string> words;
  while (words.size() < count) {
    std::string word;
    const int length = rng.uniform_int(2, 10);
    for (int i = 0; i < length; ++i) word += kLetters[static_cast<std::size_t>(rng.uniform_int(0, 33))];
    if (seen.insert(word).second) words.push_back(word);
  }
  return words;
}

// Splits UTF-8 text into characters (valid input assumed).
inline std::vector<std::string> characters_of(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const std::size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    out.emplace_back(text.substr(i, n));
    i += n;
  }
  return out;
}

inline Vocabulary synthetic_spm_vocab(Rng& rng, const std::vector<std::string>& words, std::size_t size) {
  constexpr std::string_view kMarker = "\xE2\x96\x81";
  Vocabulary v;
  v.model = "llama";
  std::unordered_set<std::string> seen;
  const auto add = [&](std::string piece, TokenType type) {
    if (v.pieces.size() >= size || !seen.insert(piece).second) return;
    v.pieces.push_back(std::move(piece));
    v.types.push_back(type);
    v.scores.push_back(type == TokenType::kNormal ? -rng.uniform(0.0f, 20.0f) : 0.0f);
  };
  add("<unk>", TokenType::kUnknown);
  add("<s>", TokenType::kControl);
  add("</s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, TokenType::kByte);
  }
  // Real vocabularies have "_" (a lone space is no byte fallback) and, like Gemma's, runs "__", "___", ...
  for (std::string run(kMarker); run.size() <= 16 * kMarker.size(); run += kMarker) add(run, TokenType::kNormal);
  for (std::size_t round = 0; v.pieces.size() < size; ++round) {
    for (const std::string& word : words) {
      std::string piece = round % 2 == 0 ? std::string(kMarker) : std::string();
      for (const std::string& c : characters_of(word + (round < 2 ? "" : std::to_string(round)))) {
        piece += c;
        add(piece, TokenType::kNormal);
      }
      if (v.pieces.size() >= size) break;
    }
  }
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  return v;
}

inline Vocabulary synthetic_bpe_vocab(const std::vector<std::string>& words, std::size_t size) {
  Vocabulary v;
  v.model = "gpt2";
  v.pre = "llama3";
  std::unordered_set<std::string> seen;
  const auto mapped = [](std::string_view raw) {
    std::string out;
    detail::append_byte_level(raw, out);
    return out;
  };
  for (int b = 0; b < 256; ++b) {
    v.pieces.push_back(mapped(std::string(1, static_cast<char>(b))));
    seen.insert(v.pieces.back());
  }
  for (const std::string& word : words) {
    const std::string spaced = " " + word;
    std::string left = mapped(spaced.substr(0, 1));
    for (std::size_t i = 1; i < spaced.size() && v.pieces.size() < size; ++i) {
      const std::string right = mapped(spaced.substr(i, 1));
      const std::string joined = left + right;
      if (seen.insert(joined).second) {
        v.merges.push_back(left + " " + right);
        v.pieces.push_back(joined);
      }
      left = joined;
    }
    if (v.pieces.size() >= size) break;
  }
  v.types.assign(v.pieces.size(), TokenType::kNormal);
  v.pieces.push_back("<|endoftext|>");
  v.types.push_back(TokenType::kControl);
  v.eos = static_cast<std::int32_t>(v.pieces.size()) - 1;
  v.add_bos = false;
  v.add_space_prefix = false;
  return v;
}

// About `bytes` bytes of words drawn with a Zipf-like skew, with punctuation and newlines.
inline std::string synthetic_text(Rng& rng, const std::vector<std::string>& words, std::size_t bytes) {
  std::string text;
  text.reserve(bytes + 64);
  while (text.size() < bytes) {
    const double u = rng.uniform(0.0f, 1.0f);
    text += words[static_cast<std::size_t>(std::pow(u, 3.0) * static_cast<double>(words.size() - 1))];
    const int r = rng.uniform_int(0, 19);
    text += r == 0 ? ", " : r == 1 ? ". " : r == 2 ? "\n" : r == 3 ? " 1234 " : " ";
  }
  return text;
}

}  // namespace sitsrt::test
