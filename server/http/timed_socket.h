// A blocking TCP socket whose reads give up after a time without input. asio's blocking reads wait forever
// (they poll again when SO_RCVTIMEO fires), so an idle keep-alive client, one that sends a request a byte at a
// time, or one that never finishes its TLS handshake would hold a connection thread until shutdown. Meets Beast's
// SyncReadStream and SyncWriteStream and serves as the next layer of asio::ssl::stream.
#pragma once

#include <poll.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <cstddef>

namespace tq::server {

class TimedSocket {
 public:
  using socket_type = boost::asio::ip::tcp::socket;
  using lowest_layer_type = socket_type;
  using executor_type = socket_type::executor_type;

  // `idle_ms`: longest wait for the next bytes from the peer (> 0).
  TimedSocket(socket_type& socket, int idle_ms) : socket_(socket), idle_ms_(idle_ms) {}

  executor_type get_executor() { return socket_.get_executor(); }
  lowest_layer_type& lowest_layer() { return socket_; }

  // Fails with boost::asio::error::timed_out when nothing arrives within idle_ms.
  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, boost::system::error_code& ec) {
    if (!WaitReadable(ec)) return 0;
    return socket_.read_some(buffers, ec);
  }
  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    boost::system::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, boost::system::error_code& ec) {
    return socket_.write_some(buffers, ec);
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    return socket_.write_some(buffers);
  }

 private:
  bool WaitReadable(boost::system::error_code& ec) {
    pollfd p{socket_.native_handle(), POLLIN, 0};
    for (;;) {
      const int r = ::poll(&p, 1, idle_ms_);
      if (r > 0) return true;  // data, end of stream or an error: read_some reports which
      if (r == 0) {
        ec = boost::asio::error::timed_out;
        return false;
      }
      if (errno != EINTR) {
        ec = boost::system::error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }

  socket_type& socket_;
  int idle_ms_;
};

}  // namespace tq::server
