// Byte-level BPE encoding. Each pre-token is a doubly linked list of symbols (token ids, one
// per byte at first); every adjacent pair that has a merge goes into a min-heap keyed by
// (rank, position), and the best pair is merged until none is left. Stale heap entries (a side
// merged since queuing) are skipped lazily, so a pre-token of n bytes costs O(n log n) rather
// than the O(n^2) of rescanning all pairs after each merge. Ranks and results are looked up by
// id pair, so no strings are built while merging.
#include "tokenizer/bpe_tokenizer.hpp"

#include "core/check.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/utf8.hpp"

#include <algorithm>
#include <array>
#include <string_view>

namespace sitsrt {
namespace {

// Texts of control tokens that end a turn in common chat formats (Llama 3, ChatML / Qwen2,
// GPT-2, Phi-3, Gemma); llama.cpp treats the same ones as end of generation.
constexpr std::array<std::string_view, 7> kEndOfTurnTexts = {
    "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|end|>", "<end_of_turn>", "<|eom_id|>"};

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

struct Symbol {
  std::int32_t id;  // -1 once merged into its left neighbour
  std::int32_t prev;
  std::int32_t next;  // -1 at the end
};

struct Candidate {
  std::int32_t rank;
  std::int32_t left;  // symbol indices
  std::int32_t right;
  std::int32_t left_id;  // ids when queued; a change marks the entry stale
  std::int32_t right_id;
};

// std heap functions keep the largest on top: "larger" = lower rank, then further left.
struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const noexcept {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// Explicit patterns (tokenizer.json) win; an empty `pre` with none means no splitting at all
// (a tokenizer.json ByteLevel step with use_regex = false).
std::vector<std::string> pre_tokenizer_of(const Vocabulary& vocab, std::string_view source) {
  if (!vocab.pre_patterns.empty() || vocab.pre.empty()) return vocab.pre_patterns;
  return detail::pre_tokenizer_patterns(vocab.pre, source);
}

// Whether every byte of `text` belongs to a well-formed UTF-8 character.
bool is_valid_utf8(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    if (static_cast<std::uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const detail::Utf8Sequence sequence = detail::scan_utf8(text.substr(pos));
    if (sequence.status != detail::Utf8Status::kComplete) return false;
    pos += sequence.length;
  }
  return true;
}

// llama.cpp's reading of invalid UTF-8 (unicode_cpts_from_utf8): each byte that does not belong
// to a well-formed character becomes U+FFFD. Overlong forms and surrogates count as invalid here.
void replace_invalid_utf8(std::string_view text, std::string& out) {
  out.clear();
  for (std::size_t pos = 0; pos < text.size();) {
    const detail::Utf8Sequence sequence = detail::scan_utf8(text.substr(pos));
    if (sequence.status == detail::Utf8Status::kComplete) {
      out.append(text.substr(pos, sequence.length));
      pos += sequence.length;
    } else {
      out.append(detail::kReplacementCharacter);
      ++pos;
    }
  }
}

// The byte a "<0xNN>" piece stands for, or -1.
int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return -1;
  const auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  const int high = digit(piece[3]);
  const int low = digit(piece[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581
constexpr std::int32_t kNoPiece = -2;  // a raw-UTF-8 character without a piece: byte fallback

}  // namespace

struct BpeTokenizer::Scratch {
  std::string valid_text;  // the text with invalid UTF-8 replaced, when it has any
  std::string escaped;     // ... and spaces as U+2581 (raw UTF-8 with escape_spaces)
  std::vector<std::pair<std::uint32_t, std::uint32_t>> spans;  // raw UTF-8: each symbol's bytes
  std::vector<std::string_view> pre_tokens;
  std::string mapped;
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

BpeTokenizer::BpeTokenizer(Vocabulary vocab, std::string_view source)
    : vocab_(complete_vocabulary(std::move(vocab))),
      splitter_(pre_tokenizer_of(vocab_, source), source),
      specials_(vocab_) {
  if (vocab_.pre_patterns.empty() && !vocab_.pre.empty()) {
    const detail::PreTokenizerSpec spec = detail::pre_tokenizer_spec(vocab_.pre, source);
    if (spec.ignore_merges) vocab_.ignore_merges = true;
    raw_utf8_ = spec.raw_utf8;
    escape_spaces_ = spec.escape_spaces;
    newline_runs_whole_ = spec.newline_runs_whole;
    if (spec.force_bos) vocab_.add_bos = true;
  }

  const std::int32_t size = vocab_.size();
  piece_to_id_.reserve(vocab_.pieces.size());
  for (std::int32_t id = 0; id < size; ++id) {
    const TokenType type = vocab_.types[id];
    // User-defined pieces hold raw text, not mapped bytes: they are found by the special-token
    // matcher, never built by merges.
    const bool mergeable = type == TokenType::kNormal || type == TokenType::kUndefined;
    if (mergeable && !vocab_.pieces[id].empty()) piece_to_id_.insert(vocab_.pieces[id], id, /*overwrite=*/false);
    if (type == TokenType::kControl) {
      const std::string& piece = vocab_.pieces[id];
      if (std::find(kEndOfTurnTexts.begin(), kEndOfTurnTexts.end(), piece) != kEndOfTurnTexts.end()) {
        end_of_generation_.push_back(id);
      }
    }
  }
  if (vocab_.eos >= 0) end_of_generation_.push_back(vocab_.eos);
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()), end_of_generation_.end());

  if (raw_utf8_) {
    byte_tokens_.fill(-1);
    for (std::int32_t id = size - 1; id >= 0; --id) {  // the lowest id of a duplicated <0xNN>
      if (const int value = byte_piece_value(vocab_.pieces[id]); value >= 0) byte_tokens_[value] = id;
    }
  } else {
    for (int byte = 0; byte < 256; ++byte) {
      byte_tokens_[byte] = piece_to_id_.find(detail::byte_level_char(static_cast<std::uint8_t>(byte)));
    }
  }

  if (vocab_.merges.size() > static_cast<std::size_t>(INT32_MAX)) {
    raise(ErrorCode::kInvalidModel, "{}: {} merges are more than int32 ranks can address", source, vocab_.merges.size());
  }
  merges_.reserve(vocab_.merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string_view merge = vocab_.merges[rank];
    const std::size_t space = merge.find(' ', 1);  // as llama.cpp: a piece may be a space itself
    if (space == std::string_view::npos || space == 0 || space + 1 == merge.size()) {
      raise(ErrorCode::kInvalidModel, "{}: merge {} ('{}') is not two pieces separated by a space", source, rank, merge);
    }
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    joined.assign(left).append(right);
    const auto find = [&](std::string_view piece) {
      const std::int32_t found = piece_to_id_.find(piece);
      if (found < 0) {
        raise(ErrorCode::kInvalidModel, "{}: merge {} ('{}'): '{}' is not a token of the vocabulary", source, rank,
              merge, piece);
      }
      return found;
    };
    const std::int32_t left_id = find(left);
    const std::int32_t right_id = find(right);
    const std::int32_t result = find(joined);
    merges_.try_emplace(pair_key(left_id, right_id), Merge{static_cast<std::int32_t>(rank), result});
  }
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(std::int32_t left, std::int32_t right) const {
  const auto found = merges_.find(pair_key(left, right));
  return found == merges_.end() ? nullptr : &found->second;
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<std::int32_t> ids;
  if (add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
  ids.reserve(ids.size() + text.size() / 3 + 1);
  Scratch scratch;
  if (!parse_special && !specials_.has_user_defined()) {
    encode_text(text, ids, scratch);
    return ids;
  }
  for (const detail::TextFragment& fragment : specials_.split(text, parse_special)) {
    if (fragment.token >= 0) {
      ids.push_back(fragment.token);
    } else {
      encode_text(fragment.text, ids, scratch);
    }
  }
  return ids;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<std::int32_t>& out, Scratch& scratch) const {
  scratch.pre_tokens.clear();
  if (!is_valid_utf8(text)) {
    replace_invalid_utf8(text, scratch.valid_text);
    text = scratch.valid_text;
  }
  if (escape_spaces_ && text.find(' ') != std::string_view::npos) {
    scratch.escaped.clear();
    for (const char c : text) {
      if (c == ' ') {
        scratch.escaped.append(kSpaceMarker);
      } else {
        scratch.escaped.push_back(c);
      }
    }
    text = scratch.escaped;
  }
  splitter_.split(text, scratch.pre_tokens);
  for (const std::string_view pre_token : scratch.pre_tokens) encode_pre_token(pre_token, out, scratch);
}

void BpeTokenizer::encode_pre_token(std::string_view bytes, std::vector<std::int32_t>& out, Scratch& scratch) const {
  const bool newlines_only = newline_runs_whole_ && bytes.find_first_not_of('\n') == std::string_view::npos;
  if (vocab_.ignore_merges || newlines_only) {
    std::string_view piece = bytes;
    if (!raw_utf8_) {
      scratch.mapped.clear();
      detail::append_byte_level(bytes, scratch.mapped);
      piece = scratch.mapped;
    }
    if (const std::int32_t found = piece_to_id_.find(piece); found >= 0) {
      out.push_back(found);
      return;
    }
  }

  auto& symbols = scratch.symbols;
  symbols.clear();
  if (raw_utf8_) {  // one symbol per character (the text is valid UTF-8 by now)
    scratch.spans.clear();
    for (std::size_t pos = 0; pos < bytes.size();) {
      const std::size_t length = detail::scan_utf8(bytes.substr(pos)).length;
      const std::int32_t id = piece_to_id_.find(bytes.substr(pos, length));
      const auto index = static_cast<std::int32_t>(symbols.size());
      symbols.push_back({id < 0 ? kNoPiece : id, index - 1, index + 1});
      scratch.spans.emplace_back(static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(length));
      pos += length;
    }
  } else {
    for (const char c : bytes) {
      std::int32_t id = byte_tokens_[static_cast<std::uint8_t>(c)];
      if (id < 0) id = vocab_.unk;  // a vocabulary without this byte: <unk>, or dropped as Hugging Face does
      if (id < 0) continue;
      const auto index = static_cast<std::int32_t>(symbols.size());
      symbols.push_back({id, index - 1, index + 1});
    }
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto& heap = scratch.heap;
  heap.clear();
  const auto queue_pair = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    if (const Merge* merge = find_merge(symbols[left].id, symbols[right].id)) {
      heap.push_back({merge->rank, left, right, symbols[left].id, symbols[right].id});
      std::push_heap(heap.begin(), heap.end(), LaterCandidate{});
    }
  };
  for (std::int32_t i = 1; i < static_cast<std::int32_t>(symbols.size()); ++i) queue_pair(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LaterCandidate{});
    const Candidate best = heap.back();
    heap.pop_back();
    Symbol& left = symbols[best.left];
    if (left.id != best.left_id || left.next != best.right || symbols[best.right].id != best.right_id) continue;
    Symbol& right = symbols[best.right];
    left.id = find_merge(best.left_id, best.right_id)->result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = best.left;
    queue_pair(left.prev, best.left);
    queue_pair(best.left, left.next);
  }

  for (std::int32_t i = 0; i != -1; i = symbols[i].next) {
    if (symbols[i].id != kNoPiece) {
      out.push_back(symbols[i].id);
      continue;
    }
    // As llama.cpp: each byte's <0xNN> token; a byte without one is dropped.
    const auto [offset, length] = scratch.spans[static_cast<std::size_t>(i)];
    for (const char c : bytes.substr(offset, length)) {
      if (const std::int32_t id = byte_tokens_[static_cast<std::uint8_t>(c)]; id >= 0) out.push_back(id);
    }
  }
}

void BpeTokenizer::append_token_bytes(std::int32_t id, std::string& out) const {
  const std::string& piece = vocab_.pieces[id];
  if (const int byte = raw_utf8_ ? byte_piece_value(piece) : -1; byte >= 0 && byte_tokens_[byte] == id) {
    out.push_back(static_cast<char>(byte));
    return;
  }
  switch (vocab_.types[id]) {
    case TokenType::kNormal:
    case TokenType::kUndefined:
    case TokenType::kByte:
      if (!raw_utf8_) {
        detail::append_byte_level_decoded(piece, out);
        return;
      }
      for (std::size_t pos = 0; pos < piece.size();) {  // U+2581 prints as a space
        if (escape_spaces_ && piece.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
          out.push_back(' ');
          pos += kSpaceMarker.size();
        } else {
          out.push_back(piece[pos++]);
        }
      }
      return;
    case TokenType::kUserDefined:
      out.append(vocab_.pieces[id]);
      return;
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      return;
  }
}

bool BpeTokenizer::is_end_of_generation(std::int32_t id) const noexcept {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

}  // namespace sitsrt
