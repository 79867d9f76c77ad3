// Calibration: a head-importance profile (engine/kv/precision.h) from the model run on sample text, by one of
// two methods.
// - concentration: chunks of `ctx` tokens run with exact f32 KV; every query attending to at least 16
// positions
//   adds its attention concentration to its (layer, KV head). One forward pass per chunk.
// - sensitivity: per (layer, KV head), the chunks run with that head alone stored in `format` (the SPARSE
// format,
//   tq4 by default) and every other head f16, and again with it alone in `baseline_format` (the ACTIVE
//   format, int8). Each run's damage is the mean KL divergence KL(f16 || test) of the next-token distribution
//   over the scored positions of the chunks (llama.cpp's: [ctx/2, ctx-1)), in nats per token, against all-f16
//   logits computed once per chunk; score = damage(format) - damage(baseline_format). The subtraction
//   matters: on a quantized model any change to one head's KV costs a floor of KLD (rounding downstream
//   re-rolls; on SmolLM2 Q4_1 about 0.003 nats for a head in layer 0 down to 0.0007 in layer 29, for int8 as
//   for tq4), which would otherwise rank heads by depth. 2 * n_layers * n_kv_heads + 1 forward passes per
//   chunk (n_layers * n_kv_heads
//   + 1 without a baseline).
// Chunks are taken like `tqserve eval`'s (BOS first), starting after `skip_chunks` chunks of the text so that
// the calibration text can be held out from an evaluation's chunks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/precision.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/model.h"
#include "engine/llm/thread_pool.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {

enum class CalibrationMethod { kConcentration, kSensitivity };
StatusOr<CalibrationMethod> ParseCalibrationMethod(std::string_view name);  // "concentration" | "sensitivity"

struct CalibrateOptions {
  CalibrationMethod method = CalibrationMethod::kConcentration;
  int ctx = 512;               // tokens per chunk
  int chunks = 8;              // 0 = every whole chunk after skip_chunks
  int skip_chunks = 0;         // whole chunks of the text left out before the first calibration chunk
  std::string format = "tq4";  // sensitivity: the format a head is measured in, "FMT" or "KFMT/VFMT"
  std::string baseline_format = "int8";  // sensitivity: its damage is subtracted; "" = none (score = raw KLD)
  std::string scratch_dir;  // sensitivity: where the single-head profile is written ("" = system temp dir)
};

// Sensitivity progress: one call per measured head.
struct SensitivityStep {
  int done = 0;  // heads measured so far, [1, total]
  int total = 0;
  int layer = 0;
  int kv_head = 0;
  double kld = 0;       // this head's damage in the format, nats per scored token
  double baseline = 0;  // ... in the baseline format (0 without one)
  double seconds = 0;   // since the start, reference passes included
};
using SensitivityProgress = std::function<void(const SensitivityStep&)>;
// Concentration progress: chunks done (one pass each), chunks in all.
using ChunkProgress = std::function<void(int, int)>;

StatusOr<HeadProfile> Calibrate(const Model& model, const Tokenizer& tokenizer, const std::string& text,
                                const CalibrateOptions& options, ThreadPool& pool,
                                const SensitivityProgress& progress = nullptr,
                                const ChunkProgress& chunk_progress = nullptr);

// The pieces of the sensitivity method, exposed for tests.
//
// A KvSpec under which (layer, kv_head) alone is SPARSE in `format` and every other head HOT (f16): preset
// "N-1:0:1" (N = n_layers * n_kv_heads) over a profile written to `profile_path` that ranks that head lowest.
StatusOr<KvSpec> SingleHeadSpec(int n_layers, int n_kv_heads, int layer, int kv_head,
                                const std::string& format, const std::string& profile_path);

// Mean over `rows` of KL(ref || test), both [rows][vocab] log-probabilities (log-softmax rows); nats, >= 0.
double MeanKld(const float* ref, const float* test, int rows, int vocab, ThreadPool& pool);

}  // namespace tq::engine
