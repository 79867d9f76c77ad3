#include "engine/llm/model.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <span>
#include <unordered_map>
#include <cmath>

#include "engine/kv/read_ahead.h"
#include "engine/llm/lora.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/matmul.h"

namespace tq::engine {
namespace {

// The kernels' view of y = W x. x: [batch, w.cols], y: [batch, w.rows].
kernels::MatMulArgs ArgsFor(const Weight& w, const float* x, int64_t batch, float* y) {
  kernels::MatMulArgs args;
  args.type = w.type;
  args.w = w.data;
  args.row_bytes = w.row_bytes;
  args.cols = w.cols;
  args.x = x;
  args.batch = batch;
  args.y = y;
  args.y_stride = w.rows;
  return args;
}

// y[b] = W x[b] for b in [0, batch). The activations are prepared once per product (for a small batch every
// thread prepares its own copy, which is cheaper than another barrier), then the rows are split over the pool in
// whole row tiles.
void MatMul(const Weight& w, const float* x, int64_t batch, float* y, ThreadPool& pool) {
  constexpr int64_t kPrivateActsMaxBatch = 4;
  const kernels::MatMulArgs args = ArgsFor(w, x, batch, y);
  const int64_t act_bytes = kernels::MatMulActivationBytes(args);
  const int64_t scratch_bytes = kernels::MatMulScratchBytes(args);
  const bool private_acts = batch <= kPrivateActsMaxBatch;
  thread_local std::vector<uint8_t> shared_acts;  // the calling thread's; workers see it through the pointer
  if (act_bytes > 0 && !private_acts && shared_acts.size() < static_cast<size_t>(act_bytes)) {
    shared_acts.resize(act_bytes);
  }
  uint8_t* const shared = shared_acts.data();
  if (act_bytes > 0 && !private_acts) {
    pool.ParallelFor(batch, [&](int64_t begin, int64_t end, int) {
      kernels::PrepareActivations(args, begin, end, shared);
    });
  }
  const int64_t tile = kernels::kMatMulRowTile;
  pool.ParallelFor((w.rows + tile - 1) / tile, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<uint8_t> scratch, own_acts;
    if (scratch.size() < static_cast<size_t>(scratch_bytes)) scratch.resize(scratch_bytes);
    const uint8_t* acts = shared;
    if (act_bytes > 0 && private_acts) {
      if (own_acts.size() < static_cast<size_t>(act_bytes)) own_acts.resize(act_bytes);
      kernels::PrepareActivations(args, 0, batch, own_acts.data());
      acts = own_acts.data();
    }
    kernels::MatMulRows(args, acts, begin * tile, std::min(end * tile, w.rows), scratch.data());
  });
}

// One weight's share of a fused product: y = W x with the input x shared by all.
struct Product {
  const Weight* w;
  float* y;  // [batch, w->rows]
};

// y_i[b] = W_i x[b] for every product (one input, several weights: q/k/v, gate/up). For a decode-sized batch the
// row tiles of all of them are split over the pool in one pass (one barrier instead of one per weight; k and v
// alone are too small to share well); every thread prepares the activations once per weight type it meets.
// Larger batches run one MatMul per weight.
void MatMuls(std::span<const Product> products, const float* x, int64_t batch, ThreadPool& pool) {
  constexpr int64_t kFusedMaxBatch = 4;  // MatMul's private-activation batches
  if (batch > kFusedMaxBatch || products.size() == 1) {
    for (const Product& p : products) MatMul(*p.w, x, batch, p.y, pool);
    return;
  }
  const int64_t tile = kernels::kMatMulRowTile;
  std::vector<kernels::MatMulArgs> args(products.size());
  std::vector<int64_t> first_tile(products.size() + 1, 0);
  int64_t act_bytes = 0, scratch_bytes = 0;
  for (size_t i = 0; i < products.size(); ++i) {
    const Weight& w = *products[i].w;
    const kernels::MatMulArgs& a = args[i] = ArgsFor(w, x, batch, products[i].y);
    act_bytes = std::max(act_bytes, kernels::MatMulActivationBytes(a));
    scratch_bytes = std::max(scratch_bytes, kernels::MatMulScratchBytes(a));
    first_tile[i + 1] = first_tile[i] + (w.rows + tile - 1) / tile;
  }
  pool.ParallelFor(first_tile.back(), [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<uint8_t> scratch, acts;
    if (scratch.size() < static_cast<size_t>(scratch_bytes)) scratch.resize(scratch_bytes);
    if (acts.size() < static_cast<size_t>(act_bytes)) acts.resize(act_bytes);
    const kernels::MatMulArgs* prepared = nullptr;  // whose activations `acts` holds (same type and cols, same x)
    for (size_t i = 0; i < products.size(); ++i) {
      const int64_t b = std::max(begin, first_tile[i]), e = std::min(end, first_tile[i + 1]);
      if (b >= e) continue;
      const kernels::MatMulArgs& a = args[i];
      if (kernels::MatMulActivationBytes(a) > 0 &&
          (prepared == nullptr || prepared->type != a.type || prepared->cols != a.cols)) {
        kernels::PrepareActivations(a, 0, batch, acts.data());
        prepared = &a;
      }
      const int64_t row0 = (b - first_tile[i]) * tile, row1 = std::min((e - first_tile[i]) * tile, a.y_stride);
      kernels::MatMulRows(a, acts.data(), row0, row1, scratch.data());
    }
  });
}

const float* F32(const Weight& w) { return reinterpret_cast<const float*>(w.data); }

// out[b] = x[b] / rms(x[b]) * gain, rows of n.
void RmsNorm(const float* x, const float* gain, int64_t batch, int64_t n, float eps, float* out) {
  for (int64_t b = 0; b < batch; ++b) {
    const float* xb = x + b * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xb[i]) * xb[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
    float* ob = out + b * n;
    for (int64_t i = 0; i < n; ++i) ob[i] = xb[i] * scale * gain[i];
  }
}

void AddBias(float* y, const Weight& bias, int64_t batch) {
  if (!bias.present()) return;
  const float* bv = F32(bias);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < bias.cols; ++i) y[b * bias.cols + i] += bv[i];
  }
}

// Rotates each head of x ([n_heads, head_dim]) by position `pos`.
// cos and sin of the rotation angles of position `pos`: [n_rot / 2] each (the same for every layer). `divisors`
// ([n_rot / 2], or null for none) divide the angles: Llama 3.1's rope_freqs.weight, as llama.cpp applies it.
void RopeAngles(int n_rot, int pos, float base, const float* divisors, float* c, float* s) {
  for (int i = 0; i < n_rot / 2; ++i) {
    double theta = pos * std::pow(static_cast<double>(base), -2.0 * i / n_rot);
    if (divisors != nullptr) theta /= divisors[i];
    c[i] = static_cast<float>(std::cos(theta));
    s[i] = static_cast<float>(std::sin(theta));
  }
}

// Rotates the first n_rot dims of each head of x: [n_heads][head_dim] by the angles of RopeAngles.
void Rope(float* x, int n_heads, int head_dim, int n_rot, const float* c, const float* s, RopeStyle style) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const int a = style == RopeStyle::kAdjacent ? 2 * i : i;
      const int b = style == RopeStyle::kAdjacent ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c[i] - x1 * s[i];
      v[b] = x0 * s[i] + x1 * c[i];
    }
  }
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::Open(const std::string& path) {
  std::unique_ptr<Model> m(new Model());
  TQ_ASSIGN_OR_RETURN(m->gguf_, GgufFile::Open(path));
  TQ_ASSIGN_OR_RETURN(m->hp_, ReadHParams(*m->gguf_));
  if (m->hp_.name.empty()) m->hp_.name = path.substr(path.find_last_of('/') + 1);
  TQ_ASSIGN_OR_RETURN(m->weights_, BindWeights(*m->gguf_, m->hp_));
  return m;
}

Status Model::Forward(std::span<const BatchToken> batch, ThreadPool& pool, std::vector<float>* logits,
                      std::vector<float>* hidden, const ForwardLayers& layers) const {
  const HParams& hp = hp_;
  const int64_t B = static_cast<int64_t>(batch.size());
  const int64_t E = hp.n_embd, D = hp.head_dim;
  const size_t layer_floats = static_cast<size_t>(B) * E;  // one layer's input in LayerInputs
  if (layers.first_layer < 0 || layers.first_layer >= hp.n_layers) {
    return InvalidArgumentError("first layer " + std::to_string(layers.first_layer) + " is outside [0, " +
                                std::to_string(hp.n_layers) + ")");
  }
  if (layers.first_layer > 0 && layers.resume == nullptr) {
    return InvalidArgumentError("a pass that starts at layer " + std::to_string(layers.first_layer) +
                                " needs the recorded layer inputs");
  }
  if (layers.resume != nullptr && layers.resume->x.size() != hp.n_layers * layer_floats) {
    return InvalidArgumentError("the recorded layer inputs hold " + std::to_string(layers.resume->x.size()) +
                                " floats, not " + std::to_string(hp.n_layers * layer_floats) + " (another batch?)");
  }
  const int64_t q_dim = int64_t{hp.n_heads} * D, kv_dim = int64_t{hp.n_kv_heads} * D;
  const int group = hp.n_heads / hp.n_kv_heads;
  // Each sequence's tokens must continue it in order: positions n_tokens, n_tokens + 1, ...
  std::unordered_map<const SequenceKv*, int> next_pos;
  for (const BatchToken& t : batch) {
    if (t.token < 0 || t.token >= hp.vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(t.token) + " is outside the vocabulary [0, " +
                                  std::to_string(hp.vocab_size) + ")");
    }
    if (t.kv == nullptr || t.pos < 0 || t.pos >= t.kv->n_ctx()) {
      return OutOfRangeError("position " + std::to_string(t.pos) + " is outside the sequence's context of " +
                             std::to_string(t.kv ? t.kv->n_ctx() : 0) + " tokens");
    }
    auto [it, fresh] = next_pos.try_emplace(t.kv, t.kv->n_tokens());
    if (t.pos != it->second) {
      return InvalidArgumentError("position " + std::to_string(t.pos) + " does not continue its sequence (next is " +
                                  std::to_string(it->second) + ")");
    }
    ++it->second;
  }
  // Attention work: runs of consecutive batch tokens of one sequence, cut into chunks of at most kRowsPerItem
  // rows, times KV heads.
  constexpr int64_t kRowsPerItem = 16;
  struct Chunk {
    int64_t first;  // batch index of the first row
    int rows;
  };
  std::vector<Chunk> chunks;
  for (int64_t b = 0; b < B;) {
    int64_t e = b + 1;
    while (e < B && batch[e].kv == batch[b].kv && e - b < kRowsPerItem) ++e;
    chunks.push_back({b, static_cast<int>(e - b)});
    b = e;
  }

  // Batch rows per LoRA adapter (none when every token runs the base model).
  std::vector<LoraGroup> lora;
  for (int64_t b = 0; b < B; ++b) {
    if (batch[b].lora == nullptr) continue;
    auto it = std::find_if(lora.begin(), lora.end(), [&](const LoraGroup& g) { return g.adapter == batch[b].lora; });
    if (it == lora.end()) it = lora.insert(lora.end(), LoraGroup{batch[b].lora, {}});
    it->rows.push_back(b);
  }

  std::vector<float> x(B * E), xn(B * E), q(B * q_dim), k(B * kv_dim), v(B * kv_dim), attn(B * q_dim);
  std::vector<float> gate(B * hp.n_ff), up(B * hp.n_ff), tmp(B * E);
  if (layers.resume != nullptr) {  // the recorded input of the first layer run
    std::copy_n(layers.resume->x.begin() + layers.first_layer * layer_floats, layer_floats, x.begin());
  } else {
    for (int64_t b = 0; b < B; ++b) {
      const Weight& emb = weights_.token_embd;
      kernels::DecodeRow(emb.type, emb.data + batch[b].token * emb.row_bytes, E, x.data() + b * E);
    }
    if (hp.arch->embed_scale) {
      const float scale = std::sqrt(static_cast<float>(E));
      for (float& e : x) e *= scale;
    }
  }

  // Distinct sequences of the batch, for prefetching their cold pages a layer ahead of attention.
  std::vector<SequenceKv*> seqs;
  for (const BatchToken& t : batch) {
    if (std::find(seqs.begin(), seqs.end(), t.kv) == seqs.end()) seqs.push_back(t.kv);
  }
  // Cold pages read ahead of attention (ColdReadAhead has the plan). A sliding-window layer needs only the
  // pages its first row's window reaches.
  uint64_t read_ahead = 0;
  for (SequenceKv* kv : seqs) read_ahead = std::max(read_ahead, kv->ReadAheadBytes());
  ColdReadAhead ahead(hp.n_layers, read_ahead, [&](int i, uint64_t limit) {
    const bool next_step = i >= hp.n_layers;
    const int l = next_step ? i - hp.n_layers : i;
    KvPageStore::PrefetchResult all;
    for (SequenceKv* kv : seqs) {
      const int row = kv->n_tokens() + (next_step ? 1 : 0);  // first query position of the (next) step
      const KvPageStore::PrefetchResult r =
          kv->PrefetchLayer(l, hp.IsSlidingLayer(l) ? row - hp.sliding_window + 1 : 0, limit - all.bytes);
      all.bytes += r.bytes;
      all.complete = all.complete && r.complete;
      if (!r.complete) break;
    }
    return all;
  });
  ahead.Start();
  // RoPE angles per token, computed once for all layers: [B][n_rot / 2] cos and sin.
  // Sliding-window layers may use their own base: a second set of angles then.
  const int half = hp.n_rot / 2;
  const bool two_bases = hp.sliding_window > 0 && hp.arch->swa_period > 0 && hp.arch->rope_base_local > 0;
  std::vector<float> rope_cos(B * half), rope_sin(B * half), local_cos, local_sin;
  const float* rope_div = weights_.rope_freqs.present() ? F32(weights_.rope_freqs) : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    RopeAngles(hp.n_rot, batch[b].pos, hp.rope_base, rope_div, rope_cos.data() + b * half, rope_sin.data() + b * half);
  }
  if (two_bases) {
    local_cos.resize(B * half);
    local_sin.resize(B * half);
    for (int64_t b = 0; b < B; ++b) {
      RopeAngles(hp.n_rot, batch[b].pos, hp.arch->rope_base_local, rope_div, local_cos.data() + b * half,
                 local_sin.data() + b * half);
    }
  }

  if (layers.record != nullptr) layers.record->x.resize(hp.n_layers * layer_floats);
  for (int l = layers.first_layer; l < hp.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[l];
    if (layers.record != nullptr) std::copy(x.begin(), x.end(), layers.record->x.begin() + l * layer_floats);
    ahead.BeforeLayer(l);
    RmsNorm(x.data(), F32(L.attn_norm), B, E, hp.rms_eps, xn.data());
    const Product qkv[] = {{&L.wq, q.data()}, {&L.wk, k.data()}, {&L.wv, v.data()}};
    MatMuls(qkv, xn.data(), B, pool);
    if (!lora.empty()) {
      ApplyLora(lora, l, LoraTarget::kQ, xn.data(), E, q.data(), q_dim, pool);
      ApplyLora(lora, l, LoraTarget::kK, xn.data(), E, k.data(), kv_dim, pool);
      ApplyLora(lora, l, LoraTarget::kV, xn.data(), E, v.data(), kv_dim, pool);
    }
    AddBias(q.data(), L.bq, B);
    AddBias(k.data(), L.bk, B);
    AddBias(v.data(), L.bv, B);
    if (L.q_norm.present()) {  // per-head RMSNorm of q and k (rows of head_dim)
      RmsNorm(q.data(), F32(L.q_norm), B * hp.n_heads, D, hp.rms_eps, q.data());
      RmsNorm(k.data(), F32(L.k_norm), B * hp.n_kv_heads, D, hp.rms_eps, k.data());
    }
    const bool sliding = hp.IsSlidingLayer(l);
    const bool local_angles = sliding && !local_cos.empty();
    for (int64_t b = 0; b < B; ++b) {
      const float* c = (local_angles ? local_cos.data() : rope_cos.data()) + b * half;
      const float* sn = (local_angles ? local_sin.data() : rope_sin.data()) + b * half;
      Rope(q.data() + b * q_dim, hp.n_heads, D, hp.n_rot, c, sn, hp.arch->rope);
      Rope(k.data() + b * kv_dim, hp.n_kv_heads, D, hp.n_rot, c, sn, hp.arch->rope);
      TQ_RETURN_IF_ERROR(batch[b].kv->Append(l, batch[b].pos, k.data() + b * kv_dim, v.data() + b * kv_dim,
                                             q.data() + b * q_dim, hp.n_heads));
    }
    // q of a KV head's query group is contiguous: [group][D] at kv_head * group * D within a token's q. Attend
    // scales q.k by 1 / sqrt(D); a model with another scale gets q multiplied by the ratio.
    const float q_mult = hp.attn_scale > 0 ? hp.attn_scale * std::sqrt(static_cast<float>(D)) : 1.0f;
    std::atomic<bool> failed{false};
    Status first_error;
    std::mutex error_mu;
    pool.ParallelFor(static_cast<int64_t>(chunks.size()) * hp.n_kv_heads, [&](int64_t begin, int64_t end, int) {
      thread_local std::vector<float> qbuf, obuf;
      for (int64_t item = begin; item < end && !failed; ++item) {
        const Chunk& c = chunks[item / hp.n_kv_heads];
        const int kvh = static_cast<int>(item % hp.n_kv_heads);
        const size_t span = static_cast<size_t>(group) * D;
        qbuf.resize(c.rows * span);
        obuf.resize(c.rows * span);
        for (int r = 0; r < c.rows; ++r) {
          std::copy_n(q.data() + (c.first + r) * q_dim + kvh * span, span, qbuf.data() + r * span);
        }
        if (q_mult != 1.0f) {
          for (float& e : qbuf) e *= q_mult;
        }
        Status s = batch[c.first].kv->Attend(l, kvh, qbuf.data(), c.rows, group, batch[c.first].pos, obuf.data(),
                                             nullptr, nullptr, sliding ? hp.sliding_window : 0, hp.attn_softcap);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!failed.exchange(true)) first_error = s;
          return;
        }
        for (int r = 0; r < c.rows; ++r) {
          std::copy_n(obuf.data() + r * span, span, attn.data() + (c.first + r) * q_dim + kvh * span);
        }
      }
    });
    for (SequenceKv* kv : seqs) kv->FinishLayerPass(l);
    ahead.AfterLayer(l);
    if (failed) return first_error;
    MatMul(L.wo, attn.data(), B, tmp.data(), pool);
    if (!lora.empty()) ApplyLora(lora, l, LoraTarget::kOut, attn.data(), q_dim, tmp.data(), E, pool);
    if (L.post_attn_norm.present()) RmsNorm(tmp.data(), F32(L.post_attn_norm), B, E, hp.rms_eps, tmp.data());
    for (int64_t i = 0; i < B * E; ++i) x[i] += tmp[i];

    RmsNorm(x.data(), F32(L.ffn_norm), B, E, hp.rms_eps, xn.data());
    const Product gate_up[] = {{&L.w_gate, gate.data()}, {&L.w_up, up.data()}};
    MatMuls(gate_up, xn.data(), B, pool);
    if (!lora.empty()) {
      ApplyLora(lora, l, LoraTarget::kGate, xn.data(), E, gate.data(), hp.n_ff, pool);
      ApplyLora(lora, l, LoraTarget::kUp, xn.data(), E, up.data(), hp.n_ff, pool);
    }
    // GeGLU gelu_tanh(gate) * up or SwiGLU silu(gate) * up, in place on gate; rows split over the pool from 16k
    // values (about 10 us of work; fewer cost less than waking the pool).
    const auto activate = [&](int64_t b0, int64_t b1, int) {
      float* g = gate.data() + b0 * hp.n_ff;
      const float* u = up.data() + b0 * hp.n_ff;
      if (hp.arch->ffn == FfnActivation::kGeluTanh) {
        kernels::GeGluTanhF32(g, u, (b1 - b0) * hp.n_ff);
      } else {
        kernels::SwiGluF32(g, u, (b1 - b0) * hp.n_ff);
      }
    };
    if (B > 1 && B * hp.n_ff >= 16384) {
      pool.ParallelFor(B, activate);
    } else {
      activate(0, B, 0);
    }
    MatMul(L.w_down, gate.data(), B, tmp.data(), pool);
    if (!lora.empty()) ApplyLora(lora, l, LoraTarget::kDown, gate.data(), hp.n_ff, tmp.data(), E, pool);
    if (L.post_ffn_norm.present()) RmsNorm(tmp.data(), F32(L.post_ffn_norm), B, E, hp.rms_eps, tmp.data());
    for (int64_t i = 0; i < B * E; ++i) x[i] += tmp[i];
  }

  if (hidden != nullptr) {
    hidden->clear();
    for (int64_t b = 0; b < B; ++b) {
      if (batch[b].want_hidden) hidden->insert(hidden->end(), x.begin() + b * E, x.begin() + (b + 1) * E);
    }
    const int64_t n = static_cast<int64_t>(hidden->size()) / E;
    if (n > 0) RmsNorm(hidden->data(), F32(weights_.output_norm), n, E, hp.rms_eps, hidden->data());
  }
  // Logits only for the tokens that want them.
  std::vector<float> rows;
  std::vector<LoraGroup> out_lora;  // groups by logits row
  for (int64_t b = 0; b < B; ++b) {
    if (!batch[b].want_logits) continue;
    if (batch[b].lora != nullptr) {
      auto it = std::find_if(out_lora.begin(), out_lora.end(),
                             [&](const LoraGroup& g) { return g.adapter == batch[b].lora; });
      if (it == out_lora.end()) it = out_lora.insert(out_lora.end(), LoraGroup{batch[b].lora, {}});
      it->rows.push_back(static_cast<int64_t>(rows.size()) / E);
    }
    rows.insert(rows.end(), x.begin() + b * E, x.begin() + (b + 1) * E);
  }
  const int64_t n_out = static_cast<int64_t>(rows.size()) / E;
  logits->assign(n_out * hp.vocab_size, 0.0f);
  if (n_out > 0) {
    std::vector<float> normed(rows.size());
    RmsNorm(rows.data(), F32(weights_.output_norm), n_out, E, hp.rms_eps, normed.data());
    MatMul(weights_.output, normed.data(), n_out, logits->data(), pool);
    if (!out_lora.empty()) {
      ApplyLora(out_lora, -1, LoraTarget::kCount, normed.data(), E, logits->data(), hp.vocab_size, pool);
    }
    if (hp.logit_softcap > 0) {
      for (float& z : *logits) z = hp.logit_softcap * std::tanh(z / hp.logit_softcap);
    }
  }
  for (const BatchToken& t : batch) t.kv->set_n_tokens(std::max(t.kv->n_tokens(), t.pos + 1));
  for (SequenceKv* kv : seqs) {
    Status fault = kv->fault();
    if (!fault.ok()) return DataLossError("a sequence's KV could not be read back: " + fault.message());
  }
  return Status::Ok();
}

}  // namespace tq::engine
