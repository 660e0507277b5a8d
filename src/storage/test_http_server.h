// A plain-socket HTTP/1.1 server for the storage layer's client tests (header-only, included
// from src/storage/*_test.cc): it listens on 127.0.0.1 port 0, hands each request to a handler
// and answers what the handler returns, so tests script any status, header or cut-off body an
// S3 endpoint or a peer agent could send.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gantry/common/thread_annotations.h"

namespace gantry::storage_test {

struct SeenRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

struct Reply {
  int status = 200;
  std::string body;
  std::map<std::string, std::string> headers;
  // Sent as Content-Length; when larger than body, the connection is closed after the body.
  int64_t content_length = -1;
};

// A plain-socket HTTP/1.1 server on 127.0.0.1 port 0. Each request goes to `handler`.
class FaultServer {
 public:
  explicit FaultServer(std::function<Reply(const SeenRequest&)> handler)
      : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~FaultServer() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : connections_) t.join();
    ::close(fd_);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<SeenRequest> seen() {
    MutexLock lock(mu_);
    return seen_;
  }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c >= 0) connections_.emplace_back([this, c] { Serve(c); });
    }
  }

  // Reads one request; false when the peer closed or the server stops.
  bool ReadRequest(int c, std::string& buf, SeenRequest& req) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(c, buf)) return false;
    }
    std::string head = buf.substr(0, end);
    buf.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    std::string first = head.substr(0, line_end);
    req.method = first.substr(0, first.find(' '));
    req.target = first.substr(first.find(' ') + 1);
    req.target = req.target.substr(0, req.target.rfind(' '));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        req.headers[name] = value;
      }
      pos = e + 2;
    }
    const size_t length =
        req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    while (buf.size() < length) {
      if (!Fill(c, buf)) return false;
    }
    req.body = buf.substr(0, length);
    buf.erase(0, length);
    return true;
  }

  bool Fill(int c, std::string& buf) {
    while (!stop_) {
      pollfd p{c, POLLIN, 0};
      const int r = ::poll(&p, 1, 50);
      if (r == 0) continue;
      char tmp[65536];
      const ssize_t n = ::recv(c, tmp, sizeof(tmp), 0);
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
      return true;
    }
    return false;
  }

  void Serve(int c) {
    std::string buf;
    while (true) {
      SeenRequest req;
      if (!ReadRequest(c, buf, req)) break;
      Reply reply;
      {
        MutexLock lock(mu_);
        seen_.push_back(req);
      }
      reply = handler_(req);
      const int64_t length = reply.content_length >= 0 ? reply.content_length
                                                       : static_cast<int64_t>(reply.body.size());
      std::string out = "HTTP/1.1 " + std::to_string(reply.status) + " X\r\n";
      for (const auto& [k, v] : reply.headers) out += k + ": " + v + "\r\n";
      out += "Content-Length: " + std::to_string(length) + "\r\n\r\n";
      if (req.method != "HEAD") out += reply.body;
      ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      if (length > static_cast<int64_t>(reply.body.size()) && req.method != "HEAD") break;
    }
    ::close(c);
  }

  std::function<Reply(const SeenRequest&)> handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // touched by the acceptor thread, then the destructor
  Mutex mu_;
  std::vector<SeenRequest> seen_ GUARDED_BY(mu_);
};

}  // namespace gantry::storage_test
