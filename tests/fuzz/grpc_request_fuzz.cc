// libFuzzer target: what the gRPC front end does with a Generate request's bytes before anything reaches the
// engine: protobuf's parser, then DecodeGenerateRequest (server/grpc/generate_request.cc) with a real tokenizer
// and ChatML template (tests/data/models/stories260K.gguf, run from the repository root), then the admission
// path's limits (CheckLimits). The first input byte chooses the caller: bit 0 set = an admin key, else a tenant.
// Checks: no exception escapes, a refused request carries an error, an accepted one is one the engine may take
// (prompt non-empty and within the limit, ids in the vocabulary, max_tokens >= 1, stop lists within the limits,
// a safe request id, priority above 0 only for an admin). Any failure aborts.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "engine/tokenizer/tokenizer.h"
#include "server/grpc/generate_request.h"
#include "tests/fuzz/decoding_engine.h"

namespace {

struct Fixture {
  std::unique_ptr<tq::engine::GgufFile> gguf;
  std::unique_ptr<tq::fuzz::DecodingEngine> engine;
  tq::server::RequestLimits limits;
  int ctx_size = 512;
  int vocab_size = 0;
};

Fixture* g_fixture = nullptr;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "grpc_request_fuzz: %s\n", what);
    std::abort();
  }
}

bool SafeId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != ':' && c != '-') return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  constexpr const char* kPath = "tests/data/models/stories260K.gguf";
  auto gguf = tq::engine::GgufFile::Open(kPath);
  if (!gguf.ok()) {
    std::fprintf(stderr, "grpc_request_fuzz: %s (run from the repository root: tests/data)\n",
                 gguf.status().ToString().c_str());
    std::exit(1);
  }
  auto tokenizer = tq::engine::Tokenizer::FromGguf(**gguf);
  Check(tokenizer.ok(), "cannot build the tokenizer");
  g_fixture = new Fixture{std::move(*gguf), std::make_unique<tq::fuzz::DecodingEngine>(std::move(*tokenizer))};
  g_fixture->vocab_size = g_fixture->engine->vocab_size();
  g_fixture->limits.max_prompt_tokens = 256;
  g_fixture->limits.max_tokens = 1024;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  tqserve::v1::GenerateRequest in;
  if (!in.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  const bool admin = (data[0] & 1) != 0;
  const tq::server::Caller caller{true, admin, admin ? "" : "0123456789abcdef"};
  const Fixture& f = *g_fixture;
  auto job = tq::server::DecodeGenerateRequest(in, caller, "fuzz-model", f.vocab_size, f.limits, *f.engine,
                                               "grpc-fuzz");
  if (!job.ok()) {
    Check(!job.status().ok(), "a refused request carries no error");
    return 0;
  }
  const tq::engine::GenerateRequest& r = job->request;
  if (tq::server::CheckLimits(f.limits, f.ctx_size, f.vocab_size, r)) return 0;
  Check(!r.prompt.empty(), "empty prompt accepted");
  Check(static_cast<int>(r.prompt.size()) <= f.limits.max_prompt_tokens, "prompt over the limit accepted");
  for (int32_t id : r.prompt) Check(id >= 0 && id < f.vocab_size, "token id outside the vocabulary");
  Check(r.max_tokens >= 1, "max_tokens below 1");
  Check(static_cast<int>(r.stop.size()) <= f.limits.max_stop, "too many stop strings accepted");
  for (const std::string& s : r.stop) Check(static_cast<int>(s.size()) <= f.limits.max_stop_bytes, "long stop");
  for (int32_t id : r.stop_tokens) Check(id >= 0 && id < f.vocab_size, "stop token outside the vocabulary");
  Check(SafeId(r.id), "unsafe request id accepted");
  Check(r.priority <= 0 || admin, "a tenant raised its priority");
  Check(admin || r.cache_salt.starts_with("key:0123456789abcdef/"), "a tenant's cache salt lost its tenant");
  return 0;
}
