#include "server/tls.h"

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tq::server {
namespace {

namespace ssl = boost::asio::ssl;

StatusOr<std::string> ReadPem(const std::string& option, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return InvalidArgumentError("option " + option + ": " + path + " does not exist or is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return InvalidArgumentError("option " + option + ": cannot read " + path);
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return InvalidArgumentError("option " + option + ": " + path + " holds no PEM block (-----BEGIN ...)");
  }
  return text.str();
}

}  // namespace

StatusOr<std::optional<TlsPem>> LoadTlsPem(const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() && key_file.empty()) return std::optional<TlsPem>();
  if (cert_file.empty() || key_file.empty()) {
    return InvalidArgumentError(std::string("option ") +
                                (cert_file.empty() ? "server.tls_cert_file" : "server.tls_key_file") +
                                " is empty: TLS needs both server.tls_cert_file and server.tls_key_file");
  }
  TlsPem pem;
  TQ_ASSIGN_OR_RETURN(pem.cert_chain, ReadPem("server.tls_cert_file", cert_file));
  TQ_ASSIGN_OR_RETURN(pem.private_key, ReadPem("server.tls_key_file", key_file));
  return std::optional<TlsPem>(std::move(pem));
}

StatusOr<std::shared_ptr<ssl::context>> MakeServerSslContext(const TlsPem& pem) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                           ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                       ec);
  if (ec) return InternalError("TLS: cannot set protocol options: " + ec.message());
  context->use_certificate_chain(boost::asio::buffer(pem.cert_chain), ec);
  if (ec) return InvalidArgumentError("option server.tls_cert_file: not a usable certificate: " + ec.message());
  context->use_private_key(boost::asio::buffer(pem.private_key), ssl::context::pem, ec);
  if (ec) {
    return InvalidArgumentError("option server.tls_key_file: not a usable private key of server.tls_cert_file: " +
                                ec.message());
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return InvalidArgumentError("option server.tls_key_file: the key does not belong to server.tls_cert_file");
  }
  return context;
}

}  // namespace tq::server
