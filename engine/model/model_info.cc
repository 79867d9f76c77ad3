#include "engine/model/model_info.h"

#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {
namespace {

constexpr size_t kMaxUnsupportedListed = 8;

// An optional integer hyperparameter; a per-layer array reports its largest element.
StatusOr<std::optional<int64_t>> OptionalInt(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.Find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->IsArray() && v->elem_type != GgufValueType::kString && v->elem_type != GgufValueType::kArray) {
    // Bounds before the cast: a float element outside int64's range (or NaN) is a corrupt file, not UB.
    constexpr double kLimit = 9.0e18;
    int64_t best = 0;
    for (uint64_t k = 0; k < v->count; ++k) {
      const double x = v->NumericElement(k);
      if (!(x > -kLimit && x < kLimit)) {
        return InvalidArgumentError("GGUF key '" + key + "': element " + std::to_string(k) + " out of range");
      }
      best = std::max(best, static_cast<int64_t>(x));
    }
    return std::optional<int64_t>(best);
  }
  TQ_ASSIGN_OR_RETURN(int64_t x, g.GetInt(key));
  return std::optional<int64_t>(x);
}

StatusOr<std::optional<double>> OptionalFloat(const GgufFile& g, const std::string& key) {
  if (g.Find(key) == nullptr) return std::optional<double>();
  TQ_ASSIGN_OR_RETURN(double x, g.GetFloat(key));
  return std::optional<double>(x);
}

}  // namespace

std::string FileTypeName(uint64_t file_type) {
  // general.file_type: the llama.cpp "ftype" of the file's dominant weights.
  switch (file_type) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return "";
  }
}

StatusOr<ModelInfo> InspectModel(const GgufFile& g, const std::string& path) {
  ModelInfo info;
  info.path = path;
  info.file_bytes = g.file_size();
  info.gguf_version = g.version();
  info.alignment = g.alignment();
  info.metadata_count = g.metadata().size();
  TQ_ASSIGN_OR_RETURN(std::string_view arch, g.GetStringOr("general.architecture", ""));
  info.architecture = std::string(arch);
  TQ_ASSIGN_OR_RETURN(std::string_view name, g.GetStringOr("general.name", ""));
  info.name = std::string(name);
  if (g.Find("general.file_type") != nullptr) {
    TQ_ASSIGN_OR_RETURN(uint64_t ft, g.GetUint("general.file_type"));
    info.file_type = FileTypeName(ft);
  }

  const std::string a = info.architecture + ".";
  TQ_ASSIGN_OR_RETURN(info.layers, OptionalInt(g, a + "block_count"));
  TQ_ASSIGN_OR_RETURN(info.embedding, OptionalInt(g, a + "embedding_length"));
  TQ_ASSIGN_OR_RETURN(info.feed_forward, OptionalInt(g, a + "feed_forward_length"));
  TQ_ASSIGN_OR_RETURN(info.heads, OptionalInt(g, a + "attention.head_count"));
  TQ_ASSIGN_OR_RETURN(info.kv_heads, OptionalInt(g, a + "attention.head_count_kv"));
  if (!info.kv_heads) info.kv_heads = info.heads;
  TQ_ASSIGN_OR_RETURN(info.head_dim, OptionalInt(g, a + "attention.key_length"));
  if (!info.head_dim && info.embedding && info.heads && *info.heads > 0)
    info.head_dim = *info.embedding / *info.heads;
  TQ_ASSIGN_OR_RETURN(info.context, OptionalInt(g, a + "context_length"));
  TQ_ASSIGN_OR_RETURN(info.vocab, OptionalInt(g, a + "vocab_size"));
  TQ_ASSIGN_OR_RETURN(info.rope_dims, OptionalInt(g, a + "rope.dimension_count"));
  TQ_ASSIGN_OR_RETURN(info.sliding_window, OptionalInt(g, a + "attention.sliding_window"));
  TQ_ASSIGN_OR_RETURN(info.rope_freq_base, OptionalFloat(g, a + "rope.freq_base"));
  TQ_ASSIGN_OR_RETURN(info.rope_scale, OptionalFloat(g, a + "rope.scaling.factor"));
  TQ_ASSIGN_OR_RETURN(info.rms_eps, OptionalFloat(g, a + "attention.layer_norm_rms_epsilon"));
  TQ_ASSIGN_OR_RETURN(std::string_view scaling, g.GetStringOr(a + "rope.scaling.type", ""));
  info.rope_scaling = std::string(scaling);

  info.tensor_count = static_cast<int64_t>(g.tensors().size());
  for (const GgufTensorInfo& t : g.tensors()) {
    const kernels::WeightTypeInfo& type = kernels::GetWeightTypeInfo(t.type);
    TensorTypeStats& stats = info.tensor_types[std::string(type.name)];
    stats.count += 1;
    stats.bytes += t.bytes;
    stats.supported = type.supported;
    info.tensor_bytes += t.bytes;
    info.parameters += static_cast<uint64_t>(t.elements());
    if (!type.supported && info.unsupported_tensors.size() < kMaxUnsupportedListed) {
      info.unsupported_tensors.push_back(std::string(t.name) + " (" + std::string(type.name) + ")");
    }
  }

  TQ_ASSIGN_OR_RETURN(std::string_view model, g.GetStringOr("tokenizer.ggml.model", ""));
  info.tokenizer_model = std::string(model);
  if (!model.empty()) {
    StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(g);
    if (tok.ok()) {
      const Tokenizer& t = **tok;
      info.tokenizer_pre = std::string(t.pre_name());
      info.tokenizer_tokens = t.vocab_size();
      info.bos = t.bos();
      info.eos = t.eos();
      if (t.bos() != kNoToken) info.bos_text = t.token_text(t.bos());
      if (t.eos() != kNoToken) info.eos_text = t.token_text(t.eos());
      info.add_bos = t.add_bos();
    } else {
      info.tokenizer_error = tok.status().ToString();
      TQ_ASSIGN_OR_RETURN(std::string_view pre, g.GetStringOr("tokenizer.ggml.pre", ""));
      info.tokenizer_pre = std::string(pre);
    }
    if (const GgufValue* merges = g.Find("tokenizer.ggml.merges"))
      info.tokenizer_merges = static_cast<int64_t>(merges->count);
    if (!info.vocab) {
      if (const GgufValue* tokens = g.Find("tokenizer.ggml.tokens"))
        info.vocab = static_cast<int64_t>(tokens->count);
    }
  }
  if (const GgufValue* tmpl = g.Find("tokenizer.chat_template");
      tmpl != nullptr && tmpl->type == GgufValueType::kString) {
    info.has_chat_template = true;
    info.chat_template_bytes = tmpl->str.size();
  }
  return info;
}

}  // namespace tq::engine
