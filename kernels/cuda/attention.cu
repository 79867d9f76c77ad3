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
struct Block {
  int32_t query = 0;
  int32_t page = -1;     // into the page table; -1: the query's tail rows
  int32_t tokens = 0;    // tokens of this page the query attends to, >= 1
  int32_t k_local = -1;  // the K codec's slot in the transformed queries; -1: plain (identity)
  int32_t v_local = -1;  // the V codec's accumulator slot in the merge; -1: plain
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
    for (int i = 0; i < seg.dims; ++i) AddScaled(q + i * kMaxGroup, HalfBits(h[i * kGroupTokens + t]), acc, G);
    return;
  }
  const uint8_t* base = group_bytes + seg.group_offset;
  if (seg.bits == 3) {
    const uint8_t* hi_plane = base + kGroupTokens * (seg.dims / 4);
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
    for (int i = 0; i < seg.dims; ++i) {
      AddScaled(q + i * kMaxGroup, static_cast<float>(static_cast<int8_t>(base[i * kGroupTokens + t])), acc, G);
    }
    return;
  }
  switch (seg.bits) {
    case 4:
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

__global__ void __launch_bounds__(kThreads) PageKernel(CallArgs a) {
  const Block blk = a.blocks[blockIdx.x];
  const Query& qu = a.queries[blk.query];
  const int d = a.d, G = a.group, tid = threadIdx.x, n = blk.tokens;
  const bool tail = blk.page < 0;
  const GpuPage page = tail ? GpuPage{} : a.pages[blk.page];
  // Queries coordinate-major per domain slot: qt[(slot * kMaxDim + c) * kMaxGroup + g].
  __shared__ __align__(16) float qt[kDomainSlots * kMaxDim * kMaxGroup];
  __shared__ float tables[2 * kMaxSegments * 256];  // [K/V][segment][code]
  // Softmax weights times the token's V norm (or 1), per V segment: pn[(s * kPageTokens + t) * kMaxGroup + g].
  __shared__ __align__(16) float pn[kMaxSegments * kPageTokens * kMaxGroup];
  __shared__ float red[kPageTokens * kMaxGroup];
  __shared__ float stat[kMaxGroup];

  const GpuCodec* kc = tail ? nullptr : &a.codecs[page.k_codec];
  const GpuCodec* vc = tail ? nullptr : &a.codecs[page.v_codec];
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

  // Scores: thread t <-> token t.
  float score[kMaxGroup];
  TQ_FOR_EACH_HEAD(g, kMaxGroup) score[g] = -INFINITY;
  if (tid < n) {
    float acc[kMaxGroup];
    TQ_FOR_EACH_HEAD(g, kMaxGroup) acc[g] = 0.0f;
    if (tail) {
      const float* k = qu.q.tail_k + static_cast<int64_t>(tid) * d;
      for (int i = 0; i < d; ++i) AddScaled(qt + i * kMaxGroup, k[i], acc, G);
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
          TQ_FOR_EACH_HEAD(g, G) acc[g] = fmaf(norm, part[g], acc[g]);
        }
      } else {
        ScoreSegment(grp, kc->seg[0], nullptr, t, qt, G, acc);
        if (kc->kind == GpuKind::kInt8) {
          float k_scale;
          memcpy(&k_scale, page.k + detail::kHeaderScaleOffset, 4);
          TQ_FOR_EACH_HEAD(g, G) acc[g] *= k_scale;
        }
      }
    }
    TQ_FOR_EACH_HEAD(g, G) score[g] = acc[g] * a.scale;
  }

  // Page-local softmax: m = max score, p = exp(score - m), l = sum p (per query head).
  float* part = a.partials + PartialFloats(G, d) * blockIdx.x;
  TQ_FOR_EACH_HEAD(g, G) red[g * kPageTokens + tid] = score[g];
  __syncthreads();
  if (tid < G) {
    float m = -INFINITY;
    for (int t = 0; t < n; ++t) m = fmaxf(m, red[tid * kPageTokens + t]);
    stat[tid] = m;
  }
  __syncthreads();
  float p[kMaxGroup];
  TQ_FOR_EACH_HEAD(g, kMaxGroup) p[g] = 0.0f;
  TQ_FOR_EACH_HEAD(g, G) p[g] = tid < n ? expf(score[g] - stat[g]) : 0.0f;
  __syncthreads();  // every thread has read red (the max) before it is reused for the sums
  TQ_FOR_EACH_HEAD(g, G) red[g * kPageTokens + tid] = p[g];
  // V norms folded into the weights.
  const int nseg = tail ? 1 : vc->num_segments;
  for (int s = 0; s < nseg; ++s) {
    float norm = 1.0f;
    if (!tail && vc->kind == GpuKind::kTq && tid < n) {
      norm = HalfBits(detail::NormsOf(page.v, *vc, vc->seg[s].norm_slot)[tid]);
    }
    TQ_FOR_EACH_HEAD(g, kMaxGroup) pn[(s * kPageTokens + tid) * kMaxGroup + g] = p[g] * norm;
  }
  __syncthreads();
  if (tid < G) {
    float l = 0.0f;
    for (int t = 0; t < n; ++t) l += red[tid * kPageTokens + t];
    part[tid] = stat[tid];
    part[G + tid] = l;
  }
  float v_scale = 1.0f;
  if (!tail && vc->kind == GpuKind::kInt8) memcpy(&v_scale, page.v + detail::kHeaderScaleOffset, 4);
  __syncthreads();  // red is reused below

  // Values: virtual coordinate vi over the concatenated segments; `parts` threads share a coordinate when the
  // coordinates are fewer than the threads, each taking a run of tokens.
  const int total = tail ? d : vc->total_dims;
  const int parts = total >= kThreads ? 1 : kThreads / total;
  const int per_part = kThreads / parts;  // threads per run of tokens
  const int span = kPageTokens / parts;
  float* acc_out = part + 2 * G;
  for (int base_vi = 0; base_vi < total; base_vi += per_part) {
    const int vi = base_vi + tid % per_part;
    const int my_part = tid / per_part;
    float acc[kMaxGroup];
    TQ_FOR_EACH_HEAD(g, kMaxGroup) acc[g] = 0.0f;
    const bool active = vi < total && my_part < parts;
    int s = 0, i = vi;
    if (active && nseg == 2 && vi >= vc->seg[0].dims) {
      s = 1;
      i = vi - vc->seg[0].dims;
    }
    if (active) {
      const int t0 = my_part * span, t1 = min(n, t0 + span);
      const float* w = pn + s * kPageTokens * kMaxGroup;
      if (tail) {
        for (int t = t0; t < t1; ++t) {
          AddScaled(w + t * kMaxGroup, qu.q.tail_v[static_cast<int64_t>(t) * d + i], acc, G);
        }
      } else if (vc->kind == GpuKind::kF16) {
        for (int t = t0; t < t1; ++t) {
          const uint16_t* h = reinterpret_cast<const uint16_t*>(GroupOf(page.v, *vc, t));
          AddScaled(w + t * kMaxGroup, HalfBits(h[i * kGroupTokens + t % kGroupTokens]), acc, G);
        }
      } else if (vc->kind == GpuKind::kInt8) {
        const GpuSegment& seg = vc->seg[0];
        for (int t = t0; t < t1; ++t) {
          const uint8_t* grp = GroupOf(page.v, *vc, t) + seg.group_offset;
          AddScaled(w + t * kMaxGroup, static_cast<float>(static_cast<int8_t>(grp[i * kGroupTokens + t % kGroupTokens])),
                    acc, G);
        }
        TQ_FOR_EACH_HEAD(g, G) acc[g] *= v_scale;
      } else {
        const GpuSegment& seg = vc->seg[s];
        const float* table = &tables[(kMaxSegments + s) * 256];
        for (int t = t0; t < t1; ++t) {
          AddScaled(w + t * kMaxGroup, table[GetCode(GroupOf(page.v, *vc, t), seg, i, t % kGroupTokens)], acc, G);
        }
      }
    }
    TQ_FOR_EACH_HEAD(g, G) red[tid * kMaxGroup + g] = acc[g];
    __syncthreads();
    if (active && my_part == 0) {
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

// out[g] = merge of the query's blocks, mapped back from each domain. Grid (queries, group); block kMaxDim.
__global__ void MergeKernel(CallArgs a) {
  const Query& qu = a.queries[blockIdx.x];
  const int g = blockIdx.y, d = a.d, G = a.group;
  __shared__ float accum[(1 + kMaxCallCodecs) * kDomainSlots * kMaxDim];
  float* out = qu.q.out + static_cast<int64_t>(g) * d;
  const int64_t stride = PartialFloats(G, d);
  float m = -INFINITY;
  for (int b = 0; b < qu.num_blocks; ++b) m = fmaxf(m, a.partials[(qu.first_block + b) * stride + g]);
  for (int idx = threadIdx.x; idx < (1 + a.nv) * kDomainSlots * d; idx += blockDim.x) accum[idx] = 0.0f;
  __syncthreads();
  float l = 0.0f;
  for (int b = 0; b < qu.num_blocks; ++b) {
    const int blk_index = qu.first_block + b;
    const float* part = a.partials + blk_index * stride;
    const float w = expf(part[g] - m);
    l += w * part[G + g];
    const Block& blk = a.blocks[blk_index];
    const int slot_base = (blk.v_local + 1) * kDomainSlots;
    const bool sketch = blk.v_local >= 0 && a.codecs[a.v_codecs[blk.v_local]].domain[1] != nullptr;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      accum[slot_base * d + c] += w * part[2 * G + g * d + c];
      if (sketch) accum[(slot_base + 1) * d + c] += w * part[2 * G + (G + g) * d + c];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float o = accum[c];
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
    out[c] = l > 0.0f ? o / l : 0.0f;
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
      Block b;
      b.query = static_cast<int32_t>(qi);
      b.page = pi;
      b.tokens = n;
      const GpuCodec& kc = codecs.desc(pg.k_codec);
      const GpuCodec& vc = codecs.desc(pg.v_codec);
      b.k_local = kc.domain[0] != nullptr ? local(k_codecs, pg.k_codec) : -1;
      b.v_local = vc.domain[0] != nullptr ? local(v_codecs, pg.v_codec) : -1;
      blocks.push_back(b);
    }
    const int n_tail = static_cast<int>(std::min<int64_t>(q.tail_tokens, q.limit - pos));
    if (n_tail > 0) blocks.push_back(Block{static_cast<int32_t>(qi), -1, n_tail, -1, -1});
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
    PageKernel<<<static_cast<unsigned>(last_blocks_), kThreads, 0, stream>>>(args);
    TQ_CUDA_RETURN_IF_LAUNCH_FAILED("GPU attention: pages");
  }
  MergeKernel<<<dim3(static_cast<unsigned>(qs.size()), group), kMaxDim, 0, stream>>>(args);
  TQ_CUDA_RETURN_IF_LAUNCH_FAILED("GPU attention: merge");
  return Status::Ok();
}

}  // namespace tq::gpu
