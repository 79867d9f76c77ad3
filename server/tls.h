// TLS for both front ends: the PEM files named by server.tls_cert_file and server.tls_key_file, read once at
// start-up, and the OpenSSL server context the HTTP front end wraps its sockets in (gRPC takes the PEM text).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace boost::asio::ssl {
class context;
}

namespace tq::server {

struct TlsPem {
  std::string cert_chain;   // PEM: the server's certificate, then any intermediates
  std::string private_key;  // PEM: its private key
};

// nullopt when both paths are empty. invalid_argument naming the option when only one is set, or a file is
// missing, unreadable or holds no PEM block.
StatusOr<std::optional<TlsPem>> LoadTlsPem(const std::string& cert_file, const std::string& key_file);

// A TLS 1.2+ server context with this certificate and key. invalid_argument when OpenSSL rejects either or the
// key does not belong to the certificate.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeServerSslContext(const TlsPem& pem);

}  // namespace tq::server
