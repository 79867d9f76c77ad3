// A blocking TCP socket whose reads and writes give up: a read after a time without input (idle) or at a deadline
// (a whole request must arrive within its time, so a client sending a byte at a time cannot hold the thread), a
// write after a time in which the peer took nothing (a client that stops reading). asio's blocking operations
// wait forever (they poll again when SO_RCVTIMEO fires). Meets Beast's SyncReadStream and SyncWriteStream and
// serves as the next layer of asio::ssl::stream.
//
// A peer that stops reading does not block a write until the kernel's send buffer is full, and that buffer grows
// to megabytes (net.ipv4.tcp_wmem's maximum, 4 MiB by default): more than a whole streamed answer. So a write also
// fails with timed_out when bytes have been waiting in the send queue (SIOCOUTQ) and the peer has taken none of
// them for send_ms, as seen from one write to the next.
#pragma once

#include <poll.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#if defined(__linux__)
#include <linux/sockios.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace tq::server {

class TimedSocket {
 public:
  using socket_type = boost::asio::ip::tcp::socket;
  using lowest_layer_type = socket_type;
  using executor_type = socket_type::executor_type;

  using Clock = std::chrono::steady_clock;

  // `idle_ms`: longest wait for the next bytes from the peer (> 0); `send_ms`: longest wait for the peer to take
  // bytes we write (> 0).
  TimedSocket(socket_type& socket, int idle_ms, int send_ms = 30000)
      : socket_(socket), idle_ms_(idle_ms), send_ms_(send_ms) {}

  // Reads fail with timed_out from `deadline` on (a request's whole arrival); Clock::time_point::max() = none.
  void set_read_deadline(Clock::time_point deadline) { read_deadline_ = deadline; }

  executor_type get_executor() { return socket_.get_executor(); }
  lowest_layer_type& lowest_layer() { return socket_; }

  // Fails with boost::asio::error::timed_out when nothing arrives within idle_ms, or at the read deadline.
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

  // Writes what the socket takes now, waiting up to send_ms for room; timed_out when the peer took nothing in
  // that time.
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, boost::system::error_code& ec) {
    std::array<iovec, 16> iov{};
    size_t n = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && n < iov.size(); ++it) {
      const boost::asio::const_buffer b(*it);
      if (b.size() == 0) continue;
      iov[n++] = {const_cast<void*>(b.data()), b.size()};
    }
    ec = {};
    if (n == 0) return 0;
    if (PeerStalled()) {
      ec = boost::asio::error::timed_out;
      return 0;
    }
    pollfd p{socket_.native_handle(), POLLOUT, 0};
    for (;;) {
      msghdr msg{};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = n;
      const ssize_t sent = ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent >= 0) {
        written_ += sent;
        return static_cast<size_t>(sent);
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = boost::system::error_code(errno, boost::system::system_category());
        return 0;
      }
      const int r = ::poll(&p, 1, send_ms_);
      if (r == 0) {
        ec = boost::asio::error::timed_out;
        return 0;
      }
      if (r < 0 && errno != EINTR) {
        ec = boost::system::error_code(errno, boost::system::system_category());
        return 0;
      }
    }
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    boost::system::error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  // Waits for input (idle_ms at most, and not past the read deadline); true when there is some (or an end).
  bool WaitReadable(boost::system::error_code& ec) {
    pollfd p{socket_.native_handle(), POLLIN, 0};
    for (;;) {
      if (Clock::now() >= read_deadline_) {
        ec = boost::asio::error::timed_out;
        return false;
      }
      int wait_ms = idle_ms_;
      if (read_deadline_ != Clock::time_point::max()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(read_deadline_ - Clock::now()).count();
        wait_ms = static_cast<int>(std::clamp<long long>(left, 0, idle_ms_));
      }
      const int r = ::poll(&p, 1, wait_ms);
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

 private:
  // True when bytes wait in the send queue and the peer has taken none since a write send_ms or more ago.
  bool PeerStalled() {
#if defined(SIOCOUTQ)
    int queued = 0;
    if (::ioctl(socket_.native_handle(), SIOCOUTQ, &queued) != 0) return false;  // poll() still applies
    const auto now = Clock::now();
    const int64_t taken = written_ - queued;
    if (queued <= 0 || taken != taken_ || progress_ == Clock::time_point{}) {
      taken_ = taken;
      progress_ = now;
      return false;
    }
    return now - progress_ >= std::chrono::milliseconds(send_ms_);
#else
    return false;
#endif
  }

  socket_type& socket_;
  int idle_ms_;
  int send_ms_;
  Clock::time_point read_deadline_ = Clock::time_point::max();
  int64_t written_ = 0;          // bytes this object wrote to the socket
  int64_t taken_ = 0;            // written_ minus the send queue, when last seen to change
  Clock::time_point progress_;   // when taken_ last changed (or the queue was empty)
};

}  // namespace tq::server
