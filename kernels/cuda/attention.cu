// Paged attention on the GPU over mixed-format KV pages (see kv_kernels.h for the plan). One block of 128 threads
// per (query, page): thread t scores token t; the page's values are then accumulated one domain coordinate per
// thread (the tokens split between threads when the coordinates are fewer than 128).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kv_kernels.h"

namespace tq::gpu {
namespace {

using detail::GetCode;
using detail::GroupOf;
using detail::HalfBits;
using detail::kGroupTokens;
using detail::kPageTokens;

constexpr int kThreads = 128;
constexpr int kMaxDim = 256;

// Loops over the query heads of the group, unrolled to kMaxGroup so that per-head arrays stay in registers.
#define TQ_FOR_EACH_HEAD(g, G) _Pragma("unroll") for (int g = 0; g < kMaxGroup; ++g) if (g < (G))

// One thread block of the main kernel.
// A split: consecutive pages of one query with the same K and V codecs, or its tail rows.
struct Block {
  int32_t query = 0;
  int32_t page = -1;       // first page in the page table; -1: the query's tail rows
  int32_t num_pages = 1;   // pages of the split (1 for the tail)
  int32_t tokens = 0;      // tokens of the split the query attends to, >= 1 (pages in order, each up to its count)
  int32_t k_local = -1;    // the K codec's slot in the transformed queries; -1: plain (identity)
  int32_t v_local = -1;    // the V codec's accumulator slot in the merge; -1: plain
};

// The device copy of one query, and where its blocks are.
struct Query {
  GpuQuery q;
  int32_t first_block = 0;
  int32_t num_blocks = 0;
};

struct CallArgs {
  const GpuCodec* codecs = nullptr;
  const GpuPage* pages = nullptr;
  const Block* blocks = nullptr;
  const Query* queries = nullptr;
  const int32_t* k_codecs = nullptr;  // [nk] codec index of each K local slot
  const int32_t* v_codecs = nullptr;  // [nv]
  int nk = 0, nv = 0;
  int d = 0, group = 0;
  float scale = 0.0f;
  float* qdom = nullptr;      // [queries][nk][kDomainSlots][group][d]
  float* partials = nullptr;  // [blocks][PartialFloats]
};

__host__ __device__ inline int64_t PartialFloats(int group, int d) {
  return 2 * static_cast<int64_t>(group) + static_cast<int64_t>(kDomainSlots) * group * d;
}

// qdom[query][k][slot][g][i] = sum_j A_slot[i][j] q[g][j]. Grid (queries, nk); block kMaxDim threads.
__global__ void TransformQueries(CallArgs a) {
  const Query& qu = a.queries[blockIdx.x];
  const GpuCodec& c = a.codecs[a.k_codecs[blockIdx.y]];
  const int d = a.d;
  __shared__ float q[kMaxGroup * kMaxDim];
  for (int idx = threadIdx.x; idx < a.group * d; idx += blockDim.x) q[idx] = qu.q.q[idx];
  __syncthreads();
  float* dst = a.qdom + (static_cast<int64_t>(blockIdx.x) * a.nk + blockIdx.y) * kDomainSlots * a.group * d;
  for (int slot = 0; slot < kDomainSlots; ++slot) {
    const float* m = c.domain[slot];
    if (m == nullptr) continue;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      const float* row = m + static_cast<int64_t>(i) * d;
      for (int g = 0; g < a.group; ++g) {
        float acc = 0.0f;
        for (int j = 0; j < d; ++j) acc += row[j] * q[g * d + j];
        dst[(slot * a.group + g) * d + i] = acc;
      }
    }
  }
}

// acc[g] += row[g] * v for the query heads of the group; row: [kMaxGroup] floats, 16-byte aligned (one or two
// vector loads). Heads past G compute on whatever the row holds there and are never read.
__device__ __forceinline__ void AddScaled(const float* row, float v, float (&acc)[kMaxGroup], int G) {
  const float4 a4 = reinterpret_cast<const float4*>(row)[0];
  acc[0] = fmaf(a4.x, v, acc[0]);
  acc[1] = fmaf(a4.y, v, acc[1]);
  acc[2] = fmaf(a4.z, v, acc[2]);
  acc[3] = fmaf(a4.w, v, acc[3]);
  if (G > 4) {
    const float4 b4 = reinterpret_cast<const float4*>(row)[1];
    acc[4] = fmaf(b4.x, v, acc[4]);
    acc[5] = fmaf(b4.y, v, acc[5]);
    acc[6] = fmaf(b4.z, v, acc[6]);
    acc[7] = fmaf(b4.w, v, acc[7]);
  }
}

// acc[g] += sum_i q[g][first + i] * value_i over the token's K segment (norm and scale not applied).
// qt: the queries of the segment's domain, coordinate-major: qt[c * kMaxGroup + g].
__device__ inline void ScoreSegment(const uint8_t* group_bytes, const GpuSegment& seg, const float* table, int t,
                                    const float* qt, int G, float (&acc)[kMaxGroup]) {
  const float* q = qt + seg.first * kMaxGroup;
  if (seg.bits == 16) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(group_bytes);
#pragma unroll 8
    for (int i = 0; i < seg.dims; ++i) AddScaled(q + i * kMaxGroup, HalfBits(h[i * kGroupTokens + t]), acc, G);
    return;
  }
  const uint8_t* base = group_bytes + seg.group_offset;
  if (seg.bits == 3) {
    const uint8_t* hi_plane = base + kGroupTokens * (seg.dims / 4);
#pragma unroll 2
    for (int r = 0; r < seg.dims / 8; ++r) {
      const uint32_t lo = base[(2 * r) * kGroupTokens + t] | (base[(2 * r + 1) * kGroupTokens + t] << 8);
      const uint32_t hi = hi_plane[r * kGroupTokens + t];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t code = ((lo >> (2 * j)) & 3u) | (((hi >> j) & 1u) << 2);
        AddScaled(q + (r * 8 + j) * kMaxGroup, table[code], acc, G);
      }
    }
    return;
  }
  if (table == nullptr) {  // int8
#pragma unroll 8
    for (int i = 0; i < seg.dims; ++i) {
      AddScaled(q + i * kMaxGroup, static_cast<float>(static_cast<int8_t>(base[i * kGroupTokens + t])), acc, G);
    }
    return;
  }
  switch (seg.bits) {
    case 4:
#pragma unroll 8
      for (int r = 0; r < seg.dims / 2; ++r) {
        const uint32_t byte = base[r * kGroupTokens + t];
        AddScaled(q + (2 * r) * kMaxGroup, table[byte & 15u], acc, G);
        AddScaled(q + (2 * r + 1) * kMaxGroup, table[byte >> 4], acc, G);
      }
      return;
    default: {
      const int w = seg.bits;
      const int per_row = 8 / w;
      const uint32_t mask = (1u << w) - 1;
      for (int r = 0; r < seg.dims / per_row; ++r) {
        const uint32_t byte = base[r * kGroupTokens + t];
        for (int j = 0; j < per_row; ++j) {
          AddScaled(q + (r * per_row + j) * kMaxGroup, table[(byte >> (j * w)) & mask], acc, G);
        }
      }
    }
  }
}

// Sum (or max) over the 128 threads of the block for every query head: warp shuffles, then the four warps
// through `scratch` ([4][kMaxGroup]). Every thread gets the result. Contains __syncthreads.
template <bool kMax>
__device__ inline void BlockReduce(float (&v)[kMaxGroup], float* scratch, int G) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  TQ_FOR_EACH_HEAD(g, G) {
    float x = v[g];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const float y = __shfl_xor_sync(0xffffffffu, x, off);
      x = kMax ? fmaxf(x, y) : x + y;
    }
    if (lane == 0) scratch[warp * kMaxGroup + g] = x;
  }
  __syncthreads();
  TQ_FOR_EACH_HEAD(g, G) {
    const float* w = scratch + g;
    v[g] = kMax ? fmaxf(fmaxf(w[0], w[kMaxGroup]), fmaxf(w[2 * kMaxGroup], w[3 * kMaxGroup]))
                : (w[0] + w[kMaxGroup]) + (w[2 * kMaxGroup] + w[3 * kMaxGroup]);
  }
  __syncthreads();  // scratch may be reused
}

// One split per block: for each page, thread t scores token t, the running softmax (m, l) is updated, and the
// values are accumulated one domain coordinate per thread (tokens split between `parts` threads when there are
// fewer coordinates than threads), rescaled as the running maximum grows.
__global__ void __launch_bounds__(kThreads, 4) SplitKernel(CallArgs a) {
  const Block blk = a.blocks[blockIdx.x];
  const Query& qu = a.queries[blk.query];
  const int d = a.d, G = a.group, tid = threadIdx.x;
  const bool tail = blk.page < 0;
  const GpuPage first = tail ? GpuPage{} : a.pages[blk.page];
  // Queries coordinate-major per domain slot: qt[(slot * kMaxDim + c) * kMaxGroup + g].
  __shared__ __align__(16) float qt[kDomainSlots * kMaxDim * kMaxGroup];
  __shared__ float tables[2 * kMaxSegments * 256];  // [K/V][segment][code]
  // Softmax weights times the token's V norm (or 1), per V segment: pn[(s * kPageTokens + t) * kMaxGroup + g].
  __shared__ __align__(16) float pn[kMaxSegments * kPageTokens * kMaxGroup];
  __shared__ float red[kPageTokens * kMaxGroup];
  __shared__ float scratch[4 * kMaxGroup];

  const GpuCodec* kc = tail ? nullptr : &a.codecs[first.k_codec];
  const GpuCodec* vc = tail ? nullptr : &a.codecs[first.v_codec];
  if (blk.k_local < 0) {
    for (int idx = tid; idx < G * d; idx += kThreads) qt[(idx % d) * kMaxGroup + idx / d] = qu.q.q[idx];
  } else {
    const float* src = a.qdom + (static_cast<int64_t>(blk.query) * a.nk + blk.k_local) * kDomainSlots * G * d;
    for (int idx = tid; idx < kDomainSlots * G * d; idx += kThreads) {
      const int slot = idx / (G * d), rem = idx % (G * d);
      qt[(slot * kMaxDim + rem % d) * kMaxGroup + rem / d] = src[idx];
    }
  }
  for (int which = 0; which < 2 && !tail; ++which) {
    const GpuCodec& c = which == 0 ? *kc : *vc;
    if (c.kind != GpuKind::kTq) continue;
    for (int s = 0; s < c.num_segments; ++s) {
      const int entries = 1 << c.seg[s].bits;
      for (int e = tid; e < entries; e += kThreads) {
        tables[(which * kMaxSegments + s) * 256 + e] = c.tables[c.seg[s].table_offset + e];
      }
    }
  }
  __syncthreads();

  // This thread's value coordinates: virtual coordinate vi over the concatenated V segments, in `rounds` rounds.
  const int nseg = tail ? 1 : vc->num_segments;
  const int total = tail ? d : vc->total_dims;
  const int parts = total >= kThreads ? 1 : kThreads / total;
  const int per_part = kThreads / parts;  // threads per run of tokens
  const int span = kPageTokens / parts;
  const int my_part = tid / per_part;
  const int rounds = (total + per_part - 1) / per_part;  // 1 or 2 (total <= 2 * kMaxDim = 4 * kThreads)
  constexpr int kMaxRounds = 4;
  float acc[kMaxRounds][kMaxGroup];
#pragma unroll
  for (int r = 0; r < kMaxRounds; ++r) TQ_FOR_EACH_HEAD(g, kMaxGroup) acc[r][g] = 0.0f;
  float m_run[kMaxGroup], l_run[kMaxGroup];
  TQ_FOR_EACH_HEAD(g, kMaxGroup) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.0f;
  }
  int left = blk.tokens;
  for (int pi = 0; pi < blk.num_pages && left > 0; ++pi) {
    const GpuPage page = tail ? GpuPage{} : a.pages[blk.page + pi];
    const int n = tail ? left : min(left, page.num_tokens);
    left -= tail ? left : page.num_tokens;

    // Scores: thread t <-> token t.
    float score[kMaxGroup];
    TQ_FOR_EACH_HEAD(g, kMaxGroup) score[g] = -INFINITY;
    if (tid < n) {
      float sacc[kMaxGroup];
      TQ_FOR_EACH_HEAD(g, kMaxGroup) sacc[g] = 0.0f;
      if (tail) {
        const float* k = qu.q.tail_k + static_cast<int64_t>(tid) * d;
        for (int i = 0; i < d; ++i) AddScaled(qt + i * kMaxGroup, k[i], sacc, G);
      } else {
        const uint8_t* grp = GroupOf(page.k, *kc, tid);
        const int t = tid % kGroupTokens;
        if (kc->kind == GpuKind::kTq) {
          for (int s = 0; s < kc->num_segments; ++s) {
            const GpuSegment& seg = kc->seg[s];
            float part[kMaxGroup];
            TQ_FOR_EACH_HEAD(g, kMaxGroup) part[g] = 0.0f;
            ScoreSegment(grp, seg, &tables[s * 256], t, qt + seg.slot * kMaxDim * kMaxGroup, G, part);
            const float norm = HalfBits(detail::NormsOf(page.k, *kc, seg.norm_slot)[tid]);
            TQ_FOR_EACH_HEAD(g, G) sacc[g] = fmaf(norm, part[g], sacc[g]);
          }
        } else {
          ScoreSegment(grp, kc->seg[0], nullptr, t, qt, G, sacc);
          if (kc->kind == GpuKind::kInt8) {
            float k_scale;
            memcpy(&k_scale, page.k + detail::kHeaderScaleOffset, 4);
            TQ_FOR_EACH_HEAD(g, G) sacc[g] *= k_scale;
          }
        }
      }
      TQ_FOR_EACH_HEAD(g, G) score[g] = sacc[g] * a.scale;
    }

    // Running softmax: page maximum, rescale factor, weights, their sum.
    float m_new[kMaxGroup];
    TQ_FOR_EACH_HEAD(g, kMaxGroup) m_new[g] = score[g];
    BlockReduce<true>(m_new, scratch, G);
    float alpha[kMaxGroup], p[kMaxGroup];
    TQ_FOR_EACH_HEAD(g, kMaxGroup) {
      alpha[g] = 1.0f;
      p[g] = 0.0f;
    }
    TQ_FOR_EACH_HEAD(g, G) {
      m_new[g] = fmaxf(m_new[g], m_run[g]);
      alpha[g] = expf(m_run[g] - m_new[g]);  // 0 on the first page (m_run = -inf)
      p[g] = tid < n ? expf(score[g] - m_new[g]) : 0.0f;
      m_run[g] = m_new[g];
    }
    for (int s = 0; s < nseg; ++s) {
      float norm = 1.0f;
      if (!tail && vc->kind == GpuKind::kTq && tid < n) {
        norm = HalfBits(detail::NormsOf(page.v, *vc, vc->seg[s].norm_slot)[tid]);
      }
      TQ_FOR_EACH_HEAD(g, kMaxGroup) pn[(s * kPageTokens + tid) * kMaxGroup + g] = p[g] * norm;
    }
    BlockReduce<false>(p, scratch, G);  // also the barrier before pn is read
    TQ_FOR_EACH_HEAD(g, G) l_run[g] = l_run[g] * alpha[g] + p[g];

    float v_scale = 1.0f;
    if (!tail && vc->kind == GpuKind::kInt8) memcpy(&v_scale, page.v + detail::kHeaderScaleOffset, 4);
    const int t0 = my_part * span, t1 = min(n, t0 + span);
#pragma unroll
    for (int r = 0; r < kMaxRounds; ++r) {
      if (r >= rounds) break;
      const int vi = r * per_part + tid % per_part;
      TQ_FOR_EACH_HEAD(g, G) acc[r][g] *= alpha[g];
      if (vi >= total || my_part >= parts) continue;
      int s = 0, i = vi;
      if (nseg == 2 && vi >= vc->seg[0].dims) {
        s = 1;
        i = vi - vc->seg[0].dims;
      }
      const float* w = pn + s * kPageTokens * kMaxGroup;
      float va[kMaxGroup];
      TQ_FOR_EACH_HEAD(g, kMaxGroup) va[g] = 0.0f;
      if (tail) {
        for (int t = t0; t < t1; ++t) {
          AddScaled(w + t * kMaxGroup, qu.q.tail_v[static_cast<int64_t>(t) * d + i], va, G);
        }
      } else if (vc->kind == GpuKind::kF16) {
        // Four tokens per 8-byte load; tokens past n have zero weights (and zero codes), so whole spans are read.
        const uint8_t* col = page.v + vc->codes_offset + i * 2 * kGroupTokens;
#pragma unroll 4
        for (int t = t0; t < t0 + span; t += 4) {
          const uint2 h4 =
              *reinterpret_cast<const uint2*>(col + (t / kGroupTokens) * vc->group_bytes + 2 * (t % kGroupTokens));
          AddScaled(w + t * kMaxGroup, HalfBits(h4.x & 0xffffu), va, G);
          AddScaled(w + (t + 1) * kMaxGroup, HalfBits(h4.x >> 16), va, G);
          AddScaled(w + (t + 2) * kMaxGroup, HalfBits(h4.y & 0xffffu), va, G);
          AddScaled(w + (t + 3) * kMaxGroup, HalfBits(h4.y >> 16), va, G);
        }
      } else if (vc->kind == GpuKind::kInt8) {
        const uint8_t* col = page.v + vc->codes_offset + vc->seg[0].group_offset + i * kGroupTokens;
#pragma unroll 4
        for (int t = t0; t < t0 + span; t += 4) {
          const uint32_t b4 = *reinterpret_cast<const uint32_t*>(col + (t / kGroupTokens) * vc->group_bytes +
                                                                 t % kGroupTokens);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            AddScaled(w + (t + j) * kMaxGroup, static_cast<float>(static_cast<int8_t>((b4 >> (8 * j)) & 0xffu)), va, G);
          }
        }
        TQ_FOR_EACH_HEAD(g, G) va[g] *= v_scale;
      } else {
        const GpuSegment& seg = vc->seg[s];
        const float* table = &tables[(kMaxSegments + s) * 256];
        if (seg.bits == 4) {
          const uint8_t* col = page.v + vc->codes_offset + seg.group_offset + (i / 2) * kGroupTokens;
          const int shift = (i % 2) * 4;
#pragma unroll 4
          for (int t = t0; t < t0 + span; t += 4) {
            const uint32_t b4 = *reinterpret_cast<const uint32_t*>(col + (t / kGroupTokens) * vc->group_bytes +
                                                                   t % kGroupTokens) >> shift;
#pragma unroll
            for (int j = 0; j < 4; ++j) AddScaled(w + (t + j) * kMaxGroup, table[(b4 >> (8 * j)) & 15u], va, G);
          }
        } else {
          for (int t = t0; t < t1; ++t) {
            AddScaled(w + t * kMaxGroup, table[GetCode(GroupOf(page.v, *vc, t), seg, i, t % kGroupTokens)], va, G);
          }
        }
      }
      TQ_FOR_EACH_HEAD(g, G) acc[r][g] += va[g];
    }
    __syncthreads();  // pn is rewritten by the next page
  }

  // The split's partial: m, l, and the accumulators summed over the token parts.
  float* part = a.partials + PartialFloats(G, d) * blockIdx.x;
  if (tid == 0) {
    TQ_FOR_EACH_HEAD(g, G) {
      part[g] = m_run[g];
      part[G + g] = l_run[g];
    }
  }
  float* acc_out = part + 2 * G;
#pragma unroll
  for (int r = 0; r < kMaxRounds; ++r) {
    if (r >= rounds) break;
    TQ_FOR_EACH_HEAD(g, G) red[tid * kMaxGroup + g] = acc[r][g];
    __syncthreads();
    const int vi = r * per_part + tid % per_part;
    if (vi < total && my_part == 0) {
      int s = 0, i = vi;
      if (nseg == 2 && vi >= vc->seg[0].dims) {
        s = 1;
        i = vi - vc->seg[0].dims;
      }
      const int slot = tail ? 0 : vc->seg[s].slot;
      const int c = (tail ? 0 : vc->seg[s].first) + i;
      TQ_FOR_EACH_HEAD(g, G) {
        float sum = 0.0f;
        for (int q = 0; q < parts; ++q) sum += red[(tid + q * per_part) * kMaxGroup + g];
        acc_out[(slot * G + g) * d + c] = sum;
      }
    }
    __syncthreads();
  }
}

// out[g] = merge of the query's splits, mapped back from each domain. Grid (queries, group); block kMergeThreads:
// the splits' maxima and weights in parallel, then coordinate c summed by kMergeThreads / d threads over strided
// splits, per V codec and domain slot, and the slices added.
constexpr int kMergeThreads = 256;
constexpr int kMaxAccum = (1 + kMaxCallCodecs) * kDomainSlots;

__global__ void __launch_bounds__(kMergeThreads) MergeKernel(CallArgs a) {
  const Query& qu = a.queries[blockIdx.x];
  const int g = blockIdx.y, d = a.d, G = a.group, tid = threadIdx.x;
  const int nb = qu.num_blocks;
  const int64_t stride = PartialFloats(G, d);
  const float* base = a.partials + static_cast<int64_t>(qu.first_block) * stride;
  __shared__ float red[kMergeThreads];
  __shared__ float accum[kMaxAccum * kMaxDim];
  __shared__ float slice_sums[kMaxAccum * kMergeThreads];
  float* out = qu.q.out + static_cast<int64_t>(g) * d;

  // M = max over splits of m; L = sum of l * exp(m - M).
  float m = -INFINITY;
  for (int b = tid; b < nb; b += kMergeThreads) m = fmaxf(m, base[b * stride + g]);
  red[tid] = m;
  __syncthreads();
  for (int w = kMergeThreads / 2; w > 0; w /= 2) {
    if (tid < w) red[tid] = fmaxf(red[tid], red[tid + w]);
    __syncthreads();
  }
  const float M = red[0];
  __syncthreads();
  float l = 0.0f;
  for (int b = tid; b < nb; b += kMergeThreads) l += base[b * stride + G + g] * expf(base[b * stride + g] - M);
  red[tid] = l;
  __syncthreads();
  for (int w = kMergeThreads / 2; w > 0; w /= 2) {
    if (tid < w) red[tid] += red[tid + w];
    __syncthreads();
  }
  const float L = red[0];
  // Coordinate c, slice `slice` of the splits (d <= kMergeThreads): per-thread sums per (V codec, slot), then
  // the slices added in a fixed order (deterministic, unlike atomics).
  const int slices = kMergeThreads / d;
  const int c_mine = tid % d, slice = tid / d;
  float sums[kMaxAccum];
#pragma unroll
  for (int k = 0; k < kMaxAccum; ++k) sums[k] = 0.0f;
  if (slice < slices) {
    for (int b = slice; b < nb; b += slices) {
      const float* part = base + b * stride;
      const float w = expf(part[g] - M);
      const Block& blk = a.blocks[qu.first_block + b];
      const int k0 = (blk.v_local + 1) * kDomainSlots;
      const float v0 = w * part[2 * G + g * d + c_mine];
      const bool sketch = blk.v_local >= 0 && a.codecs[a.v_codecs[blk.v_local]].domain[1] != nullptr;
      const float v1 = sketch ? w * part[2 * G + (G + g) * d + c_mine] : 0.0f;
#pragma unroll
      for (int k = 0; k < kMaxAccum; k += kDomainSlots) {
        if (k == k0) {
          sums[k] += v0;
          sums[k + 1] += v1;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxAccum; ++k) slice_sums[k * kMergeThreads + tid] = sums[k];
  __syncthreads();
  for (int idx = tid; idx < kMaxAccum * d; idx += kMergeThreads) {
    const int k = idx / d, c = idx % d;
    float sum = 0.0f;
    for (int sl = 0; sl < slices; ++sl) sum += slice_sums[k * kMergeThreads + sl * d + c];
    accum[idx] = sum;
  }
  __syncthreads();
  for (int c = tid; c < d; c += kMergeThreads) {
    float o = accum[c];  // plain domain
    for (int v = 0; v < a.nv; ++v) {
      const GpuCodec& codec = a.codecs[a.v_codecs[v]];
      for (int slot = 0; slot < kDomainSlots; ++slot) {
        const float* m_s = codec.domain[slot];
        if (m_s == nullptr) continue;
        const float* acc = accum + ((v + 1) * kDomainSlots + slot) * d;
        float sum = 0.0f;
        for (int j = 0; j < d; ++j) sum += m_s[static_cast<int64_t>(j) * d + c] * acc[j];
        o += sum;
      }
    }
    out[c] = L > 0.0f ? o / L : 0.0f;
  }
}

template <typename T>
size_t AlignUp(size_t off) {
  return (off + alignof(T) - 1) / alignof(T) * alignof(T);
}

}  // namespace

Status PagedAttention::Run(const DeviceCodecs& codecs, std::span<const GpuPage> pages,
                           std::span<const GpuQuery> queries, int head_dim, int group, float scale,
                           cudaStream_t stream) {
  const int d = head_dim;
  if (d < 16 || d > kMaxDim || d % 16 != 0) return InvalidArgumentError("GPU attention: unsupported head_dim");
  if (group < 1 || group > kMaxGroup) {
    return InvalidArgumentError("GPU attention: a group of " + std::to_string(group) + " query heads, at most " +
                                std::to_string(kMaxGroup));
  }
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(d));
  // The plan.
  std::vector<int32_t> k_codecs, v_codecs;
  auto local = [](std::vector<int32_t>& list, int codec) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i] == codec) return static_cast<int32_t>(i);
    }
    list.push_back(codec);
    return static_cast<int32_t>(list.size() - 1);
  };
  // Pages per split: enough splits for about four blocks per multiprocessor over the whole call.
  for (const GpuQuery& q : queries) {  // the arguments first: bad calls fail before any device work
    if (q.first_page < 0 || q.num_pages < 0 || static_cast<size_t>(q.first_page) + q.num_pages > pages.size()) {
      return InvalidArgumentError("GPU attention: a query's pages are outside the page table");
    }
    if (q.tail_tokens < 0 || q.tail_tokens > kPageTokens || (q.tail_tokens > 0 && (!q.tail_k || !q.tail_v))) {
      return InvalidArgumentError("GPU attention: bad tail rows");
    }
    for (int pi = q.first_page; pi < q.first_page + q.num_pages; ++pi) {
      const GpuPage& pg = pages[pi];
      if (pg.k_codec < 0 || pg.k_codec >= codecs.size() || pg.v_codec < 0 || pg.v_codec >= codecs.size()) {
        return InvalidArgumentError("GPU attention: unknown codec on a page");
      }
    }
  }
  if (queries.empty()) return Status::Ok();
  if (sms_ == 0) {
    int device = 0;
    TQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    TQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
  }
  int64_t attended_pages = 0;
  for (const GpuQuery& q : queries) {
    attended_pages += std::min<int64_t>(std::max(q.num_pages, 0), (std::max(q.limit, 0) + kPageTokens - 1) / kPageTokens);
  }
  const int64_t target_blocks = 4 * static_cast<int64_t>(std::max(sms_, 1));
  const int per_split = static_cast<int>(std::clamp<int64_t>((attended_pages + target_blocks - 1) / target_blocks, 1, 64));

  std::vector<Block> blocks;
  std::vector<Query> qs(queries.size());
  for (size_t qi = 0; qi < queries.size(); ++qi) {
    const GpuQuery& q = queries[qi];
    if (q.first_page < 0 || q.num_pages < 0 || static_cast<size_t>(q.first_page) + q.num_pages > pages.size()) {
      return InvalidArgumentError("GPU attention: a query's pages are outside the page table");
    }
    if (q.tail_tokens < 0 || q.tail_tokens > kPageTokens || (q.tail_tokens > 0 && (!q.tail_k || !q.tail_v))) {
      return InvalidArgumentError("GPU attention: bad tail rows");
    }
    qs[qi].q = q;
    qs[qi].first_block = static_cast<int32_t>(blocks.size());
    int64_t pos = 0;
    Block* open = nullptr;  // the split being filled
    for (int pi = q.first_page; pi < q.first_page + q.num_pages; ++pi) {
      const GpuPage& pg = pages[pi];
      if (pg.k_codec < 0 || pg.k_codec >= codecs.size() || pg.v_codec < 0 || pg.v_codec >= codecs.size()) {
        return InvalidArgumentError("GPU attention: unknown codec on a page");
      }
      if (codecs.desc(pg.k_codec).head_dim != d || codecs.desc(pg.v_codec).head_dim != d) {
        return InvalidArgumentError("GPU attention: a page's head_dim differs from the call's");
      }
      if (pg.num_tokens < 0 || pg.num_tokens > kPageTokens) return InvalidArgumentError("GPU attention: bad page");
      const int n = static_cast<int>(std::min<int64_t>(pg.num_tokens, q.limit - pos));
      pos += pg.num_tokens;
      if (n <= 0) break;
      const GpuPage& prev = pages[open != nullptr ? open->page : pi];
      if (open == nullptr || open->num_pages == per_split || prev.k_codec != pg.k_codec ||
          prev.v_codec != pg.v_codec || pages[pi - 1].num_tokens != kPageTokens) {
        Block b;
        b.query = static_cast<int32_t>(qi);
        b.page = pi;
        b.num_pages = 0;
        b.tokens = 0;
        const GpuCodec& kc = codecs.desc(pg.k_codec);
        const GpuCodec& vc = codecs.desc(pg.v_codec);
        b.k_local = kc.domain[0] != nullptr ? local(k_codecs, pg.k_codec) : -1;
        b.v_local = vc.domain[0] != nullptr ? local(v_codecs, pg.v_codec) : -1;
        blocks.push_back(b);
        open = &blocks.back();
      }
      open->num_pages += 1;
      open->tokens += n;
    }
    const int n_tail = static_cast<int>(std::min<int64_t>(q.tail_tokens, q.limit - pos));
    if (n_tail > 0) blocks.push_back(Block{static_cast<int32_t>(qi), -1, 1, n_tail, -1, -1});
    qs[qi].num_blocks = static_cast<int32_t>(blocks.size()) - qs[qi].first_block;
  }
  if (v_codecs.size() > static_cast<size_t>(kMaxCallCodecs)) {
    return InvalidArgumentError("GPU attention: more than " + std::to_string(kMaxCallCodecs) +
                                " rotated V formats in one call");
  }
  last_blocks_ = static_cast<int64_t>(blocks.size());
  if (queries.empty()) return Status::Ok();

  // One upload: pages, blocks, queries, codec lists.
  size_t off = 0;
  const size_t pages_off = off;
  off = AlignUp<Block>(off + sizeof(GpuPage) * pages.size());
  const size_t blocks_off = off;
  off = AlignUp<Query>(off + sizeof(Block) * blocks.size());
  const size_t queries_off = off;
  off = AlignUp<int32_t>(off + sizeof(Query) * qs.size());
  const size_t k_off = off;
  off += sizeof(int32_t) * (k_codecs.size() + 1);
  const size_t v_off = off;
  off += sizeof(int32_t) * (v_codecs.size() + 1);
  // The plan in host memory; uploaded only when it differs from the last call's (a decode step's attention per
  // layer repeats it until a page fills).
  plan_bytes_.assign(off, 0);
  uint8_t* h = plan_bytes_.data();
  if (!pages.empty()) std::memcpy(h + pages_off, pages.data(), sizeof(GpuPage) * pages.size());
  if (!blocks.empty()) std::memcpy(h + blocks_off, blocks.data(), sizeof(Block) * blocks.size());
  std::memcpy(h + queries_off, qs.data(), sizeof(Query) * qs.size());
  if (!k_codecs.empty()) std::memcpy(h + k_off, k_codecs.data(), sizeof(int32_t) * k_codecs.size());
  if (!v_codecs.empty()) std::memcpy(h + v_off, v_codecs.data(), sizeof(int32_t) * v_codecs.size());
  if (plan_bytes_ != uploaded_bytes_ || plan_.get() == nullptr) {
    if (pending_) {
      TQ_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(uploaded_.get()));
      pending_ = false;
    }
    if (uploaded_.get() == nullptr) {
      TQ_ASSIGN_OR_RETURN(uploaded_, Event::Create());
    }
    TQ_RETURN_IF_ERROR(host_plan_.Reserve(off));
    TQ_RETURN_IF_ERROR(plan_.Reserve(off));
    std::memcpy(host_plan_.get(), h, off);
    TQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(plan_.get(), host_plan_.get(), off, cudaMemcpyHostToDevice, stream));
    TQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(uploaded_.get(), stream));
    pending_ = true;
    uploaded_bytes_.swap(plan_bytes_);
  }

  const int nk = static_cast<int>(k_codecs.size());
  TQ_RETURN_IF_ERROR(qdom_.Reserve(sizeof(float) * std::max<size_t>(1, qs.size() * nk * kDomainSlots * group * d)));
  TQ_RETURN_IF_ERROR(partials_.Reserve(sizeof(float) * std::max<int64_t>(1, last_blocks_ * PartialFloats(group, d))));
  CallArgs args;
  uint8_t* dev = plan_.as<uint8_t>();
  args.codecs = codecs.device_table();
  args.pages = reinterpret_cast<const GpuPage*>(dev + pages_off);
  args.blocks = reinterpret_cast<const Block*>(dev + blocks_off);
  args.queries = reinterpret_cast<const Query*>(dev + queries_off);
  args.k_codecs = reinterpret_cast<const int32_t*>(dev + k_off);
  args.v_codecs = reinterpret_cast<const int32_t*>(dev + v_off);
  args.nk = nk;
  args.nv = static_cast<int>(v_codecs.size());
  args.d = d;
  args.group = group;
  args.scale = scale;
  args.qdom = qdom_.as<float>();
  args.partials = partials_.as<float>();
  if (nk > 0) {
    TransformQueries<<<dim3(static_cast<unsigned>(qs.size()), nk), kMaxDim, 0, stream>>>(args);
    TQ_CUDA_RETURN_IF_LAUNCH_FAILED("GPU attention: query transform");
  }
  if (last_blocks_ > 0) {
    SplitKernel<<<static_cast<unsigned>(last_blocks_), kThreads, 0, stream>>>(args);
    TQ_CUDA_RETURN_IF_LAUNCH_FAILED("GPU attention: pages");
  }
  MergeKernel<<<dim3(static_cast<unsigned>(qs.size()), group), kMergeThreads, 0, stream>>>(args);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("GPU attention: merge");
  return Status::Ok();
}

}  // namespace tq::gpu
