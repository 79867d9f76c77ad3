// SequenceKv::Demote: re-encoding a head's full pages down to its current formats (online adaptation moved the
// head to a class with fewer bits). Kept apart from kv_cache.cc, which holds the hot path.
#include <spdlog/spdlog.h>

#include <cstring>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_cache_pages.h"

namespace tq::engine {

Status SequenceKv::Demote(int layer, int kv_head) {
  if (!layout_ || layout_->layer(layer).plain || store_ == nullptr) return Status::Ok();
  using kernels::KvFormat;
  const HeadKvFormat& to = layout_->head(layer, kv_head);
  HeadPages& hp = pages_[layer][kv_head];
  const int d = head_dim_;
  constexpr int kPage = kernels::kPageTokens;
  std::vector<float> x(static_cast<size_t>(kPage) * d);
  hp.prefetched = {};  // the pages get new ids
  hp.holds.Drop();     // and the old bytes go
  for (size_t page_index = 0; page_index < hp.full.size(); ++page_index) {
    HeadPages::Full& page = hp.full[page_index];
    if (page.released) continue;
    const bool k_down = kernels::BitsPerValue(to.k, d) < kernels::BitsPerValue(page.k, d);
    const bool v_down = kernels::BitsPerValue(to.v, d) < kernels::BitsPerValue(page.v, d);
    if (!k_down && !v_down) continue;
    const uint8_t* data = page.ram;
    PageBytes hold;
    if (data == nullptr) {
      TQ_ASSIGN_OR_RETURN(PinnedPage pin, store_->Pin(page.id));
      data = pin.data;
      hold = std::move(pin.hold);
    }
    const KvFormat old_fmt[2] = {page.k, page.v};
    const KvFormat new_fmt[2] = {k_down ? to.k : page.k, v_down ? to.v : page.v};
    const size_t old_k = kernels::PageBytes(page.k, d).value();
    const size_t new_k = kernels::PageBytes(new_fmt[0], d).value();
    std::vector<uint8_t> bytes(new_k + kernels::PageBytes(new_fmt[1], d).value());
    std::vector<float> new_sink[2] = {hp.xf.k_sink, hp.xf.v_sink};
    for (int kv = 0; kv < 2; ++kv) {
      const uint8_t* src = data + (kv == 0 ? 0 : old_k);
      const size_t src_bytes = kernels::PageBytes(old_fmt[kv], d).value();
      std::span<uint8_t> dest(bytes.data() + (kv == 0 ? 0 : new_k), kv == 0 ? new_k : bytes.size() - new_k);
      if (old_fmt[kv] == new_fmt[kv]) {
        std::memcpy(dest.data(), src, src_bytes);
        continue;
      }
      // Keys and values stay in the head's domain (both classes compress K and V and share the head's transform,
      // key offsets included).
      TQ_RETURN_IF_ERROR(layout_->codec(old_fmt[kv]).DecodePage({src, src_bytes}, x.data()));
      // Page 0's token 0 was exact with the sink corrections: re-encode that, and keep the new difference
      // (k_sink is in raw key space, v_sink in the stored space).
      const bool sink = page_index == 0 && new_sink[kv].size() == static_cast<size_t>(d);
      const std::vector<float>* key_scale = kv == 0 ? &hp.xf.k_scale : nullptr;
      if (sink) {
        for (int i = 0; i < d; ++i) x[i] += new_sink[kv][i] / (key_scale ? (*key_scale)[i] : 1.0f);
      }
      TQ_RETURN_IF_ERROR(layout_->codec(new_fmt[kv]).EncodePage(x.data(), kPage, dest, PageNormRule(kv)));
      if (sink) {
        TQ_ASSIGN_OR_RETURN(new_sink[kv], SinkDifference(layout_->codec(new_fmt[kv]), dest, x.data(), key_scale));
      }
    }
    PageInfo info;
    if (const PageInfo* old = store_->Info(page.id); old != nullptr) info = *old;
    if (page_index == 0) {
      info.transform = hp.xf;
      info.transform.k_sink = new_sink[0];
      info.transform.v_sink = new_sink[1];
    }
    info.k = new_fmt[0];
    info.v = new_fmt[1];
    StatusOr<PageId> id = store_->Store(to.cls, bytes, std::move(info));
    if (!id.ok()) {
      // No room for the smaller copy: the page keeps its precision (and its place); nothing is lost.
      spdlog::warn("KV demotion of layer {} head {}: {}", layer, kv_head, id.status().ToString());
      return Status::Ok();
    }
    if (page.id != kNoPage) store_->Release(page.id);
    if (page_index == 0) {
      hp.xf.k_sink = std::move(new_sink[0]);
      hp.xf.v_sink = std::move(new_sink[1]);
    }
    page = {*id, store_->RamBytes(*id), new_fmt[0], new_fmt[1]};
  }
  return Status::Ok();
}

}  // namespace tq::engine
