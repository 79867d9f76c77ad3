#include "engine/llm/lora.h"

#include <algorithm>
#include <string_view>

#include "engine/llm/hparams.h"
#include "engine/llm/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "storage/crc32c.h"

namespace tq::engine {
namespace {

constexpr std::string_view kSuffixA = ".lora_a", kSuffixB = ".lora_b";

// The layer matrices by their GGUF names (blk.N.<name>.weight).
constexpr std::pair<std::string_view, LoraTarget> kTargets[] = {
    {"attn_q", LoraTarget::kQ},       {"attn_k", LoraTarget::kK},   {"attn_v", LoraTarget::kV},
    {"attn_output", LoraTarget::kOut}, {"ffn_gate", LoraTarget::kGate}, {"ffn_up", LoraTarget::kUp},
    {"ffn_down", LoraTarget::kDown}};

const Weight* BaseMatrix(const ModelWeights& w, int layer, LoraTarget t) {
  const LayerWeights& L = w.layers[layer];
  switch (t) {
    case LoraTarget::kQ: return &L.wq;
    case LoraTarget::kK: return &L.wk;
    case LoraTarget::kV: return &L.wv;
    case LoraTarget::kOut: return &L.wo;
    case LoraTarget::kGate: return &L.w_gate;
    case LoraTarget::kUp: return &L.w_up;
    case LoraTarget::kDown: return &L.w_down;
    case LoraTarget::kCount: break;
  }
  return nullptr;
}

Weight AsWeight(const GgufTensorInfo& t) {
  const int64_t cols = t.dims[0], rows = t.dims[1] * t.dims[2] * t.dims[3];
  return Weight{t.type, t.data, rows, cols, cols * (t.type == kernels::WeightType::kF16 ? 2 : 4)};
}

std::string Shape(const Weight& w) { return "[" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]"; }

// Parses "blk.N.NAME.weight" into (N, target); "output.weight" gives layer -1. False for anything else.
bool ParseMatrixName(std::string_view base, int n_layers, int* layer, LoraTarget* target) {
  if (base == "output.weight") {
    *layer = -1;
    return true;
  }
  constexpr std::string_view kBlk = "blk.", kWeight = ".weight";
  if (!base.starts_with(kBlk) || !base.ends_with(kWeight)) return false;
  base.remove_prefix(kBlk.size());
  base.remove_suffix(kWeight.size());
  const size_t dot = base.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return false;
  int n = 0;
  for (char c : base.substr(0, dot)) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  if (n >= n_layers) return false;
  const std::string_view matrix = base.substr(dot + 1);
  for (const auto& [name, t] : kTargets) {
    if (matrix == name) {
      *layer = n;
      *target = t;
      return true;
    }
  }
  return false;
}

}  // namespace

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::Open(const std::string& path, const std::string& name,
                                                               float user_scale, const HParams& hp,
                                                               const ModelWeights& base) {
  const auto fail = [&](const std::string& why) { return InvalidArgumentError("LoRA adapter " + path + ": " + why); };
  std::shared_ptr<LoraAdapter> a(new LoraAdapter());
  a->name_ = name;
  a->path_ = path;
  a->user_scale_ = user_scale;
  auto file = GgufFile::Open(path);
  if (!file.ok()) return fail(file.status().message());
  a->gguf_ = std::move(*file);
  const GgufFile& g = *a->gguf_;
  TQ_ASSIGN_OR_RETURN(std::string_view type, g.GetStringOr("general.type", ""));
  TQ_ASSIGN_OR_RETURN(std::string_view adapter_type, g.GetStringOr("adapter.type", ""));
  if (type != "adapter" || adapter_type != "lora") {
    return fail("not a LoRA adapter (general.type '" + std::string(type) + "', adapter.type '" +
                std::string(adapter_type) + "'; expected 'adapter' and 'lora')");
  }
  TQ_ASSIGN_OR_RETURN(std::string_view arch, g.GetStringOr("general.architecture", ""));
  if (arch != hp.arch->name) {
    return fail("it adapts a '" + std::string(arch) + "' model, the model is '" + std::string(hp.arch->name) + "'");
  }
  TQ_ASSIGN_OR_RETURN(double alpha, g.GetFloatOr("adapter.lora.alpha", 0.0));
  a->layers_.resize(hp.n_layers);

  for (const GgufTensorInfo& t : g.tensors()) {
    const std::string_view tname = t.name;
    if (tname.ends_with(kSuffixB)) continue;  // taken with its A
    if (!tname.ends_with(kSuffixA)) return fail("tensor '" + std::string(tname) + "' is not a lora_a or lora_b");
    const std::string matrix(tname.substr(0, tname.size() - kSuffixA.size()));
    int layer = 0;
    LoraTarget target = LoraTarget::kQ;
    if (!ParseMatrixName(matrix, hp.n_layers, &layer, &target)) {
      return fail("tensor '" + std::string(tname) + "' adapts '" + matrix +
                  "', which this model does not have or tqserve cannot adapt (attention and FFN matrices of "
                  "layers 0-" + std::to_string(hp.n_layers - 1) + ", and output.weight)");
    }
    const GgufTensorInfo* tb = g.FindTensor(matrix + std::string(kSuffixB));
    if (tb == nullptr) return fail("tensor '" + std::string(tname) + "' has no '" + matrix + ".lora_b'");
    for (const GgufTensorInfo* x : {&t, tb}) {
      if (x->type != kernels::WeightType::kF16 && x->type != kernels::WeightType::kF32) {
        return fail("tensor '" + std::string(x->name) + "' is " +
                    std::string(kernels::WeightTypeName(x->type)) + "; adapter weights must be F16 or F32");
      }
    }
    const Weight wa = AsWeight(t), wb = AsWeight(*tb);
    const Weight* w = layer < 0 ? &base.output : BaseMatrix(base, layer, target);
    if (w == nullptr || !w->present()) return fail("the model has no '" + matrix + "'");
    if (wa.cols != w->cols || wb.rows != w->rows || wa.rows != wb.cols || wa.rows <= 0) {
      return fail("'" + matrix + "' is " + Shape(*w) + " in the model; its lora_a is " + Shape(wa) +
                  " and lora_b " + Shape(wb) + " (expected [rank, " + std::to_string(w->cols) + "] and [" +
                  std::to_string(w->rows) + ", rank])");
    }
    const int rank = static_cast<int>(wa.rows);
    LoraPair& p = layer < 0 ? a->output_ : a->layers_[layer][static_cast<int>(target)];
    p = LoraPair{wa, wb, alpha != 0 ? static_cast<float>(user_scale * alpha / rank) : user_scale, {}};
    p.bt.resize(static_cast<size_t>(rank * wb.rows));
    std::vector<float> brow(static_cast<size_t>(rank));
    for (int64_t j = 0; j < wb.rows; ++j) {
      kernels::DecodeRow(wb.type, wb.data + j * wb.row_bytes, rank, brow.data());
      for (int k = 0; k < rank; ++k) p.bt[static_cast<size_t>(k * wb.rows + j)] = brow[static_cast<size_t>(k)];
    }
    a->max_rank_ = std::max(a->max_rank_, rank);
    a->bytes_ += t.bytes + tb->bytes + p.bt.size() * sizeof(float);
    ++a->adapted_;
  }
  // Every lora_b must have had its lora_a.
  for (const GgufTensorInfo& t : g.tensors()) {
    const std::string_view tname = t.name;
    if (tname.ends_with(kSuffixB) &&
        g.FindTensor(std::string(tname.substr(0, tname.size() - kSuffixB.size())) + std::string(kSuffixA)) == nullptr) {
      return fail("tensor '" + std::string(tname) + "' has no lora_a");
    }
  }
  if (a->adapted_ == 0) return fail("it has no lora_a/lora_b tensors");
  a->checksum_ = storage::Crc32c(std::as_bytes(g.bytes()));
  return std::shared_ptr<const LoraAdapter>(std::move(a));
}

void ApplyLora(std::span<const LoraGroup> groups, int layer, LoraTarget target, const float* x, int64_t x_stride,
               float* y, int64_t y_stride, ThreadPool& pool) {
  // Multiply-adds below which B (A x) runs on the calling thread.
  constexpr int64_t kSerialMacs = int64_t{1} << 18;
  for (const LoraGroup& g : groups) {
    const LoraPair* p = layer < 0 ? g.adapter->output() : g.adapter->Find(layer, target);
    if (p == nullptr) continue;
    const int64_t n = static_cast<int64_t>(g.rows.size()), rank = p->a.rows, in = p->a.cols, out = p->b.rows;
    // ax[i] = A x[row i] ([n, rank]), gathered rows first.
    std::vector<float> xs(n * in), ax(n * rank);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + g.rows[i] * x_stride, in, xs.data() + i * in);
    kernels::MatMulArgs args{.type = p->a.type, .w = p->a.data, .row_bytes = p->a.row_bytes, .cols = in,
                             .x = xs.data(), .batch = n, .y = ax.data(), .y_stride = rank};
    std::vector<uint8_t> scratch(kernels::MatMulScratchBytes(args));  // float weights: no prepared activations
    kernels::MatMulRows(args, nullptr, 0, rank, scratch.data());
    for (float& v : ax) v *= p->scale;
    // y[row i] += sum_k ax[i][k] * bt[k]: contiguous updates of `out` floats, no horizontal sums. A small product
    // (under kSerialMacs multiply-adds, tens of microseconds) costs less than waking the pool; a large one (the
    // output matrix) splits the columns of y.
    const auto update = [&](int64_t j0, int64_t j1) {
      for (int64_t i = 0; i < n; ++i) {
        float* yr = y + g.rows[i] * y_stride;
        for (int64_t k = 0; k < rank; ++k) {
          kernels::AxpyF32(ax[i * rank + k], p->bt.data() + k * out + j0, yr + j0, j1 - j0);
        }
      }
    };
    if (n * out * rank < kSerialMacs) {
      update(0, out);
    } else {
      constexpr int64_t kChunk = 1024;  // columns of y per task
      pool.ParallelFor((out + kChunk - 1) / kChunk, [&](int64_t b, int64_t e, int) {
        update(b * kChunk, std::min(e * kChunk, out));
      });
    }
  }
}

}  // namespace tq::engine
