#include "engine/gpu/backend.h"
#include "kernels/formats/format.h"

namespace tq::gpu {

StatusOr<std::pair<std::string, std::string>> UniformFormats(const engine::KvLayout& layout) {
  const std::string why =
      "the GPU path stores one K and one V format for every layer and head; the KV layout is '" +
      layout.Describe() + "'";
  if (layout.n_layers() == 0 || layout.n_kv_heads() == 0) return InvalidArgumentError("no KV layers: " + why);
  if (!layout.all_paged()) {
    return InvalidArgumentError(
        "a layer keeps plain f32 rows (choose a paged format, e.g. --kv-k f16 --kv-v f16): " + why);
  }
  const engine::HeadKvFormat first = layout.head(0, 0);
  for (int l = 0; l < layout.n_layers(); ++l) {
    for (int h = 0; h < layout.n_kv_heads(); ++h) {
      const engine::HeadKvFormat& f = layout.head(l, h);
      if (f.k != first.k || f.v != first.v) {
        return InvalidArgumentError("layer " + std::to_string(l) + " head " + std::to_string(h) +
                                    " differs from layer 0 head 0 (use --kv-preset uniform:FMT or one "
                                    "--kv-k and --kv-v without boundary layers): " +
                                    why);
      }
    }
  }
  return std::make_pair(std::string(kernels::FormatName(first.k)), std::string(kernels::FormatName(first.v)));
}

}  // namespace tq::gpu
