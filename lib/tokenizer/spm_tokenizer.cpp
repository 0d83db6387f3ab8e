// SentencePiece BPE encoding as llama.cpp's llm_tokenizer_spm does it: the text is split into
// characters held in a doubly linked list, every adjacent pair whose concatenation is a
// vocabulary piece goes into a max-heap keyed by (score, leftmost), and the best pair is merged
// until the heap is empty; stale heap entries are skipped lazily. O(n log n) in the text length.
// Text is merged one word at a time where no vocabulary piece can span the word boundary (a
// U+2581 after another character): same result, small heaps.
//
// Deliberate differences from llama.cpp (both only affect unusual input or vocabularies):
//  - control, byte, unknown and unused pieces never take part in merges or match a character
//    (SentencePiece's rule; llama.cpp looks every piece up), so e.g. literal "<0x41>" text is
//    not turned into the byte token;
//  - a byte that does not start a valid UTF-8 character is a symbol of its own (llama.cpp takes
//    the length from the lead byte alone and may swallow the following ASCII character).
// llama.cpp's "resegment" step (splitting an unknown merged symbol back into its parts) never
// fires here because only pairs that are vocabulary pieces are ever merged.
#include "tokenizer/spm_tokenizer.hpp"

#include "core/check.hpp"
#include "tokenizer/utf8.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace sitsrt {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK
// Word cache bounds per encode call: long runs are rarely repeated, and the cache stays small.
constexpr std::size_t kMaxCachedWordBytes = 64;
constexpr std::size_t kMaxCachedWords = 1 << 16;

// Whether the U+2581 at `pos` comes right after another U+2581.
bool follows_marker(std::string_view text, std::size_t pos) {
  return pos >= kSpaceMarker.size() && text.substr(pos - kSpaceMarker.size(), kSpaceMarker.size()) == kSpaceMarker;
}

// Byte offsets of the U+2581s of `piece` that follow another character (none for "__ab"; the
// second one for "_a_b").
std::vector<std::size_t> markers_after_a_character(std::string_view piece) {
  std::vector<std::size_t> offsets;
  for (std::size_t pos = piece.find(kSpaceMarker, 1); pos != std::string_view::npos;
       pos = piece.find(kSpaceMarker, pos + 1)) {
    if (!follows_marker(piece, pos)) offsets.push_back(pos);
  }
  return offsets;
}

// More pieces that can cross a word boundary than this: merge the whole text at once.
constexpr std::size_t kMaxCrossingPieces = 64;

bool is_mergeable(TokenType type) {
  return type == TokenType::kNormal || type == TokenType::kUserDefined || type == TokenType::kUndefined;
}

std::optional<std::uint8_t> parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return std::nullopt;
  const auto hex_digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int high = hex_digit(piece[3]);
  const int low = hex_digit(piece[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<std::uint8_t>(high * 16 + low);
}

void append_unescaped(std::string_view piece, std::string& out) {
  std::size_t pos = 0;
  while (true) {
    const std::size_t marker = piece.find(kSpaceMarker, pos);
    if (marker == std::string_view::npos) break;
    out.append(piece.substr(pos, marker - pos));
    out.push_back(' ');
    pos = marker + kSpaceMarker.size();
  }
  out.append(piece.substr(pos));
}

// One character or merged run of characters in the working text.
struct Symbol {
  std::size_t offset;
  std::size_t length;  // 0 once merged into its left neighbour
  std::int32_t prev;
  std::int32_t next;  // -1 at the end
};

struct Bigram {
  float score;
  std::int32_t left;
  std::int32_t right;
  std::size_t length;  // left.length + right.length when queued; a mismatch marks it stale
};

// Heap order: higher score first, then the leftmost pair.
struct LowerPriority {
  bool operator()(const Bigram& a, const Bigram& b) const noexcept {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

// Per-call state: reused buffers and the word cache (per call, so encode stays lock-free).
struct SpmTokenizer::MergeScratch {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;  // a max-heap under LowerPriority
  detail::PieceIndex word_cache;  // word -> index into cached_ids
  std::vector<std::pair<std::size_t, std::size_t>> cached_ids;  // (offset, count) in cached_id_arena
  std::vector<std::int32_t> cached_id_arena;
};

SpmTokenizer::SpmTokenizer(Vocabulary vocab) : vocab_(complete_vocabulary(std::move(vocab))), specials_(vocab_) {
  const std::int32_t size = vocab_.size();

  std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), -1);
  piece_to_id_.reserve(vocab_.pieces.size());
  for (std::int32_t id = 0; id < size; ++id) {
    const std::string& piece = vocab_.pieces[id];
    const TokenType type = vocab_.types[id];
    if (std::isnan(vocab_.scores[id])) raise(ErrorCode::kInvalidArgument, "vocabulary: score of token {} is NaN", id);
    if (is_mergeable(type) && !piece.empty()) {
      piece_to_id_.insert(piece, id, /*overwrite=*/true);  // a duplicated piece keeps its last id, as in llama.cpp
      max_piece_bytes_ = std::max(max_piece_bytes_, piece.size());
      if (std::vector<std::size_t> offsets = markers_after_a_character(piece); !offsets.empty()) {
        crossing_.push_back({piece, std::move(offsets)});
      }
    }
    if (const auto byte = parse_byte_piece(piece)) {
      std::int32_t& slot = byte_tokens_[*byte];
      if (slot < 0 || (type == TokenType::kByte && vocab_.types[slot] != TokenType::kByte)) slot = id;
    }
  }
  if (crossing_.size() > kMaxCrossingPieces) {
    word_by_word_ = false;
    crossing_.clear();
  }
}

bool SpmTokenizer::crossed(std::string_view working, std::size_t boundary) const {
  for (const CrossingPiece& piece : crossing_) {
    for (const std::size_t offset : piece.marker_offsets) {
      if (boundary >= offset && working.substr(boundary - offset, piece.text.size()) == piece.text) return true;
    }
  }
  return false;
}

std::vector<std::int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<std::int32_t> ids;
  if (add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
  if (!parse_special && !specials_.has_user_defined()) {
    encode_fragment(text, vocab_.add_space_prefix, ids);
    return ids;
  }
  // As llama.cpp: user-defined tokens (and with parse_special control ones) are cut out first;
  // the dummy prefix goes before the first text and before text that follows such a token.
  bool after_special = true;
  for (const detail::TextFragment& fragment : specials_.split(text, parse_special)) {
    if (fragment.token >= 0) {
      ids.push_back(fragment.token);
      after_special = true;
    } else {
      encode_fragment(fragment.text, vocab_.add_space_prefix && after_special, ids);
      after_special = false;
    }
  }
  return ids;
}

void SpmTokenizer::encode_fragment(std::string_view text, bool add_prefix, std::vector<std::int32_t>& ids) const {
  if (text.empty()) return;  // no dummy prefix for empty text (llama.cpp gives [BOS] or [])

  // Dummy prefix and spaces as U+2581, as SentencePiece sees the text.
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 2 + kSpaceMarker.size());
  if (add_prefix && !(vocab_.space_prefix_unless_leading_space && text.front() == ' ')) escaped.append(kSpaceMarker);
  for (const char c : text) {
    if (c == ' ') {
      escaped.append(kSpaceMarker);
    } else {
      escaped.push_back(c);
    }
  }
  ids.reserve(ids.size() + escaped.size() / 4);

  const std::string_view working(escaped);
  MergeScratch scratch;
  if (!word_by_word_) {
    merge_segment(working, ids, scratch);
    return;
  }
  // Every merge makes a vocabulary piece, so a merge can only cross a U+2581 that follows
  // another character where a crossing piece ("a_b"; most vocabularies have none, Gemma's one)
  // occurs across it in the text. Elsewhere such a U+2581 starts a new word, and words are
  // merged one at a time: same result, a small heap (in cache); each word's ids are remembered,
  // since text repeats its words (one lookup then replaces a dozen pair lookups).
  std::size_t start = 0;
  while (start < working.size()) {
    std::size_t next = start;
    do {
      next = working.find(kSpaceMarker, next + 1);
    } while (next != std::string_view::npos && (follows_marker(working, next) || crossed(working, next)));
    if (next == std::string_view::npos) next = working.size();
    const std::string_view word = working.substr(start, next - start);
    start = next;
    if (const std::int32_t cached = scratch.word_cache.find(word); cached >= 0) {
      const auto [offset, count] = scratch.cached_ids[static_cast<std::size_t>(cached)];
      ids.insert(ids.end(), scratch.cached_id_arena.begin() + offset, scratch.cached_id_arena.begin() + offset + count);
      continue;
    }
    const std::size_t before = ids.size();
    merge_segment(word, ids, scratch);
    if (word.size() <= kMaxCachedWordBytes && scratch.cached_ids.size() < kMaxCachedWords) {
      scratch.word_cache.insert(word, static_cast<std::int32_t>(scratch.cached_ids.size()), /*overwrite=*/false);
      scratch.cached_ids.emplace_back(scratch.cached_id_arena.size(), ids.size() - before);
      scratch.cached_id_arena.insert(scratch.cached_id_arena.end(), ids.begin() + static_cast<std::ptrdiff_t>(before),
                                     ids.end());
    }
  }
}

void SpmTokenizer::merge_segment(std::string_view working, std::vector<std::int32_t>& ids, MergeScratch& scratch) const {
  auto& symbols = scratch.symbols;
  symbols.clear();
  for (std::size_t offset = 0; offset < working.size();) {
    const detail::Utf8Sequence character = detail::scan_utf8(working.substr(offset));
    const std::size_t length = character.status == detail::Utf8Status::kComplete ? character.length : 1;
    if (symbols.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
      raise(ErrorCode::kInvalidArgument, "encode: text of {} bytes has too many characters", working.size());
    }
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({offset, length, index - 1, index + 1});
    offset += length;
  }
  symbols.back().next = -1;

  auto& heap = scratch.heap;
  heap.clear();
  const auto try_add_bigram = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const std::size_t length = symbols[left].length + symbols[right].length;
    if (length > max_piece_bytes_) return;
    const std::int32_t found = piece_to_id_.find(working.substr(symbols[left].offset, length));
    if (found < 0) return;
    heap.push_back({vocab_.scores[found], left, right, length});
    std::push_heap(heap.begin(), heap.end(), LowerPriority{});
  };

  for (std::int32_t i = 1; i < static_cast<std::int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LowerPriority{});
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Lengths only grow, so an unchanged sum means neither side was merged since queuing.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) continue;

    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;

    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  for (std::int32_t i = 0; i != -1; i = symbols[i].next) {
    emit_symbol(working.substr(symbols[i].offset, symbols[i].length), ids);
  }
}

void SpmTokenizer::emit_symbol(std::string_view text, std::vector<std::int32_t>& out) const {
  if (const std::int32_t found = piece_to_id_.find(text); found >= 0) {
    out.push_back(found);
    return;
  }
  const bool bytes_representable =
      std::all_of(text.begin(), text.end(), [&](char c) { return byte_tokens_[static_cast<std::uint8_t>(c)] >= 0; });
  if (bytes_representable) {
    for (const char c : text) out.push_back(byte_tokens_[static_cast<std::uint8_t>(c)]);
    return;
  }
  if (vocab_.unk < 0) {
    raise(ErrorCode::kInvalidArgument,
          "encode: the vocabulary has neither byte tokens nor an unknown token for the character 0x{:02X}...",
          static_cast<std::uint8_t>(text[0]));
  }
  out.push_back(vocab_.unk);
}

void SpmTokenizer::append_token_bytes(std::int32_t id, std::string& out) const {
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.types[id]) {
    case TokenType::kNormal:
    case TokenType::kUndefined:
      append_unescaped(piece, out);
      return;
    case TokenType::kUserDefined:
      out.append(piece);
      return;
    case TokenType::kByte:
      if (const auto byte = parse_byte_piece(piece)) {
        out.push_back(static_cast<char>(*byte));
      } else {
        append_unescaped(piece, out);
      }
      return;
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      return;
  }
}

bool SpmTokenizer::is_end_of_generation(std::int32_t id) const noexcept {
  return id >= 0 && id == vocab_.eos;
}

}  // namespace sitsrt
