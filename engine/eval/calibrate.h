// Calibration: a head-importance profile (engine/kv/precision.h) from the model's attention on sample text.
// Chunks of `ctx` tokens run with exact f32 KV; every query attending to at least 16 positions adds its
// attention concentration to its (layer, KV head).
#pragma once

#include <string>

#include "common/status.h"
#include "engine/kv/precision.h"
#include "engine/llm/model.h"
#include "engine/llm/thread_pool.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {

StatusOr<HeadProfile> Calibrate(const Model& model, const Tokenizer& tokenizer, const std::string& text, int ctx,
                                int chunks, ThreadPool& pool);

}  // namespace tq::engine
