#include "engine/runner/forward_path.h"

#include <string>

#include "kernels/formats/format.h"

namespace tq::engine {

KvNeed& KvNeed::operator+=(const KvNeed& o) {
  for (int i = 0; i < 3; ++i) pages[i] += o.pages[i];
  return *this;
}

namespace {

class CpuPath final : public ForwardPath {
 public:
  CpuPath(const Model& model, ThreadPool& pool, const std::shared_ptr<const KvLayout>& layout)
      : model_(model), pool_(pool), layout_(layout) {}

  bool on_gpu() const override { return false; }
  Status Supports(bool, bool) const override { return Status::Ok(); }
  KvNeed Need(int have, int n, int max_pass) const override {
    KvNeed need;
    need.pages = PagesForTokens(*layout_, have, n, max_pass);
    return need;
  }
  Status Forward(const std::vector<BatchToken>& batch, const std::vector<PathKv*>&, std::vector<float>* logits,
                 std::vector<float>* hidden) override {
    return model_.Forward(batch, pool_, logits, hidden);
  }

 private:
  const Model& model_;
  ThreadPool& pool_;
  const std::shared_ptr<const KvLayout>& layout_;
};

class GpuPath final : public ForwardPath {
 public:
  explicit GpuPath(std::unique_ptr<gpu::Backend> backend)
      : gpu_(std::move(backend)), class_pairs_(gpu_->class_pairs()) {}

  bool on_gpu() const override { return true; }
  Status Supports(bool embed, bool lora) const override {
    if (embed) return UnimplementedError("embeddings are not computed on the GPU path yet");
    if (lora) return UnimplementedError("LoRA adapters do not run on the GPU path yet");
    return Status::Ok();
  }
  // Each (layer, KV head) pair gets a page of its class when 128 tokens fill (the GPU encodes whole pages only,
  // so the pass length does not matter).
  KvNeed Need(int have, int n, int) const override {
    constexpr int kPage = kernels::kPageTokens;
    const uint64_t filled = static_cast<uint64_t>((have + n) / kPage - have / kPage);
    KvNeed need;
    for (int c = 0; c < 3; ++c) need.pages[c] = filled * class_pairs_[c];
    return need;
  }
  // The GPU runs one sequence's run of consecutive tokens at a time (a step lists each sequence's tokens
  // together, and only its last one may want logits).
  Status Forward(const std::vector<BatchToken>& batch, const std::vector<PathKv*>& kvs, std::vector<float>* logits,
                 std::vector<float>*) override {
    logits->clear();
    std::vector<int32_t> tokens;
    std::vector<float> row;
    for (size_t i = 0; i < batch.size();) {
      PathKv& kv = *kvs[i];
      tokens.clear();
      size_t j = i;
      for (; j < batch.size() && kvs[j] == kvs[i]; ++j) {
        if (batch[j].want_logits && j + 1 < batch.size() && kvs[j + 1] == kvs[i]) {
          return InternalError("the GPU path takes logits only at the last token of a sequence's run");
        }
        tokens.push_back(batch[j].token);
      }
      if (!kv) {
        TQ_ASSIGN_OR_RETURN(kv, gpu_->NewKv());
      }
      const bool want = batch[j - 1].want_logits;
      TQ_RETURN_IF_ERROR(gpu_->Forward(*kv, tokens, batch[i].pos, want, &row));
      if (want) logits->insert(logits->end(), row.begin(), row.end());
      i = j;
    }
    return Status::Ok();
  }

 private:
  std::unique_ptr<gpu::Backend> gpu_;
  std::array<uint64_t, 3> class_pairs_;
};

}  // namespace

std::unique_ptr<ForwardPath> MakeCpuPath(const Model& model, ThreadPool& pool,
                                         const std::shared_ptr<const KvLayout>& layout) {
  return std::make_unique<CpuPath>(model, pool, layout);
}

std::unique_ptr<ForwardPath> MakeGpuPath(std::unique_ptr<gpu::Backend> backend) {
  return std::make_unique<GpuPath>(std::move(backend));
}

}  // namespace tq::engine
