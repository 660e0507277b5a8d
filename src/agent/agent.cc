// The gantry-agent HTTP server on cpp-httplib: object reads with byte ranges, streamed with
// pread from one descriptor per request; health and metrics. See include/gantry/agent/agent.h.
#include "gantry/agent/agent.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gantry/storage/object_store.h"
#include "gantry/storage/posix_store.h"

namespace gantry {
namespace {

constexpr std::string_view kObjectsPrefix = "/v1/objects/";
// Each pread/write step of a streamed body: large enough to amortise the syscalls, small enough
// that many concurrent streams stay cheap.
constexpr size_t kStreamPiece = 1 << 20;
constexpr char kReservedTopLevel[] = ".gantry-tmp";  // PosixStore's temp files: never objects

// An open file shared by the response and its content provider, closed when both are done.
struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

// Debian's libcpp-httplib listens with a backlog of 5 (compiled in), so a burst of peers
// connecting at once overflows the accept queue and their SYNs are retried after a full second.
// Linux lets listen(2) on a listening socket raise the backlog; the socket is a protected member.
class Server : public httplib::Server {
 public:
  void RaiseBacklog(int backlog) { ::listen(svr_sock_, backlog); }
};

std::string HttpDate(time_t t) {
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

// "[::1]" for IPv6 literals, so "http://" + HostForUrl(h) + ":" + port is a valid URL.
std::string HostForUrl(const std::string& host) {
  if (host.find(':') != std::string::npos && host.front() != '[') return "[" + host + "]";
  return host;
}

std::string RouteOf(std::string_view path) {
  if (path.starts_with(kObjectsPrefix)) return "objects";
  if (path == "/healthz") return "healthz";
  if (path == "/metrics") return "metrics";
  return "other";
}

}  // namespace

struct AgentServer::Impl {
  AgentOptions options;
  int root_fd = -1;
  int port = 0;
  std::unique_ptr<MetricsRegistry> own_metrics;
  MetricsRegistry* metrics = nullptr;
  Counter* bytes_served = nullptr;
  Counter* read_errors = nullptr;
  Counter* aborted = nullptr;
  Server server;
  std::thread listener;
  std::mutex stop_mu;
  bool stopped = false;  // guarded by stop_mu

  ~Impl() {
    if (root_fd >= 0) ::close(root_fd);
  }

  void Text(httplib::Response& res, int status, const std::string& text) {
    res.status = status;
    res.set_content(text + "\n", "text/plain; charset=utf-8");
  }

  // Opens ROOT/key the way the posix store does, following no symlink, so neither a link
  // planted in the tree nor a ".." (already refused by ValidateKey) can lead outside the root.
  // O_NONBLOCK: opening a FIFO someone left in the tree must not hang the handler. Returns the
  // descriptor, or -1 with errno set (ELOOP or EXDEV for a link).
  int OpenBeneathRoot(std::string_view key) const {
    return OpenBeneath(root_fd, key, O_RDONLY | O_NONBLOCK);
  }

  void ServeObject(const httplib::Request& req, httplib::Response& res) {
    // httplib applies req.ranges to the response itself after the handler, and its 0.11 code
    // does not clip or reject ranges past the end. This handler answers ranges itself (below),
    // so it clears them; the Request object is httplib's own non-const value, passed as const.
    const httplib::Ranges ranges = req.ranges;
    const_cast<httplib::Request&>(req).ranges.clear();

    if (req.method != "GET" && req.method != "HEAD") {
      res.set_header("Allow", "GET, HEAD");
      return Text(res, 405, "method " + req.method + " not allowed: the agent is read-only");
    }
    const std::string_view key = std::string_view(req.path).substr(kObjectsPrefix.size());
    if (Status s = ValidateKey(key); !s.ok()) return Text(res, 400, s.message());
    if (key == kReservedTopLevel || key.starts_with(std::string(kReservedTopLevel) + "/")) {
      return Text(res, 400, "key '" + std::string(key) + "': the '.gantry-tmp' tree is reserved");
    }
    auto file = std::make_shared<OpenFile>();
    file->fd = OpenBeneathRoot(key);
    if (file->fd < 0) {
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR || err == ELOOP || err == EXDEV) {
        return Text(res, 404, "no object '" + std::string(key) + "'");
      }
      // Every other errno through the one errno-to-code and code-to-HTTP mappings: EACCES is
      // 403, ENOSPC 507, EIO 500, ...
      const Status s = StatusFromErrno(err, "object '" + std::string(key) + "': open");
      if (s.code() != StatusCode::kPermissionDenied) read_errors->Increment();
      return Text(res, HttpStatusFor(s.code()), s.message());
    }
    struct stat st;
    if (::fstat(file->fd, &st) != 0) {
      read_errors->Increment();
      return Text(res, 500, "object '" + std::string(key) + "': stat: " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return Text(res, 404, "no object '" + std::string(key) + "'");
    const uint64_t size = static_cast<uint64_t>(st.st_size);

    // One range: serve it. Several (multipart/byteranges) are not worth supporting: a server may
    // ignore Range (RFC 9110 14.2), so the whole object goes out.
    uint64_t first = 0;
    uint64_t count = size;
    bool partial = false;
    if (ranges.size() == 1) {
      const ssize_t a = ranges[0].first;
      const ssize_t b = ranges[0].second;
      bool satisfiable = false;
      if (a < 0 && b > 0) {  // "bytes=-N": the last N bytes
        satisfiable = size > 0;
        first = size - std::min<uint64_t>(size, static_cast<uint64_t>(b));
        count = size - first;
      } else if (a >= 0 && static_cast<uint64_t>(a) < size && (b < 0 || b >= a)) {
        satisfiable = true;
        first = static_cast<uint64_t>(a);
        const uint64_t last =
            b < 0 ? size - 1 : std::min<uint64_t>(static_cast<uint64_t>(b), size - 1);
        count = last - first + 1;
      }
      if (!satisfiable) {
        res.set_header("Content-Range", "bytes */" + std::to_string(size));
        return Text(res, 416,
                    "object '" + std::string(key) + "' has " + std::to_string(size) +
                        " bytes: range '" + req.get_header_value("Range") + "' is unsatisfiable");
      }
      partial = true;
    }

    res.status = partial ? 206 : 200;
    res.set_header("Accept-Ranges", "bytes");
    res.set_header("Last-Modified", HttpDate(st.st_mtime));
    if (partial) {
      res.set_header("Content-Range", "bytes " + std::to_string(first) + "-" +
                                          std::to_string(first + count - 1) + "/" +
                                          std::to_string(size));
    }
    if (count == 0) {
      // httplib treats a provider of length 0 as "length unknown" (a close-delimited body).
      res.set_content("", "application/octet-stream");
      return;
    }
    res.set_content_provider(
        static_cast<size_t>(count), "application/octet-stream",
        [this, file, first, count, buf = std::vector<char>()](
            size_t offset, size_t length, httplib::DataSink& sink) mutable -> bool {
          if (buf.empty()) buf.resize(std::min<size_t>(kStreamPiece, count));
          const size_t want = std::min(length, buf.size());
          ssize_t n;
          do {
            n = ::pread(file->fd, buf.data(), want, static_cast<off_t>(first + offset));
          } while (n < 0 && errno == EINTR);
          if (n <= 0) {
            // An I/O error, or the file shrank under us (written in place by something other
            // than a PosixStore): end the connection short, so the client sees an error.
            read_errors->Increment();
            return false;
          }
          if (!sink.write(buf.data(), static_cast<size_t>(n))) {
            aborted->Increment();
            return false;
          }
          bytes_served->Increment(static_cast<uint64_t>(n));
          return true;
        });
  }

  void Log(const httplib::Request& req, const httplib::Response& res) {
    metrics
        ->GetCounter("gantry_agent_requests_total", "HTTP requests answered, by route and status.",
                     {{"route", RouteOf(req.path)}, {"code", std::to_string(res.status)}})
        .Increment();
  }
};

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AgentServer::~AgentServer() { Stop(); }

Result<std::unique_ptr<AgentServer>> AgentServer::Start(const AgentOptions& options) {
  if (options.root.empty()) return InvalidArgument("gantry-agent: no root directory given");
  if (options.threads < 1) {
    return InvalidArgument("gantry-agent: threads must be at least 1 (got " +
                           std::to_string(options.threads) + ")");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->root_fd = ::open(options.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (impl->root_fd < 0) {
    const int err = errno;
    const std::string msg = "gantry-agent: root '" + options.root + "': " + std::strerror(err);
    if (err == ENOENT) return NotFound(msg);
    return FailedPrecondition(msg);
  }
  if (options.metrics == nullptr) impl->own_metrics = std::make_unique<MetricsRegistry>();
  impl->metrics = options.metrics != nullptr ? options.metrics : impl->own_metrics.get();
  MetricsRegistry& m = *impl->metrics;
  impl->bytes_served =
      &m.GetCounter("gantry_agent_bytes_served_total", "Object bytes sent to peers.");
  impl->read_errors = &m.GetCounter("gantry_agent_errors_total",
                                    "Requests that failed or were cut short.", {{"kind", "read"}});
  impl->aborted = &m.GetCounter("gantry_agent_errors_total",
                                "Requests that failed or were cut short.", {{"kind", "client"}});

  Impl* p = impl.get();
  Server& s = impl->server;
  const size_t threads = static_cast<size_t>(options.threads);
  // httplib takes ownership of the queue it is given.
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_tcp_nodelay(true);
  if (options.keep_alive_timeout_s > 0) {
    s.set_keep_alive_timeout(options.keep_alive_timeout_s);
    s.set_keep_alive_max_count(100);
  } else {
    s.set_keep_alive_max_count(1);  // answers "Connection: close": the thread is free at once
  }
  // httplib's default also sets SO_REUSEPORT, which would let a second agent bind the same port
  // and silently share its traffic; SO_REUSEADDR alone allows quick restarts.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.set_pre_routing_handler([p](const httplib::Request& req, httplib::Response& res) {
    if (!std::string_view(req.path).starts_with(kObjectsPrefix)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    p->ServeObject(req, res);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/healthz",
        [p](const httplib::Request&, httplib::Response& res) { p->Text(res, 200, "ok"); });
  s.Get("/metrics", [p](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(p->metrics->PrometheusText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.set_logger(
      [p](const httplib::Request& req, const httplib::Response& res) { p->Log(req, res); });

  if (options.port == 0) {
    impl->port = s.bind_to_any_port(options.host);
  } else if (options.port > 0 && options.port < 65536 &&
             s.bind_to_port(options.host, options.port)) {
    impl->port = options.port;
  } else {
    impl->port = -1;
  }
  if (impl->port <= 0) {
    return Status(StatusCode::kUnavailable,
                  "gantry-agent: cannot listen on " + HostForUrl(options.host) + ":" +
                      std::to_string(options.port) +
                      " (address in use, not an address of this host, or not permitted)");
  }
  s.RaiseBacklog(SOMAXCONN);
  impl->listener = std::thread([p] { p->server.listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs; wait for it so a Stop() right after
  // Start() cannot leave the listener thread running forever.
  for (int i = 0; i < 5000 && !s.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
}

int AgentServer::port() const { return impl_->port; }

std::string AgentServer::url() const {
  return "http://" + HostForUrl(impl_->options.host) + ":" + std::to_string(impl_->port);
}

const std::string& AgentServer::root() const { return impl_->options.root; }

MetricsRegistry& AgentServer::metrics() { return *impl_->metrics; }

void AgentServer::Stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->server.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

}  // namespace gantry
