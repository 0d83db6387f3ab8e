// The KV block pool and paged sequences: reference counts, copy-on-write, prefix caching with
// LRU eviction, and a long random run of fork/extend/truncate/drop/prefix operations after which
// every block is free again.
#include "backend/kv_block_pool.hpp"
#include "backend/paged_kv_cache.hpp"
#include "cpu_backend/cpu_backend.hpp"
#include "support/random.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

using namespace sitsrt;

namespace {

CpuBackend make_backend() {
  CpuBackendOptions o;
  o.threads = 1;
  return CpuBackend(o);
}

KvGeometry geometry(ops::KvType k = ops::KvType::kF16, ops::KvType v = ops::KvType::kF16) {
  KvGeometry g;
  g.n_layers = 3;
  g.n_kv_heads = 2;
  g.head_dim = 32;
  g.k_type = k;
  g.v_type = v;
  g.block_size = 4;
  return g;
}

// Fills a block's rows in every layer with a byte pattern naming (block, layer, K/V).
void stamp(const KvBlockPool& pool, std::int32_t block, std::uint8_t tag) {
  const std::int32_t table[] = {block};
  for (std::int64_t l = 0; l < pool.geometry().n_layers; ++l) {
    const ops::KvLayerRef ref = pool.layer(l, std::span(table, 1));
    const auto bs = static_cast<std::size_t>(pool.block_size());
    std::memset(ref.k + static_cast<std::size_t>(block) * bs * ref.k_row_bytes, tag + l, bs * ref.k_row_bytes);
    std::memset(ref.v + static_cast<std::size_t>(block) * bs * ref.v_row_bytes, tag + 100 + l, bs * ref.v_row_bytes);
  }
}

bool has_stamp(const KvBlockPool& pool, std::int32_t block, std::uint8_t tag) {
  const std::int32_t table[] = {block};
  for (std::int64_t l = 0; l < pool.geometry().n_layers; ++l) {
    const ops::KvLayerRef ref = pool.layer(l, std::span(table, 1));
    const auto bs = static_cast<std::size_t>(pool.block_size());
    const std::byte* k = ref.k + static_cast<std::size_t>(block) * bs * ref.k_row_bytes;
    const std::byte* v = ref.v + static_cast<std::size_t>(block) * bs * ref.v_row_bytes;
    for (std::size_t i = 0; i < bs * ref.k_row_bytes; ++i) {
      if (k[i] != static_cast<std::byte>(tag + l)) return false;
    }
    for (std::size_t i = 0; i < bs * ref.v_row_bytes; ++i) {
      if (v[i] != static_cast<std::byte>(tag + 100 + l)) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("KV geometry: bytes per token and per block for every K/V type", "[kv_pool]") {
  // 2 heads x 32 = 64 values per row: f16 128 bytes; int8 64 + 2 f16 scales; int4 32 + 2 scale codes.
  CHECK(geometry().token_bytes() == 3 * (128 + 128));
  CHECK(geometry(ops::KvType::kInt8, ops::KvType::kInt4).token_bytes() == 3 * ((64 + 4) + (32 + 2)));
  CHECK(geometry(ops::KvType::kF32, ops::KvType::kF32).block_bytes() == 4 * 3 * 2 * 256);
  CHECK(KvBlockPool::blocks_for_bytes(geometry(), 10 * geometry().block_bytes() + 5) == 10);
  KvGeometry odd = geometry(ops::KvType::kInt4);
  odd.head_dim = 12;  // 24 values per row: no whole group of 32
  CHECK_THROWS_WITH(odd.token_bytes(), Catch::Contains("int4") && Catch::Contains("24"));
}

TEST_CASE("KV pool: a head-major geometry marks its sides head-major, int4 only with whole groups per head",
          "[kv_pool]") {
  CpuBackend backend = make_backend();
  CHECK(backend.info().head_major_kv);  // the CPU backend's pools (engine.cpp reads the flag)
  const std::int32_t table[] = {0};
  for (const bool head_major : {false, true}) {
    for (const auto& [k, v] :
         {std::pair{ops::KvType::kF16, ops::KvType::kF32}, std::pair{ops::KvType::kInt8, ops::KvType::kF16},
          std::pair{ops::KvType::kF32, ops::KvType::kInt4}}) {
      KvGeometry g = geometry(k, v);
      g.head_major = head_major;
      const KvBlockPool pool(backend, g, 2);
      const ops::KvLayerRef ref = pool.layer(1, std::span(table, 1));
      CAPTURE(head_major, ops::name(k), ops::name(v));
      CHECK(ref.k_head_major == head_major);  // head_dim 32: one int4 group per head
      CHECK(ref.v_head_major == head_major);
      CHECK(pool.bytes() == 2 * g.block_bytes());  // the layout moves values within a block only
      g.head_dim = 16;                             // int4 groups of 32 would span two heads
      const KvBlockPool narrow(backend, g, 2);
      const ops::KvLayerRef n = narrow.layer(0, std::span(table, 1));
      CHECK(n.k_head_major == (head_major && k != ops::KvType::kInt4));
      CHECK(n.v_head_major == (head_major && v != ops::KvType::kInt4));
    }
  }
}

TEST_CASE("KV pool: allocate, retain, release and reuse", "[kv_pool]") {
  CpuBackend backend = make_backend();
  KvBlockPool pool(backend, geometry(), 5);
  CHECK(pool.bytes() == 5 * geometry().block_bytes());
  std::vector<std::int32_t> got;
  for (int i = 0; i < 5; ++i) got.push_back(pool.allocate().value());
  CHECK(got == std::vector<std::int32_t>{0, 1, 2, 3, 4});  // a fresh pool hands blocks out in order
  CHECK_FALSE(pool.allocate());
  CHECK(pool.free_blocks() == 0);
  pool.retain(2);
  CHECK(pool.references(2) == 2);
  pool.release(2);
  CHECK(pool.free_blocks() == 0);
  pool.release(2);
  CHECK(pool.free_blocks() == 1);
  CHECK(pool.allocate().value() == 2);
  CHECK_THROWS_WITH(pool.retain(7), Catch::Contains("block 7"));
  for (std::int32_t b : got) pool.release(b);
  CHECK(pool.free_blocks() == 5);
  CHECK_THROWS_WITH(pool.release(0), Catch::Contains("unreferenced"));
}

TEST_CASE("KV pool: a budget too small for the pool is kOutOfMemory naming it", "[kv_pool]") {
  CpuBackendOptions o;
  o.threads = 1;
  o.budget_bytes = 3 * geometry().block_bytes();
  CpuBackend backend(o);
  try {
    KvBlockPool pool(backend, geometry(), 4);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kOutOfMemory);
    CHECK_THAT(e.what(), Catch::Contains("KV block pool"));
  }
}

TEST_CASE("KV pool: copy-on-write copies every layer's K and V rows of a shared block", "[kv_pool]") {
  CpuBackend backend = make_backend();
  KvBlockPool pool(backend, geometry(ops::KvType::kInt8, ops::KvType::kF32), 4);
  const std::int32_t a = pool.allocate().value();
  stamp(pool, a, 7);
  CHECK(pool.copy_on_write(a).value() == a);  // sole holder: written in place
  pool.retain(a);
  const std::int32_t b = pool.copy_on_write(a).value();
  CHECK(b != a);
  CHECK(pool.references(a) == 1);
  CHECK(pool.references(b) == 1);
  CHECK(has_stamp(pool, b, 7));
  stamp(pool, b, 40);
  CHECK(has_stamp(pool, a, 7));  // the original is untouched by the copy's writes
  CHECK(pool.stats().copies == 1);
  // No free block for the copy: nothing changes.
  const std::int32_t c = pool.allocate().value(), d = pool.allocate().value();
  pool.retain(c);
  CHECK_FALSE(pool.copy_on_write(c));
  CHECK(pool.references(c) == 2);
  for (std::int32_t x : {a, b, c, c, d}) pool.release(x);
  CHECK(pool.free_blocks() == 4);
}

TEST_CASE("KV pool: published blocks stay cached after release and are evicted least recently released first",
          "[kv_pool]") {
  CpuBackend backend = make_backend();
  KvBlockPool pool(backend, geometry(), 3);
  const std::vector<std::int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8}, t3{9, 9, 9, 9};
  const std::uint64_t h1 = kv_block_hash(0, t1), h2 = kv_block_hash(h1, t2);
  CHECK(h1 != kv_block_hash(0, t2));
  CHECK(h2 != kv_block_hash(0, t2));  // the same tokens after another prefix hash differently
  const std::int32_t a = pool.allocate().value(), b = pool.allocate().value();
  pool.publish(a, h1, t1);
  pool.publish(b, h2, t2);
  pool.release(b);  // released first: evicted first
  pool.release(a);
  CHECK(pool.stats().cached_blocks == 2);
  CHECK(pool.free_blocks() == 3);
  // A hit revives a cached block; the tokens must match exactly.
  CHECK_FALSE(pool.lookup(h1, t3));
  const std::int32_t hit = pool.lookup(h1, t1).value();
  CHECK(hit == a);
  CHECK(pool.references(a) == 1);
  CHECK(pool.stats().cached_blocks == 1);
  // The never-used block goes first, then the least recently released cached one (b).
  const std::int32_t c = pool.allocate().value();
  CHECK(c != a);
  CHECK(c != b);
  CHECK(pool.allocate().value() == b);
  CHECK(pool.stats().evictions == 1);
  CHECK_FALSE(pool.lookup(h2, t2));  // evicted: its hash is gone
  const KvPoolStats s = pool.stats();
  CHECK(s.prefix_hits == 1);
  CHECK(s.prefix_misses == 2);
}

TEST_CASE("paged sequence: blocks on demand, truncate, fork with copy-on-write", "[kv_pool]") {
  CpuBackend backend = make_backend();
  KvBlockPool pool(backend, geometry(), 8);
  auto seq = std::make_unique<PagedKvCache>(pool, 20);
  CHECK(seq->capacity() == 0);
  CHECK(seq->blocks_needed(9) == 3);
  REQUIRE(seq->prepare_write(0, 9));
  CHECK(seq->block_table().size() == 3);
  CHECK(seq->capacity() == 12);
  seq->set_size(9);
  CHECK(seq->layer(1).block_table.size() == 3);
  CHECK(seq->layer(1).capacity == 12);
  CHECK(seq->layer(1).contiguous());
  CHECK_THROWS_WITH(seq->prepare_write(9, 12), Catch::Contains("context length 20"));
  stamp(pool, seq->block_table()[2], 3);
  auto child = seq->fork();
  CHECK(pool.references(seq->block_table()[0]) == 2);
  CHECK(seq->blocks_needed(1) == 1);  // the shared last block would be copied
  REQUIRE(child->prepare_write(9, 1));  // writes into the shared last block: copied
  CHECK(child->block_table()[2] != seq->block_table()[2]);
  CHECK(child->block_table()[0] == seq->block_table()[0]);
  CHECK(has_stamp(pool, child->block_table()[2], 3));
  child->truncate(3);
  CHECK(child->block_table().size() == 1);
  CHECK(child->size() == 3);
  child.reset();
  CHECK(pool.references(seq->block_table()[0]) == 1);
  seq.reset();
  CHECK(pool.free_blocks() == 8);
}

TEST_CASE("paged sequence: a prompt with a published prefix adopts its full blocks", "[kv_pool]") {
  CpuBackend backend = make_backend();
  KvBlockPool pool(backend, geometry(), 8);
  const std::vector<std::int32_t> prompt{10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  {
    PagedKvCache first(pool, 64);
    REQUIRE(first.prepare_write(0, 10));
    first.set_size(10);
    first.publish_full_blocks(prompt);  // blocks 0 and 1 (positions 0..7); 8..9 are partial
    CHECK(pool.stats().cached_blocks == 0);
  }
  CHECK(pool.stats().cached_blocks == 2);
  PagedKvCache second(pool, 64);
  std::vector<std::int32_t> other = prompt;
  other[5] = 99;  // differs in the second block: only the first is taken
  CHECK(second.adopt_prefix(other) == 4);
  PagedKvCache third(pool, 64);
  CHECK(third.adopt_prefix(prompt) == 8);
  CHECK(third.block_table()[0] == second.block_table()[0]);
  // Writing inside an adopted block (recomputing its last token) copies it.
  CHECK(third.blocks_needed(1) == 1);
  third.truncate(7);
  REQUIRE(third.prepare_write(7, 1));
  CHECK(pool.stats().copies == 1);
}

TEST_CASE("paged sequences: 10k random operations leave every block free", "[kv_pool]") {
  CpuBackend backend = make_backend();
  KvBlockPool pool(backend, geometry(), 24);
  test::Rng rng(1019);
  std::vector<std::unique_ptr<PagedKvCache>> live;
  std::vector<std::vector<std::int32_t>> tokens;  // what each sequence holds
  std::uint64_t refused = 0;
  for (int op = 0; op < 10000; ++op) {
    const int kind = rng.uniform_int(0, 5);
    if (kind == 0 || live.empty()) {  // new sequence, maybe from the prefix cache
      auto seq = std::make_unique<PagedKvCache>(pool, 40);
      std::vector<std::int32_t> prompt;
      const int n = rng.uniform_int(1, 12);
      for (int i = 0; i < n; ++i) prompt.push_back(rng.uniform_int(0, 2));
      const std::int64_t adopted = rng.uniform_int(0, 1) ? seq->adopt_prefix(prompt) : 0;
      if (!seq->prepare_write(adopted, n - adopted)) {
        ++refused;
        continue;  // dropping it returns what it adopted
      }
      seq->set_size(n);
      seq->publish_full_blocks(prompt);
      live.push_back(std::move(seq));
      tokens.push_back(prompt);
      continue;
    }
    const std::size_t i = static_cast<std::size_t>(rng.uniform_int(0, static_cast<int>(live.size()) - 1));
    PagedKvCache& seq = *live[i];
    if (kind == 1) {  // extend
      const int n = rng.uniform_int(1, 6);
      if (seq.size() + n > seq.max_positions() || !seq.prepare_write(seq.size(), n)) {
        ++refused;
        continue;
      }
      for (int k = 0; k < n; ++k) tokens[i].push_back(rng.uniform_int(0, 2));
      seq.set_size(seq.size() + n);
      seq.publish_full_blocks(tokens[i]);
    } else if (kind == 2) {  // truncate (preempted and recomputed from there)
      const int n = rng.uniform_int(0, static_cast<int>(seq.size()));
      seq.truncate(n);
      tokens[i].resize(static_cast<std::size_t>(n));
    } else if (kind == 3 && live.size() < 12) {  // fork
      live.push_back(seq.fork());
      tokens.push_back(tokens[i]);
    } else {  // drop (finished or cancelled)
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // Invariant: every block's reference count is the number of live tables holding it.
    if (op % 97 == 0) {
      std::map<std::int32_t, int> holders;
      for (const auto& s : live) {
        for (std::int32_t b : s->block_table()) ++holders[b];
      }
      for (const auto& [block, count] : holders) REQUIRE(pool.references(block) == count);
      REQUIRE(pool.free_blocks() == pool.n_blocks() - static_cast<std::int64_t>(holders.size()));
    }
  }
  INFO("refused for lack of blocks: " << refused << "; " << pool.stats().prefix_hits << " prefix hits");
  CHECK(refused > 0);                   // the pool ran out sometimes: those paths ran
  CHECK(pool.stats().prefix_hits > 0);  // and the prefix cache served some prompts
  live.clear();
  CHECK(pool.free_blocks() == pool.n_blocks());
}
