// POST /v1/embeddings: each input is a prompt the engine runs as an embed request (engine/runner/request.h);
// the inputs are admitted together, like the choices of a completion.
#include <openssl/evp.h>

#include <cstring>

#include "common/utf8.h"
#include "server/request_options.h"
#include "server/http/route_util.h"
#include "server/http/routes.h"

namespace tq::server {
namespace {

using json = nlohmann::ordered_json;

// Collects nothing as it goes: the embeddings are in the final events.
class EmbeddingStream final : public GenerationStream {
 public:
  explicit EmbeddingStream(ResponseWriter& w) : w_(w) {}
  bool ClientGone() override { return w_.ClientGone(); }
  bool OnEvent(int, const engine::GenerateEvent&, bool) override { return true; }

 private:
  ResponseWriter& w_;
};

std::string Base64Floats(const std::vector<float>& v) {
  // Little-endian float32 bytes, as OpenAI's encoding_format "base64" carries them (x86 and ARM are little-endian).
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

struct EmbeddingJob {
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
  std::string lora;  // the adapter `model` names; "" = the base model
};

// Fills `job` or returns the error and its param.
Status ParseEmbeddings(const json& body, const ApiContext& ctx, EmbeddingJob* job, std::string* param) {
  if (!body.is_object()) return InvalidArgumentError("the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (key == "input" || key == "model" || key == "encoding_format" || key == "dimensions" || key == "user") continue;
    if (ctx.ignore_unknown_fields) continue;
    *param = key;
    return UnknownFieldError(key);
  }
  if (body.contains("model") && !body["model"].is_null()) {
    *param = "model";
    if (!body["model"].is_string()) return InvalidArgumentError("'model' must be a string");
    TQ_ASSIGN_OR_RETURN(job->lora, AdapterOfModel(body["model"].get<std::string>(), ctx.model_id, *ctx.engine));
  }
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    *param = "encoding_format";
    const json& f = body["encoding_format"];
    if (f != "float" && f != "base64") return InvalidArgumentError("'encoding_format' must be float or base64");
    job->base64 = f == "base64";
  }
  const int width = ctx.engine->Info().n_embd;
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    *param = "dimensions";
    if (!body["dimensions"].is_number_integer() || body["dimensions"] != width) {
      return InvalidArgumentError("this model's embeddings have " + std::to_string(width) +
                                  " dimensions; other sizes are not supported");
    }
  }
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string()) {
    *param = "user";
    return InvalidArgumentError("'user' must be a string");
  }
  *param = "input";
  if (!body.contains("input")) return InvalidArgumentError("'input' is required");
  const json& in = body["input"];
  auto tokens_of = [&](const json& item, std::vector<int32_t>* out) -> Status {
    if (item.is_string()) {
      const std::string text = item.get<std::string>();
      if (text.empty()) return InvalidArgumentError("an input is empty");
      if (!IsValidUtf8(text)) return InvalidArgumentError("an input is not valid UTF-8");
      *out = ctx.engine->Tokenize(text, {.add_special = true, .parse_special = false});
      return Status::Ok();
    }
    if (item.is_array() && !item.empty()) {
      for (const json& t : item) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size) {
          return InvalidArgumentError("token ids in 'input' must be integers in [0, " + std::to_string(ctx.vocab_size) +
                                      ")");
        }
        out->push_back(t.get<int32_t>());
      }
      return Status::Ok();
    }
    return InvalidArgumentError("'input' must be a string, a list of strings, token ids or lists of token ids");
  };
  if (in.is_string() || (in.is_array() && !in.empty() && in[0].is_number_integer())) {
    job->inputs.emplace_back();
    return tokens_of(in, &job->inputs.back());
  }
  if (!in.is_array() || in.empty()) {
    return InvalidArgumentError("'input' must be a string, a list of strings, token ids or lists of token ids");
  }
  if (static_cast<int>(in.size()) > ctx.limits.max_embedding_inputs) {
    return InvalidArgumentError("'input' has " + std::to_string(in.size()) + " items; at most " +
                                std::to_string(ctx.limits.max_embedding_inputs) + " are allowed");
  }
  for (const json& item : in) {
    job->inputs.emplace_back();
    TQ_RETURN_IF_ERROR(tokens_of(item, &job->inputs.back()));
  }
  return Status::Ok();
}

}  // namespace

void Router::Embeddings(const HttpRequest& req, ResponseWriter& w, const Caller& caller) {
  const std::string endpoint = "/v1/embeddings";
  RequestDeadline deadline(generation_->limits().request_timeout_s);
  auto body = AcceptBody(req, w, endpoint);
  if (!body) return;
  EmbeddingJob job;
  std::string param;
  if (Status s = ParseEmbeddings(*body, options_.api, &job, &param); !s.ok()) {
    metrics_->CountRequest(endpoint, "invalid");
    w.Send(StatusResponse(s, param));
    return;
  }
  const std::string id = NewId("embd-");
  std::vector<engine::GenerateRequest> inputs;
  for (size_t i = 0; i < job.inputs.size(); ++i) {
    engine::GenerateRequest r;
    r.id = id + "-" + std::to_string(i);
    r.prompt = std::move(job.inputs[i]);
    r.embed = true;
    r.lora = job.lora;
    r.max_tokens = 1;  // nothing is generated; the limits see one token
    r.cache_salt = TenantCacheSalt(caller.tenant, "");  // the pages it offers stay the tenant's
    inputs.push_back(std::move(r));
  }
  EmbeddingStream stream(w);
  std::string field;
  auto run = generation_->Run(endpoint, std::move(inputs), deadline, stream, &field,
                              options_.api.limits.max_embedding_inputs, caller.tenant);
  if (!run.ok()) {
    w.Send(StatusResponse(run.status(), field == "prompt" ? "input" : field == "n" ? "input" : field));
    return;
  }
  if (run->outcome == Outcome::kAborted) return;
  if (run->outcome != Outcome::kSuccess) {
    w.Send(StatusResponse(run->error.ok() ? UnavailableError("the server shut down") : run->error));
    return;
  }
  json data = json::array();
  int prompt_tokens = 0;
  for (size_t i = 0; i < run->finals.size(); ++i) {
    const engine::GenerateEvent& ev = run->finals[i];
    json e{{"object", "embedding"}, {"index", i}};
    if (job.base64) {
      e["embedding"] = Base64Floats(ev.embedding);
    } else {
      e["embedding"] = ev.embedding;
    }
    data.push_back(std::move(e));
    prompt_tokens += ev.usage.prompt_tokens;
  }
  json out{{"object", "list"},
           {"data", data},
           {"model", options_.api.model_id},
           {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  w.Send(JsonResponse(http::status::ok, out.dump()));
}

}  // namespace tq::server
