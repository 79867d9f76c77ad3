#include "server/http/http_server.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "server/http/timed_socket.h"

namespace tq::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

// Writes to `stream` (the TCP socket itself, or a TLS stream over it); `socket` is the TCP socket underneath.
template <class Stream>
class SocketWriter final : public ResponseWriter {
 public:
  SocketWriter(Stream& stream, tcp::socket& socket, unsigned version, bool keep_alive)
      : stream_(stream), socket_(socket), version_(version), keep_alive_(keep_alive) {}

  bool Send(HttpResponse response) override {
    started_ = true;
    response.version(version_);
    response.keep_alive(keep_alive_);
    response.set(http::field::server, "tqserve");
    response.prepare_payload();
    beast::error_code ec;
    http::write(stream_, response, ec);
    return Ok(ec);
  }

  bool StartStream() override {
    started_ = true;
    http::response<http::empty_body> header{http::status::ok, version_};
    header.set(http::field::server, "tqserve");
    header.set(http::field::content_type, "text/event-stream");
    header.set(http::field::cache_control, "no-cache");
    header.chunked(true);
    header.keep_alive(keep_alive_);
    http::response_serializer<http::empty_body> serializer{header};
    beast::error_code ec;
    http::write_header(stream_, serializer, ec);
    return Ok(ec);
  }

  bool SendEvent(std::string_view text) override {
    beast::error_code ec;
    net::write(stream_, http::make_chunk(net::buffer(text.data(), text.size())), ec);
    return Ok(ec);
  }

  bool EndStream() override {
    beast::error_code ec;
    net::write(stream_, http::make_chunk_last(), ec);
    return Ok(ec);
  }

  bool ClientGone() override {
    if (failed_) return true;
    pollfd p{socket_.native_handle(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char c;
    return ::recv(socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  bool failed() const { return failed_; }
  bool started() const { return started_; }  // a response or a stream header has been written
  void MarkFailed() { failed_ = true; }

 private:
  bool Ok(const beast::error_code& ec) {
    if (ec) failed_ = true;
    return !ec;
  }

  Stream& stream_;
  tcp::socket& socket_;
  unsigned version_;
  bool keep_alive_;
  bool failed_ = false;
  bool started_ = false;
};

}  // namespace

HttpResponse JsonResponse(http::status status, std::string body) {
  HttpResponse r{status, 11};
  r.set(http::field::content_type, "application/json");
  r.body() = std::move(body);
  return r;
}

HttpResponse ErrorResponse(http::status status, std::string_view message, std::string_view type,
                           std::string_view param) {
  nlohmann::json j;
  j["error"]["message"] = std::string(message);
  j["error"]["type"] = std::string(type);
  j["error"]["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(param));
  j["error"]["code"] = static_cast<int>(status);
  return JsonResponse(status, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

HttpServer::HttpServer(HttpServerOptions options, Handler handler, HeaderCheck header_check)
    : options_(std::move(options)), handler_(std::move(handler)), header_check_(std::move(header_check)) {}

HttpServer::~HttpServer() { Stop(0); }

Status HttpServer::Start() {
  beast::error_code ec;
  const auto address = net::ip::make_address(options_.host, ec);
  if (ec) return InvalidArgumentError("server.host '" + options_.host + "' is not an IP address: " + ec.message());
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return UnavailableError("cannot listen for HTTP on " + options_.host + ":" + std::to_string(options_.port) +
                            ": " + ec.message());
  }
  port_ = acceptor->local_endpoint().port();
  acceptor_ = std::move(acceptor);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

namespace {

// What a connection over server.max_connections gets, written without blocking before it is closed.
const std::string& OverCapacityResponse() {
  static const std::string response = [] {
    const std::string body =
        R"j({"error":{"message":"too many open connections (server.max_connections)","type":"service_unavailable",)j"
        R"j("code":503,"param":null}})j";
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           "Connection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  return response;
}

constexpr std::chrono::seconds kLogEvery{10};

}  // namespace

void HttpServer::AcceptLoop() {
  while (!stopping_) {
    tcp::socket socket(io_);
    beast::error_code ec;
    acceptor_->accept(socket, ec);
    const auto now = std::chrono::steady_clock::now();
    if (ec) {
      if (stopping_) return;
      // Out of descriptors (EMFILE) repeats until connections close: one line per 10 s, with the count.
      ++accept_errors_since_log_;
      if (now - accept_error_logged_ >= kLogEvery) {
        spdlog::warn("http: accept failed {} time(s) in the last {} s: {}", accept_errors_since_log_,
                     kLogEvery.count(), ec.message());
        accept_errors_since_log_ = 0;
        accept_error_logged_ = now;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    bool over = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      over = options_.max_connections > 0 && open_connections_ >= options_.max_connections;
      if (!over) {
        ++open_connections_;
        open_fds_[socket.native_handle()] = false;
      }
    }
    if (over) {
      // Shed without a thread: a plain-text 503 where the listener is plain (a TLS client just sees the close).
      if (!options_.tls) {
        const std::string& r = OverCapacityResponse();
        ::send(socket.native_handle(), r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      beast::error_code ignored;
      socket.close(ignored);
      ++shed_since_log_;
      if (now - shed_logged_ >= kLogEvery) {
        spdlog::warn("http: {} connection(s) refused in the last {} s: {} open (server.max_connections)",
                     shed_since_log_, kLogEvery.count(), options_.max_connections);
        shed_since_log_ = 0;
        shed_logged_ = now;
      }
      continue;
    }
    std::thread([this, s = std::move(socket)]() mutable { Serve(std::move(s)); }).detach();
  }
}

void HttpServer::Serve(tcp::socket socket) {
  const int fd = socket.native_handle();
  // Every wait for the peer's bytes (TLS handshake, next request on a kept-alive connection, the rest of a
  // request) ends the connection after idle_timeout_ms without one.
  TimedSocket timed(socket, options_.idle_timeout_ms, options_.send_timeout_ms);
  if (options_.tls) {
    net::ssl::stream<TimedSocket&> tls(timed, *options_.tls);
    beast::error_code ec;
    tls.handshake(net::ssl::stream_base::server, ec);
    if (ec) {
      spdlog::debug("http: TLS handshake failed: {}", ec.message());
    } else {
      ServeRequests(tls, timed, socket);
      // Our close_notify, without waiting for the peer's (HTTP frames its own messages, so none is needed).
      ::SSL_shutdown(tls.native_handle());
    }
  } else {
    ServeRequests(timed, timed, socket);
  }
  beast::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  socket.close(ignored);
  std::lock_guard<std::mutex> lock(mu_);
  open_fds_.erase(fd);
  --open_connections_;
  idle_.notify_all();
}

template <class Stream>
void HttpServer::ServeRequests(Stream& stream, TimedSocket& timed, tcp::socket& socket) {
  const int fd = socket.native_handle();
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(options_.max_body_bytes);
    parser.header_limit(64 * 1024);
    beast::error_code ec;
    // The next request may take the idle time to start; from its first byte it must arrive whole within
    // read_timeout_ms, however it trickles. Under TLS the first byte of a request cannot be told from the socket
    // (records may already sit decrypted or buffered in the TLS layer), so there the bound is idle + read time.
    const auto now = TimedSocket::Clock::now();
    const auto read_time = std::chrono::milliseconds(options_.read_timeout_ms);
    if constexpr (std::is_same_v<Stream, TimedSocket>) {
      timed.set_read_deadline(TimedSocket::Clock::time_point::max());
      if (buffer.size() == 0) timed.WaitReadable(ec);
      if (!ec) timed.set_read_deadline(TimedSocket::Clock::now() + read_time);
    } else {
      timed.set_read_deadline(now + std::chrono::milliseconds(options_.idle_timeout_ms) + read_time);
    }
    // The header first: a request the header check refuses (no valid API key) is answered before its body is
    // read, and its connection closed.
    if (!ec) http::read_header(stream, buffer, parser, ec);
    std::optional<HttpResponse> refused;
    if (!ec && header_check_) refused = header_check_(parser.get());
    if (!ec && !refused) http::read(stream, buffer, parser, ec);
    timed.set_read_deadline(TimedSocket::Clock::time_point::max());
    if (refused || ec == http::error::body_limit) {
      SocketWriter<Stream> w(stream, socket, 11, false);
      w.Send(refused ? std::move(*refused)
                     : ErrorResponse(http::status::payload_too_large,
                                     "request body exceeds the limit of " + std::to_string(options_.max_body_bytes) +
                                         " bytes",
                                     "invalid_request_error"));
      // The client may still be sending the body and reads the answer only when done: take in and drop what
      // it sends (up to 1 GiB after a 413, the body limit after a refusal; 2 s of silence ends it) so it sees
      // the answer instead of a broken pipe.
      const uint64_t drain_limit = refused ? options_.max_body_bytes : uint64_t{1} << 30;
      beast::error_code ignored;
      socket.shutdown(tcp::socket::shutdown_send, ignored);
      timeval drain_tv{2, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &drain_tv, sizeof drain_tv);
      char sink[64 * 1024];
      for (uint64_t total = 0; total < drain_limit;) {
        const ssize_t n = ::recv(fd, sink, sizeof sink, 0);
        if (n <= 0) break;
        total += static_cast<uint64_t>(n);
      }
      break;
    }
    if (ec == http::error::header_limit || ec == http::error::bad_method || ec == http::error::bad_target ||
        ec == http::error::bad_version || ec == http::error::bad_field || ec == http::error::bad_value ||
        ec == http::error::bad_chunk || ec == http::error::bad_content_length) {
      SocketWriter<Stream> w(stream, socket, 11, false);
      w.Send(ErrorResponse(http::status::bad_request, "malformed HTTP request: " + ec.message(),
                           "invalid_request_error"));
      break;
    }
    if (ec) break;  // end of stream, idle timeout, reset
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_fds_[fd] = true;
    }
    HttpRequest request = parser.release();
    const bool keep_alive = request.keep_alive() && !stopping_;
    SocketWriter<Stream> writer(stream, socket, request.version(), keep_alive);
    // The boundary of our code for this connection: an exception that escapes a handler (a library's, or a bug)
    // costs this request a 500 (when nothing was sent yet) and the connection, never the process.
    try {
      handler_(request, writer);
    } catch (const std::exception& e) {
      spdlog::error("http: {} {}: unhandled exception: {}", std::string(request.method_string()),
                    std::string(request.target()), e.what());
      if (!writer.started()) {
        writer.Send(ErrorResponse(http::status::internal_server_error, "internal error", "server_error"));
      }
      writer.MarkFailed();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_fds_[fd] = false;
    }
    if (!keep_alive || writer.failed() || stopping_) break;
  }
}

bool HttpServer::Stop(int timeout_ms) {
  if (!acceptor_ || stopping_.exchange(true)) return true;
  ::shutdown(acceptor_->native_handle(), SHUT_RDWR);  // wakes the blocked accept()
  if (accept_thread_.joinable()) accept_thread_.join();
  beast::error_code ignored;
  acceptor_->close(ignored);
  std::unique_lock<std::mutex> lock(mu_);
  // Idle keep-alive connections close now; connections serving a request get up to timeout_ms.
  for (const auto& [fd, busy] : open_fds_) {
    if (!busy) ::shutdown(fd, SHUT_RD);
  }
  if (!idle_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return open_connections_ == 0; })) {
    for (const auto& [fd, busy] : open_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes blocked I/O; threads exit
    return idle_.wait_for(lock, std::chrono::seconds(5), [&] { return open_connections_ == 0; });
  }
  return true;
}

}  // namespace tq::server
