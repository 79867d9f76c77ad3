// libFuzzer target: what the HTTP front end does with outside bytes before anything reaches the engine.
// The first input byte chooses the path; the rest is the payload:
//   0: the payload is a /v1/completions JSON body, 1: a /v1/chat/completions body (JSON parse, then
//   ParseCompletionRequest with a real tokenizer and ChatML template: tests/data/models/stories260K.gguf, run from the repository root);
//   2, 3: the payload is raw bytes off the socket for Beast's request parser with the server's limits, and a
//   complete request's body then goes through path 0 or 1 by its target.
// Checks: no exception escapes (the server does not catch them), a parsed body never exceeds the body limit, and
// a job that parsing and the admission path's limits (CheckLimits) accept is one the engine may take (prompt
// non-empty, within the limit, ids in the vocabulary, n and max_tokens in range). Any failure aborts.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/api.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/http/openai.h"
#include "tests/fuzz/decoding_engine.h"

namespace {

namespace http = boost::beast::http;

constexpr uint64_t kBodyLimit = 8192;         // small, so that the fuzzer reaches it (the server's default: 4 MiB)
constexpr uint32_t kHeaderLimit = 64 * 1024;  // as HttpServer::Serve

struct Fixture {
  std::unique_ptr<tq::engine::GgufFile> gguf;
  std::unique_ptr<tq::fuzz::DecodingEngine> engine;
  tq::server::ApiContext api;
};

Fixture* g_fixture = nullptr;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "http_request_fuzz: %s\n", what);
    std::abort();
  }
}

// As Router::Completions: JSON parse errors are a 400, then the field-by-field decode.
void DecodeBody(std::string_view body, bool chat) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::ordered_json::exception&) {
    return;
  }
  const tq::server::ApiContext& api = g_fixture->api;
  tq::server::ParseError error;
  const auto job = tq::server::ParseCompletionRequest(j, chat, api, &error);
  if (!job) {
    Check(!error.status.ok(), "a rejected request carries no error status");
    return;
  }
  // What the admission path (Generation::Run) checks next, with the same function.
  if (tq::server::CheckLimits(api.limits, api.ctx_size, api.vocab_size, job->request)) return;
  const auto& prompt = job->request.prompt;
  Check(!prompt.empty(), "empty prompt accepted");
  Check(static_cast<int>(prompt.size()) <= api.limits.max_prompt_tokens, "prompt over the limit accepted");
  for (int32_t id : prompt) Check(id >= 0 && id < api.vocab_size, "token id outside the vocabulary");
  Check(job->n >= 1 && job->n <= api.limits.max_n, "n out of range");
  Check(job->request.max_tokens >= 1, "max_tokens below 1");
  Check(job->top_logprobs >= 0 && job->top_logprobs <= 20, "top_logprobs out of range");
}

void ParseHttp(std::string_view bytes) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(kBodyLimit);
  parser.header_limit(kHeaderLimit);
  parser.eager(true);
  boost::beast::error_code ec;
  boost::asio::const_buffer in(bytes.data(), bytes.size());
  while (in.size() > 0 && !parser.is_done()) {
    const size_t used = parser.put(in, ec);
    in += used;
    if (ec == http::error::need_more) {
      ec = {};
      break;  // all input given: the end of the stream decides
    }
    if (ec) return;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return;
  }
  const http::request<http::string_body>& request = parser.get();
  Check(request.body().size() <= kBodyLimit, "body larger than the limit");
  const std::string_view target(request.target().data(), request.target().size());
  DecodeBody(request.body(), target.starts_with("/v1/chat/"));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  constexpr const char* kPath = "tests/data/models/stories260K.gguf";
  auto gguf = tq::engine::GgufFile::Open(kPath);
  if (!gguf.ok()) {
    std::fprintf(stderr, "http_request_fuzz: %s (run from the repository root: tests/data)\n",
                 gguf.status().ToString().c_str());
    std::exit(1);
  }
  auto tokenizer = tq::engine::Tokenizer::FromGguf(**gguf);
  Check(tokenizer.ok(), "cannot build the tokenizer");
  g_fixture = new Fixture{std::move(*gguf), std::make_unique<tq::fuzz::DecodingEngine>(std::move(*tokenizer)), {}};
  g_fixture->api.model_id = "fuzz-model";
  g_fixture->api.engine = g_fixture->engine.get();
  g_fixture->api.ctx_size = 512;
  g_fixture->api.vocab_size = g_fixture->engine->vocab_size();
  g_fixture->api.limits.max_prompt_tokens = 256;
  g_fixture->api.limits.max_tokens = 1024;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] & 3) {
    case 0: DecodeBody(payload, /*chat=*/false); break;
    case 1: DecodeBody(payload, /*chat=*/true); break;
    default: ParseHttp(payload); break;
  }
  return 0;
}
