// Panel tiles for the K-quants (Q4_K, Q5_K, Q6_K) on AVX-512 targets: the prefill product (Q4_K and Q6_K above
// DirectMaxBatch in matmul_q8.cc, Q5_K at any batch). Textually included by matmul_q8.cc inside its per-target
// namespace, once per Highway target, after the direct K tiles: no include guard, by design. Uses kR, kTMax, F16,
// DotQuads512, UnpackK4, UnpackQ6K, UnpackK4Scales and MinTerm from there, and SuperBlockDot from the direct K
// tiles (whose sums must equal these).
//
// Per weight row r and token t, a super-block's 4 chunks of 64 codes give (c . q per 4 codes, 16 int32 lanes)
// times (d * sc * dx per lane, dx the scale of the activation block of 32 the lane is in), chained in a register
// and added to the row's accumulator (SuperBlockDot, shared with the direct K tiles). The mins (Q4_K / Q5_K) and
// Q6_K's offset of 32 stay a float term per half-block, added once per row and token (MinTerm).
//
// Panel row (q8::KPanelRowBytes(cols) bytes, nb = cols / 32):
//   u8    c[cols]         codes in element order
//   f32   sv[cols / 4]    per 64 codes, 16 lanes of 4: d * sc of the sub-block each lane's codes fall in
//   f32   mn[2 nb]        min term per half-block: -dmin * m (Q4_K / Q5_K) or -32 * d * sc (Q6_K)

#if TQ_Q8_512

// Decodes one K-quant weight row into a panel row (layout above).
void DecodePanelRowK(WeightType type, const uint8_t* row, int64_t cols, uint8_t* panel) {
  const int64_t nsb = cols / kQkK;
  auto* sv = reinterpret_cast<float*>(panel + cols);
  float* mn = sv + cols / 4;
  // Lane maps from a super-block's scales to chunk i's 16 lanes. Q4_K / Q5_K: lanes 0-7 take sub-block 2i,
  // 8-15 sub-block 2i + 1. Q6_K: lanes 4k..4k+3 take scale 4i + k.
  const __m512i k4_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i k6_lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (int64_t s = 0; s < nsb; ++s) {
    float* out = sv + 64 * s;  // 4 chunks x 16 lanes
    if (type == WeightType::kQ6_K) {
      const uint8_t* b = row + 210 * s;
      UnpackQ6K(b, b + 128, panel + kQkK * s);
      const float d = F16(b + 208);
      const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
      const __m512 dsc = _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8)));
      for (int i = 0; i < 4; ++i) {
        const __m512i lanes = _mm512_add_epi32(k6_lanes, _mm512_set1_epi32(4 * i));
        _mm512_storeu_ps(out + 16 * i, _mm512_permutexvar_ps(lanes, dsc));
      }
      _mm512_storeu_ps(mn + 16 * s, _mm512_mul_ps(dsc, _mm512_set1_ps(-32.0f)));
    } else {
      const bool five = type == WeightType::kQ5_K;
      const uint8_t* b = row + (five ? 176 : 144) * s;
      UnpackK4(five ? b + 48 : b + 16, b + 16, five, panel + kQkK * s);
      uint64_t scales, mins;
      UnpackK4Scales(b + 4, &scales, &mins);
      const auto to_float = [](uint64_t v) {
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(v))));
      };
      const __m512 dsc = _mm512_mul_ps(_mm512_set1_ps(F16(b)), to_float(scales));  // lanes 0-7
      for (int i = 0; i < 4; ++i) {
        const __m512i lanes = _mm512_add_epi32(k4_lanes, _mm512_set1_epi32(2 * i));
        _mm512_storeu_ps(out + 16 * i, _mm512_permutexvar_ps(lanes, dsc));
      }
      // Each sub-block's min, once per half-block: lanes 0,0,1,1,...,7,7.
      const __m512 m = _mm512_mul_ps(_mm512_set1_ps(-F16(b + 2)), to_float(mins));
      const __m512i halves = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
      _mm512_storeu_ps(mn + 16 * s, _mm512_permutexvar_ps(halves, m));
    }
  }
}

// out[r][t] = panel row r . activation record t, for r < kR, t < kT.
template <int kT>
void TileK(const uint8_t* panel, int64_t cols, const uint8_t* acts, int64_t stride, float out[kR][kTMax]) {
  const int64_t nsb = cols / kQkK, nb = cols / 32, prow = KPanelRowBytes(cols);
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) dx[t] = reinterpret_cast<const float*>(acts + t * stride + cols);
  __m512 acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t s = 0; s < nsb; ++s) {
    for (int r = 0; r < kR; ++r) {
      const uint8_t* cs = panel + r * prow + kQkK * s;
      const float* svs = reinterpret_cast<const float*>(panel + r * prow + cols) + 64 * s;
      __m512i c[4];
      __m512 sv[4];
      for (int i = 0; i < 4; ++i) {
        c[i] = _mm512_loadu_si512(cs + 64 * i);
        sv[i] = _mm512_loadu_ps(svs + 16 * i);
      }
      for (int t = 0; t < kT; ++t) {
        acc[r][t] = _mm512_add_ps(acc[r][t], SuperBlockDot(c, sv, acts + t * stride + kQkK * s, dx[t] + 8 * s));
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    const float* mn = reinterpret_cast<const float*>(panel + r * prow + cols) + cols / 4;
    for (int t = 0; t < kT; ++t) out[r][t] = _mm512_reduce_add_ps(acc[r][t]) + MinTerm(mn, dx[t] + nb, 2 * nb);
  }
}

#endif  // TQ_Q8_512
