// The gRPC front end: tqserve.v1.Inference over the engine (synchronous gRPC API, one thread per call),
// plus the standard health service and server reflection. Errors are converted to gRPC codes here, once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/api_keys.h"
#include "server/generation.h"
#include "server/http/openai.h"
#include "server/metrics.h"
#include "server/server_state.h"
#include "tqserve/v1/inference.grpc.pb.h"

namespace tq::server {

class InferenceService final : public tqserve::v1::Inference::Service {
 public:
  // Generations go through `generation` (the admission path shared with HTTP); a client's deadline applies
  // when it is earlier than limits.request_timeout_s.
  // `api_keys`: null = no authentication.
  InferenceService(ApiContext api, const ApiKeys* api_keys, engine::EngineApi* engine,
                   Generation* generation, Metrics* metrics, ServerState* state);

  grpc::Status Embed(grpc::ServerContext* context, const tqserve::v1::EmbedRequest* request,
                     tqserve::v1::EmbedResponse* response) override;
  grpc::Status Generate(grpc::ServerContext* context, const tqserve::v1::GenerateRequest* request,
                        grpc::ServerWriter<tqserve::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const tqserve::v1::TokenizeRequest* request,
                        tqserve::v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const tqserve::v1::DetokenizeRequest* request,
                          tqserve::v1::DetokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const tqserve::v1::GetModelInfoRequest* request,
                            tqserve::v1::ModelInfo* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context, const tqserve::v1::GetServerInfoRequest* request,
                             tqserve::v1::ServerInfo* response) override;
  grpc::Status Abort(grpc::ServerContext* context, const tqserve::v1::AbortRequest* request,
                     tqserve::v1::AbortResponse* response) override;
  grpc::Status SubscribeKvEvents(grpc::ServerContext* context, const tqserve::v1::SubscribeKvEventsRequest* request,
                                 grpc::ServerWriter<tqserve::v1::KvEvent>* writer) override;

 private:
  grpc::Status CheckKey(grpc::ServerContext* context) const;
  // Who the call is from (metadata authorization); everyone is the one admin tenant when no keys are set.
  Caller CallerOf(grpc::ServerContext* context) const;

  ApiContext api_;
  const ApiKeys* api_keys_;
  engine::EngineApi* engine_;
  Generation* generation_;
  Metrics* metrics_;
  ServerState* state_;
};

// tq::Status -> grpc::Status, the one conversion.
grpc::Status ToGrpc(const Status& status);

}  // namespace tq::server
