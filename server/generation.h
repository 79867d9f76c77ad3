// One admission path for a generation, whichever front end received it (HTTP /v1/completions and chat, gRPC
// Generate). In order: the server's limits on the request (one set for both front ends), draining, the
// concurrency limit (limits.max_concurrent_requests, HTTP and gRPC counted together), Submit of each choice, then
// the event loop on the front end's thread: events go to the front end's stream; the request is aborted in the
// engine when its deadline passes or its client goes; outcome metrics are counted once, here.
//
// Threads: Run() blocks the calling front-end thread (one per HTTP connection, one per gRPC call) until every
// choice has its final event. The engine thread only pushes events into the request's EventChannel.
#pragma once

#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/api.h"
#include "server/metrics.h"
#include "server/request_limits.h"
#include "server/request_deadline.h"
#include "server/server_state.h"

namespace tq::server {

// What a front end does with the events of one admitted request.
class GenerationStream {
 public:
  virtual ~GenerationStream() = default;
  // Polled at least every 100 ms while the request runs: true once the client has gone (HTTP: the socket
  // closed; gRPC: the call was cancelled).
  virtual bool ClientGone() = 0;
  // One event of choice `choice`: tokens and text since the last one, or the final one. `timed_out`: a final
  // event of a choice that the deadline aborted. Returns false when the client can no longer be written to (the
  // request is then aborted).
  virtual bool OnEvent(int choice, const engine::GenerateEvent& event, bool timed_out) = 0;
};

enum class Outcome {
  kSuccess,  // every choice ended on its own (stop, length)
  kError,    // a choice failed in the engine: `error`
  kTimeout,  // the server's limit or the client's deadline passed; the choices still open were aborted
  kAborted,  // the client went away; the choices still open were aborted
  kShutdown, // the server drained past its timeout
};
std::string_view OutcomeName(Outcome outcome);  // the metrics label: "success", "error", ...

struct GenerationResult {
  Outcome outcome = Outcome::kSuccess;
  std::vector<engine::GenerateEvent> finals;  // [choices]: each choice's final event (finish reason, usage)
  Status error;  // kError: the first failed choice's error; kTimeout: deadline_exceeded saying whose deadline
};

class Generation {
 public:
  Generation(RequestLimits limits, engine::EngineApi* engine, Metrics* metrics, ServerState* state);

  const RequestLimits& limits() const { return limits_; }
  // CheckLimits under this server's limits and model.
  std::optional<LimitError> Check(const engine::GenerateRequest& request) const {
    return CheckLimits(limits_, ctx_size_, vocab_size_, request);
  }

  // Admits the choices of one request (each with its own id; at most `max_choices`, 0 = limits.max_n: the inputs
  // of an embeddings request are its choices) and runs them to the end, streaming events to
  // `stream`. Errors (nothing ran; counted as "invalid" or "rejected" under `endpoint`): invalid_argument (a
  // limit; `*limit_field` names the field), unavailable (draining), resource_exhausted (concurrency limit,
  // engine queue full). What happened after admission is in the result.
  StatusOr<GenerationResult> Run(std::string_view endpoint, std::vector<engine::GenerateRequest> choices,
                                 const RequestDeadline& deadline, GenerationStream& stream,
                                 std::string* limit_field = nullptr, int max_choices = 0,
                                 const std::string& tenant = "");

  // The tenant (ApiKeys' Caller::tenant) whose request `id` is, for requests running now and the last
  // kRecentOwners that finished; nullopt when unknown. Abort and the KV event stream are scoped with it.
  std::optional<std::string> OwnerOf(const std::string& id) const;
  static constexpr size_t kRecentOwners = 4096;

 private:
  RequestLimits limits_;
  int ctx_size_;
  int vocab_size_;
  engine::EngineApi* engine_;
  Metrics* metrics_;
  ServerState* state_;
  mutable std::mutex owners_mu_;
  std::unordered_map<std::string, std::string> owners_;  // request id -> tenant, running and recent
  std::deque<std::string> finished_;                     // recent ids in finishing order (bounded)
};

}  // namespace tq::server
