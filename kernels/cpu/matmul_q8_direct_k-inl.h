// Direct decode tiles for the K-quant super-blocks (Q4_K, Q6_K) on AVX-512 and AVX2 targets: codes and scales come
// straight from the weight rows, unpacked in registers, with no panel (the panel costs a decode pass per row that,
// at batch 1, takes longer than the product itself). Textually included by matmul_q8.cc inside its per-target
// namespace, once per Highway target, after DirectTile: no include guard, by design. Uses kR, kTMax, F16, Load32,
// DotQuads, DotQuads512, HorizontalSum, kStreamAhead and PrefetchLines from there.
//
// Memory order as DirectTile's: each row start to end, kStreamAhead bytes prefetched ahead (PrefetchLines).
//
// Activation records (matmul_q8.h): int8 q[cols], then f32 d[nb], s[2 nb], sb[nb] with nb = cols / 32. Per token
// t and weight row r the tiles sum, over super-blocks of 256 (dx_b the scale of the block of 32 the codes are in):
//   Q4_K  sub-block j of 32: d*sc_j * dx_b * (c . q) - dmin*m_j * s_h              (c in 0..15, h its halves)
//   Q6_K  sub-block k of 16: d*sc_k * dx_b * (c . q) - 32*d*sc_k * s_k             (c in 0..63)
// with the integer dots in int32 lanes of 4 codes (dpbusd), scaled per lane and accumulated in f32, in the order
// of the panel tiles of the same target (TileK on AVX-512, Tile on AVX2), so that a row's result does not depend
// on which tile, and so on which batch, computed it.

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

// Eight bytes (the low byte first) as eight floats: the 6-bit scales or mins of a Q4_K super-block.
inline __m256 U8x8ToFloat(uint64_t v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(v))));
}

#endif

#if TQ_Q8_512

// The sum of a 512-bit accumulator of min terms exactly as MinTerm (the panel tiles' helper) sums its own.
inline float SumMinLanes(__m512 v) {
  const hn::ScalableTag<float> df;
  static_assert(hn::MaxLanes(df) == 16, "MinTerm's lanes are 512 bits on these targets");
  return hn::GetLane(hn::SumOfLanes(df, hn::Vec512<float>{v}));
}

// Chunk i's 16 lanes of the record's 8 block scales dx of a super-block (dxs = &d[8 s]): lanes 0-7 cover block
// 2i, lanes 8-15 block 2i + 1 (both tiles lay out a chunk of 64 codes in that order).
inline __m512 ChunkDx(const float* dxs, int i) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(dxs[2 * i])), _mm256_set1_ps(dxs[2 * i + 1]), 1);
}

// One token's products over a super-block: the 4 chunk dots (64 codes each, element order) times d*sc*dx per
// lane, chained mul then fma. TileK (matmul_q8_panel_k-inl.h) uses it too: the order both tiles must share.
inline __m512 SuperBlockDot(const __m512i c[4], const __m512 sv[4], const uint8_t* x, const float* dxs) {
  __m512 sum = _mm512_mul_ps(_mm512_cvtepi32_ps(DotQuads512(c[0], _mm512_loadu_si512(x))),
                             _mm512_mul_ps(sv[0], ChunkDx(dxs, 0)));
  for (int i = 1; i < 4; ++i) {
    sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(DotQuads512(c[i], _mm512_loadu_si512(x + 64 * i))),
                          _mm512_mul_ps(sv[i], ChunkDx(dxs, i)), sum);
  }
  return sum;
}

// Both K tiles do TileK's float arithmetic (matmul_q8_panel_k-inl.h) on the same values in the same order: per
// super-block the 4 chunk dots times d*sc*dx per lane (SuperBlockDot), added to the accumulator; the min terms
// (-dmin*m per half-block, or -32*d*sc per 16 elements) fma'd lane-wise with the half-block sums in a second
// accumulator summed as MinTerm sums it. So a row's result is bit for bit the panel's, whatever the batch
// (MatMulTest.DirectAndPanelTilesAgreeBitwise).

// Q4_K: 144-byte super-blocks: d, dmin (f16), 12 scale bytes, qs[128]. qs bytes [32i, 32i + 32) hold sub-block 2i
// in their low nibbles and 2i + 1 in their high nibbles: chunk i of 64 codes (elements [64i, 64i + 64)) is those
// 32 bytes' low nibbles, then their high nibbles.
template <int kT>
void DirectTileQ4K(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride,
                   float out[kR][kTMax]) {
  const int64_t nb = cols / 32, nsb = cols / 256;
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
  // As DecodePanelRowK: chunk i's lanes 0-7 take sub-block 2i, 8-15 sub-block 2i + 1; mins once per half-block.
  const __m512i k4_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i halves = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i nibble_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  const __m512i low4 = _mm512_set1_epi8(15);
  for (int r = 0; r < kR; ++r) {
    __m512 acc[kT], min_acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = min_acc[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = w[r] + s * 144;
      PrefetchLines(blk + kStreamAhead, 144);
      uint64_t sc, m;
      UnpackK4Scales(blk + 4, &sc, &m);
      // The 8 sub-blocks' d*sc and -dmin*m in 256 bits (the same products as the panel's in 512).
      const __m512 dsc = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(F16(blk)), U8x8ToFloat(sc)));
      const __m512 mn = _mm512_permutexvar_ps(
          halves, _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(-F16(blk + 2)), U8x8ToFloat(m))));
      __m512i c[4];
      __m512 sv[4];
      for (int i = 0; i < 4; ++i) {
        const __m512i q =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * i)));
        c[i] = _mm512_and_si512(_mm512_srlv_epi16(q, nibble_shift), low4);
        sv[i] = _mm512_permutexvar_ps(_mm512_add_epi32(k4_lanes, _mm512_set1_epi32(2 * i)), dsc);
      }
      for (int t = 0; t < kT; ++t) {
        acc[t] = _mm512_add_ps(acc[t], SuperBlockDot(c, sv, acts + t * stride + 256 * s, dx[t] + 8 * s));
        min_acc[t] = _mm512_fmadd_ps(mn, _mm512_loadu_ps(dx[t] + nb + 16 * s), min_acc[t]);
      }
    }
    for (int t = 0; t < kT; ++t) out[r][t] = _mm512_reduce_add_ps(acc[t]) + SumMinLanes(min_acc[t]);
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
  const __m512i k6_lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  // The top 2 bits: qh (32 bytes, in both halves of a vector) shifted right by 0 / 2 for the low nibbles' 64
  // elements and 4 / 6 for the high nibbles'.
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  const __m512i low4 = _mm512_set1_epi8(15), low2 = _mm512_set1_epi8(3);
  for (int r = 0; r < kR; ++r) {
    __m512 acc[kT], min_acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = min_acc[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = w[r] + s * 210;
      PrefetchLines(blk + kStreamAhead, 210);
      const __m512 dsc = _mm512_mul_ps(
          _mm512_set1_ps(F16(blk + 208)),
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))));
      const __m512 mn = _mm512_mul_ps(dsc, _mm512_set1_ps(-32.0f));
      __m512i c[4];  // chunk i: elements [64i, 64i + 64)
      __m512 sv[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
        const __m512i top_lo = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_lo), low2), 4);
        const __m512i top_hi = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), low2), 4);
        c[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), top_lo);
        c[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), top_hi);
      }
      for (int i = 0; i < 4; ++i) {
        sv[i] = _mm512_permutexvar_ps(_mm512_add_epi32(k6_lanes, _mm512_set1_epi32(4 * i)), dsc);
      }
      for (int t = 0; t < kT; ++t) {
        acc[t] = _mm512_add_ps(acc[t], SuperBlockDot(c, sv, acts + t * stride + 256 * s, dx[t] + 8 * s));
        min_acc[t] = _mm512_fmadd_ps(mn, _mm512_loadu_ps(dx[t] + nb + 16 * s), min_acc[t]);
      }
    }
    for (int t = 0; t < kT; ++t) out[r][t] = _mm512_reduce_add_ps(acc[t]) + SumMinLanes(min_acc[t]);
  }
}

#endif  // TQ_Q8_512

#if TQ_Q8_X86 && !TQ_Q8_512
// AVX2 (laptops and older servers): the same two tiles in 256-bit vectors, 32 codes (one Q4_K sub-block, two
// Q6_K scales) per dot; activation codes in element order.

// The min terms of the panel's Tile (DecodePanelRow's mn, one per half-block) added lane-wise into acc after the
// products, 8 half-blocks at a time: Q4_K's -dmin*m_j twice per sub-block; Q6_K's -32*d*sc_k.
template <int kT>
void AddK4Mins(const uint8_t* row, int64_t nsb, const float* const* hs, __m256 acc[]) {
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* blk = row + s * 144;
    uint64_t sc, m;
    UnpackK4Scales(blk + 4, &sc, &m);
    const __m256 mn = _mm256_mul_ps(_mm256_set1_ps(-F16(blk + 2)), U8x8ToFloat(m));  // sub-blocks 0-7
    const __m256 lo = _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    const __m256 hi = _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
    for (int t = 0; t < kT; ++t) {
      acc[t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(hs[t] + 16 * s), acc[t]);
      acc[t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(hs[t] + 16 * s + 8), acc[t]);
    }
  }
}

template <int kT>
void AddQ6KMins(const uint8_t* row, int64_t nsb, const float* const* hs, __m256 acc[]) {
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* blk = row + s * 210;
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    const __m256 vm = _mm256_set1_ps(-32.0f * F16(blk + 208));
    const __m256 lo = _mm256_mul_ps(vm, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8)));
    const __m256 hi = _mm256_mul_ps(vm, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(s8, s8))));
    for (int t = 0; t < kT; ++t) {
      acc[t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(hs[t] + 16 * s), acc[t]);
      acc[t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(hs[t] + 16 * s + 8), acc[t]);
    }
  }
}

// Q4_K: sub-block 2h is the low nibbles of qs[32h, 32h + 32), 2h + 1 their high nibbles.
template <int kT>
void DirectTileQ4K(const uint8_t* const* w, int64_t cols, const uint8_t* acts, int64_t stride,
                   float out[kR][kTMax]) {
  const int64_t nb = cols / 32, nsb = cols / 256;
  const float* dx[kT];
  const float* hs[kT];  // half-block sums
  for (int t = 0; t < kT; ++t) {
    dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
    hs[t] = dx[t] + nb;
  }
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int r = 0; r < kR; ++r) {
    __m256 acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = w[r] + s * 144;
      PrefetchLines(blk + kStreamAhead, 144);
      uint64_t sc, m;
      UnpackK4Scales(blk + 4, &sc, &m);
      const __m256 dsc = _mm256_mul_ps(_mm256_set1_ps(F16(blk)), U8x8ToFloat(sc));
      for (int t = 0; t < kT; ++t) {
        const __m256 f = _mm256_mul_ps(dsc, _mm256_loadu_ps(dx[t] + 8 * s));  // per sub-block: d*sc_j*dx_j
        const uint8_t* x = acts + t * stride + 256 * s;
        for (int h = 0; h < 4; ++h) {
          const __m256i q = Load32(blk + 16 + 32 * h);
          const __m256 lo = _mm256_cvtepi32_ps(DotQuads(_mm256_and_si256(q, low4), Load32(x + 64 * h)));
          const __m256 hi =
              _mm256_cvtepi32_ps(DotQuads(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), Load32(x + 64 * h + 32)));
          acc[t] = _mm256_fmadd_ps(lo, _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * h)), acc[t]);
          acc[t] = _mm256_fmadd_ps(hi, _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * h + 1)), acc[t]);
        }
      }
    }
    AddK4Mins<kT>(w[r], nsb, hs, acc);
    for (int t = 0; t < kT; ++t) out[r][t] = HorizontalSum(acc[t]);
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
  const float* hs[kT];  // half-block sums
  for (int t = 0; t < kT; ++t) hs[t] = dx[t] + nb;
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3);
  for (int r = 0; r < kR; ++r) {
    __m256 acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
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
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DotQuads(c[k], Load32(x + 32 * k))), f, acc[t]);
        }
      }
    }
    AddQ6KMins<kT>(w[r], nsb, hs, acc);
    for (int t = 0; t < kT; ++t) out[r][t] = HorizontalSum(acc[t]);
  }
}
#endif  // TQ_Q8_X86 && !TQ_Q8_512
