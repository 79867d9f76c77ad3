// GET /kv/state: the KV cache as the built-in page draws it (server/http/web/index.html). Every number is the one
// /metrics exports from the same EngineStats (tiers, classes, cold cache, prefix cache, requests), plus where each
// (layer, KV head) lives (Engine::HeadPlacements, as gRPC GetServerInfo's heads).
#pragma once

#include <string>
#include <vector>

#include "engine/api.h"

namespace tq::server {

// JSON: {running, waiting, kv_usage_ratio, bits_per_value, n_layers, n_kv_heads,
//        tiers: [{tier, pages, bytes, capacity_bytes, reads, writes}], classes: [{class, heads, pages, bytes}],
//        heads: [{layer, kv_head, class, tier, format}] (layer-major),
//        cold_cache: {hits, late, misses, bytes}, prefix_cache: {entries, bytes, lookups, hits, hit_tokens},
//        cold_tier_unavailable}
std::string KvStateJson(const engine::EngineStats& stats, const std::vector<engine::HeadPlacement>& heads);

}  // namespace tq::server
