// What the AVX2 decode of KV codes costs beside the FMAs of attention: instruction blocks timed on this CPU,
// each iteration one block, all blocks measured in one run (compare them side by side; the machine is
// shared).
//   fma8 / fma12           8 or 12 independent FMAs (2 per cycle where the core has two FMA pipes)
//   cvt8, pshufb8          8 vcvtph2ps ymm <- xmm, 8 vpshufb ymm, independent
//   fma8+cvt4 / +pshufb4 / +add4   8 FMAs interleaved with 4 of the other instruction
//   f16_unit               one f16 value-pass step of attention: 4 vcvtph2ps from memory + 12 FMAs
//   tq4_unit               the former tq4 value-pass step, binary16 tables + 12 FMAs: broadcast load,
//                          vpsrlvd, vpand, 2 vpshufb, 2 vpunpck, 2 vextracti128, 4 vcvtph2ps
//   tq4_decode             tq4_unit without the FMAs; tq4_unit_no_cvt: vpmovzxwd in place of vcvtph2ps
//   bf16_unit              the bfloat16-table decode the kernel uses (DecodeUnit4Quads) + 12 FMAs:
//                          2 vpshufb, 2 vpunpck*bw, 4 vpunpck*wd over zero, no lane crossing
//   bytes3_unit            fp32 from three byte tables (binary16 tables kept exact) + 12 FMAs
// The blocks are inline assembly, so the compiler can neither drop nor reorder them. x86 with AVX2/F16C/FMA
// only.
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace {

#define TQ_TARGET __attribute__((target("avx2,fma,f16c")))

bool HasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

constexpr int kInner = 1024;  // blocks per benchmark iteration

// ns per block; false (skipped) where the CPU lacks the instructions.
bool Start(benchmark::State& state) {
  if (HasAvx2()) return true;
  state.SkipWithError("needs AVX2, FMA and F16C");
  return false;
}
void Finish(benchmark::State& state) {
  state.counters["ns_per_block"] = benchmark::Counter(static_cast<double>(state.iterations()) * kInner,
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// The loop over blocks sits in the benchmark function itself, so the accumulators stay in registers.
#define TQ_BLOCKS(state, ...)                         \
  if (!Start(state)) return;                          \
  for (auto _ : state) {                              \
    for (int i = 0; i < kInner; ++i) __VA_ARGS__      \
  }                                                   \
  Finish(state)

// Eight independent instructions `prefix %k`, k = 0..7 (the outputs; %8 and %9, where given, the inputs).
#define TQ_EIGHT(prefix)                                                                           \
  prefix "%0\n " prefix "%1\n " prefix "%2\n " prefix "%3\n " prefix "%4\n " prefix "%5\n " prefix \
         "%6\n " prefix "%7"

TQ_TARGET void BM_Fma8(benchmark::State& state) {
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-9f);
  __m256 x0 = a, x1 = a, x2 = a, x3 = a, x4 = a, x5 = a, x6 = a, x7 = a;
  TQ_BLOCKS(state, {
    asm volatile(TQ_EIGHT("vfmadd231ps %8, %9, ")
                 : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5), "+x"(x6), "+x"(x7)
                 : "x"(a), "x"(b));
  });
}

TQ_TARGET void BM_Cvt8(benchmark::State& state) {
  __m128i h = _mm_set1_epi16(0x3c00);
  TQ_BLOCKS(state, {
    __m256 y0, y1, y2, y3, y4, y5, y6, y7;
    asm volatile(TQ_EIGHT("vcvtph2ps %8, ")
                 : "=x"(y0), "=x"(y1), "=x"(y2), "=x"(y3), "=x"(y4), "=x"(y5), "=x"(y6), "=x"(y7)
                 : "x"(h));
  });
}

TQ_TARGET void BM_Pshufb8(benchmark::State& state) {
  __m256i t = _mm256_set1_epi8(3), ix = _mm256_set1_epi8(1);
  TQ_BLOCKS(state, {
    __m256i y0, y1, y2, y3, y4, y5, y6, y7;
    asm volatile(TQ_EIGHT("vpshufb %9, %8, ")
                 : "=x"(y0), "=x"(y1), "=x"(y2), "=x"(y3), "=x"(y4), "=x"(y5), "=x"(y6), "=x"(y7)
                 : "x"(t), "x"(ix));
  });
}

// 8 FMAs with 4 instructions `op` (operands: %8 = output, %12/%13 = inputs) interleaved.
#define TQ_FMA8_WITH4(op)                                                                              \
  "vfmadd231ps %12, %13, %0\n " op " %12, %13, %8\n vfmadd231ps %12, %13, %1\n vfmadd231ps %12, %13, %2\n" \
  op " %12, %13, %9\n vfmadd231ps %12, %13, %3\n vfmadd231ps %12, %13, %4\n " op                           \
  " %12, %13, %10\n vfmadd231ps %12, %13, %5\n vfmadd231ps %12, %13, %6\n " op                             \
  " %12, %13, %11\n vfmadd231ps %12, %13, %7"

TQ_TARGET void BM_Fma8Add4(benchmark::State& state) {
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-9f);
  __m256 x0 = a, x1 = a, x2 = a, x3 = a, x4 = a, x5 = a, x6 = a, x7 = a;
  TQ_BLOCKS(state, {
    __m256 y0, y1, y2, y3;
    asm volatile(TQ_FMA8_WITH4("vaddps")
                 : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5), "+x"(x6), "+x"(x7), "=&x"(y0),
                   "=&x"(y1), "=&x"(y2), "=&x"(y3)
                 : "x"(a), "x"(b));
  });
}

TQ_TARGET void BM_Fma8Pshufb4(benchmark::State& state) {
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-9f);
  __m256 x0 = a, x1 = a, x2 = a, x3 = a, x4 = a, x5 = a, x6 = a, x7 = a;
  TQ_BLOCKS(state, {
    __m256i y0, y1, y2, y3;
    asm volatile(TQ_FMA8_WITH4("vpshufb")
                 : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5), "+x"(x6), "+x"(x7), "=&x"(y0),
                   "=&x"(y1), "=&x"(y2), "=&x"(y3)
                 : "x"(a), "x"(b));
  });
}

TQ_TARGET void BM_Fma8Cvt4(benchmark::State& state) {
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-9f);
  __m128i h = _mm_set1_epi16(0x3c00);
  __m256 x0 = a, x1 = a, x2 = a, x3 = a, x4 = a, x5 = a, x6 = a, x7 = a;
  TQ_BLOCKS(state, {
    __m256 y0, y1, y2, y3;
    asm volatile(
        "vfmadd231ps %12, %13, %0\n vcvtph2ps %14, %8\n vfmadd231ps %12, %13, %1\n vfmadd231ps %12, %13, %2\n"
        "vcvtph2ps %14, %9\n vfmadd231ps %12, %13, %3\n vfmadd231ps %12, %13, %4\n vcvtph2ps %14, %10\n"
        "vfmadd231ps %12, %13, %5\n vfmadd231ps %12, %13, %6\n vcvtph2ps %14, %11\n vfmadd231ps %12, %13, %7"
        : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5), "+x"(x6), "+x"(x7), "=&x"(y0), "=&x"(y1),
          "=&x"(y2), "=&x"(y3)
        : "x"(a), "x"(b), "x"(h));
  });
}

// 12 FMAs into 6 accumulators (3 heads x 2 coordinates), two per accumulator per block as in the value pass.
#define TQ_FMA12(v0, v1, v2, v3, w0, w1, w2)                                                                \
  "vfmadd231ps " w0 ", " v0 ", %0\n vfmadd231ps " w0 ", " v1 ", %1\n vfmadd231ps " w1 ", " v0 ", %2\n"    \
  "vfmadd231ps " w1 ", " v1 ", %3\n vfmadd231ps " w2 ", " v0 ", %4\n vfmadd231ps " w2 ", " v1 ", %5\n"    \
  "vfmadd231ps " w0 ", " v2 ", %0\n vfmadd231ps " w0 ", " v3 ", %1\n vfmadd231ps " w1 ", " v2 ", %2\n"    \
  "vfmadd231ps " w1 ", " v3 ", %3\n vfmadd231ps " w2 ", " v2 ", %4\n vfmadd231ps " w2 ", " v3 ", %5\n"

TQ_TARGET void BM_Fma12(benchmark::State& state) {
  __m256 a = _mm256_set1_ps(1.0f), w = _mm256_set1_ps(1e-9f);
  __m256 r0 = a, r1 = a, r2 = a, r3 = a, r4 = a, r5 = a;
  TQ_BLOCKS(state, {
    asm volatile(TQ_FMA12("%6", "%6", "%6", "%6", "%7", "%7", "%7")
                 : "+x"(r0), "+x"(r1), "+x"(r2), "+x"(r3), "+x"(r4), "+x"(r5)
                 : "x"(a), "x"(w));
  });
}

TQ_TARGET void BM_F16Unit(benchmark::State& state) {
  alignas(64) static uint16_t halves[64] = {};
  __m256 a = _mm256_set1_ps(1.0f), w = _mm256_set1_ps(1e-9f);
  __m256 r0 = a, r1 = a, r2 = a, r3 = a, r4 = a, r5 = a;
  TQ_BLOCKS(state, {
    __m256 v0, v1, v2, v3;
    asm volatile(
        "vcvtph2ps (%12), %6\n vcvtph2ps 16(%12), %7\n vcvtph2ps 32(%12), %8\n vcvtph2ps 48(%12), %9\n" TQ_FMA12(
            "%6", "%7", "%8", "%9", "%10", "%11", "%11")
        : "+x"(r0), "+x"(r1), "+x"(r2), "+x"(r3), "+x"(r4), "+x"(r5), "=&x"(v0), "=&x"(v1), "=&x"(v2), "=&x"(v3)
        : "x"(w), "x"(a), "r"(halves)
        : "memory");
  });
}

// One binary16-table decode of a unit row (broadcast load, vpsrlvd, vpand, 2 vpshufb, 2 vpunpck, 2
// vextracti128, 4 `widen` of 8 halves) followed by `tail` (12 FMAs, or nothing). Registers: t0 indices, then
// the high-byte lookup, then coordinate 0 of tokens 8-15; t1 tokens 0-7 halves, then coordinate 1 of tokens
// 0-7; t2 tokens 8-15 halves, then coordinate 1 of tokens 8-15; v coordinate 0 of tokens 0-7. The weights are
// FMA memory operands, as in the value pass.
#define TQ_HALF_DECODE_BENCH(name, widen, tail)                                                          \
  TQ_TARGET void name(benchmark::State& state) {                                                         \
    alignas(64) static uint8_t row[16] = {};                                                             \
    alignas(64) static float weights[8] = {};                                                            \
    const __m256i shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), mask = _mm256_set1_epi8(0x0F);     \
    const __m256i table_lo = _mm256_set1_epi8(0), table_hi = _mm256_set1_epi8(0x3c);                     \
    __m256 a = _mm256_set1_ps(1.0f);                                                                     \
    __m256 r0 = a, r1 = a, r2 = a, r3 = a, r4 = a, r5 = a;                                               \
    TQ_BLOCKS(state, {                                                                                   \
      __m256i t0, t1, t2;                                                                                \
      __m256 v;                                                                                          \
      asm volatile(                                                                                      \
          "vbroadcasti128 (%10), %6\n vpsrlvd %11, %6, %6\n vpand %12, %6, %6\n"                         \
          "vpshufb %6, %13, %7\n vpshufb %6, %14, %6\n vpunpckhbw %6, %7, %8\n vpunpcklbw %6, %7, "      \
          "%7\n" widen " %x7, %9\n vextracti128 $1, %7, %x7\n " widen                                    \
          " %x8, %6\n vextracti128 $1, %8, %x8\n" widen " %x7, %7\n " widen " %x8, %8\n" tail            \
          : "+x"(r0), "+x"(r1), "+x"(r2), "+x"(r3), "+x"(r4), "+x"(r5), "=&x"(t0), "=&x"(t1), "=&x"(t2), \
            "=&x"(v)                                                                                     \
          : "r"(row), "x"(shifts), "x"(mask), "x"(table_lo), "x"(table_hi), "m"(weights)                 \
          : "memory");                                                                                   \
    });                                                                                                  \
  }

#define TQ_FMA12_OF_DECODE TQ_FMA12("%9", "%7", "%6", "%8", "%15", "%15", "%15")
TQ_HALF_DECODE_BENCH(BM_Tq4Unit, "vcvtph2ps", TQ_FMA12_OF_DECODE)
TQ_HALF_DECODE_BENCH(BM_Tq4Decode, "vcvtph2ps", "")
TQ_HALF_DECODE_BENCH(BM_Tq4UnitNoCvt, "vpmovzxwd", TQ_FMA12_OF_DECODE)
BENCHMARK(BM_Tq4Decode);
BENCHMARK(BM_Tq4UnitNoCvt);

TQ_TARGET void BM_Bf16Unit(benchmark::State& state) {
  alignas(64) static uint8_t row[16] = {};
  alignas(64) static float weights[8] = {};
  const __m256i shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), mask = _mm256_set1_epi8(0x0F);
  const __m256i table_lo = _mm256_set1_epi8(0), table_hi = _mm256_set1_epi8(0x3c);
  __m256 a = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  __m256 r0 = a, r1 = a, r2 = a, r3 = a, r4 = a, r5 = a;
  TQ_BLOCKS(state, {
    __m256i t0, t1, t2;
    __m256 v;
    asm volatile(
        "vbroadcasti128 (%10), %6\n vpsrlvd %11, %6, %6\n vpand %12, %6, %6\n"
        "vpshufb %6, %13, %7\n vpshufb %6, %14, %6\n vpunpckhbw %6, %7, %8\n vpunpcklbw %6, %7, %7\n"
        "vpunpcklwd %7, %16, %9\n vpunpckhwd %7, %16, %7\n vpunpcklwd %8, %16, %6\n vpunpckhwd %8, %16, %8\n"
        TQ_FMA12("%9", "%7", "%6", "%8", "%15", "%15", "%15")
        : "+x"(r0), "+x"(r1), "+x"(r2), "+x"(r3), "+x"(r4), "+x"(r5), "=&x"(t0), "=&x"(t1), "=&x"(t2), "=&x"(v)
        : "r"(row), "m"(shifts), "m"(mask), "x"(table_lo), "x"(table_hi), "m"(weights), "x"(zero)
        : "memory");
  });
}
BENCHMARK(BM_Bf16Unit);
TQ_TARGET void BM_Bytes3Unit(benchmark::State& state) {
  alignas(64) static uint8_t row[16] = {};
  alignas(64) static float weights[8] = {};
  alignas(32) static const __m256i shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  alignas(32) static const __m256i mask = _mm256_set1_epi8(0x0F);
  alignas(32) static const __m256i table_b1 = _mm256_set1_epi8(0);
  const __m256i table_b2 = _mm256_set1_epi8(0), table_b3 = _mm256_set1_epi8(0x3c);
  __m256 a = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  __m256 r0 = a, r1 = a, r2 = a, r3 = a, r4 = a, r5 = a;
  TQ_BLOCKS(state, {
    __m256i t0, t1, t2, t3, t4;
    asm volatile(
        "vbroadcasti128 (%11), %6\n vpsrlvd %12, %6, %6\n vpand %13, %6, %6\n"
        "vmovdqa %14, %9\n vpshufb %6, %9, %9\n"
        "vpshufb %6, %15, %7\n vpshufb %6, %16, %6\n"
        "vpunpckhbw %6, %7, %8\n vpunpcklbw %6, %7, %7\n"
        "vpunpckhbw %9, %18, %6\n vpunpcklbw %9, %18, %9\n"
        "vpunpcklwd %7, %9, %10\n vpunpckhwd %7, %9, %7\n vpunpcklwd %8, %6, %9\n vpunpckhwd %8, %6, %8\n"
        TQ_FMA12("%10", "%7", "%9", "%8", "%17", "%17", "%17")
        : "+x"(r0), "+x"(r1), "+x"(r2), "+x"(r3), "+x"(r4), "+x"(r5), "=&x"(t0), "=&x"(t1), "=&x"(t2), "=&x"(t3),
          "=&x"(t4)
        : "r"(row), "m"(shifts), "m"(mask), "m"(table_b1), "x"(table_b2), "x"(table_b3), "m"(weights), "x"(zero)
        : "memory");
  });
}
BENCHMARK(BM_Bytes3Unit);
BENCHMARK(BM_Fma8);
BENCHMARK(BM_Cvt8);
BENCHMARK(BM_Pshufb8);
BENCHMARK(BM_Fma8Add4);
BENCHMARK(BM_Fma8Pshufb4);
BENCHMARK(BM_Fma8Cvt4);
BENCHMARK(BM_Fma12);
BENCHMARK(BM_F16Unit);
BENCHMARK(BM_Tq4Unit);

}  // namespace
#endif  // __x86_64__
