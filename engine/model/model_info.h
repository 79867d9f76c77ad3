// A summary of a GGUF model for `tqserve inspect`: architecture, hyperparameters, tensor types and sizes,
// tokenizer and chat template. Read generically from "{arch}.*" metadata, so it also describes models the
// engine cannot run (their problems are listed, not fatal).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model/gguf.h"

namespace tq::engine {

struct TensorTypeStats {
  int64_t count = 0;
  uint64_t bytes = 0;
  bool supported = true;
};

struct ModelInfo {
  std::string path;
  uint64_t file_bytes = 0;
  uint32_t gguf_version = 0;
  uint32_t alignment = 0;
  size_t metadata_count = 0;

  std::string architecture;  // general.architecture ("" when absent)
  std::string name;          // general.name
  std::string file_type;     // "Q4_1" etc. from general.file_type when known

  // Hyperparameters; absent when the metadata lacks them (e.g. a vocabulary-only file).
  std::optional<int64_t> layers, embedding, feed_forward, heads, kv_heads, head_dim, context, vocab;
  std::optional<int64_t> rope_dims;
  std::optional<int64_t> sliding_window;  // "{arch}.attention.sliding_window" (Gemma 3, Mistral)
  std::optional<double> rope_freq_base, rope_scale, rms_eps;
  std::string rope_scaling;  // "{arch}.rope.scaling.type", "" when none

  int64_t tensor_count = 0;
  uint64_t tensor_bytes = 0;
  uint64_t parameters = 0;
  std::map<std::string, TensorTypeStats> tensor_types;  // by type name
  std::vector<std::string> unsupported_tensors;         // "name (TYPE)", the first few

  std::string tokenizer_model;  // tokenizer.ggml.model
  std::string tokenizer_pre;    // tokenizer.ggml.pre
  std::string tokenizer_error;  // why the tokenizer does not load, "" when it does
  int64_t tokenizer_tokens = 0;
  int64_t tokenizer_merges = 0;
  int32_t bos = -1, eos = -1;
  std::string bos_text, eos_text;
  bool add_bos = false;

  bool has_chat_template = false;
  uint64_t chat_template_bytes = 0;
};

// Summarizes an opened file. Only malformed hyperparameter metadata (a key of the wrong type) is an error.
StatusOr<ModelInfo> InspectModel(const GgufFile& gguf, const std::string& path);

// "Q4_1" for a general.file_type value, "" when unknown.
std::string FileTypeName(uint64_t file_type);

}  // namespace tq::engine
