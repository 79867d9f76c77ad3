// Direct decode tiles for the K-quant super-blocks (Q4_K, Q6_K) on AVX-512 and AVX2 targets: codes and scales come
// straight from the weight rows, unpacked in registers, with no panel (the panel costs a decode pass per row that,
// at batch 1, takes longer than the product itself). Textually included by matmul_q8.cc inside its per-target
// namespace, once per Highway target, after DirectTile: no include guard, by design. Uses kR, kTMax, F16, Load32,
// DotQuads, DotQuads512, HorizontalSum, kStreamAhead and PrefetchLines from there.
//
// Memory order as DirectTile's: each row start to end, kStreamAhead bytes prefetched ahead (PrefetchLines).
//
// Activation records (matmul_q8.h): int8 q[cols], then f32 d[nb], s[2 nb], sb[nb] with nb = cols / 32 (d is the
// same for the 8 blocks of a super-block; the tiles do not rely on it). On AVX-512, Q4_K reads its codes from a
// copy in which each super-block's 32-byte chunks are in the order the weight nibbles come (PermuteForQ4K).
// Per token t and weight row r the tile sums, over super-blocks of 256:
//   Q4_K  sub-block j of 32: d*sc_j * dx_j * (c . q) - dmin*m_j * sb_j        (c in 0..15)
//   Q6_K  sub-block k of 16: d*sc_k * dx_(k/2) * (c . q) - 32*d*sc_k * s_k     (c in 0..63)
// with the integer dots in int32 lanes of 4 codes (dpbusd), scaled per lane and accumulated in f32.

#if TQ_Q8_X86
// The eight 6-bit scales (sc) and mins (m) of a Q4_K super-block's 12 packed bytes, as bytes: bytes 0-3 hold the
// low 6 bits of sc[0..3], 4-7 of m[0..3]; bytes 8-11 the low nibbles of sc[4..7] and m[4..7], whose top 2 bits are
// bits 6-7 of bytes 0-3 (sc) and 4-7 (m).
inline void UnpackK4Scales(const uint8_t* packed, uint64_t* sc, uint64_t* m) {
  uint32_t a, b, c;
  std::memcpy(&a, packed, 4);
  std::memcpy(&b, packed + 4, 4);
  std::memcpy(&c, packed + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  *sc = sc_lo | (uint64_t{sc_hi} << 32);
  *m = m_lo | (uint64_t{m_hi} << 32);
}

#endif

#if TQ_Q8_512

// The codes of `batch` activation records, each super-block's 32-byte chunks reordered 0 2 1 3 4 6 5 7: chunk
// pairs [sub 4h | sub 4h + 2] and [sub 4h + 1 | sub 4h + 3] as the Q4_K nibbles hold them (see DirectTileQ4K).
// out: [batch, cols] bytes.
inline void PermuteForQ4K(const uint8_t* acts, int64_t stride, int64_t batch, int64_t cols, uint8_t* out) {
  constexpr int kOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t t = 0; t < batch; ++t) {
    for (int64_t s = 0; s < cols; s += 256) {
      for (int i = 0; i < 8; ++i) {
        std::memcpy(out + t * cols + s + 32 * i, acts + t * stride + s + 32 * kOrder[i], 32);
      }
    }
  }
}

inline __m256 U8x8ToFloat(uint64_t v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(v))));
}

// Q4_K: 144-byte super-blocks: d, dmin (f16), 12 scale bytes, qs[128]. qs bytes [32i, 32i + 32) hold sub-block 2i
// in their low nibbles and 2i + 1 in their high nibbles.
// `codes`: the records' codes after PermuteForQ4K, [kT, cols].
template <int kT>
void DirectTileQ4K(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride,
                   const uint8_t* codes, float out[kR][kTMax]) {
  const int64_t nb = cols / 32, nsb = cols / 256;
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
  // Lane maps from the 8 per-sub-block factors of a super-block to the 16 int32 lanes of a dot: low nibbles of
  // qs bytes [64h, 64h + 64) are sub-blocks 4h (lanes 0-7) and 4h + 2 (8-15), high nibbles 4h + 1 and 4h + 3.
  const __m512i lane_sub[4] = {
      _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
      _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
      _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
      _mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7)};
  const __m512i low4 = _mm512_set1_epi8(15);
  __m512 acc[kR][kT];
  __m256 min_acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) {
      acc[r][t] = _mm512_setzero_ps();
      min_acc[r][t] = _mm256_setzero_ps();
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = w[r] + s * 144;
      PrefetchLines(blk + kStreamAhead, 144);
      uint64_t sc, m;
      UnpackK4Scales(blk + 4, &sc, &m);
      const __m256 d = _mm256_set1_ps(F16(blk)), dmin = _mm256_set1_ps(F16(blk + 2));
      const __m256 dsc = _mm256_mul_ps(d, U8x8ToFloat(sc));
      const __m256 dm = _mm256_mul_ps(dmin, U8x8ToFloat(m));
      const __m512i q0 = _mm512_loadu_si512(blk + 16), q1 = _mm512_loadu_si512(blk + 80);
      const __m512i c[4] = {_mm512_and_si512(q0, low4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4),
                            _mm512_and_si512(q1, low4), _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4)};
      for (int t = 0; t < kT; ++t) {
        // per sub-block: d*sc_j*dx_j
        const __m512 f = _mm512_castps256_ps512(_mm256_mul_ps(dsc, _mm256_loadu_ps(dx[t] + 8 * s)));
        const uint8_t* x = codes + t * cols + 256 * s;
        for (int i = 0; i < 4; ++i) {
          const __m512 dot = _mm512_cvtepi32_ps(DotQuads512(c[i], _mm512_loadu_si512(x + 64 * i)));
          acc[r][t] = _mm512_fmadd_ps(dot, _mm512_permutexvar_ps(lane_sub[i], f), acc[r][t]);
        }
        min_acc[r][t] = _mm256_fmadd_ps(dm, _mm256_loadu_ps(dx[t] + 3 * nb + 8 * s), min_acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) out[r][t] = _mm512_reduce_add_ps(acc[r][t]) - HorizontalSum(min_acc[r][t]);
  }
}

// Q6_K: 210-byte super-blocks: ql[128], qh[64], int8 scales[16], d (f16). Half h (elements [128h, 128h + 128)):
// ql bytes [64h, 64h + 64) hold elements 128h + [0, 64) in their low nibbles and 128h + [64, 128) in their high
// nibbles; qh byte 32h + l holds the top 2 bits of elements 128h + l + 32i in its bits 2i, 2i + 1 (i < 4).
// Scale k covers elements [16k, 16k + 16).
template <int kT>
void DirectTileQ6K(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride,
                   float out[kR][kTMax]) {
  const int64_t nb = cols / 32, nsb = cols / 256;
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
  // The 64 codes of chunk i (elements [64i, 64i + 64)) sit in 16 lanes of 4; lanes 4k..4k+3 take scale 4i + k.
  __m512i lane_scale[4];
  for (int i = 0; i < 4; ++i) {
    lane_scale[i] = _mm512_add_epi32(_mm512_set1_epi32(4 * i),
                                     _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  }
  // The 8 block scales dx of a super-block, one per pair of 16-element scales.
  const __m512i pair = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  // The top 2 bits: qh (32 bytes, in both halves of a vector) shifted right by 0 / 2 for the low nibbles' 64
  // elements and 4 / 6 for the high nibbles'.
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  const __m512i low4 = _mm512_set1_epi8(15), low2 = _mm512_set1_epi8(3);
  __m512 acc[kR][kT], min_acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = min_acc[r][t] = _mm512_setzero_ps();
  }
  for (int r = 0; r < kR; ++r) {
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = w[r] + s * 210;
      PrefetchLines(blk + kStreamAhead, 210);
      const __m512 dsc = _mm512_mul_ps(
          _mm512_set1_ps(F16(blk + 208)),
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))));
      __m512i c[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
        const __m512i top_lo = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_lo), low2), 4);
        const __m512i top_hi = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), low2), 4);
        c[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), top_lo);
        c[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), top_hi);
      }
      for (int t = 0; t < kT; ++t) {
        const uint8_t* q = acts + t * stride + 256 * s;
        const __m512 xd = _mm512_permutexvar_ps(pair, _mm512_castps256_ps512(_mm256_loadu_ps(dx[t] + 8 * s)));
        const __m512 f = _mm512_mul_ps(dsc, xd);  // per 16 elements: d*sc_k*dx_(k/2)
        for (int i = 0; i < 4; ++i) {
          const __m512 dot = _mm512_cvtepi32_ps(DotQuads512(c[i], _mm512_loadu_si512(q + 64 * i)));
          acc[r][t] = _mm512_fmadd_ps(dot, _mm512_permutexvar_ps(lane_scale[i], f), acc[r][t]);
        }
        min_acc[r][t] = _mm512_fmadd_ps(dsc, _mm512_loadu_ps(dx[t] + nb + 16 * s), min_acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) {
      out[r][t] = _mm512_reduce_add_ps(acc[r][t]) - 32.0f * _mm512_reduce_add_ps(min_acc[r][t]);
    }
  }
}

#endif  // TQ_Q8_512

#if TQ_Q8_X86 && !TQ_Q8_512
// AVX2 (laptops and older servers): the same two tiles in 256-bit vectors, 32 codes (one Q4_K sub-block, two
// Q6_K scales) per dot; activation codes in element order.

inline __m256 Bytes8ToFloat256(uint64_t v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(v))));
}

// Q4_K: sub-block 2h is the low nibbles of qs[32h, 32h + 32), 2h + 1 their high nibbles.
template <int kT>
void DirectTileQ4K(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride,
                   float out[kR][kTMax]) {
  const int64_t nb = cols / 32, nsb = cols / 256;
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
  const __m256i low4 = _mm256_set1_epi8(15);
  __m256 acc[kR][kT], min_acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = min_acc[r][t] = _mm256_setzero_ps();
  }
  for (int r = 0; r < kR; ++r) {
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = w[r] + s * 144;
      PrefetchLines(blk + kStreamAhead, 144);
      uint64_t sc, m;
      UnpackK4Scales(blk + 4, &sc, &m);
      const __m256 dsc = _mm256_mul_ps(_mm256_set1_ps(F16(blk)), Bytes8ToFloat256(sc));
      const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(F16(blk + 2)), Bytes8ToFloat256(m));
      for (int t = 0; t < kT; ++t) {
        const __m256 f = _mm256_mul_ps(dsc, _mm256_loadu_ps(dx[t] + 8 * s));  // per sub-block: d*sc_j*dx_j
        const uint8_t* x = acts + t * stride + 256 * s;
        for (int h = 0; h < 4; ++h) {
          const __m256i q = Load32(blk + 16 + 32 * h);
          const __m256 lo = _mm256_cvtepi32_ps(DotQuads(_mm256_and_si256(q, low4), Load32(x + 64 * h)));
          const __m256 hi =
              _mm256_cvtepi32_ps(DotQuads(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), Load32(x + 64 * h + 32)));
          acc[r][t] = _mm256_fmadd_ps(lo, _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * h)), acc[r][t]);
          acc[r][t] = _mm256_fmadd_ps(hi, _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * h + 1)), acc[r][t]);
        }
        min_acc[r][t] = _mm256_fmadd_ps(dm, _mm256_loadu_ps(dx[t] + 3 * nb + 8 * s), min_acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) out[r][t] = HorizontalSum(acc[r][t]) - HorizontalSum(min_acc[r][t]);
  }
}

// Q6_K: chunk k of 32 elements (k < 8, half h = k / 4, part p = k % 4) takes the low (p < 2) or high nibbles of
// ql[64h + 32 (p & 1), +32) and bits 2p, 2p + 1 of qh[32h, +32); scales 2k and 2k + 1 cover its two halves.
template <int kT>
void DirectTileQ6K(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride,
                   float out[kR][kTMax]) {
  const int64_t nb = cols / 32, nsb = cols / 256;
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3);
  __m256 acc[kR][kT], min_acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = min_acc[r][t] = _mm256_setzero_ps();
  }
  for (int r = 0; r < kR; ++r) {
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = w[r] + s * 210;
      PrefetchLines(blk + kStreamAhead, 210);
      const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
      const __m256 d = _mm256_set1_ps(F16(blk + 208));
      const __m256 dsc[2] = {_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8))),
                             _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(s8, s8))))};
      __m256i c[8];
      for (int k = 0; k < 8; ++k) {
        const int h = k / 4, p = k % 4;
        const __m256i ql = Load32(blk + 64 * h + 32 * (p & 1));
        const __m256i qh = Load32(blk + 128 + 32 * h);
        const __m256i low = _mm256_and_si256(p < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
        const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), low2);
        c[k] = _mm256_or_si256(low, _mm256_slli_epi16(top, 4));
      }
      for (int t = 0; t < kT; ++t) {
        const uint8_t* x = acts + t * stride + 256 * s;
        for (int k = 0; k < 8; ++k) {
          // lanes 0-3: scale 2k, 4-7: scale 2k + 1, times the block's dx.
          const __m256i idx = _mm256_setr_epi32(2 * (k % 4), 2 * (k % 4), 2 * (k % 4), 2 * (k % 4), 2 * (k % 4) + 1,
                                                2 * (k % 4) + 1, 2 * (k % 4) + 1, 2 * (k % 4) + 1);
          const __m256 f =
              _mm256_mul_ps(_mm256_permutevar8x32_ps(dsc[k / 4], idx), _mm256_broadcast_ss(dx[t] + 8 * s + k));
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DotQuads(c[k], Load32(x + 32 * k))), f, acc[r][t]);
        }
        const float* hs = dx[t] + nb + 16 * s;  // d * sum per half-block
        min_acc[r][t] = _mm256_fmadd_ps(dsc[0], _mm256_loadu_ps(hs), min_acc[r][t]);
        min_acc[r][t] = _mm256_fmadd_ps(dsc[1], _mm256_loadu_ps(hs + 8), min_acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) out[r][t] = HorizontalSum(acc[r][t]) - 32.0f * HorizontalSum(min_acc[r][t]);
  }
}
#endif  // TQ_Q8_X86 && !TQ_Q8_512
