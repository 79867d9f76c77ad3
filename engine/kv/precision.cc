#include "engine/kv/precision.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

namespace tq::engine {

std::string_view PrecisionClassName(PrecisionClass c) {
  switch (c) {
    case PrecisionClass::kHot: return "hot";
    case PrecisionClass::kActive: return "active";
    case PrecisionClass::kSparse: return "sparse";
  }
  return "unknown";
}

StatusOr<HeadProfile> LoadHeadProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("head profile " + path + " cannot be read");
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    HeadProfile p;
    p.model = j.value("model", "");
    p.n_layers = j.at("n_layers").get<int>();
    p.n_kv_heads = j.at("n_kv_heads").get<int>();
    p.queries = j.value("queries", int64_t{0});
    p.method = j.value("method", std::string("concentration"));
    p.format = j.value("format", std::string());
    p.baseline_format = j.value("baseline_format", std::string());
    for (const char* key : {"kld", "kld_baseline"}) {
      if (!j.contains(key)) continue;
      std::vector<double>& dst = std::string(key) == "kld" ? p.kld : p.kld_baseline;
      for (const auto& row : j.at(key)) {
        for (const auto& v : row) dst.push_back(v.get<double>());
      }
      if (dst.size() != static_cast<size_t>(p.n_layers) * p.n_kv_heads) {
        return InvalidArgumentError("head profile " + path + ": '" + key + "' must be n_layers x n_kv_heads");
      }
    }
    if (p.method != "concentration" && p.method != "sensitivity") {
      return InvalidArgumentError("head profile " + path + ": unknown method '" + p.method + "'");
    }
    const auto& rows = j.at("score");
    if (p.n_layers <= 0 || p.n_kv_heads <= 0 || !rows.is_array() ||
        static_cast<int>(rows.size()) != p.n_layers) {
      return InvalidArgumentError("head profile " + path + ": 'score' must be n_layers rows");
    }
    for (const auto& row : rows) {
      if (!row.is_array() || static_cast<int>(row.size()) != p.n_kv_heads) {
        return InvalidArgumentError("head profile " + path +
                                    ": each 'score' row must have n_kv_heads numbers");
      }
      for (const auto& v : row) {
        const double s = v.get<double>();
        if (!std::isfinite(s))
          return InvalidArgumentError("head profile " + path + ": a score is not finite");
        p.score.push_back(s);
      }
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError("head profile " + path + " is not a valid profile: " + e.what());
  }
}

Status SaveHeadProfile(const HeadProfile& p, const std::string& path) {
  nlohmann::json j{{"model", p.model},     {"n_layers", p.n_layers}, {"n_kv_heads", p.n_kv_heads},
                   {"queries", p.queries}, {"method", p.method},     {"score", nlohmann::json::array()}};
  if (!p.format.empty()) j["format"] = p.format;
  if (!p.baseline_format.empty()) j["baseline_format"] = p.baseline_format;
  // Rows of n_kv_heads per layer.
  const auto rows = [&](const std::vector<double>& v) {
    nlohmann::json out = nlohmann::json::array();
    for (int l = 0; l < p.n_layers; ++l) {
      out.push_back(std::vector<double>(v.begin() + l * p.n_kv_heads, v.begin() + (l + 1) * p.n_kv_heads));
    }
    return out;
  };
  j["score"] = rows(p.score);
  if (p.kld.size() == p.score.size()) j["kld"] = rows(p.kld);
  if (p.kld_baseline.size() == p.score.size()) j["kld_baseline"] = rows(p.kld_baseline);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) return IoError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoToStatus(errno, "rename " + tmp);
  return Status::Ok();
}

namespace {

// "H:A:S" -> shares H/(H+A+S), A/(H+A+S).
StatusOr<Preset> ParseShares(std::string_view text) {
  const std::string s(text);
  double v[3];
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? s.find(':', at) : s.size();
    if (end == std::string::npos) break;
    const std::string part = s.substr(at, end - at);
    char* stop = nullptr;
    v[i] = part.empty() ? -1 : std::strtod(part.c_str(), &stop);
    if (part.empty() || *stop != '\0' || !std::isfinite(v[i]) || v[i] < 0) {
      return InvalidArgumentError("KV preset '" + s +
                                  "': shares must be HOT:ACTIVE:SPARSE, three numbers >= 0");
    }
    if (i == 2) {
      const double sum = v[0] + v[1] + v[2];
      if (sum <= 0) return InvalidArgumentError("KV preset '" + s + "': the shares sum to 0");
      return Preset{"shares", v[0] / sum, v[1] / sum};
    }
    at = end + 1;
  }
  return InvalidArgumentError("KV preset '" + s + "': shares must be HOT:ACTIVE:SPARSE, three numbers >= 0");
}

}  // namespace

StatusOr<Preset> FindPreset(std::string_view name) {
  static constexpr Preset kPresets[] = {{"code", 0.15, 0.70},
                                        {"longdoc", 0.10, 0.60},
                                        {"chat", 0.20, 0.65},
                                        {"auto", 0.10, 0.50},
                                        {"5x", 0.0, 1.0, "tq3c", "tq3c", false, 0, "tq3.5c/tq3c", 3.2},
                                        {"6x", 0.0, 1.0, "tq3c/tq2c", "tq3c/tq2c", false, 0, "tq3c/tq2.5c", 2.7},
                                        kDefaultPreset};
  for (const Preset& p : kPresets) {
    if (p.name == name) return p;
  }
  if (name.find(':') != std::string_view::npos && name.rfind("uniform:", 0) != 0) return ParseShares(name);
  return InvalidArgumentError(
      "unknown KV preset '" + std::string(name) +
      "' (known: default, 5x, 6x, code, longdoc, chat, auto, HOT:ACTIVE:SPARSE shares, uniform:FORMAT)");
}

ConcentrationStats::ConcentrationStats(int n_layers, int n_kv_heads)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      sum_(new std::atomic<double>[static_cast<size_t>(n_layers) * n_kv_heads]),
      count_(new std::atomic<int64_t>[static_cast<size_t>(n_layers) * n_kv_heads]) {
  for (int i = 0; i < n_layers * n_kv_heads; ++i) {
    sum_[i] = 0;
    count_[i] = 0;
  }
}

void ConcentrationStats::Add(int layer, int kv_head, const float* p, int n) {
  if (n < 16) return;
  double h = 0;
  for (int i = 0; i < n; ++i) {
    if (p[i] > 0) h -= p[i] * std::log(static_cast<double>(p[i]));
  }
  const size_t at = static_cast<size_t>(layer) * n_kv_heads_ + kv_head;
  sum_[at].fetch_add(1.0 - h / std::log(static_cast<double>(n)));
  count_[at].fetch_add(1);
}

HeadProfile ConcentrationStats::ToProfile(std::string model) const {
  HeadProfile p;
  p.model = std::move(model);
  p.n_layers = n_layers_;
  p.n_kv_heads = n_kv_heads_;
  for (int i = 0; i < n_layers_ * n_kv_heads_; ++i) {
    const int64_t c = count_[i].load();
    p.score.push_back(c ? sum_[i].load() / c : 0.0);
    p.queries += c;
  }
  return p;
}

HeadProfile DepthProfile(int n_layers, int n_kv_heads) {
  HeadProfile p;
  p.n_layers = n_layers;
  p.n_kv_heads = n_kv_heads;
  p.method = "depth";
  const double middle = (n_layers - 1) / 2.0;
  p.score.resize(static_cast<size_t>(n_layers) * n_kv_heads);
  for (int l = 0; l < n_layers; ++l) {
    for (int h = 0; h < n_kv_heads; ++h) p.score[static_cast<size_t>(l) * n_kv_heads + h] = std::abs(l - middle);
  }
  return p;
}

std::vector<PrecisionClass> AssignClasses(const HeadProfile& p, const Preset& preset) {
  const size_t n = p.score.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.score[a] > p.score[b]; });
  const size_t hot = static_cast<size_t>(std::lround(preset.hot * n));
  const size_t active = std::min(n - hot, static_cast<size_t>(std::lround(preset.active * n)));
  std::vector<PrecisionClass> out(n, PrecisionClass::kSparse);
  for (size_t i = 0; i < n; ++i) {
    out[order[i]] = i < hot ? PrecisionClass::kHot
                            : (i < hot + active ? PrecisionClass::kActive : PrecisionClass::kSparse);
  }
  return out;
}

}  // namespace tq::engine
