// TimedSocket (server/http/timed_socket.h) on real loopback TCP: a request trickling a byte at a time is cut at its
// read deadline although bytes keep coming within the idle time, and a peer that reads nothing makes writes fail
// after the send timeout instead of blocking the thread forever.
#include "server/http/timed_socket.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <thread>
#include <vector>

namespace tq::server {
namespace {

using boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Pair {
  boost::asio::io_context io;
  tcp::socket server{io}, client{io};
  Pair() {
    tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    client.connect(acceptor.local_endpoint());
    acceptor.accept(server);
  }
};

TEST(TimedSocketTest, ReadDeadlineCutsATricklingRequest) {
  Pair p;
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (int i = 0; i < 100 && !stop; ++i) {
      boost::system::error_code ec;
      p.client.write_some(boost::asio::buffer("x", 1), ec);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  TimedSocket timed(p.server, /*idle_ms=*/60000, /*send_ms=*/60000);
  const auto start = Clock::now();
  timed.set_read_deadline(start + std::chrono::milliseconds(400));
  boost::system::error_code ec;
  char buf[16];
  size_t got = 0;
  while (!ec) got += timed.read_some(boost::asio::buffer(buf), ec);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  trickle.join();
  EXPECT_EQ(ec, boost::asio::error::timed_out);
  EXPECT_GT(got, 2u);   // bytes did arrive, each within the idle time
  EXPECT_LT(s, 2.0);    // and still the deadline ended it
  EXPECT_GE(s, 0.35);
}

TEST(TimedSocketTest, WritesToAPeerThatReadsNothingTimeOut) {
  Pair p;
  const int small = 4096;
  p.server.set_option(boost::asio::socket_base::send_buffer_size(small));
  p.client.set_option(boost::asio::socket_base::receive_buffer_size(small));
  TimedSocket timed(p.server, /*idle_ms=*/60000, /*send_ms=*/300);
  const std::vector<char> chunk(64 * 1024, 'y');
  boost::system::error_code ec;
  size_t sent = 0;
  const auto start = Clock::now();
  while (!ec && sent < (size_t{256} << 20)) sent += timed.write_some(boost::asio::buffer(chunk), ec);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(ec, boost::asio::error::timed_out) << "sent " << sent << " bytes";
  EXPECT_LT(s, 5.0);
  // A peer that reads gets everything: the same socket type streams to it.
  Pair q;
  TimedSocket ok(q.server, 60000, 300);
  std::thread reader([&] {
    std::vector<char> in(64 * 1024);
    size_t total = 0;
    boost::system::error_code rec;
    while (total < (size_t{8} << 20) && !rec) total += q.client.read_some(boost::asio::buffer(in), rec);
  });
  size_t written = 0;
  boost::system::error_code wec;
  while (written < (size_t{8} << 20) && !wec) written += ok.write_some(boost::asio::buffer(chunk), wec);
  reader.join();
  EXPECT_FALSE(wec) << wec.message();
}

// A stream of small events to a peer that reads nothing fits in the kernel's send buffer (it grows to megabytes),
// so no write ever blocks: the stall is seen in the send queue instead, after send_ms.
TEST(TimedSocketTest, SmallWritesToAPeerThatReadsNothingTimeOut) {
  Pair p;
  TimedSocket timed(p.server, /*idle_ms=*/60000, /*send_ms=*/300);
  const std::vector<char> event(300, 'z');  // about one SSE chunk
  boost::system::error_code ec;
  size_t sent = 0;
  const auto start = Clock::now();
  while (!ec && Clock::now() - start < std::chrono::seconds(10)) {
    sent += timed.write_some(boost::asio::buffer(event), ec);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(ec, boost::asio::error::timed_out) << "sent " << sent << " bytes in " << s << " s";
  EXPECT_LT(s, 3.0);
  // A peer that reads slowly but steadily is not cut, though bytes wait in the queue the whole time.
  Pair q;
  TimedSocket ok(q.server, 60000, 300);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    std::vector<char> in(1024);
    boost::system::error_code rec;
    while (!stop && !rec) {
      q.client.read_some(boost::asio::buffer(in), rec);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  boost::system::error_code wec;
  const auto t0 = Clock::now();
  while (!wec && Clock::now() - t0 < std::chrono::milliseconds(1500)) {
    ok.write_some(boost::asio::buffer(event), wec);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  q.server.shutdown(tcp::socket::shutdown_both);
  reader.join();
  EXPECT_FALSE(wec) << wec.message();
}

}  // namespace
}  // namespace tq::server
