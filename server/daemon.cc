#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "server/grpc/inference_service.h"
#include "server/http/http_server.h"
#include "server/http/routes.h"
#include "server/tls.h"

namespace tq::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::vector<std::string> SplitKeys(const std::string& text) {
  std::vector<std::string> keys;
  std::stringstream in(text);
  std::string key;
  while (std::getline(in, key, ',')) {
    key.erase(0, key.find_first_not_of(" \t"));
    key.erase(key.find_last_not_of(" \t") + 1);
    if (!key.empty()) keys.push_back(key);
  }
  return keys;
}

StatusOr<std::string> ModelPath(const config::Config& cfg) {
  std::string path = cfg.model.path;
  if (path.empty()) path = cfg.model.dir + "/" + kDefaultModelFile;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("model file " + path + " does not exist" +
                         (cfg.model.path.empty() ? " (fetch the default model with scripts/fetch-model.sh)" : ""));
  }
  return path;
}

std::string DisplayName(const config::Config& cfg, const engine::Engine& e, const std::string& path) {
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
  auto model_path = ModelPath(cfg);
  if (!model_path.ok()) {
    spdlog::error("{}", model_path.status().ToString());
    return 1;
  }

  engine::EngineOptions eo;
  eo.model_path = *model_path;
  eo.threads = cfg.engine.threads;
  eo.ctx_size = cfg.engine.ctx_size;
  eo.max_batch_tokens = cfg.engine.max_batch_tokens;
  eo.max_running = cfg.engine.max_running;
  eo.max_waiting = cfg.engine.max_waiting;
  eo.device = cfg.engine.device;
  eo.gpu_warm_fraction = cfg.kv.gpu_warm_fraction;
  eo.gpu_cold_fraction = cfg.kv.gpu_cold_fraction;
  eo.kv.k_format = cfg.kv.k_format;
  eo.kv.v_format = cfg.kv.v_format;
  eo.kv.boundary_layers = cfg.kv.boundary_layers;
  eo.kv.preset = cfg.kv.preset;
  eo.kv.profile_path = cfg.kv.profile;
  eo.kv.hot_format = cfg.kv.hot_format;
  eo.kv.active_format = cfg.kv.active_format;
  eo.kv.sparse_format = cfg.kv.sparse_format;
  eo.kv_store.hot_bytes = static_cast<uint64_t>(cfg.kv.hot_bytes);
  eo.kv_store.warm_bytes = static_cast<uint64_t>(cfg.kv.warm_bytes);
  eo.kv_store.warm_lock = cfg.kv.warm_lock;
  eo.kv_store.cold_dir = cfg.kv.cold_dir;
  eo.kv_store.cold_optional = cfg.kv.cold_dir_optional;
  eo.kv_store.cold_bytes = static_cast<uint64_t>(cfg.kv.cold_bytes);
  eo.kv_store.cold_cache_bytes = static_cast<uint64_t>(cfg.kv.cold_cache_bytes);
  eo.kv_store.io_backend = cfg.kv.io_backend;
  eo.kv_store.io_depth = static_cast<uint32_t>(cfg.kv.io_depth);
  eo.kv_store.direct_io = cfg.kv.direct_io;
  eo.prefix_cache_bytes = static_cast<uint64_t>(cfg.kv.prefix_cache_bytes);
  eo.prefix_pin_seconds = cfg.kv.prefix_pin_s;
  eo.kv_adapt = cfg.kv.adapt;
  eo.adapt.window = cfg.kv.adapt_window;
  eo.adapt.every = cfg.kv.adapt_every;
  // The HTTP listener starts before the model loads, so probes answer during the load: /health 200, /ready and
  // everything else 503 until the router is installed. `router` outlives `http` (declared first).
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Router> router;
  std::atomic<Router*> router_ptr{nullptr};
  HttpServerOptions ho;
  ho.host = cfg.server.host;
  ho.port = cfg.server.http_port;
  ho.max_body_bytes = static_cast<uint64_t>(cfg.limits.max_body_bytes);
  ho.tls = tls_context;
  ho.idle_timeout_ms = static_cast<int>(cfg.server.idle_timeout_s * 1000);
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
  });
  if (Status s = http.Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  spdlog::info("loading model {}", eo.model_path);
  const auto t0 = Clock::now();
  auto created = engine::Engine::Create(eo);
  if (!created.ok()) {
    spdlog::error("cannot load the model: {}", created.status().ToString());
    return 1;
  }
  std::unique_ptr<engine::Engine> eng = std::move(created).value();
  const engine::HParams& hp = eng->model().hparams();
  spdlog::info("loaded {} in {:.2f} s: {} layers, {} heads ({} KV), head_dim {}, vocab {}, context {}, {} MiB of weights",
               hp.arch->name, std::chrono::duration<double>(Clock::now() - t0).count(), hp.n_layers, hp.n_heads,
               hp.n_kv_heads, hp.head_dim, hp.vocab_size, eng->ctx_size(), eng->model().weight_bytes() >> 20);

  // Chat template.
  std::optional<engine::ChatTemplate> chat;
  if (cfg.server.chat_format != "auto") {
    chat = engine::ChatTemplate{*engine::ParseChatFormat(cfg.server.chat_format), ""};
  } else {
    auto tmpl_text = eng->model().gguf().GetStringOr("tokenizer.chat_template", "");
    auto detected = tmpl_text.ok() ? engine::DetectChatTemplate(*tmpl_text) : tmpl_text.status();
    if (detected.ok()) {
      chat = *detected;
    } else {
      spdlog::warn("chat completions are off: {}", detected.status().message());
    }
  }

  ApiContext api;
  api.model_id = DisplayName(cfg, *eng, eo.model_path);
  api.tokenizer = &eng->tokenizer();
  api.chat = chat ? &*chat : nullptr;
  api.ctx_size = eng->ctx_size();
  api.limits.max_prompt_tokens = cfg.limits.max_prompt_tokens;
  api.limits.max_tokens = cfg.limits.max_tokens;
  api.limits.default_max_tokens = cfg.limits.default_max_tokens;
  const std::vector<std::string> keys = SplitKeys(cfg.server.api_keys);

  // KV capacity: the budgets of the tiers the engine placed pages in.
  uint64_t kv_capacity = 0;
  for (const engine::KvTierUsage& t : eng->kv_store().Stats().tiers) kv_capacity += t.present ? t.capacity_bytes : 0;
  metrics = std::make_unique<Metrics>(kv_capacity);

  RouterOptions ro;
  ro.api = api;
  ro.api_keys = keys;
  ro.max_concurrent_requests = cfg.limits.max_concurrent_requests;
  ro.request_timeout_s = cfg.limits.request_timeout_s;
  ro.web_ui = cfg.server.web_ui;
  router = std::make_unique<Router>(ro, eng.get(), metrics.get(), &state);
  router_ptr.store(router.get(), std::memory_order_release);

  InferenceService service(api, keys, cfg.limits.request_timeout_s, eng.get(), metrics.get(), &state);
  service.set_max_concurrent_requests(cfg.limits.max_concurrent_requests);
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
               api.model_id, chat ? std::string(engine::ChatFormatName(chat->format)) : "none");

  int signal_number = 0;
  sigwait(&signals, &signal_number);
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
  http.Stop(2000);
  if (grpc_server) grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  eng.reset();
  spdlog::info("drained; exiting");
  return 0;
}

}  // namespace tq::server
