#include "server/http/kv_state.h"

#include <nlohmann/json.hpp>

#include "server/kv_metrics.h"

namespace tq::server {

std::string KvStateJson(const engine::EngineStats& st, const std::vector<engine::HeadPlacement>& heads) {
  using nlohmann::json;
  const engine::KvStoreStats& s = st.kv_store;
  json tiers = json::array();
  for (int t = 0; t < engine::kKvTiers; ++t) {
    const engine::KvTierUsage& u = s.tiers[t];
    if (!u.present) continue;
    tiers.push_back({{"tier", engine::KvTierName(static_cast<engine::KvTier>(t))},
                     {"pages", u.pages},
                     {"bytes", u.bytes},
                     {"capacity_bytes", u.capacity_bytes},
                     {"reads", u.io.reads},
                     {"writes", u.io.writes}});
  }
  json classes = json::array();
  for (int c = 0; c < 3; ++c) {
    classes.push_back({{"class", engine::PrecisionClassName(static_cast<engine::PrecisionClass>(c))},
                       {"heads", st.kv_class_heads[c]},
                       {"pages", s.class_pages[c]},
                       {"bytes", s.class_bytes[c]}});
  }
  json placements = json::array();
  int n_layers = 0, n_kv_heads = 0;
  for (const engine::HeadPlacement& h : heads) {
    placements.push_back({{"layer", h.layer},
                          {"kv_head", h.kv_head},
                          {"class", engine::PrecisionClassName(h.cls)},
                          {"tier", engine::KvTierName(h.tier)},
                          {"format", h.format}});
    n_layers = std::max(n_layers, h.layer + 1);
    n_kv_heads = std::max(n_kv_heads, h.kv_head + 1);
  }
  const engine::ColdCacheStats& cc = s.cold_cache;
  const engine::PrefixCacheStats& pc = st.prefix_cache;
  json out{{"running", st.running},
           {"waiting", st.waiting},
           {"kv_usage_ratio", KvUsageRatio(s)},
           {"bits_per_value", st.kv_bits_per_value},
           {"n_layers", n_layers},
           {"n_kv_heads", n_kv_heads},
           {"tiers", tiers},
           {"classes", classes},
           {"heads", placements},
           {"cold_cache",
            {{"hits", cc.prefetch_hits}, {"late", cc.prefetch_late}, {"misses", cc.misses}, {"bytes", cc.cached_bytes}}},
           {"prefix_cache",
            {{"entries", pc.entries},
             {"bytes", pc.bytes},
             {"lookups", pc.lookups},
             {"hits", pc.hits},
             {"hit_tokens", pc.hit_tokens}}},
           {"cold_tier_unavailable", s.cold_unavailable}};
  return out.dump();
}

}  // namespace tq::server
