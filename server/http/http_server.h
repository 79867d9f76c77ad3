// The HTTP/1.1 front end (Boost.Beast): a listener thread that accepts connections and one thread per connection
// (keep-alive), each reading requests and handing them to the Router. Responses are whole bodies or chunked
// Server-Sent Events. Body size is limited before any parsing. With a TLS context every connection is TLS.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/status.h"

namespace boost::asio::ssl {
class context;
}

namespace tq::server {

class TimedSocket;

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

// What a route handler writes to: one whole response, or an event stream.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual bool Send(HttpResponse response) = 0;  // false when the client is gone
  // Starts a 200 text/event-stream response; then SendEvent("data: ...\n\n") per event; EndStream() at the end.
  virtual bool StartStream() = 0;
  virtual bool SendEvent(std::string_view text) = 0;
  virtual bool EndStream() = 0;
  // True when the peer has closed its side (checked without blocking).
  virtual bool ClientGone() = 0;
};

using Handler = std::function<void(const HttpRequest&, ResponseWriter&)>;
// Looks at a request's header before its body is read (the request's body is still empty): a response refuses
// the request (e.g. 401 without a valid API key); the body is then never read and the connection closes.
using HeaderCheck = std::function<std::optional<HttpResponse>(const HttpRequest&)>;

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8080;            // 0 = any free port (tests)
  uint64_t max_body_bytes = 4 << 20;
  int idle_timeout_ms = 60000;  // a connection waiting this long for the client's next bytes is closed
  int read_timeout_ms = 30000;  // a request (header and body) must arrive whole within this, from its first byte
  int send_timeout_ms = 30000;  // a client that takes none of our bytes for this long is disconnected
  // Connections served at once (one thread each); one more is answered 503 and closed at once (TLS: closed).
  // 0 = no limit.
  int max_connections = 1024;
  std::shared_ptr<boost::asio::ssl::context> tls;  // set: every connection is TLS (MakeServerSslContext)
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler, HeaderCheck header_check = {});
  ~HttpServer();

  // Binds and starts accepting. Errors: the address is invalid or in use.
  Status Start();
  int port() const { return port_; }
  // Stops accepting and waits up to `timeout_ms` for open connections to finish, then closes them and waits up to
  // 5 s more for their threads. False when some connection thread is still running after that (it may still use
  // this server and the handler's objects: the caller must not destroy them).
  bool Stop(int timeout_ms);

 private:
  void AcceptLoop();
  void Serve(boost::asio::ip::tcp::socket socket);
  // Reads requests from `stream` (the socket, or TLS over it) until the connection ends.
  template <class Stream>
  void ServeRequests(Stream& stream, TimedSocket& timed, boost::asio::ip::tcp::socket& socket);

  HttpServerOptions options_;
  Handler handler_;
  HeaderCheck header_check_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable idle_;
  int open_connections_ = 0;
  // Rate-limited logs of the accept loop (its thread only): shed connections and accept errors since the last line.
  uint64_t shed_since_log_ = 0, accept_errors_since_log_ = 0;
  std::chrono::steady_clock::time_point shed_logged_{}, accept_error_logged_{};
  std::unordered_map<int, bool> open_fds_;  // fd -> busy with a request; guarded by mu_
};

// An OpenAI-shaped JSON error body with the given status.
HttpResponse ErrorResponse(http::status status, std::string_view message, std::string_view type,
                           std::string_view param = "");
HttpResponse JsonResponse(http::status status, std::string body);

}  // namespace tq::server
