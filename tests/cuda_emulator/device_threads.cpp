// The emulator's device threads: each CUDA thread of a block a fiber on the launching thread,
// switched at its barriers and warp collectives by a scheduler that releases a barrier once
// every live thread it waits for has arrived. Blocks run one at a time in a shuffled order, and
// each block's threads in a shuffled order, so a kernel that reads what another thread or block
// writes without a barrier (or the end of the grid) between them sees stale data here too.
#include "cuda_emulator/cuda_emulator.hpp"
#include "cuda_emulator/emulator_state.hpp"
#include "support/mma_emulation.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SITSRT_EMULATOR_ASAN 1
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace sitsrt::cuda_emulator {
namespace {

constexpr std::size_t kStackBytes = 512 * 1024;
constexpr std::size_t kGuardBytes = 4096;

// A fiber's stack: mapped on demand, a guard page below it (an overflow faults, not corrupts).
class Stack {
 public:
  Stack() {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cuda emulator: cannot map a fiber stack");
    base_ = static_cast<char*>(p);
    mprotect(base_, kGuardBytes, PROT_NONE);
  }
  ~Stack() { munmap(base_, kStackBytes + kGuardBytes); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  [[nodiscard]] char* bottom() const noexcept { return base_ + kGuardBytes; }
  [[nodiscard]] char* top() const noexcept { return base_ + kGuardBytes + kStackBytes; }

 private:
  char* base_ = nullptr;
};

enum class Wait : std::uint8_t { kRunnable, kBlock, kWarp, kDone };

struct WarpRequest {
  enum class Kind : std::uint8_t { kShuffle, kBallot, kMma } kind = Kind::kShuffle;
  std::uint32_t mask = 0;
  std::uint64_t bits = 0;  // shuffle: the value; ballot: the predicate
  int source = 0;          // shuffle: the lane mask (xor) or delta (down)
  bool down = false;
  int width = 32;
  std::uint32_t a[4] = {}, b[2] = {};  // mma fragments
  float c[4] = {};                     // mma accumulators, in and out
  std::uint64_t result = 0;
};

struct Fiber {
  Stack stack;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t context{};
#endif
  ThreadIndex index;
  int lane = 0, warp = 0;
  Wait wait = Wait::kRunnable;
  int predicate = 0;  // __syncthreads_or
  int block_result = 0;
  WarpRequest request;
};

// The orders' seed: fixed, so a run repeats; SITSRT_CUDA_EMULATOR_SEED=N tries other orders.
std::uint64_t seed() {
  const char* setting = std::getenv("SITSRT_CUDA_EMULATOR_SEED");
  return setting != nullptr && *setting != '\0' ? std::strtoull(setting, nullptr, 10) : 0x5175727453ull;
}

// The launch in progress (launches are serialised by g_launch_mutex).
struct Grid {
  std::vector<std::unique_ptr<Fiber>> fibers;  // the block's threads; kept between launches
  std::size_t threads = 0;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<std::byte> shared_storage;
  void* shared = nullptr;
  std::size_t shared_bytes = 0;
  std::string error;  // why the running block failed
  bool failed_last = false;
  const std::vector<std::size_t>* order = nullptr;  // the running pass's order of threads
  std::size_t cursor = 0;                           // its next
  bool from_scheduler = false;  // the last switch left the scheduler  // the last launch's block failed: its fibers'
                                // stacks were left mid-kernel
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler{};
#endif
#if defined(SITSRT_EMULATOR_ASAN)
  const void* scheduler_stack_bottom = nullptr;
  std::size_t scheduler_stack_size = 0;
#endif
  std::mt19937_64 random{seed()};
};

// The kernels' __shared__ statics (cuda_emulator.hpp puts them in this section).
extern "C" char __start_sitsrt_emulated_shared[] __attribute__((weak));
extern "C" char __stop_sitsrt_emulated_shared[] __attribute__((weak));

void poison_static_shared() {
  if (__start_sitsrt_emulated_shared == nullptr || __stop_sitsrt_emulated_shared == nullptr) return;
  std::memset(__start_sitsrt_emulated_shared, 0xff,
              static_cast<std::size_t>(__stop_sitsrt_emulated_shared - __start_sitsrt_emulated_shared));
}

std::mutex g_launch_mutex;
Grid g_grid;

}  // namespace
}  // namespace sitsrt::cuda_emulator

// Context switch (x86-64 System V): callee-saved registers, MXCSR and the x87 control word are
// pushed on the old stack, the stack pointer swapped, and the new stack's popped.
#if defined(__x86_64__)
extern "C" void sitsrt_emulator_switch(void** save_sp, void* load_sp);
asm(R"(
.text
.globl sitsrt_emulator_switch
.type sitsrt_emulator_switch,@function
sitsrt_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size sitsrt_emulator_switch, .-sitsrt_emulator_switch
)");
#endif

namespace sitsrt::cuda_emulator {
namespace {

[[noreturn]] void fiber_main();

#if defined(__x86_64__)
extern "C" [[noreturn]] void sitsrt_emulator_fiber_entry() {
  fiber_main();
}
#else
void fiber_entry_ucontext() {
  fiber_main();
}
#endif

void asan_start_switch(void** fake_stack, const void* bottom, std::size_t size) {
#if defined(SITSRT_EMULATOR_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  static_cast<void>(fake_stack), static_cast<void>(bottom), static_cast<void>(size);
#endif
}
#if defined(SITSRT_EMULATOR_ASAN)
const void** scheduler_bottom() {
  return &g_grid.scheduler_stack_bottom;
}
std::size_t* scheduler_size() {
  return &g_grid.scheduler_stack_size;
}
#else
const void** scheduler_bottom() {
  return nullptr;
}
std::size_t* scheduler_size() {
  return nullptr;
}
#endif

// Where a switch lands: `from_bottom` / `from_size` receive the bounds of the stack left (the
// scheduler's, when a fiber starts or resumes; null where the scheduler resumes).
void asan_finish_switch(void* fake_stack, const void** from_bottom, std::size_t* from_size) {
#if defined(SITSRT_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, from_bottom, from_size);
#else
  static_cast<void>(fake_stack), static_cast<void>(from_bottom), static_cast<void>(from_size);
#endif
}

// A fresh start for the fiber: its entry at the top of its stack, less a few cache lines that
// differ from fiber to fiber (stacks a whole number of pages apart would put every fiber's hot
// frames in the same L1 set: each switch a miss).
void reset(Fiber& f, std::size_t index, bool whole_stack) {
  char* top = f.stack.top() - (index * 17 % 64) * 64;
#if defined(SITSRT_EMULATOR_ASAN)
  // A finished fiber's last frames (it never returns) stay poisoned, and a failed block's fibers'
  // whole stacks: clear them before the stack is used again.
  const std::size_t clear = whole_stack ? kStackBytes : std::size_t{64} * 1024;
  ASAN_UNPOISON_MEMORY_REGION(f.stack.top() - clear, clear);
#else
  static_cast<void>(whole_stack);
#endif
#if defined(__x86_64__)
  auto* sp = reinterpret_cast<std::uint64_t*>(top);
  *--sp = 0;  // the entry's (never used) return address: it starts as if called, rsp = 8 mod 16
  *--sp = reinterpret_cast<std::uint64_t>(&sitsrt_emulator_fiber_entry);
  for (int r = 0; r < 6; ++r) *--sp = 0;  // rbp, rbx, r12-r15
  *--sp = 0x037full << 32 | 0x1f80u;      // x87 control word, MXCSR: the defaults
  f.sp = sp;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.bottom();
  f.context.uc_stack.ss_size = static_cast<std::size_t>(top - f.stack.bottom());
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_entry_ucontext, 0);
#endif
  f.wait = Wait::kRunnable;
}

// Where a context lands after a switch: ASan learns the stack it left (kept when that was the
// scheduler's, which fibers switch back to).
void landed(void* fake_stack) {
  if (g_grid.from_scheduler) {
    asan_finish_switch(fake_stack, scheduler_bottom(), scheduler_size());
  } else {
    asan_finish_switch(fake_stack, nullptr, nullptr);
  }
}

// Switches from the running context (fiber `from`, or the scheduler: null) to fiber `to` (or the
// scheduler: null); returns when something switches back to `from`.
void transfer(Fiber* from, Fiber* to) {
  void* fake_stack = nullptr;
#if defined(SITSRT_EMULATOR_ASAN)
  const bool dying = from != nullptr && from->wait == Wait::kDone;
  if (to != nullptr) {
    asan_start_switch(dying ? nullptr : &fake_stack, to->stack.bottom(), kStackBytes);
  } else {
    asan_start_switch(dying ? nullptr : &fake_stack, g_grid.scheduler_stack_bottom, g_grid.scheduler_stack_size);
  }
#endif
  g_grid.from_scheduler = from == nullptr;
  g_grid.current = to;
#if defined(__x86_64__)
  sitsrt_emulator_switch(from != nullptr ? &from->sp : &g_grid.scheduler_sp,
                         to != nullptr ? to->sp : g_grid.scheduler_sp);
#else
  swapcontext(from != nullptr ? &from->context : &g_grid.scheduler, to != nullptr ? &to->context : &g_grid.scheduler);
#endif
  landed(fake_stack);
}

// The pass's next fiber that can run (null: the pass is over).
Fiber* next_runnable() {
  while (g_grid.cursor < g_grid.order->size()) {
    Fiber* f = g_grid.fibers[(*g_grid.order)[g_grid.cursor++]].get();
    if (f->wait == Wait::kRunnable) return f;
  }
  return nullptr;
}

// The running fiber stops (its wait set first): straight to the pass's next runnable fiber, or
// back to the scheduler when there is none; returns when the fiber is resumed.
void suspend(Fiber& f) {
  transfer(&f, next_runnable());
}

[[noreturn]] void fiber_main() {
  landed(nullptr);
  Fiber& f = *g_grid.current;
  try {
    (*g_grid.body)();
  } catch (const std::exception& e) {
    if (g_grid.error.empty()) g_grid.error = std::string("a kernel thread threw: ") + e.what();
  } catch (...) {
    if (g_grid.error.empty()) g_grid.error = "a kernel thread threw";
  }
  f.wait = Wait::kDone;
  suspend(f);
  std::abort();  // a finished fiber is reset before it is resumed again
}

Fiber& running() {
  if (g_grid.current == nullptr) {
    std::fputs("cuda emulator: a device function was called outside a kernel\n", stderr);
    std::abort();
  }
  return *g_grid.current;
}

std::string where(const Fiber& f) {
  std::ostringstream s;
  s << "block (" << f.index.block_idx.x << ", " << f.index.block_idx.y << ", " << f.index.block_idx.z << ") thread "
    << f.index.thread_idx.x + f.index.block_dim.x * (f.index.thread_idx.y + f.index.block_dim.y * f.index.thread_idx.z);
  return s.str();
}

void fail(const std::string& why) {
  if (g_grid.error.empty()) g_grid.error = why;
}

// Resolves the warp's collective when every lane its mask names waits at it; false otherwise.
bool release_warp(std::size_t first, std::size_t count) {
  Fiber* lanes[32] = {};
  std::uint32_t waiting = 0, exited = 0, present = 0;
  for (std::size_t i = 0; i < count; ++i) {
    Fiber& f = *g_grid.fibers[first + i];
    lanes[i] = &f;
    present |= 1u << i;
    if (f.wait == Wait::kWarp) waiting |= 1u << i;
    if (f.wait == Wait::kDone) exited |= 1u << i;
  }
  if (waiting == 0) return false;
  const Fiber& lead = *lanes[std::countr_zero(waiting)];
  const std::uint32_t mask = lead.request.mask;
  for (std::size_t i = 0; i < count; ++i) {
    if ((waiting >> i & 1u) == 0) continue;
    const WarpRequest& r = lanes[i]->request;
    if (r.mask != mask || r.kind != lead.request.kind) {
      fail(where(*lanes[i]) + ": lanes of one warp wait at different warp collectives (or masks)");
      return true;
    }
    if ((mask >> i & 1u) == 0) {
      fail(where(*lanes[i]) + ": a warp collective whose mask leaves out its own lane");
      return true;
    }
  }
  if ((mask & ~present) != 0 || (mask & exited) != 0) {
    char masks[64];
    std::snprintf(masks, sizeof masks, "mask 0x%08x, exited 0x%08x", mask, exited);
    fail(where(lead) + ": a warp collective's mask names lanes that do not exist or have exited (" + masks + ")");
    return true;
  }
  if ((mask & ~waiting) != 0) return false;  // some lanes of the mask have not arrived yet
  switch (lead.request.kind) {
    case WarpRequest::Kind::kShuffle:
      for (std::size_t i = 0; i < count; ++i) {
        if ((mask >> i & 1u) == 0) continue;
        WarpRequest& r = lanes[i]->request;
        const int lane = static_cast<int>(i), base = lane & ~(r.width - 1);
        const int source = r.down ? lane + r.source : lane ^ r.source;
        if (source >= base + r.width || source >= 32 || source < 0) {
          r.result = r.bits;  // out of the segment: the lane's own value
        } else if ((mask >> source & 1u) == 0) {
          fail(where(*lanes[i]) + ": a shuffle reads lane " + std::to_string(source) + ", outside its mask");
          return true;
        } else {
          r.result = lanes[source]->request.bits;
        }
      }
      break;
    case WarpRequest::Kind::kBallot: {
      std::uint32_t votes = 0;
      for (std::size_t i = 0; i < count; ++i) {
        if ((mask >> i & 1u) != 0 && lanes[i]->request.bits != 0) votes |= 1u << i;
      }
      for (std::size_t i = 0; i < count; ++i) lanes[i]->request.result = votes;
      break;
    }
    case WarpRequest::Kind::kMma: {
      if (mask != 0xffffffffu) {
        fail(where(lead) + ": mma.sync needs all 32 lanes");
        return true;
      }
      // The warp's fragments through the host tests' emulated mma (the PTX ISA's layout; exact
      // BF16 products summed in double, rounded to float once per mma).
      cuda::mma::FragA a[32];
      cuda::mma::FragB b[32];
      float c[32][4];
      for (int lane = 0; lane < 32; ++lane) {
        const WarpRequest& r = lanes[lane]->request;
        std::copy(r.a, r.a + 4, a[lane].r);
        std::copy(r.b, r.b + 2, b[lane].r);
        std::copy(r.c, r.c + 4, c[lane]);
      }
      test::emulated_mma(a, b, c);
      for (int lane = 0; lane < 32; ++lane) std::copy(c[lane], c[lane] + 4, lanes[lane]->request.c);
      break;
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    if ((mask >> i & 1u) != 0) lanes[i]->wait = Wait::kRunnable;
  }
  return true;
}

// Runs one block to its end; false (g_grid.error set) when it fails.
bool run_block(const std::vector<std::size_t>& order) {
  const std::size_t n = g_grid.threads;
  for (;;) {
    // A pass: every runnable fiber runs to its next wait, each handing over to the next.
    g_grid.order = &order;
    g_grid.cursor = 0;
    if (Fiber* first = next_runnable()) transfer(nullptr, first);
    if (!g_grid.error.empty()) return false;
    bool released = false;
    for (std::size_t w = 0; w < n; w += 32) released |= release_warp(w, std::min<std::size_t>(32, n - w));
    if (!g_grid.error.empty()) return false;
    if (released) continue;
    std::size_t at_barrier = 0, done = 0;
    int any = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Fiber& f = *g_grid.fibers[i];
      if (f.wait == Wait::kBlock) {
        ++at_barrier;
        any |= f.predicate != 0;
      }
      if (f.wait == Wait::kDone) ++done;
    }
    if (done == n) return true;
    if (at_barrier + done == n) {
      for (std::size_t i = 0; i < n; ++i) {
        Fiber& f = *g_grid.fibers[i];
        if (f.wait == Wait::kBlock) {
          f.block_result = any;
          f.wait = Wait::kRunnable;
        }
      }
      continue;
    }
    std::size_t at_warp = n - at_barrier - done;
    fail(where(*g_grid.fibers[0]) + "'s block cannot go on: " + std::to_string(at_barrier) +
         " threads wait at __syncthreads, " + std::to_string(at_warp) +
         " at warp collectives whose lanes cannot all arrive, " + std::to_string(done) + " have exited");
    return false;
  }
}

}  // namespace

const ThreadIndex& current_thread() noexcept {
  return running().index;
}

void* dynamic_shared_memory() noexcept {
  return g_grid.shared;
}

void sync_threads() {
  Fiber& f = running();
  f.predicate = 0;
  f.wait = Wait::kBlock;
  suspend(f);
}

int sync_threads_or(int predicate) {
  Fiber& f = running();
  f.predicate = predicate != 0;
  f.wait = Wait::kBlock;
  suspend(f);
  return f.block_result;
}

std::uint64_t shuffle(std::uint32_t mask, std::uint64_t bits, int source, bool down, int width) {
  Fiber& f = running();
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    fail(where(f) + ": a shuffle's width must be a power of two up to 32");
  }
  f.request.kind = WarpRequest::Kind::kShuffle;
  f.request.mask = mask;
  f.request.bits = bits;
  f.request.source = source;
  f.request.down = down;
  f.request.width = width;
  f.wait = Wait::kWarp;
  suspend(f);
  return f.request.result;
}

std::uint32_t ballot(std::uint32_t mask, int predicate) {
  Fiber& f = running();
  f.request.kind = WarpRequest::Kind::kBallot;
  f.request.mask = mask;
  f.request.bits = predicate != 0;
  f.wait = Wait::kWarp;
  suspend(f);
  return static_cast<std::uint32_t>(f.request.result);
}

void mma_bf16_m16n8k16(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], float (&c)[4]) {
  Fiber& f = running();
  f.request.kind = WarpRequest::Kind::kMma;
  f.request.mask = 0xffffffffu;
  std::copy(a, a + 4, f.request.a);
  std::copy(b, b + 2, f.request.b);
  std::copy(c, c + 4, f.request.c);
  f.wait = Wait::kWarp;
  suspend(f);
  std::copy(f.request.c, f.request.c + 4, c);
}

void run_grid(dim3 grid, dim3 block, std::size_t shared, const std::function<void()>& body) {
  std::lock_guard lock(g_launch_mutex);
  Grid& g = g_grid;
  g.threads = static_cast<std::size_t>(block.x) * block.y * block.z;
  while (g.fibers.size() < g.threads) g.fibers.push_back(std::make_unique<Fiber>());
  g.body = &body;
  g.error.clear();
  g.shared_bytes = shared;
  g.shared_storage.resize(shared + 16);
  g.shared =
      reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(g.shared_storage.data()) + 15) & ~std::uintptr_t{15});
  const std::size_t blocks = static_cast<std::size_t>(grid.x) * grid.y * grid.z;
  std::vector<std::size_t> block_order(blocks), thread_order(g.threads);
  std::iota(block_order.begin(), block_order.end(), std::size_t{0});
  std::iota(thread_order.begin(), thread_order.end(), std::size_t{0});
  std::shuffle(block_order.begin(), block_order.end(), g.random);
  for (const std::size_t b : block_order) {
    const uint3 block_idx{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                          static_cast<unsigned>(b / grid.x / grid.y)};
    for (std::size_t t = 0; t < g.threads; ++t) {
      Fiber& f = *g.fibers[t];
      f.index.thread_idx = {static_cast<unsigned>(t % block.x), static_cast<unsigned>(t / block.x % block.y),
                            static_cast<unsigned>(t / block.x / block.y)};
      f.index.block_idx = block_idx;
      f.index.block_dim = block;
      f.index.grid_dim = grid;
      f.lane = static_cast<int>(t % 32);
      f.warp = static_cast<int>(t / 32);
      reset(f, t, g.failed_last);
    }
    if (shared > 0) std::memset(g.shared, 0xff, shared);
    poison_static_shared();
    std::shuffle(thread_order.begin(), thread_order.end(), g.random);
    g.failed_last = false;
    if (!run_block(thread_order)) {
      g.failed_last = true;
      const std::string why = "cuda emulator: kernel failed: " + g.error;
      g.error.clear();
      set_error(cudaErrorLaunchFailure, why, true);
      return;
    }
  }
}

}  // namespace sitsrt::cuda_emulator
