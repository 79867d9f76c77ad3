// GGUF reader: the real stories260K file, hand-built files of every value type, and corruption of all kinds
// (truncation at many offsets, flipped bytes, bogus counts, lengths, types and offsets): always a Status,
// never a crash.
#include "engine/model/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "tests/unit/engine/gguf_builder.h"
#include "tests/unit/engine/test_paths.h"

namespace tq::engine {
namespace {

using kernels::WeightType;
using testing::GgufBuilder;

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(GgufTest, OpensStories260K) {
  TQ_SKIP_IF_MISSING(testing::Stories260KPath());
  auto file = GgufFile::Open(testing::Stories260KPath());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetUint("llama.block_count"), 5u);
  EXPECT_EQ(*f.GetUint("llama.embedding_length"), 64u);
  EXPECT_EQ(*f.GetUint("llama.attention.head_count"), 8u);
  EXPECT_EQ(*f.GetUint("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "llama");
  auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 512u);
  auto scores = f.GetFloatArray("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.ok());
  EXPECT_EQ(scores->size(), 512u);

  const GgufTensorInfo* emb = f.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, WeightType::kF32);
  EXPECT_EQ(emb->dims[0], 64);
  EXPECT_EQ(emb->dims[1], 512);
  EXPECT_EQ(emb->bytes, 64u * 512u * 4u);
  // Tensors lie inside the file, aligned, and do not overlap.
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.bytes, f.file_size()) << t.name;
    total += t.bytes;
  }
  EXPECT_LE(f.data_offset() + total, f.file_size());
  // Values are finite floats.
  const float* w = reinterpret_cast<const float*>(emb->data);
  for (int k = 0; k < 64; ++k) EXPECT_TRUE(std::isfinite(w[k]));
}

TEST(GgufTest, TypedGettersNameTheKey) {
  TQ_SKIP_IF_MISSING(testing::Stories260KPath());
  auto file = GgufFile::Open(testing::Stories260KPath());
  ASSERT_TRUE(file.ok());
  const GgufFile& f = **file;
  auto missing = f.GetUint("llama.no_such_key");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("llama.no_such_key"), std::string::npos);
  auto wrong = f.GetUint("general.architecture");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("general.architecture"), std::string::npos);
  EXPECT_EQ(*f.GetUintOr("llama.no_such_key", 7), 7u);
  EXPECT_FALSE(f.GetUintOr("general.architecture", 7).ok());
}

TEST(GgufTest, MissingFileIsNotFound) {
  auto file = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
}

TEST(GgufTest, EveryValueTypeRoundTrips) {
  GgufBuilder b;
  b.AddU8("a.u8", 200).AddI8("a.i8", -100).AddU16("a.u16", 60000).AddI16("a.i16", -30000);
  b.AddU32("a.u32", 4000000000u).AddI32("a.i32", -2000000000).AddF32("a.f32", 1.5f).AddBool("a.bool", true);
  b.AddString("a.str", "hello")
      .AddU64("a.u64", 1ull << 40)
      .AddI64("a.i64", -(1ll << 40))
      .AddF64("a.f64", 0.25);
  b.AddStringArray("a.strs", {"x", "", "yz"});
  b.AddF32Array("a.f32s", {1.0f, -2.0f});
  b.AddI32Array("a.i32s", {3, -4, 5});
  b.AddNestedArray("a.nested");
  b.AddTensor("t", {32, 2}, WeightType::kQ8_0);
  std::vector<uint8_t> bytes = b.Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const GgufFile& f = **file;
  EXPECT_EQ(*f.GetUint("a.u8"), 200u);
  EXPECT_EQ(*f.GetInt("a.i8"), -100);
  EXPECT_EQ(*f.GetUint("a.u16"), 60000u);
  EXPECT_EQ(*f.GetInt("a.i16"), -30000);
  EXPECT_EQ(*f.GetUint("a.u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("a.i32"), -2000000000);
  EXPECT_EQ(*f.GetFloat("a.f32"), 1.5);
  EXPECT_EQ(*f.GetBool("a.bool"), true);
  EXPECT_EQ(*f.GetString("a.str"), "hello");
  EXPECT_EQ(*f.GetUint("a.u64"), 1ull << 40);
  EXPECT_EQ(*f.GetInt("a.i64"), -(1ll << 40));
  EXPECT_EQ(*f.GetFloat("a.f64"), 0.25);
  EXPECT_FALSE(f.GetUint("a.i8").ok());  // negative
  auto strs = f.GetStringArray("a.strs");
  ASSERT_TRUE(strs.ok());
  ASSERT_EQ(strs->size(), 3u);
  EXPECT_EQ((*strs)[2], "yz");
  EXPECT_EQ(*f.GetFloatArray("a.f32s"), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(*f.GetIntArray("a.i32s"), (std::vector<int64_t>{3, -4, 5}));
  const GgufValue* nested = f.Find("a.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[1].count, 2u);
  const GgufTensorInfo* t = f.FindTensor("t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bytes, 2u * 34u);
  EXPECT_EQ(GgufValueToString(*f.Find("a.strs")), "[string x 3] \"x\", \"\", \"yz\"");
}

TEST(GgufTest, AlignmentFromMetadata) {
  GgufBuilder b;
  b.SetAlignment(64);
  b.AddTensor("a", {3}, WeightType::kF32).AddTensor("b", {5}, WeightType::kF16);
  std::vector<uint8_t> bytes = b.Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->alignment(), 64u);
  EXPECT_EQ((*file)->data_offset() % 64, 0u);
  EXPECT_EQ((*file)->FindTensor("b")->offset, 64u);
}

void ExpectError(const std::vector<uint8_t>& bytes, std::string_view needle) {
  auto file = GgufFile::Parse(bytes);
  ASSERT_FALSE(file.ok()) << "expected an error naming '" << needle << "'";
  EXPECT_NE(file.status().message().find(needle), std::string::npos) << file.status().ToString();
}

TEST(GgufTest, BogusHeaderFields) {
  ExpectError({}, "empty");
  ExpectError({'G', 'G', 'U'}, "truncated");
  ExpectError({'G', 'G', 'U', 'X', 3, 0, 0, 0}, "magic");
  GgufBuilder b;
  b.set_version(1);
  ExpectError(b.Build(), "version 1");
  b.set_version(7);
  ExpectError(b.Build(), "version 7");
  GgufBuilder counts;
  counts.set_kv_count_override(1ull << 60);
  ExpectError(counts.Build(), "metadata count");
  GgufBuilder tensors;
  tensors.set_tensor_count_override(1ull << 40);
  ExpectError(tensors.Build(), "tensor count");
}

TEST(GgufTest, BogusValues) {
  {
    GgufBuilder b;
    b.AddRawKv("x.type", 99, {});
    ExpectError(b.Build(), "x.type");
  }
  {
    GgufBuilder b;  // a string whose length runs past the end
    std::vector<uint8_t> v(8, 0);
    v[7] = 0x10;
    b.AddRawKv("x.len", 8, v);
    ExpectError(b.Build(), "x.len");
  }
  {
    GgufBuilder b;  // an array of 2^50 uint32 elements
    std::vector<uint8_t> v = {4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0};
    b.AddRawKv("x.arr", 9, v);
    ExpectError(b.Build(), "x.arr");
  }
  {
    GgufBuilder b;
    b.AddRawKv("x.bool", 7, {2});
    ExpectError(b.Build(), "x.bool");
  }
  {
    GgufBuilder b;
    b.AddU32("dup", 1).AddU32("dup", 2);
    ExpectError(b.Build(), "'dup' appears twice");
  }
  {
    GgufBuilder b;
    b.AddString("general.alignment", "32");
    ExpectError(b.Build(), "general.alignment");
    GgufBuilder c;
    c.AddU32("general.alignment", 48);
    ExpectError(c.Build(), "power of two");
  }
}

TEST(GgufTest, BogusTensorInfos) {
  {
    GgufBuilder b;
    b.AddTensor("w.type", {32}, static_cast<WeightType>(77));
    ExpectError(b.Build(), "w.type");
  }
  {
    GgufBuilder b;
    b.AddTensor("w.dims", {32, 1, 1, 1, 1}, WeightType::kF32);
    ExpectError(b.Build(), "w.dims");
  }
  {
    GgufBuilder b;
    b.AddTensor("w.block", {33}, WeightType::kQ4_0);
    ExpectError(b.Build(), "w.block");
  }
  {
    GgufBuilder b;
    b.AddTensor("w.huge", {1ll << 40, 1ll << 30}, WeightType::kF32);
    ExpectError(b.Build(), "w.huge");
  }
  {
    GgufBuilder b;
    b.AddTensor("w.offset", {8}, WeightType::kF32, /*offset_override=*/1ull << 40);
    ExpectError(b.Build(), "w.offset");
    GgufBuilder c;
    c.AddTensor("w.unaligned", {8}, WeightType::kF32, /*offset_override=*/4);
    ExpectError(c.Build(), "w.unaligned");
  }
  {
    GgufBuilder b;
    b.AddTensor("same", {8}, WeightType::kF32).AddTensor("same", {8}, WeightType::kF32);
    ExpectError(b.Build(), "appears twice");
  }
}

TEST(GgufTest, TruncatedStories260KIsAnErrorAtEveryOffset) {
  TQ_SKIP_IF_MISSING(testing::Stories260KPath());
  const std::vector<uint8_t> full = ReadAll(testing::Stories260KPath());
  auto whole = GgufFile::Parse(full);
  ASSERT_TRUE(whole.ok());
  const uint64_t header_end = (*whole)->data_offset();
  // Every offset in the header (metadata and tensor infos), then a stride through the tensor data.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < header_end; ++n) cuts.push_back(n);
  for (size_t n = header_end; n < full.size(); n += 997) cuts.push_back(n);
  cuts.push_back(full.size() - 1);
  for (size_t n : cuts) {
    // An exact-size heap copy, so a sanitizer build sees any read past the end.
    std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    auto file = GgufFile::Parse(part);
    ASSERT_FALSE(file.ok()) << "truncated to " << n << " bytes but parsed";
    ASSERT_FALSE(file.status().message().empty());
  }
}

TEST(GgufTest, FlippedBytesNeverCrash) {
  TQ_SKIP_IF_MISSING(testing::Stories260KPath());
  std::vector<uint8_t> bytes = ReadAll(testing::Stories260KPath());
  auto whole = GgufFile::Parse(bytes);
  ASSERT_TRUE(whole.ok());
  const uint64_t header_end = (*whole)->data_offset();
  std::mt19937_64 rng(42);
  int errors = 0;
  constexpr int kTrials = 3000;
  for (int trial = 0; trial < kTrials; ++trial) {
    // Flip 1-4 bits in the header, parse, flip them back.
    size_t pos[4];
    uint8_t mask[4];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      pos[k] = rng() % header_end;
      mask[k] = static_cast<uint8_t>(1u << (rng() % 8));
      bytes[pos[k]] ^= mask[k];
    }
    auto file = GgufFile::Parse(bytes);
    if (!file.ok()) {
      ++errors;
      EXPECT_FALSE(file.status().message().empty());
    }
    for (int k = flips - 1; k >= 0; --k) bytes[pos[k]] ^= mask[k];
  }
  // Most flips land in token texts and are harmless; the rest must be errors, not crashes.
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace tq::engine
