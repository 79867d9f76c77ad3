// libFuzzer target: GgufFile::Parse on arbitrary bytes, then every getter on every key, a read of every
// tensor's first and last byte, the tokenizer built from the metadata (encoding and decoding a fixed text)
// and the model summary of `tqserve inspect`. Any crash, sanitizer report or hang is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/model/gguf.h"
#include "engine/model/model_info.h"
#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tq::engine::GgufFile::Parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;
  const tq::engine::GgufFile& f = **file;
  size_t sink = 0;
  for (const tq::engine::GgufKv& kv : f.metadata()) {
    sink += tq::engine::GgufValueToString(kv.value).size();
    sink += f.GetUint(kv.key).ok() + f.GetInt(kv.key).ok() + f.GetFloat(kv.key).ok() + f.GetBool(kv.key).ok();
    sink += f.GetString(kv.key).ok() + f.GetStringArray(kv.key).ok() + f.GetFloatArray(kv.key).ok();
    sink += f.GetIntArray(kv.key).ok();
  }
  for (const tq::engine::GgufTensorInfo& t : f.tensors()) {
    if (t.bytes > 0) sink += t.data[0] + t.data[t.bytes - 1];
  }
  auto tok = tq::engine::Tokenizer::FromGguf(f);
  if (tok.ok()) {
    const std::vector<tq::engine::TokenId> ids =
        (*tok)->Encode("Hello world 123 <s>\n\xC3\xA9", {.parse_special = true});
    for (tq::engine::TokenId id : ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) __builtin_trap();
    }
    sink += (*tok)->Decode(ids, {.unparse_special = true}).size();
  }
  sink += tq::engine::InspectModel(f, "fuzz").ok();
  volatile size_t keep = sink;
  (void)keep;
  return 0;
}
