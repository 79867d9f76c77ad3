// An EngineApi for the request-decoding fuzz targets: the parts decoding uses (tokenizer, chat template,
// constraint compiler) over a real tokenizer; generation is never reached from decoding, so Submit fails.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/api.h"
#include "engine/grammar/grammar.h"
#include "engine/runner/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::fuzz {

// The parts of the engine API that request decoding uses (tokenizer and chat template), over a real tokenizer;
// generation is not reached from decoding, so those methods fail.
class DecodingEngine final : public engine::EngineApi {
 public:
  explicit DecodingEngine(std::unique_ptr<engine::Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {
    constraints_ = engine::ConstraintCompiler::Create(*tokenizer_, tokenizer_->vocab_size()).value();
  }
  engine::ModelInfo Info() const override { return {}; }
  std::vector<int32_t> Tokenize(std::string_view text, engine::TokenizeOptions o) const override {
    return tokenizer_->Encode(text, {.add_special = o.add_special, .parse_special = o.parse_special});
  }
  StatusOr<std::string> Detokenize(std::span<const int32_t> ids) const override {
    return tokenizer_->Decode(ids);
  }
  std::string TokenText(int32_t id) const override { return tokenizer_->TokenToPiece(id); }
  StatusOr<std::vector<int32_t>> ChatPrompt(const std::vector<engine::ChatMessage>& m,
                                                const std::vector<engine::ToolSpec>& tools) const override {
    TQ_ASSIGN_OR_RETURN(const std::string text, engine::RenderChat(chat_, m, tools));
    return tokenizer_->Encode(text, {.add_special = true, .parse_special = true});
  }
  StatusOr<std::shared_ptr<const engine::CompiledConstraint>> CompileConstraint(
      const engine::ConstraintSpec& spec) const override {
    return constraints_->Compile(spec);
  }
  Status Submit(engine::GenerateRequest, engine::EventSink) override {
    return UnimplementedError("decoding only");
  }
  bool Abort(const std::string&) override { return false; }
  Status LoadLora(const std::string&, const std::string&, float) override { return UnimplementedError("no LoRA"); }
  Status UnloadLora(const std::string&) override { return UnimplementedError("no LoRA"); }
  std::vector<engine::LoraInfo> Loras() const override { return {}; }
  void StopAdmitting() override {}
  void CancelAll() override {}
  engine::EngineStats Stats() const override { return {}; }
  std::vector<engine::HeadPlacement> HeadPlacements() const override { return {}; }
  std::vector<engine::KvEventRecord> KvEventsSince(uint64_t, size_t, int, uint64_t*) const override {
    return {};
  }
  uint64_t LastKvEvent() const override { return 0; }
  int32_t vocab_size() const { return tokenizer_->vocab_size(); }

 private:
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<engine::ConstraintCompiler> constraints_;
  engine::ChatTemplate chat_{engine::ChatFormat::kChatMl, ""};
};

}  // namespace tq::fuzz
