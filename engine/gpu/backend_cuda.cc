// Backend on GpuModel (TQ_ENABLE_CUDA builds).
#include <spdlog/fmt/fmt.h>

#include "engine/gpu/backend.h"
#include "engine/gpu/gpu_model.h"

namespace tq::gpu {
namespace {

class CudaKv final : public BackendKv {
 public:
  explicit CudaKv(std::unique_ptr<GpuSequence> seq) : seq_(std::move(seq)) {}
  uint64_t bytes() const override { return seq_->bytes(); }
  GpuSequence& seq() { return *seq_; }

 private:
  std::unique_ptr<GpuSequence> seq_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<GpuModel> model, DeviceInfo device)
      : model_(std::move(model)), device_(device) {}

  StatusOr<std::unique_ptr<BackendKv>> NewKv() override {
    TQ_ASSIGN_OR_RETURN(std::unique_ptr<GpuSequence> seq, model_->NewSequence());
    return std::unique_ptr<BackendKv>(new CudaKv(std::move(seq)));
  }

  Status Forward(BackendKv& kv, std::span<const int32_t> tokens, int first_pos, bool want_logits,
                 std::vector<float>* logits) override {
    return model_->Forward(static_cast<CudaKv&>(kv).seq(), tokens, first_pos, want_logits, logits);
  }

  std::shared_ptr<engine::KvPageStore> store() const override { return model_->shared_store(); }
  std::array<uint64_t, 3> class_pairs() const override { return model_->class_pairs(); }

  std::string Describe() const override {
    const GpuModelOptions& o = model_->options();
    return fmt::format(
        "{} (sm_{}{}, {} MiB): k={} v={}, {} tokens per KV head in the pools ({} MiB), {:.0f}% of "
        "heads warm in pinned host memory, {:.0f}% cold on disk, {} MiB of fp16 weights",
        device_.name, device_.sm_major, device_.sm_minor, device_.total_bytes >> 20, o.k_format, o.v_format,
        model_->pool_pages() * kernels::kPageTokens, PoolBytes() >> 20, 100.0 * o.warm_heads_fraction,
        100.0 * o.cold_heads_fraction, model_->weight_bytes() >> 20);
  }

 private:
  // Bytes of page slots in the device and pinned pools.
  uint64_t PoolBytes() const {
    const engine::KvStoreStats st = model_->store().Stats();
    return st.tiers[0].slots * st.tiers[0].slot_bytes + st.tiers[1].slots * st.tiers[1].slot_bytes;
  }

  std::unique_ptr<GpuModel> model_;
  DeviceInfo device_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> Backend::Create(const engine::Model& model,
                                                   const GpuModelOptions& options) {
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<GpuModel> m, GpuModel::Create(model, options));  // checks, probes
  TQ_ASSIGN_OR_RETURN(DeviceInfo device, ProbeDevice());
  return std::unique_ptr<Backend>(new CudaBackend(std::move(m), device));
}

}  // namespace tq::gpu
