// What does an unhinted `mbarrier.try_wait.parity` on a pending phase do to the warp
// that issues it, and under which conditions does it answer within ~50 cycles?
//
// Built and run by benchmarks/trywait_probe.py (nvcc, sm_90a); it prints one JSON
// object per line: a header with the device and its measured SM clock, then one
// line per case with the cycles (%clock64) of every call.
//
// Every probe case runs one warp (all 32 lanes issue the probe, as a producer warp
// does) on its own freshly initialised barriers, in two launches; only the second
// launch is recorded (the first warms the instruction cache). Inside a launch the
// probe is called `reps` times, back to back or `spacing` cycles apart.
//
// The pending barrier: count 1 and no arrival (its phase 0 never completes), or,
// with COUNT2_ONE_ARRIVAL, count 2 with one arrival, as
// benchmarks/studies/trywait_microbench.py sets it up.
//
// The other conditions of that benchmark are flags. Each is something its loop does
// around the timed probe; since the loop repeats, what it does after the probe also
// precedes the next repetition's probe.

#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int MAX_REPS = 64;
constexpr int BULK_BYTES = 1024;
constexpr int HINTED_COLUMNS = 4;  // the old benchmark's hints: 0, 1000, 10000, 100000 ns
__constant__ uint32_t OLD_HINTS_NS[HINTED_COLUMNS] = {0, 1000, 10000, 100000};

// How the timed probe's answer is consumed before the second clock read.
enum Form : int {
  SELP = 0,         // try_wait, then selp on its predicate
  HINTED_SELP = 1,  // try_wait with a suspendTimeHint operand, then selp
  PRED_STORE = 2,   // try_wait, then a shared-memory store predicated on it (the old benchmark)
  TEST_WAIT = 3,    // test_wait (never suspends), then selp
  COMPLETE = 4,     // try_wait on a phase that has completed, then selp
  UNREAD = 5,       // try_wait alone; its predicate is read after the second clock read
  UNREAD_BULK = 6,  // lane 0: try_wait, then a bulk copy's issue; the predicate read after
  BULK_ALONE = 7,   // lane 0: the bulk copy's issue alone (the reference for UNREAD_BULK)
};

// The old benchmark's conditions, one bit each.
enum : unsigned {
  COUNT2_ONE_ARRIVAL = 1u << 0,  // the pending barrier has count 2 and one arrival
  DONE_PROBE_BEFORE = 1u << 1,   // a timed try_wait on a completed barrier right before
  GLOBALTIMER = 1u << 2,         // %globaltimer read outside the two clock reads
  HINTED_AFTER = 1u << 3,        // four timed hinted try_waits on the pending barrier after
  UNREAD_PROBE_AFTER = 1u << 4,  // a try_wait on the pending barrier, its predicate read later
  LDS_AFTER = 1u << 5,           // ld.shared alone, then after an unread pending probe
  GLOBAL_STORES = 1u << 6,       // lane 0 stores the timings to global memory
  BULK_AFTER = 1u << 7,          // lane 0: a bulk copy and a blocking wait for it, twice,
                                 // the second behind an unread pending probe
  TEST_WAIT_AFTER = 1u << 8,     // a timed test_wait on the pending barrier at the end
};
constexpr unsigned OLD_ALL = (1u << 9) - 1;

__device__ __forceinline__ long long clock64_read() {
  long long c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  return c;
}

__device__ __forceinline__ long long globaltimer_read() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

__device__ __forceinline__ uint32_t smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// A blocking wait as CUTLASS and the CuTe DSL write it: try_wait with a 10 ms
// suspend-time hint, retried until it answers true.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, 10000000;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// The timed regions. Each is one asm statement, so the instructions between the two
// clock reads are exactly these (the SASS written beside the results shows them).
// A selp alone would not hold the second clock read back: ptxas schedules the select
// after it. So the selected value is stored to shared memory, and ptxas keeps the
// clock read behind that store: SEL, STS, CS2R.
__device__ __forceinline__ long long timed_selp(uint32_t bar, uint32_t parity, uint32_t scratch, uint32_t& out) {
  long long c0, c1;
  asm volatile(
      "{\n .reg .pred p;\n mov.u64 %0, %%clock64;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%3], %4;\n"
      " selp.u32 %2, 1, 0, p;\n"
      " st.volatile.shared.u32 [%5], %2;\n"
      " mov.u64 %1, %%clock64;\n}\n"
      : "=l"(c0), "=l"(c1), "=r"(out)
      : "r"(bar), "r"(parity), "r"(scratch)
      : "memory");
  return c1 - c0;
}

__device__ __forceinline__ long long timed_hinted_selp(uint32_t bar, uint32_t parity, uint32_t hint,
                                                       uint32_t scratch, uint32_t& out) {
  long long c0, c1;
  asm volatile(
      "{\n .reg .pred p;\n mov.u64 %0, %%clock64;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%3], %4, %5;\n"
      " selp.u32 %2, 1, 0, p;\n"
      " st.volatile.shared.u32 [%6], %2;\n"
      " mov.u64 %1, %%clock64;\n}\n"
      : "=l"(c0), "=l"(c1), "=r"(out)
      : "r"(bar), "r"(parity), "r"(hint), "r"(scratch)
      : "memory");
  return c1 - c0;
}

__device__ __forceinline__ long long timed_test_wait(uint32_t bar, uint32_t parity, uint32_t scratch,
                                                     uint32_t& out) {
  long long c0, c1;
  asm volatile(
      "{\n .reg .pred p;\n mov.u64 %0, %%clock64;\n"
      " mbarrier.test_wait.parity.shared::cta.b64 p, [%3], %4;\n"
      " selp.u32 %2, 1, 0, p;\n"
      " st.volatile.shared.u32 [%5], %2;\n"
      " mov.u64 %1, %%clock64;\n}\n"
      : "=l"(c0), "=l"(c1), "=r"(out)
      : "r"(bar), "r"(parity), "r"(scratch)
      : "memory");
  return c1 - c0;
}

// The old benchmark's "used at once": a store predicated on the answer sits right
// behind the probe, and it cannot issue before the predicate is written.
__device__ __forceinline__ long long timed_pred_store(uint32_t bar, uint32_t parity, uint32_t flag) {
  long long c0, c1;
  asm volatile(
      "{\n .reg .pred p;\n mov.u64 %0, %%clock64;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%2], %3;\n"
      " @p st.shared.b32 [%4], 1;\n"
      " mov.u64 %1, %%clock64;\n}\n"
      : "=l"(c0), "=l"(c1)
      : "r"(bar), "r"(parity), "r"(flag)
      : "memory");
  return c1 - c0;
}

__device__ __forceinline__ long long timed_hinted_pred_store(uint32_t bar, uint32_t parity, uint32_t hint,
                                                             uint32_t flag) {
  long long c0, c1;
  asm volatile(
      "{\n .reg .pred p;\n mov.u64 %0, %%clock64;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%2], %3, %4;\n"
      " @p st.shared.b32 [%5], 1;\n"
      " mov.u64 %1, %%clock64;\n}\n"
      : "=l"(c0), "=l"(c1)
      : "r"(bar), "r"(parity), "r"(hint), "r"(flag)
      : "memory");
  return c1 - c0;
}

__device__ __forceinline__ uint32_t try_wait_untimed(uint32_t bar, uint32_t parity) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(r)
      : "r"(bar), "r"(parity)
      : "memory");
  return r;
}

// Timed: try_wait, then a bulk copy's issue; the answer is selected after the second
// clock read (ptxas schedules a select ahead of the clock read when it can).
__device__ __forceinline__ long long timed_try_wait_then_bulk_copy(uint32_t bar, uint32_t parity, uint32_t dst,
                                                                   const void* src, uint32_t bulk, uint32_t bytes,
                                                                   uint32_t& out) {
  long long c0, c1;
  asm volatile(
      "{\n .reg .pred p;\n mov.u64 %0, %%clock64;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%3], %4;\n"
      " mbarrier.arrive.expect_tx.shared::cta.b64 _, [%7], %8;\n"
      " cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%5], [%6], %8, [%7];\n"
      " mov.u64 %1, %%clock64;\n"
      " selp.u32 %2, 1, 0, p;\n}\n"
      : "=l"(c0), "=l"(c1), "=r"(out)
      : "r"(bar), "r"(parity), "r"(dst), "l"(src), "r"(bulk), "r"(bytes)
      : "memory");
  return c1 - c0;
}

__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bar, uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%2], %3;\n"
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %3, [%2];\n" ::"r"(dst),
      "l"(src), "r"(bar), "r"(bytes)
      : "memory");
}

struct Output {
  long long* cycles;  // [reps]: the timed probe
  long long* ns;      // [reps]: %globaltimer around it (GLOBALTIMER only)
  long long* hinted;  // [reps][HINTED_COLUMNS]: the hinted probes of HINTED_AFTER
  long long* scratch; // [reps][8]: where GLOBAL_STORES writes
  unsigned* sink;
};

template <int FORM, unsigned FLAGS>
__global__ void __launch_bounds__(32) probe_kernel(Output out, int reps, long long spacing, uint32_t hint,
                                                   const int* src) {
  __shared__ alignas(8) uint64_t bars[3];
  __shared__ alignas(128) int dst[BULK_BYTES / 4];
  __shared__ int word[32];
  __shared__ long long cycles[MAX_REPS], ns[MAX_REPS], hinted[MAX_REPS][HINTED_COLUMNS];
  const uint32_t pending = smem(&bars[0]), done = smem(&bars[1]), bulk = smem(&bars[2]);
  const uint32_t flag = smem(&word[1]), scratch = smem(&word[2]);
  const bool lane0 = threadIdx.x == 0;
  if (lane0) {
    mbar_init(pending, (FLAGS & COUNT2_ONE_ARRIVAL) ? 2 : 1);
    mbar_init(done, 1);
    mbar_init(bulk, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (lane0) {
    mbar_arrive(done);  // phase 0 of `done` completes now
    if (FLAGS & COUNT2_ONE_ARRIVAL) mbar_arrive(pending);  // one of two: phase 0 stays pending
  }
  __syncthreads();

  uint32_t sink = 0, answer = 0;
  uint32_t bulk_phase = 0;
  long long last_end = clock64_read();
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
    if (spacing > 0) {
      while (clock64_read() - last_end < spacing) {
      }
    }
    long long before = 0;
    if (FLAGS & DONE_PROBE_BEFORE) before = timed_pred_store(done, 0, flag);
    long long g0 = (FLAGS & GLOBALTIMER) ? globaltimer_read() : 0;
    long long c;
    if (FORM == SELP) c = timed_selp(pending, 0, scratch, answer);
    else if (FORM == HINTED_SELP) c = timed_hinted_selp(pending, 0, hint, scratch, answer);
    else if (FORM == PRED_STORE) c = timed_pred_store(pending, 0, flag);
    else if (FORM == TEST_WAIT) c = timed_test_wait(pending, 0, scratch, answer);
    else if (FORM == COMPLETE) c = timed_selp(done, 0, scratch, answer);
    else if (FORM == UNREAD) {
      long long c0 = clock64_read();
      answer = try_wait_untimed(pending, 0);
      c = clock64_read() - c0;
    } else if (lane0) {  // UNREAD_BULK, BULK_ALONE: one thread issues the copy, as a producer does
      if (FORM == UNREAD_BULK) {
        c = timed_try_wait_then_bulk_copy(pending, 0, smem(dst), src, bulk, BULK_BYTES, answer);
      } else {
        long long c0 = clock64_read();
        bulk_copy(smem(dst), src, bulk, BULK_BYTES);
        c = clock64_read() - c0;
      }
      mbar_wait(bulk, bulk_phase);
      bulk_phase ^= 1;
    } else {
      c = 0;
    }
    long long g1 = (FLAGS & GLOBALTIMER) ? globaltimer_read() : 0;
    last_end = clock64_read();
    sink += answer;
    if (lane0) {
      cycles[r] = c;
      ns[r] = g1 - g0;
    }
    if (FLAGS & HINTED_AFTER) {
#pragma unroll
      for (int h = 0; h < HINTED_COLUMNS; ++h) {
        long long t = timed_hinted_pred_store(pending, 0, OLD_HINTS_NS[h], flag);
        if (lane0) hinted[r][h] = t;
      }
    }
    if (FLAGS & UNREAD_PROBE_AFTER) {
      long long c0 = clock64_read();
      uint32_t ready = try_wait_untimed(pending, 0);
      long long c1 = clock64_read();
      sink += ready + static_cast<uint32_t>(c1 - c0);
    }
    if (FLAGS & LDS_AFTER) {
      int x = word[threadIdx.x];
      word[(threadIdx.x + 1) % 32] = x;
      uint32_t ready = try_wait_untimed(pending, 0);
      int y = word[threadIdx.x];
      word[(threadIdx.x + 2) % 32] = y;
      sink += ready;
    }
    if ((FLAGS & GLOBAL_STORES) && lane0) {
      out.scratch[r * 8 + 0] = c;
      out.scratch[r * 8 + 1] = g1 - g0;
      out.scratch[r * 8 + 2] = before;
    }
    if ((FLAGS & BULK_AFTER) && lane0) {
      bulk_copy(smem(dst), src, bulk, BULK_BYTES);
      mbar_wait(bulk, bulk_phase);
      bulk_phase ^= 1;
      uint32_t ready = try_wait_untimed(pending, 0);
      bulk_copy(smem(dst), src, bulk, BULK_BYTES);
      mbar_wait(bulk, bulk_phase);
      bulk_phase ^= 1;
      sink += ready;
    }
    if (FLAGS & TEST_WAIT_AFTER) {
      uint32_t ready;
      long long t = timed_test_wait(pending, 0, scratch, ready);
      sink += ready + static_cast<uint32_t>(t);
    }
    sink += static_cast<uint32_t>(before);
  }
  __syncthreads();
  if (lane0) {
    for (int r = 0; r < reps; ++r) {
      out.cycles[r] = cycles[r];
      out.ns[r] = ns[r];
      for (int h = 0; h < HINTED_COLUMNS; ++h) out.hinted[r * HINTED_COLUMNS + h] = (FLAGS & HINTED_AFTER) ? hinted[r][h] : 0;
    }
  }
  if (sink == 0x12345678u) *out.sink = sink;  // never true; keeps every answer alive
}

// One warp loops on unhinted try_waits (or, HINTED_LOOP, on the blocking form with a
// 10 ms hint) until the phase completes; another warp arrives `delay` cycles after
// both started. Recorded per repetition: cycles from the arriving warp's clock read
// just before its arrive to the waiting warp's clock read just after its loop ended,
// and how many try_waits the loop issued.
template <bool HINTED_LOOP>
__global__ void __launch_bounds__(64) arrival_kernel(long long* after_arrival, long long* iterations, int reps,
                                                     long long delay) {
  __shared__ alignas(8) uint64_t bar;
  __shared__ long long t_arrive, t_end, n_iter;
  const uint32_t b = smem(&bar);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    mbar_init(b, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
    const uint32_t parity = r & 1;  // repetition r waits for phase r
    __syncthreads();
    if (warp == 0) {
      long long t0 = clock64_read();
      while (clock64_read() - t0 < delay) {
      }
      if (lane == 0) {
        t_arrive = clock64_read();
        mbar_arrive(b);
      }
    } else {
      long long n = 0;
      if (HINTED_LOOP) {
        uint32_t ready;
        do {
          ready = 0;
          asm volatile(
              "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, 10000000;\n"
              " selp.u32 %0, 1, 0, p;\n}\n"
              : "=r"(ready)
              : "r"(b), "r"(parity)
              : "memory");
          ++n;
        } while (!ready);
      } else {
        while (!try_wait_untimed(b, parity)) ++n;
        ++n;
      }
      long long t = clock64_read();
      if (lane == 0) {
        t_end = t;
        n_iter = n;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      after_arrival[r] = t_end - t_arrive;
      iterations[r] = n_iter;
    }
  }
}

// The SM clock, measured: cycles and nanoseconds over a ~2 ms spin.
__global__ void clock_kernel(long long* out) {
  long long g0 = globaltimer_read(), c0 = clock64_read();
  while (clock64_read() - c0 < 4000000) {
  }
  long long c1 = clock64_read(), g1 = globaltimer_read();
  out[0] = c1 - c0;
  out[1] = g1 - g0;
}

// -- host -------------------------------------------------------------------------------

struct Buffers {
  long long *cycles, *ns, *hinted, *scratch;
  unsigned* sink;
  int* src;
};

static void print_array(const char* key, const long long* v, int n) {
  std::printf("\"%s\": [", key);
  for (int i = 0; i < n; ++i) std::printf("%s%lld", i ? ", " : "", v[i]);
  std::printf("]");
}

template <int FORM, unsigned FLAGS>
static void run_case(const char* name, const Buffers& b, int reps, long long spacing = 0, uint32_t hint = 0) {
  Output out{b.cycles, b.ns, b.hinted, b.scratch, b.sink};
  for (int launch = 0; launch < 2; ++launch) {
    probe_kernel<FORM, FLAGS><<<1, 32>>>(out, reps, spacing, hint, b.src);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  static long long cycles[MAX_REPS], ns[MAX_REPS], hinted[MAX_REPS * HINTED_COLUMNS];
  CHECK(cudaMemcpy(cycles, b.cycles, reps * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(ns, b.ns, reps * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hinted, b.hinted, reps * HINTED_COLUMNS * sizeof(long long), cudaMemcpyDeviceToHost));
  std::printf("{\"case\": \"%s\", \"form\": %d, \"flags\": %u, \"spacing\": %lld, \"hint_ns\": %u, ", name, FORM,
              FLAGS, spacing, hint);
  print_array("cycles", cycles, reps);
  if (FLAGS & GLOBALTIMER) {
    std::printf(", ");
    print_array("ns", ns, reps);
  }
  if (FLAGS & HINTED_AFTER) {
    for (int h = 0; h < HINTED_COLUMNS; ++h) {
      long long column[MAX_REPS];
      for (int r = 0; r < reps; ++r) column[r] = hinted[r * HINTED_COLUMNS + h];
      char key[64];
      std::snprintf(key, sizeof key, "hinted_after_%u_ns", h == 0 ? 0u : h == 1 ? 1000u : h == 2 ? 10000u : 100000u);
      std::printf(", ");
      print_array(key, column, reps);
    }
  }
  std::printf("}\n");
  std::fflush(stdout);
}

template <bool HINTED_LOOP>
static void run_arrival(const char* name, int reps, long long delay) {
  long long *d_after, *d_iter;
  CHECK(cudaMalloc(&d_after, reps * sizeof(long long)));
  CHECK(cudaMalloc(&d_iter, reps * sizeof(long long)));
  for (int launch = 0; launch < 2; ++launch) {
    arrival_kernel<HINTED_LOOP><<<1, 64>>>(d_after, d_iter, reps, delay);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  long long after[MAX_REPS], iter[MAX_REPS];
  CHECK(cudaMemcpy(after, d_after, reps * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(iter, d_iter, reps * sizeof(long long), cudaMemcpyDeviceToHost));
  std::printf("{\"case\": \"%s\", \"arrival_delay\": %lld, ", name, delay);
  print_array("cycles", after, reps);
  std::printf(", ");
  print_array("iterations", iter, reps);
  std::printf("}\n");
  std::fflush(stdout);
  CHECK(cudaFree(d_after));
  CHECK(cudaFree(d_iter));
}

// Adds one old condition to the clean pending probe (predicated-store form), or
// removes one from the old benchmark's full set.
#define ADD_ONE(FLAG) run_case<PRED_STORE, FLAG>("clean + " #FLAG, b, reps)
#define ALL_BUT(FLAG) run_case<PRED_STORE, OLD_ALL & ~(FLAG)>("old setup - " #FLAG, b, reps)
#define EACH_CONDITION(X)                                                                        \
  X(COUNT2_ONE_ARRIVAL); X(DONE_PROBE_BEFORE); X(GLOBALTIMER); X(HINTED_AFTER);                 \
  X(UNREAD_PROBE_AFTER); X(LDS_AFTER); X(GLOBAL_STORES); X(BULK_AFTER); X(TEST_WAIT_AFTER)

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 16;
  if (reps < 1 || reps > MAX_REPS) {
    std::fprintf(stderr, "reps must be 1..%d\n", MAX_REPS);
    return 2;
  }
  int device = 0;
  CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  long long *d_clock, h_clock[2];
  CHECK(cudaMalloc(&d_clock, 2 * sizeof(long long)));
  clock_kernel<<<1, 1>>>(d_clock);
  CHECK(cudaDeviceSynchronize());
  clock_kernel<<<1, 1>>>(d_clock);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(h_clock, d_clock, sizeof h_clock, cudaMemcpyDeviceToHost));
  std::printf("{\"device\": \"%s\", \"cc\": \"%d.%d\", \"reps\": %d, \"clock_cycles\": %lld, \"clock_ns\": %lld}\n",
              prop.name, prop.major, prop.minor, reps, h_clock[0], h_clock[1]);

  Buffers b;
  CHECK(cudaMalloc(&b.cycles, MAX_REPS * sizeof(long long)));
  CHECK(cudaMalloc(&b.ns, MAX_REPS * sizeof(long long)));
  CHECK(cudaMalloc(&b.hinted, MAX_REPS * HINTED_COLUMNS * sizeof(long long)));
  CHECK(cudaMalloc(&b.scratch, MAX_REPS * 8 * sizeof(long long)));
  CHECK(cudaMalloc(&b.sink, sizeof(unsigned)));
  CHECK(cudaMalloc(&b.src, BULK_BYTES));
  CHECK(cudaMemset(b.src, 0, BULK_BYTES));

  // The pending probe on a clean barrier (count 1, no arrival).
  run_case<SELP, 0>("unhinted, selp", b, reps);
  for (uint32_t hint : {0u, 1000u, 10000u}) run_case<HINTED_SELP, 0>("hinted, selp", b, reps, 0, hint);
  for (long long spacing : {200LL, 2000LL, 20000LL}) run_case<SELP, 0>("unhinted, selp, spaced", b, reps, spacing);
  run_case<PRED_STORE, 0>("unhinted, predicated store", b, reps);
  for (long long spacing : {200LL, 2000LL, 20000LL})
    run_case<PRED_STORE, 0>("unhinted, predicated store, spaced", b, reps, spacing);
  run_case<SELP, GLOBALTIMER>("unhinted, selp, with %globaltimer", b, reps);
  // References: a phase that completed, and test_wait on the pending phase.
  run_case<COMPLETE, 0>("complete phase, selp", b, reps);
  run_case<TEST_WAIT, 0>("test_wait, selp", b, reps);
  // Does the warp stop at the probe, or only where its answer is read?
  run_case<UNREAD, 0>("unhinted, predicate read after the clock read", b, reps);
  run_case<BULK_ALONE, 0>("lane 0: cp.async.bulk issue alone", b, reps);
  run_case<UNREAD_BULK, 0>("lane 0: unhinted try_wait, then cp.async.bulk issue", b, reps);

  // The old benchmark's conditions: all of them, one added to the clean probe, one removed.
  run_case<PRED_STORE, OLD_ALL>("old setup", b, reps);
  run_case<SELP, OLD_ALL>("old setup, selp", b, reps);
  EACH_CONDITION(ADD_ONE);
  EACH_CONDITION(ALL_BUT);

  // Unhinted try_waits in a loop, ended by another warp's arrival.
  for (long long delay : {1000LL, 4000LL, 12000LL, 20000LL}) run_arrival<false>("arrival, unhinted loop", reps, delay);
  for (long long delay : {1000LL, 12000LL}) run_arrival<true>("arrival, 10 ms hinted loop", reps, delay);
  return 0;
}
