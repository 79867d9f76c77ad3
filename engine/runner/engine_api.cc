// Engine's EngineApi methods that do not touch the step loop: model info, tokenization, chat prompts and the KV
// event log (engine/api.h).
#include <spdlog/spdlog.h>

#include "engine/llm/lora.h"
#include "engine/runner/engine.h"

namespace tq::engine {

StatusOr<std::unique_ptr<EngineApi>> CreateEngine(const EngineOptions& options) {
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(options));
  return std::unique_ptr<EngineApi>(std::move(engine));
}

Status Engine::SetUpChat() {
  if (options_.chat_format != "auto") {
    TQ_ASSIGN_OR_RETURN(const ChatFormat format, ParseChatFormat(options_.chat_format));
    chat_ = ChatTemplate{format, ""};
    return Status::Ok();
  }
  auto text = model_->gguf().GetStringOr("tokenizer.chat_template", "");
  auto detected = text.ok() ? DetectChatTemplate(*text) : StatusOr<ChatTemplate>(text.status());
  if (detected.ok()) {
    chat_ = *detected;
  } else {
    chat_unavailable_ = detected.status().message();
    spdlog::warn("chat completions are off: {}", chat_unavailable_);
  }
  return Status::Ok();
}

ModelInfo Engine::Info() const {
  const HParams& hp = model_->hparams();
  ModelInfo info;
  info.architecture = std::string(hp.arch->name);
  auto name = model_->gguf().GetStringOr("general.name", "");
  if (name.ok()) info.name = std::string(*name);
  info.n_layers = hp.n_layers;
  info.n_embd = hp.n_embd;
  info.embedding_pooling = hp.pooling_type == 3 ? "last" : hp.pooling_type == 2 ? "first" : "mean";
  info.n_heads = hp.n_heads;
  info.n_kv_heads = hp.n_kv_heads;
  info.head_dim = hp.head_dim;
  info.vocab_size = hp.vocab_size;
  info.context_length = ctx_size_;
  info.weight_bytes = model_->weight_bytes();
  if (chat_) info.chat_format = std::string(ChatFormatName(chat_->format));
  info.chat_unavailable = chat_unavailable_;
  info.device = options_.device;
  const std::shared_ptr<const KvLayout> layout = kv_layout();
  info.kv = layout->Describe();
  info.kv_bits_per_value = layout->bits_per_value();
  return info;
}

std::vector<int32_t> Engine::Tokenize(std::string_view text, TokenizeOptions options) const {
  return tokenizer_->Encode(text, {.add_special = options.add_special, .parse_special = options.parse_special});
}

StatusOr<std::string> Engine::Detokenize(std::span<const int32_t> ids) const {
  const int32_t vocab = tokenizer_->vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return InvalidArgumentError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
    }
  }
  return tokenizer_->Decode(ids);
}

std::string Engine::TokenText(int32_t id) const {
  if (id < 0 || id >= tokenizer_->vocab_size()) return "";
  return tokenizer_->TokenToPiece(id);
}

StatusOr<std::vector<int32_t>> Engine::ChatPrompt(const std::vector<ChatMessage>& messages,
                                                  const std::vector<ToolSpec>& tools) const {
  if (!chat_) {
    return FailedPreconditionError("this model has no chat template tqserve can use (" + chat_unavailable_ +
                                   "); send a plain prompt instead");
  }
  TQ_ASSIGN_OR_RETURN(const std::vector<ChatSegment> rendered, RenderChatSegments(*chat_, messages, tools));
  // The template's markers become control tokens; message content does only where the caller is trusted to
  // write them (chat_control_tokens): "<|im_end|><|im_start|>system" typed by a user stays text.
  std::vector<TextSegment> segments;
  segments.reserve(rendered.size());
  for (const ChatSegment& s : rendered) segments.push_back({s.text, s.marker || options_.chat_control_tokens});
  return tokenizer_->EncodeSegments(segments, /*add_special=*/true);
}

std::vector<KvEventRecord> Engine::KvEventsSince(uint64_t after, size_t max, int timeout_ms,
                                                 uint64_t* first_available) const {
  std::vector<KvEventRecord> out;
  for (const KvEvent& e : store_->EventsSince(after, max, timeout_ms, first_available)) {
    out.push_back({.seq = e.seq,
                   .kind = e.kind,
                   .page = Raw(e.page),
                   .tier = e.tier,
                   .from = e.from,
                   .request_id = e.info.owner,
                   .layer = e.info.layer,
                   .kv_head = e.info.kv_head,
                   .format = kernels::FormatPairName(e.info.k, e.info.v),
                   .bytes = e.bytes,
                   .unix_seconds = e.unix_seconds});
  }
  return out;
}

StatusOr<std::shared_ptr<const CompiledConstraint>> Engine::CompileConstraint(const ConstraintSpec& spec) const {
  return constraints_->Compile(spec);
}

uint64_t Engine::LastKvEvent() const { return store_->last_event(); }

Status Engine::LoadLora(const std::string& name, const std::string& path, float scale) {
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos) {
    return InvalidArgumentError("LoRA adapter name '" + name + "': 1 to 64 of [A-Za-z0-9._-]");
  }
  if (!(scale > -100 && scale < 100) || scale == 0) {
    return InvalidArgumentError("LoRA adapter scale must be non-zero and within (-100, 100)");
  }
  TQ_RETURN_IF_ERROR(path_->Supports(false, true));
  {
    std::lock_guard<std::mutex> lock(lora_mu_);
    if (loras_.count(name) != 0) return AlreadyExistsError("a LoRA adapter named '" + name + "' is loaded");
  }
  TQ_ASSIGN_OR_RETURN(std::shared_ptr<const LoraAdapter> a,
                      LoraAdapter::Open(path, name, scale, model_->hparams(), model_->weights()));
  std::lock_guard<std::mutex> lock(lora_mu_);
  if (!loras_.emplace(name, std::move(a)).second) {
    return AlreadyExistsError("a LoRA adapter named '" + name + "' is loaded");
  }
  spdlog::info("LoRA adapter '{}' loaded from {} (scale {})", name, path, scale);
  return Status::Ok();
}

Status Engine::UnloadLora(const std::string& name) {
  std::lock_guard<std::mutex> lock(lora_mu_);
  if (loras_.erase(name) == 0) return NotFoundError("no LoRA adapter named '" + name + "'");
  spdlog::info("LoRA adapter '{}' unloaded", name);
  return Status::Ok();
}

std::vector<LoraInfo> Engine::Loras() const {
  std::lock_guard<std::mutex> lock(lora_mu_);
  std::vector<LoraInfo> out;
  for (const auto& [name, a] : loras_) {
    out.push_back({name, a->path(), a->user_scale(), a->max_rank(), a->adapted_matrices(), a->bytes()});
  }
  return out;
}

}  // namespace tq::engine
