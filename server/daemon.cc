#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "common/progress.h"
#include "server/api_keys.h"
#include "server/engine_config.h"
#include "server/generation.h"
#include "server/grpc/inference_service.h"
#include "server/http/http_server.h"
#include "server/http/routes.h"
#include "server/tls.h"

namespace tq::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string DisplayName(const config::Config& cfg, const std::string& path) {
  if (!cfg.server.model_id.empty()) return cfg.server.model_id;
  std::string stem = std::filesystem::path(path).filename().string();
  if (stem.size() > 5 && stem.ends_with(".gguf")) stem.resize(stem.size() - 5);
  return stem;
}

}  // namespace

int RunDaemon(const config::Config& cfg) {
  // Signals are taken by sigwait() in this thread; every thread started from here on inherits the block.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // re-reads server.api_key_file
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  ServerState state;
  // TLS files are checked before the model loads, so a bad path fails in milliseconds (exit 1, option named).
  auto tls_pem = LoadTlsPem(cfg.server.tls_cert_file, cfg.server.tls_key_file);
  std::shared_ptr<boost::asio::ssl::context> tls_context;
  if (tls_pem.ok() && tls_pem->has_value()) {
    auto made = MakeServerSslContext(**tls_pem);
    if (made.ok()) {
      tls_context = *made;
    } else {
      tls_pem = made.status();
    }
  }
  if (!tls_pem.ok()) {
    spdlog::error("TLS: {}", tls_pem.status().message());
    return 1;
  }
  const char* const transport = tls_context ? "TLS" : "plaintext";
  // API keys are read before the model loads too: a missing key file fails at once.
  auto api_keys = ApiKeys::Load(cfg.server.api_keys, cfg.server.api_key_file, cfg.server.admin_api_keys);
  if (!api_keys.ok()) {
    spdlog::error("{}", api_keys.status().ToString());
    return 1;
  }
  const ApiKeys* keys = (*api_keys)->required() ? api_keys->get() : nullptr;  // a key file holds at least one
  auto model_path = ResolveModelPath(cfg);
  if (!model_path.ok()) {
    spdlog::error("{}", model_path.status().ToString());
    return 1;
  }

  auto options = ToEngineOptions(cfg, *model_path);
  if (!options.ok()) {
    spdlog::error("{}", options.status().ToString());
    return 1;
  }
  engine::EngineOptions eo = std::move(*options);
  // On a terminal with text logs: "model: 612/4683 MiB checked (13%), 1 s, ETA 6 s" while the file is read.
  auto load_line = std::make_shared<ProgressLine>("model: MiB checked", cfg.log.format == "text");
  eo.load_progress = [load_line](uint64_t done, uint64_t total) {
    load_line->Update(static_cast<int64_t>(done >> 20), static_cast<int64_t>(total >> 20));
  };
  // The HTTP listener starts before the model loads, so probes answer during the load: /health 200, /ready and
  // everything else 503 until the router is installed. `router` outlives `http` (declared first).
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Generation> generation;
  std::unique_ptr<ResponseStore> responses;
  std::unique_ptr<Router> router;
  std::atomic<Router*> router_ptr{nullptr};
  HttpServerOptions ho;
  ho.host = cfg.server.host;
  ho.port = cfg.server.http_port;
  ho.max_body_bytes = static_cast<uint64_t>(cfg.limits.max_body_bytes);
  ho.tls = tls_context;
  ho.idle_timeout_ms = static_cast<int>(cfg.server.idle_timeout_s * 1000);
  ho.max_connections = cfg.server.max_connections;
  ho.read_timeout_ms = static_cast<int>(cfg.server.read_timeout_s * 1000);
  ho.send_timeout_ms = static_cast<int>(cfg.server.send_timeout_s * 1000);
  HttpServer http(ho, [&](const HttpRequest& r, ResponseWriter& w) {
    if (Router* ready_router = router_ptr.load(std::memory_order_acquire)) return ready_router->Handle(r, w);
    const std::string_view target(r.target().data(), r.target().size());
    if (target == "/health") {
      w.Send(JsonResponse(http::status::ok, R"({"status":"ok"})"));
    } else if (target == "/ready") {
      w.Send(JsonResponse(http::status::service_unavailable, R"({"status":"loading"})"));
    } else {
      w.Send(ErrorResponse(http::status::service_unavailable, "the model is loading", "service_unavailable"));
    }
  }, [&](const HttpRequest& header) -> std::optional<HttpResponse> {
    if (Router* ready_router = router_ptr.load(std::memory_order_acquire)) return ready_router->CheckHeader(header);
    return std::nullopt;  // loading: the handler answers 503
  });
  if (Status s = http.Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  spdlog::info("loading model {}", eo.model_path);
  const auto t0 = Clock::now();
  auto created = engine::CreateEngine(eo);
  if (!created.ok()) {
    spdlog::error("cannot load the model: {}", created.status().ToString());
    return 1;
  }
  std::unique_ptr<engine::EngineApi> eng = std::move(created).value();
  const engine::ModelInfo info = eng->Info();
  spdlog::info("loaded {} in {:.2f} s: {} layers, {} heads ({} KV), head_dim {}, vocab {}, context {}, {} MiB of weights",
               info.architecture, std::chrono::duration<double>(Clock::now() - t0).count(), info.n_layers,
               info.n_heads, info.n_kv_heads, info.head_dim, info.vocab_size, info.context_length,
               info.weight_bytes >> 20);

  ApiContext api;
  api.model_id = DisplayName(cfg, eo.model_path);
  api.engine = eng.get();
  api.ctx_size = info.context_length;
  api.vocab_size = info.vocab_size;
  api.limits.max_prompt_tokens = cfg.limits.max_prompt_tokens;
  api.limits.max_tokens = cfg.limits.max_tokens;
  api.limits.default_max_tokens = cfg.limits.default_max_tokens;
  api.limits.max_concurrent_requests = cfg.limits.max_concurrent_requests;
  api.limits.request_timeout_s = cfg.limits.request_timeout_s;
  api.limits.max_schema_bytes = cfg.limits.max_schema_bytes;
  api.limits.max_schema_depth = cfg.limits.max_schema_depth;
  api.limits.max_logit_bias = cfg.limits.max_logit_bias;
  api.limits.max_embedding_inputs = cfg.limits.max_embedding_inputs;
  api.ignore_unknown_fields = cfg.server.ignore_unknown_fields;

  // KV capacity: the budgets of the tiers the engine placed pages in.
  uint64_t kv_capacity = 0;
  for (const engine::KvTierUsage& t : eng->Stats().kv_store.tiers) kv_capacity += t.present ? t.capacity_bytes : 0;
  metrics = std::make_unique<Metrics>(kv_capacity);
  // One admission path for both front ends (limits, draining, concurrency, deadlines, outcome metrics).
  generation = std::make_unique<Generation>(api.limits, eng.get(), metrics.get(), &state);

  RouterOptions ro;
  ro.api = api;
  ro.api_keys = keys;
  ro.web_ui = cfg.server.web_ui;
  responses = std::make_unique<ResponseStore>(static_cast<size_t>(cfg.server.responses_max_count),
                                              static_cast<uint64_t>(cfg.server.responses_max_bytes),
                                              cfg.server.responses_ttl_s);
  ro.responses = responses.get();
  router = std::make_unique<Router>(ro, eng.get(), generation.get(), metrics.get(), &state);
  router_ptr.store(router.get(), std::memory_order_release);

  InferenceService service(api, keys, eng.get(), generation.get(), metrics.get(), &state);
  std::unique_ptr<grpc::Server> grpc_server;
  if (cfg.server.grpc_port != 0) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    int bound_port = 0;
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (tls_context) {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({(*tls_pem)->private_key, (*tls_pem)->cert_chain});
      credentials = grpc::SslServerCredentials(ssl);
    }
    builder.AddListeningPort(cfg.server.host + ":" + std::to_string(cfg.server.grpc_port), credentials,
                             &bound_port);
    builder.RegisterService(&service);
    // The same bounds as HTTP: a message no larger than an HTTP body, and calls in flight (each holds a thread of
    // the synchronous server) no more than server.max_connections; a call beyond it gets RESOURCE_EXHAUSTED.
    builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(cfg.limits.max_body_bytes, INT32_MAX)));
    grpc::ResourceQuota quota("tqserve-grpc");
    if (cfg.server.max_connections > 0) {
      // The quota counts the server's own polling threads too (2 here: min and max pollers).
      quota.SetMaxThreads(cfg.server.max_connections + 2);
      builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
      builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
      builder.SetResourceQuota(quota);
    }
    grpc_server = builder.BuildAndStart();
    if (!grpc_server || bound_port == 0) {
      spdlog::error("cannot listen for gRPC on {}:{}", cfg.server.host, cfg.server.grpc_port);
      http.Stop(0);
      return 1;
    }
    grpc_server->GetHealthCheckService()->SetServingStatus(true);
    spdlog::info("gRPC listening on {}:{} ({})", cfg.server.host, bound_port, transport);
  }
  state.ready = true;
  spdlog::info("HTTP listening on {}:{} ({}; model id '{}', chat format {})", cfg.server.host, http.port(), transport,
               api.model_id, info.chat_format.empty() ? "none" : info.chat_format);

  int signal_number = 0;
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    if (cfg.server.api_key_file.empty()) {
      spdlog::info("SIGHUP received: no server.api_key_file to re-read");
      continue;
    }
    auto reloaded = (*api_keys)->Reload();
    if (reloaded.ok()) {
      spdlog::info("SIGHUP received: {} API key(s) from {} and server.api_keys", *reloaded, cfg.server.api_key_file);
    } else {
      spdlog::error("SIGHUP received: {}; the previous keys stay in force", reloaded.status().ToString());
    }
  }
  spdlog::info("{} received: draining (up to {} s)", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
               cfg.server.drain_timeout_s);
  state.draining = true;
  metrics->SetDraining(true);
  eng->StopAdmitting();
  if (grpc_server) grpc_server->GetHealthCheckService()->SetServingStatus(false);

  const auto deadline = Clock::now() + std::chrono::duration<double>(cfg.server.drain_timeout_s);
  auto busy = [&] {
    const engine::EngineStats st = eng->Stats();
    return st.running + st.waiting > 0 || state.in_flight > 0;
  };
  while (busy() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (busy()) {
    spdlog::warn("drain timeout: cancelling {} request(s)", eng->Stats().running + eng->Stats().waiting);
    eng->CancelAll();
    const auto grace = Clock::now() + std::chrono::seconds(5);
    while (state.in_flight > 0 && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool http_stopped = http.Stop(2000);
  if (grpc_server) grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // The front ends take nothing new now; the engine goes only after its last user left. A handler still inside
  // after the bound is a bug: exit without destroying what it may still touch.
  if (!state.engine_gate.Close(std::chrono::seconds(5)) || !http_stopped) {
    spdlog::error("shutdown: {} handler(s) still using the engine{}; exiting without tearing it down",
                  state.engine_gate.held(), http_stopped ? "" : " and HTTP connection threads still running");
    spdlog::shutdown();
    std::_Exit(1);
  }
  eng.reset();
  spdlog::info("drained; exiting");
  return 0;
}

}  // namespace tq::server
