// The gRPC front end: tqserve.v1.Inference over the engine (synchronous gRPC API, one thread per call),
// plus the standard health service and server reflection. Errors are converted to gRPC codes here, once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/runner/engine.h"
#include "server/http/openai.h"
#include "server/metrics.h"
#include "server/server_state.h"
#include "tqserve/v1/inference.grpc.pb.h"

namespace tq::server {

class InferenceService final : public tqserve::v1::Inference::Service {
 public:
  // `request_timeout_s`: limits.request_timeout_s (0 = none); a client's deadline applies too when earlier.
  InferenceService(ApiContext api, std::vector<std::string> api_keys, double request_timeout_s,
                   engine::Engine* engine, Metrics* metrics, ServerState* state);

  // limits.max_concurrent_requests (0 = unlimited), shared with HTTP through ServerState::in_flight.
  void set_max_concurrent_requests(int n) { max_concurrent_requests_ = n; }

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

  ApiContext api_;
  std::vector<std::string> api_keys_;
  double request_timeout_s_;
  engine::Engine* engine_;
  Metrics* metrics_;
  ServerState* state_;
  int max_concurrent_requests_ = 0;
};

// tq::Status -> grpc::Status, the one conversion.
grpc::Status ToGrpc(const Status& status);

}  // namespace tq::server
