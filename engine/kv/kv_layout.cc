// KvLayout: formats and precision classes per (layer, KV head), from the model's shape and the KV options; page
// counts per class for admission.
#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "common/fnv.h"

namespace tq::engine {
namespace {

using kernels::KvFormat;

constexpr int kPage = kernels::kPageTokens;

StatusOr<KvFormat> ParseFormat(const std::string& name, int head_dim) {
  TQ_ASSIGN_OR_RETURN(KvFormat f, kernels::FormatFromName(name));
  TQ_RETURN_IF_ERROR(kernels::CheckSupported(f, head_dim));
  return f;
}

// "FMT" or "KFMT/VFMT".
StatusOr<HeadKvFormat> ParseClassFormat(const std::string& text, int head_dim, PrecisionClass cls) {
  const size_t slash = text.find('/');
  HeadKvFormat h;
  h.cls = cls;
  TQ_ASSIGN_OR_RETURN(h.k, ParseFormat(text.substr(0, slash), head_dim));
  TQ_ASSIGN_OR_RETURN(h.v, ParseFormat(slash == std::string::npos ? text : text.substr(slash + 1), head_dim));
  return h;
}

// The format a preset's "auto" means for a class: its preferred format where that supports this head_dim and
// fits its budget there, else `fallback` (the preset's active_format or sparse_format).
std::string AutoFormat(const Preset& preset, std::string_view fallback, int head_dim) {
  if (!preset.preferred_format.empty()) {
    const StatusOr<HeadKvFormat> h =
        ParseClassFormat(std::string(preset.preferred_format), head_dim, PrecisionClass::kActive);
    if (h.ok() && (kernels::PageBitsPerValue(h->k, head_dim) + kernels::PageBitsPerValue(h->v, head_dim)) / 2 <=
                      preset.max_page_bits) {
      return std::string(preset.preferred_format);
    }
  }
  return std::string(fallback);
}

}  // namespace


StatusOr<std::shared_ptr<const KvLayout>> KvLayout::Create(const HParams& hp, const KvSpec& spec) {
  auto layout = std::make_shared<KvLayout>();
  layout->n_kv_heads_ = hp.n_kv_heads;
  layout->head_dim_ = hp.head_dim;
  layout->spec_ = spec;
  const int d = hp.head_dim, L = hp.n_layers, H = hp.n_kv_heads;
  if (spec.key_scale != "queries" && spec.key_scale != "keys") {
    return InvalidArgumentError("key scale '" + spec.key_scale + "': expected queries or keys");
  }
  if (spec.boundary_layers < -1 || 2 * spec.boundary_layers > L) {
    return InvalidArgumentError("boundary layers " + std::to_string(spec.boundary_layers) + " must be in [0, " +
                                std::to_string(L / 2) + "] (or -1: the preset's own)");
  }
  // -1 = auto: the preset's own (Preset::boundary_layers, resolved below), 0 without a preset. An explicit value
  // wins over the preset's, smaller or larger.
  int boundary_layers = std::max(spec.boundary_layers, 0);
  layout->spec_.boundary_layers = boundary_layers;
  // Per-head formats before the boundary rule.
  std::vector<HeadKvFormat> heads(static_cast<size_t>(L) * H);
  bool plain = false;
  if (spec.preset.empty()) {
    const bool f16_ok = kernels::CheckSupported(KvFormat::kF16, d).ok();
    const std::string f32(kernels::FormatName(KvFormat::kF32));
    const std::string k = spec.k_format == "auto" ? (f16_ok ? "f16" : f32) : spec.k_format;
    const std::string v = spec.v_format == "auto" ? (f16_ok ? "f16" : f32) : spec.v_format;
    if (k == f32 || v == f32) {
      if (k != v) return InvalidArgumentError("f32 KV must be used for both K and V (got k=" + k + ", v=" + v + ")");
      plain = true;
    } else {
      TQ_ASSIGN_OR_RETURN(HeadKvFormat h, ParseClassFormat(k + "/" + v, d, PrecisionClass::kHot));
      h.cls = (h.k == KvFormat::kF16 && h.v == KvFormat::kF16) ? PrecisionClass::kHot : PrecisionClass::kSparse;
      std::fill(heads.begin(), heads.end(), h);
    }
    layout->description_ = "k=" + k + " v=" + v;
  } else if (spec.preset.rfind("uniform:", 0) == 0) {
    TQ_ASSIGN_OR_RETURN(HeadKvFormat h, ParseClassFormat(spec.preset.substr(8), d, PrecisionClass::kSparse));
    // uniform:f16 is KV uncompressed: every head HOT (in the hot tier), as without a preset.
    if (h.k == KvFormat::kF16 && h.v == KvFormat::kF16) h.cls = PrecisionClass::kHot;
    std::fill(heads.begin(), heads.end(), h);
    layout->description_ = "preset " + spec.preset;
  } else {
    TQ_ASSIGN_OR_RETURN(Preset preset, FindPreset(spec.preset));
    HeadProfile profile;
    if (!spec.profile_path.empty()) {
      TQ_ASSIGN_OR_RETURN(profile, LoadHeadProfile(spec.profile_path));
    } else if (!preset.needs_profile) {
      profile = DepthProfile(L, H);
    } else {
      return InvalidArgumentError("KV preset '" + spec.preset +
                                  "' ranks heads by importance and needs a head profile (tqserve calibrate)");
    }
    if (profile.n_layers != L || profile.n_kv_heads != H) {
      return InvalidArgumentError("head profile " + spec.profile_path + " is for " + std::to_string(profile.n_layers) +
                                  " layers x " + std::to_string(profile.n_kv_heads) + " KV heads; the model has " +
                                  std::to_string(L) + " x " + std::to_string(H));
    }
    const std::string active_name =
        spec.active_format == "auto" ? AutoFormat(preset, preset.active_format, d) : spec.active_format;
    const std::string sparse_name =
        spec.sparse_format == "auto" ? AutoFormat(preset, preset.sparse_format, d) : spec.sparse_format;
    TQ_ASSIGN_OR_RETURN(HeadKvFormat hot, ParseClassFormat(spec.hot_format, d, PrecisionClass::kHot));
    TQ_ASSIGN_OR_RETURN(HeadKvFormat active, ParseClassFormat(active_name, d, PrecisionClass::kActive));
    TQ_ASSIGN_OR_RETURN(HeadKvFormat sparse, ParseClassFormat(sparse_name, d, PrecisionClass::kSparse));
    layout->class_formats_ = {hot, active, sparse};
    layout->ranked_ = true;
    if (spec.boundary_layers < 0) boundary_layers = std::min(preset.boundary_layers, L / 2);
    layout->spec_.boundary_layers = boundary_layers;  // WithClasses (adaptation) keeps them f16 too
    const std::vector<PrecisionClass> classes = AssignClasses(profile, preset);
    for (size_t i = 0; i < heads.size(); ++i) {
      heads[i] = classes[i] == PrecisionClass::kHot ? hot : (classes[i] == PrecisionClass::kActive ? active : sparse);
    }
    layout->description_ = "preset " + spec.preset + " (hot " + spec.hot_format + ", active " + active_name +
                           ", sparse " + sparse_name + "; heads ranked by " +
                           (spec.profile_path.empty() ? std::string("depth, no profile") : profile.method) + ")";
  }
  for (int l = 0; l < L; ++l) {
    LayerKvFormat f;
    f.plain = plain;
    if (hp.arch != nullptr) {
      f.rope = {hp.n_rot, hp.arch->rope, hp.RopeBase(l)};
      if (hp.IsSlidingLayer(l)) f.window = hp.sliding_window;
    }
    const bool edge = l < boundary_layers || l >= L - boundary_layers;
    if (!plain) {
      f.heads.assign(heads.begin() + static_cast<size_t>(l) * H, heads.begin() + static_cast<size_t>(l + 1) * H);
      if (edge) {
        for (HeadKvFormat& h : f.heads) h = {KvFormat::kF16, KvFormat::kF16, PrecisionClass::kHot};
      }
    }
    layout->layers_.push_back(std::move(f));
  }
  if (boundary_layers > 0 && !plain) {
    layout->description_ += ", f16 in layers 0-" + std::to_string(boundary_layers - 1) + " and " +
                            std::to_string(L - boundary_layers) + "-" + std::to_string(L - 1);
  }
  std::vector<HeadKvFormat> in_use = layout->ranked_ ? std::vector<HeadKvFormat>(layout->class_formats_.begin(),
                                                                                  layout->class_formats_.end())
                                                    : std::vector<HeadKvFormat>{};
  for (const LayerKvFormat& f : layout->layers_) in_use.insert(in_use.end(), f.heads.begin(), f.heads.end());
  {
    for (const HeadKvFormat& h : in_use) {
      for (KvFormat fmt : {h.k, h.v, KvFormat::kF16}) {
        if (layout->codecs_.count(fmt)) continue;
        TQ_ASSIGN_OR_RETURN(auto codec, kernels::KvCodec::Create(fmt, d));
        layout->codecs_[fmt] = std::move(codec);
      }
    }
  }
  return std::shared_ptr<const KvLayout>(std::move(layout));
}

namespace {

// Bits per value of a layout averaged over layers, heads and K/V; plain f32 layers count 32.
template <typename Bits>
double MeanBits(const std::vector<LayerKvFormat>& layers, int n_kv_heads, Bits bits) {
  double sum = 0;
  int64_t n = 0;
  for (const LayerKvFormat& f : layers) {
    if (f.plain) {
      sum += 64.0 * n_kv_heads;
      n += n_kv_heads;
      continue;
    }
    for (const HeadKvFormat& h : f.heads) {
      sum += bits(h.k) + bits(h.v);
      ++n;
    }
  }
  return n == 0 ? 0 : sum / (2.0 * n);
}

}  // namespace

double KvLayout::bits_per_value() const {
  return MeanBits(layers_, n_kv_heads_, [&](KvFormat f) { return kernels::BitsPerValue(f, head_dim_); });
}

double KvLayout::page_bits_per_value() const {
  return MeanBits(layers_, n_kv_heads_, [&](KvFormat f) { return kernels::PageBitsPerValue(f, head_dim_); });
}

std::array<int, 3> KvLayout::class_heads() const {
  std::array<int, 3> out{};
  for (const LayerKvFormat& f : layers_) {
    if (f.plain) out[0] += n_kv_heads_;
    for (const HeadKvFormat& h : f.heads) ++out[static_cast<int>(h.cls)];
  }
  return out;
}

uint64_t KvLayout::fingerprint() const {
  Fnv1a64 h;
  h.Mix(static_cast<uint64_t>(kPage)).Mix(static_cast<uint64_t>(head_dim_)).Mix(static_cast<uint64_t>(n_kv_heads_));
  h.Mix(layers_.size());
  for (const LayerKvFormat& f : layers_) {
    h.Mix(f.plain ? 1 : 0);
    for (const HeadKvFormat& hf : f.heads) {
      h.Mix(static_cast<uint64_t>(hf.k) | static_cast<uint64_t>(hf.v) << 8 | static_cast<uint64_t>(hf.cls) << 16);
    }
  }
  return h.value();
}

bool KvLayout::adaptable() const {
  // Both classes must transform their heads alike (FixTransform): compressed K and compressed V in each.
  for (int c = 1; c <= 2; ++c) {
    if (class_formats_[c].k == KvFormat::kF16 || class_formats_[c].v == KvFormat::kF16) return false;
  }
  return ranked_ && all_paged();
}

std::vector<PrecisionClass> KvLayout::classes() const {
  std::vector<PrecisionClass> out;
  for (const LayerKvFormat& f : layers_) {
    for (const HeadKvFormat& h : f.heads) out.push_back(h.cls);
  }
  return out;
}

std::shared_ptr<const KvLayout> KvLayout::WithClasses(const std::vector<PrecisionClass>& classes) const {
  auto out = std::make_shared<KvLayout>(*this);
  for (int l = 0; l < n_layers(); ++l) {
    const bool edge = l < spec_.boundary_layers || l >= n_layers() - spec_.boundary_layers;
    if (edge) continue;
    for (int h = 0; h < n_kv_heads_; ++h) {
      const PrecisionClass c = classes[static_cast<size_t>(l) * n_kv_heads_ + h];
      out->layers_[l].heads[h] = class_formats_[static_cast<int>(c)];
    }
  }
  return out;
}

bool KvLayout::all_paged() const {
  for (const LayerKvFormat& f : layers_) {
    if (f.plain) return false;
  }
  return !layers_.empty();
}

std::array<uint32_t, 3> KvLayout::class_page_bytes() const {
  std::array<uint32_t, 3> out{};
  for (const LayerKvFormat& f : layers_) {
    for (const HeadKvFormat& h : f.heads) {
      const size_t bytes = kernels::PageBytes(h.k, head_dim_).value() + kernels::PageBytes(h.v, head_dim_).value();
      uint32_t& o = out[static_cast<int>(h.cls)];
      o = std::max<uint32_t>(o, static_cast<uint32_t>(bytes));
    }
  }
  return out;
}

std::array<double, 3> KvLayout::class_bytes_per_token() const {
  std::array<double, 3> out{};
  for (const LayerKvFormat& f : layers_) {
    for (const HeadKvFormat& h : f.heads) {
      const size_t bytes = kernels::PageBytes(h.k, head_dim_).value() + kernels::PageBytes(h.v, head_dim_).value();
      out[static_cast<int>(h.cls)] += static_cast<double>(bytes) / kPage;
    }
  }
  return out;
}

int WindowPageCap(int window, int max_pass) {
  return (2 * std::max(1, max_pass) + window - 1) / kPage + 2;
}

std::array<uint64_t, 3> PagesForTokens(const KvLayout& layout, int have, int n, int max_pass) {
  const int crossings = (have + n) / kPage - have / kPage;
  std::array<uint64_t, 3> out{};
  for (int l = 0; l < layout.n_layers(); ++l) {
    const LayerKvFormat& f = layout.layer(l);
    const int pages = f.window > 0 ? std::min(crossings, WindowPageCap(f.window, max_pass)) : crossings;
    for (const HeadKvFormat& h : f.heads) out[static_cast<int>(h.cls)] += static_cast<uint64_t>(pages);
  }
  return out;
}

std::string KvLayout::Describe() const {
  const auto c = class_heads();
  return description_ + " [heads hot " + std::to_string(c[0]) + ", active " + std::to_string(c[1]) + ", sparse " +
         std::to_string(c[2]) + "]";
}

}  // namespace tq::engine
