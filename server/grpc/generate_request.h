// The gRPC Generate request decoded into engine requests: input (prompt, token ids or chat messages with tools),
// sampling, structured output, tools, cache salt and the caller's rights. No I/O: the service and the fuzz target
// (tests/fuzz/grpc_request_fuzz.cc) call the same function. Errors are statuses with codes; the service turns them
// into gRPC codes.
#pragma once

#include <string>

#include "engine/api.h"
#include "server/api_keys.h"
#include "server/request_limits.h"
#include "server/request_options.h"
#include "tqserve/v1/inference.pb.h"

namespace tq::server {

struct GrpcGenerateJob {
  engine::GenerateRequest request;
  ToolJob tools;
};

// `model_id`, `vocab_size`: what the server serves. `new_id` names a request that brought no request_id.
// The returned request has not been through the admission limits yet (Generation::Run checks them).
StatusOr<GrpcGenerateJob> DecodeGenerateRequest(const tqserve::v1::GenerateRequest& in, const Caller& caller,
                                                const std::string& model_id, int vocab_size,
                                                const RequestLimits& limits, const engine::EngineApi& engine,
                                                std::string new_id);

}  // namespace tq::server
