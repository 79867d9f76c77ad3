#include "engine/llm/arch.h"

#include <string>

namespace tq::engine {
namespace {

constexpr ArchInfo kArchs[] = {
    {"llama", RopeStyle::kAdjacent, false},
    {"mistral", RopeStyle::kAdjacent, false},
    {"qwen2", RopeStyle::kHalves, true},
};

}  // namespace

StatusOr<const ArchInfo*> FindArch(std::string_view name) {
  std::string known;
  for (const ArchInfo& arch : kArchs) {
    if (arch.name == name) return &arch;
    known += (known.empty() ? "" : ", ") + std::string(arch.name);
  }
  return UnimplementedError("architecture '" + std::string(name) + "' is not supported (supported: " + known + ")");
}

}  // namespace tq::engine
