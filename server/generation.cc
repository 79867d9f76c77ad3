#include "server/generation.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "server/event_channel.h"

namespace tq::server {
namespace {

using Clock = std::chrono::steady_clock;

// How often a running request looks for a departed client, whether events flow or not.
constexpr std::chrono::milliseconds kPollInterval{100};

// Aborts every choice still open when it goes out of scope or when asked.
class Choices {
 public:
  explicit Choices(engine::EngineApi* engine) : engine_(engine) {}
  ~Choices() {
    if (!settled_) AbortAll();
  }
  void Add(std::string id) { ids_.push_back(std::move(id)); }
  void AbortAll() {
    for (const std::string& id : ids_) engine_->Abort(id);
  }
  void Settle() { settled_ = true; }  // every choice has its final event

 private:
  engine::EngineApi* engine_;
  std::vector<std::string> ids_;
  bool settled_ = false;
};

}  // namespace

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess: return "success";
    case Outcome::kError: return "error";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kAborted: return "aborted";
    case Outcome::kShutdown: return "shutdown";
  }
  return "error";
}

std::optional<std::string> Generation::OwnerOf(const std::string& id) const {
  std::lock_guard<std::mutex> lock(owners_mu_);
  auto it = owners_.find(id);
  if (it == owners_.end()) return std::nullopt;
  return it->second;
}

Generation::Generation(RequestLimits limits, engine::EngineApi* engine, Metrics* metrics, ServerState* state)
    : limits_(limits), engine_(engine), metrics_(metrics), state_(state) {
  const engine::ModelInfo info = engine->Info();
  ctx_size_ = info.context_length;
  vocab_size_ = info.vocab_size;
}

StatusOr<GenerationResult> Generation::Run(std::string_view endpoint, std::vector<engine::GenerateRequest> choices,
                                           const RequestDeadline& deadline, GenerationStream& stream,
                                           std::string* limit_field, int max_choices, const std::string& tenant) {
  if (max_choices <= 0) max_choices = limits_.max_n;
  if (choices.empty() || static_cast<int>(choices.size()) > max_choices) {
    metrics_->CountRequest(endpoint, "invalid");
    if (limit_field) *limit_field = "n";
    return InvalidArgumentError("a request has 1 to " + std::to_string(max_choices) + " choices");
  }
  for (const engine::GenerateRequest& r : choices) {
    if (auto e = Check(r)) {
      metrics_->CountRequest(endpoint, "invalid");
      if (limit_field) *limit_field = e->field;
      return e->status;
    }
  }
  if (state_->draining) {
    metrics_->CountRequest(endpoint, "rejected");
    return UnavailableError("the server is draining");
  }
  // Concurrency: count first, then check, so two racing requests cannot both slip past.
  const int now_in_flight = ++state_->in_flight;
  struct Release {
    ServerState* s;
    ~Release() { --s->in_flight; }
  } release{state_};
  if (limits_.max_concurrent_requests > 0 && now_in_flight > limits_.max_concurrent_requests) {
    metrics_->CountRequest(endpoint, "rejected");
    return ResourceExhaustedError("too many concurrent requests (limit " +
                                  std::to_string(limits_.max_concurrent_requests) + ")");
  }

  const int n = static_cast<int>(choices.size());
  const std::string first_id = choices.front().id;
  // Ownership of the choices' ids while they run and for a while after (events name finished requests too).
  std::vector<std::string> ids;
  for (const engine::GenerateRequest& r : choices) ids.push_back(r.id);
  {
    std::lock_guard<std::mutex> lock(owners_mu_);
    for (const std::string& id : ids) owners_[id] = tenant;
  }
  struct Finished {
    Generation* g;
    const std::vector<std::string>& ids;
    ~Finished() {
      std::lock_guard<std::mutex> lock(g->owners_mu_);
      for (const std::string& id : ids) g->finished_.push_back(id);
      while (g->finished_.size() > kRecentOwners) {
        g->owners_.erase(g->finished_.front());
        g->finished_.pop_front();
      }
    }
  } finished{this, ids};
  auto channel = std::make_shared<EventChannel>();
  Choices admitted(engine_);
  for (int i = 0; i < n; ++i) {
    std::string id = choices[i].id;
    if (Status s = engine_->Submit(std::move(choices[i]), EventChannel::SinkFor(channel, i)); !s.ok()) {
      metrics_->CountRequest(endpoint, "rejected");
      return s;  // `admitted` aborts the choices already queued
    }
    admitted.Add(std::move(id));
  }

  GenerationResult result;
  result.finals.resize(n);
  int open = n;
  bool client_gone = false;
  bool timed_out = false;  // the deadline passed and the choices still open were aborted
  auto last_check = Clock::now();
  while (open > 0) {
    auto item = channel->Pop(deadline.WaitAtMost(kPollInterval));
    if (!timed_out && deadline.Expired()) {
      timed_out = true;
      admitted.AbortAll();
      spdlog::info("{}: {} passed; aborted", first_id,
                   deadline.by_client() ? std::string("the client's deadline")
                                        : fmt::format("the time limit of {} s", limits_.request_timeout_s));
    }
    const auto now = Clock::now();
    if (!client_gone && (!item || now - last_check > kPollInterval)) {
      last_check = now;
      if (stream.ClientGone()) {
        client_gone = true;
        admitted.AbortAll();
      }
    }
    if (!item) continue;
    engine::GenerateEvent& ev = item->event;
    const int c = item->choice;
    // A choice the deadline aborted reports a timeout; one that ended on its own first keeps its reason.
    const bool choice_timed_out = ev.final && timed_out && ev.finish_reason == engine::FinishReason::kAborted;
    if (ev.final) {
      --open;
      metrics_->ObserveFinished(ev);
    }
    if (!client_gone && !stream.OnEvent(c, ev, choice_timed_out)) {
      client_gone = true;
      admitted.AbortAll();
    }
    if (ev.final) result.finals[c] = std::move(ev);
  }
  admitted.Settle();

  // A gRPC client's deadline also cancels its call, possibly a moment before our clock sees it pass.
  timed_out |= client_gone && deadline.Expired();
  bool expired = false, shutdown = false;
  for (const engine::GenerateEvent& f : result.finals) {
    if (f.finish_reason == engine::FinishReason::kError && result.error.ok()) result.error = f.error;
    expired |= timed_out && f.finish_reason == engine::FinishReason::kAborted;
    shutdown |= f.finish_reason == engine::FinishReason::kShutdown;
  }
  if (!result.error.ok()) {
    result.outcome = Outcome::kError;
  } else if (expired) {
    result.outcome = Outcome::kTimeout;
    result.error = DeadlineExceededError(
        deadline.by_client() ? "the call's deadline passed before generation finished"
                             : fmt::format("the request did not finish within the server's time limit of {} s "
                                           "(limits.request_timeout_s)",
                                           limits_.request_timeout_s));
  } else if (client_gone) {
    result.outcome = Outcome::kAborted;
    spdlog::info("{}: the client went away; aborted {} choice(s)", first_id, n);
  } else if (shutdown) {
    result.outcome = Outcome::kShutdown;
  }
  metrics_->CountRequest(endpoint, OutcomeName(result.outcome));
  return result;
}

}  // namespace tq::server
