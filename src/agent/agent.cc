// The gantry-agent HTTP server on cpp-httplib: object reads with byte ranges, sent with
// sendfile(2) from one descriptor per request; health and metrics; bearer-token checks. See
// include/gantry/agent/agent.h.
//
// Connections do not follow httplib's own model. Debian's cpp-httplib 0.11 gives each accepted
// socket a pool thread that blocks in recv until the request head is complete, with only a
// per-recv timeout, so eight clients each sending a header line every few seconds held all
// eight threads and froze the agent, /healthz included. Here instead:
//   listener (httplib's accept loop) -> Admit: the per-client cap, then the poll thread;
//   poll thread (epoll, edge-triggered): peeks at what arrived until the head is complete,
//     then queues the connection for a worker; past its head deadline: 408 and closed;
//   workers (options.threads for objects, one for /healthz and /metrics): httplib's parser and
//     our routes run on the received head through a Stream whose every wait is bounded; a kept
//     alive connection then goes back to the poll thread, not to sleep on a worker.
// httplib still parses requests and writes responses (Server::process_request, a protected
// member, takes any Stream); only socket handling is ours.
#include "gantry/agent/agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gantry/agent/stage_client.h"
#include "gantry/ckpt/catalog.h"
#include "gantry/ckpt/drain.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/storage/object_store.h"
#include "gantry/storage/posix_store.h"
#include "stager.h"

namespace gantry {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::string_view kObjectsPrefix = "/v1/objects/";
constexpr std::string_view kStagePath = "/v1/stage";
constexpr std::string_view kCheckpointPath = "/v1/checkpoint";
constexpr std::string_view kDrainPath = "/v1/drain";
constexpr char kDrainParts[] = "gantry_agent_drain_parts_total";
constexpr char kDrainPartsHelp[] =
    "Checkpoint parts written to their durable root by drains of saves whose process ended "
    "before them.";
constexpr char kDrainCommits[] = "gantry_agent_drain_commits_total";
constexpr char kDrainCommitsHelp[] = "Checkpoints committed by drains (their last part drained).";
constexpr char kDrainBytes[] = "gantry_agent_drain_bytes_total";
constexpr char kDrainBytesHelp[] = "Raw bytes of chunks drains copied to durable roots.";
constexpr char kDrainLeft[] = "gantry_agent_drain_records_total";
constexpr char kDrainLeftHelp[] =
    "Drain records not drained: failed (left for the next drain) or discarded (unfinishable).";
// Each pread/send step of a body where the file system cannot sendfile: large enough to amortise
// the syscalls, small enough that many concurrent streams stay cheap.
constexpr size_t kStreamPiece = 1 << 20;
constexpr char kReservedTopLevel[] = ".gantry-tmp";  // PosixStore's temp files: never objects
// The longest request head the poll thread waits for. httplib refuses lines over 8 KiB, so a
// head this long without its end goes to a worker at once, to be answered 400 or 414 there.
constexpr size_t kMaxHead = 16 << 10;
// Requests served on one kept-alive connection before it is closed, so no one connection holds
// its place forever; a restoring peer reconnects once per this many chunks.
constexpr int kMaxRequestsPerConnection = 1000;
// The most one sendfile step of a response body asks for (httplib's DataSink wants a pointer
// and a length; see ConnStream::SendFrom).
constexpr size_t kSendfileStep = 4 << 20;

// An open file shared by the response and its content provider, closed when both are done.
struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
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
  if (path == kStagePath) return "stage";
  if (path == kCheckpointPath) return "checkpoint";
  if (path == kDrainPath) return "drain";
  return "other";
}

int MsUntil(SteadyClock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t - SteadyClock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// Waits up to ms for `events` on fd; true once ready (or in error: the next call reports it).
bool PollFd(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, ms);
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

// The numeric address and port of a socket's peer (or own end). IPv4-mapped IPv6 addresses
// read as plain IPv4, so a client counts as one whichever way it connected.
bool SocketAddress(int fd, bool peer, std::string* ip, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return false;
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      ::inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    }
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *ip = buf;
  return true;
}

// Answers a connection that is refused or timed out, then closes it, never blocking: the poll
// and listener threads must not wait on any one client. Request bytes still unread are drained
// first, so that the close does not reset the connection before the client reads the answer.
void AnswerAndClose(int fd, std::string_view status, const std::string& text) {
  char junk[4096];
  for (int i = 0; i < 8 && ::recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; ++i) {
  }
  const std::string msg = "HTTP/1.1 " + std::string(status) +
                          "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                          std::to_string(text.size() + 1) + "\r\nConnection: close\r\n\r\n" + text +
                          "\n";
  (void)!::send(fd, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

// Where the request head in `b` ends (just past its blank line), or 0 if it has not arrived.
// httplib accepts bare-LF line ends too, so "\n\n" ends a head as well as "\r\n\r\n".
size_t HeadEnd(std::string_view b) {
  for (size_t i = b.find('\n'); i != std::string_view::npos; i = b.find('\n', i + 1)) {
    if (i + 1 < b.size() && b[i + 1] == '\n') return i + 2;
    if (i + 2 < b.size() && b[i + 1] == '\r' && b[i + 2] == '\n') return i + 3;
  }
  return 0;
}

// True for requests of /healthz and /metrics, which have a worker of their own.
bool IsControlRequest(std::string_view head) {
  const size_t sp = head.find(' ');
  if (sp == std::string_view::npos) return false;
  const size_t end = head.find_first_of(" ?\r\n", sp + 1);
  if (end == std::string_view::npos) return false;
  const std::string_view target = head.substr(sp + 1, end - sp - 1);
  return target == "/healthz" || target == "/metrics";
}

using Digest = std::array<unsigned char, 32>;

Digest Sha256(std::string_view s) {
  Digest d{};
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

// The httplib::Stream of one request. The head, already received in full, is read out of the
// socket at once; everything else comes straight from the socket. Every wait is bounded:
// reads by the request's deadline (the body timeout); each send must make progress within the
// I/O timeout, and the response as a whole must keep up a minimum rate (io_timeout_ms of grace,
// then min_send_bytes_per_s on average), so a client reading a byte every few seconds cannot
// hold a worker for hours. Sockets are used with MSG_DONTWAIT (and are O_NONBLOCK for
// sendfile), so a send can never outlast the poll before it.
//
// A response body can come straight from a file: SendFrom() makes the next write() move bytes
// from that file to the socket with sendfile(2), in the kernel, instead of from `ptr` (which
// is then a placeholder). That halves the agent's copying of every chunk it serves.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, SteadyClock::time_point read_deadline, int io_timeout_ms,
             int64_t min_send_bytes_per_s)
      : fd_(fd),
        deadline_(read_deadline),
        io_timeout_ms_(io_timeout_ms),
        min_send_rate_(min_send_bytes_per_s),
        send_start_(SteadyClock::now()) {}

  // Reads the first n bytes (the head the poll thread saw arrive) into the buffer.
  bool Prefetch(size_t n) {
    head_.resize(n);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ReadSocket(head_.data() + got, n - got);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  bool timed_out() const { return timed_out_; }
  // The client read the response too slowly (io_timeout_ms, or the minimum rate).
  bool send_timed_out() const { return send_timed_out_; }
  // True once a file source failed (a read error, or the file shrank): the agent's fault, not
  // the client's.
  bool file_failed() const { return file_failed_; }

  // Until SendFrom(-1, 0), write() sends from `file` at `offset` on; each write advances it.
  void SendFrom(int file, uint64_t offset) {
    file_fd_ = file;
    file_offset_ = static_cast<off_t>(offset);
  }

  bool is_readable() const override {
    return pos_ < head_.size() || PollFd(fd_, POLLIN, MsUntil(deadline_));
  }
  // httplib asks before each piece of a body; a wait that runs out is the slow reader's too.
  bool is_writable() const override {
    const int ms = SendWaitMs();
    if (ms > 0 && PollFd(fd_, POLLOUT, ms)) return true;
    timed_out_ = true;
    send_timed_out_ = true;
    return false;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < head_.size()) {
      const size_t n = std::min(size, head_.size() - pos_);
      std::memcpy(ptr, head_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    return ReadSocket(ptr, size);
  }
  ssize_t write(const char* ptr, size_t size) override {
    while (true) {
      const ssize_t n = file_fd_ >= 0 ? SendFileStep(size) : ::send(fd_, ptr, size, kSendFlags);
      if (n > 0) {
        sent_ += static_cast<uint64_t>(n);
        return n;
      }
      if (n == 0) return file_fd_ >= 0 ? -1 : 0;  // the file ended early: cut the response
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      const int ms = SendWaitMs();
      if (ms == 0 || !PollFd(fd_, POLLOUT, ms)) {
        timed_out_ = true;
        send_timed_out_ = true;
        return -1;
      }
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    SocketAddress(fd_, /*peer=*/true, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    SocketAddress(fd_, /*peer=*/false, &ip, &port);
  }
  socket_t socket() const override { return fd_; }

 private:
  static constexpr int kSendFlags = MSG_NOSIGNAL | MSG_DONTWAIT;

  // How long a send may wait now: the I/O timeout, cut to what the minimum rate still allows
  // (the bytes sent so far buy time at min_send_rate_, after io_timeout_ms of grace). 0: the
  // response is too slow and is abandoned.
  int SendWaitMs() const {
    if (min_send_rate_ <= 0) return io_timeout_ms_;
    const auto allowed = std::chrono::milliseconds(
        io_timeout_ms_ +
        static_cast<int64_t>(sent_ * 1000 / static_cast<uint64_t>(min_send_rate_)));
    return std::min(io_timeout_ms_, MsUntil(send_start_ + allowed));
  }

  // One sendfile step from the file source; falls back to pread + send where the file system
  // cannot sendfile. Returns like send: > 0 bytes sent, 0 at the file's end, -1 with errno.
  ssize_t SendFileStep(size_t size) {
    const size_t want = std::min(size, kSendfileStep);
    if (!sendfile_unsupported_) {
      const off_t before = file_offset_;
      const ssize_t n = ::sendfile(fd_, file_fd_, &file_offset_, want);
      if (n >= 0 || (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)) {
        if (n == 0) file_failed_ = true;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != EPIPE &&
            errno != ECONNRESET) {
          file_failed_ = true;  // EIO and the like: the file's fault
        }
        if (n < 0) file_offset_ = before;
        return n;
      }
      sendfile_unsupported_ = true;
    }
    if (bounce_.empty()) bounce_.resize(kStreamPiece);
    ssize_t r;
    do {
      r = ::pread(file_fd_, bounce_.data(), std::min(want, bounce_.size()), file_offset_);
    } while (r < 0 && errno == EINTR);
    if (r <= 0) {
      file_failed_ = true;
      if (r == 0) return 0;
      return -1;
    }
    const ssize_t n = ::send(fd_, bounce_.data(), static_cast<size_t>(r), kSendFlags);
    if (n > 0) file_offset_ += n;
    return n;
  }

  ssize_t ReadSocket(char* ptr, size_t size) {
    while (true) {
      const ssize_t n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      const int ms = MsUntil(deadline_);
      if (ms == 0 || !PollFd(fd_, POLLIN, ms)) {
        timed_out_ = true;
        return -1;
      }
    }
  }

  const int fd_;
  const SteadyClock::time_point deadline_;
  const int io_timeout_ms_;
  const int64_t min_send_rate_;
  const SteadyClock::time_point send_start_;
  uint64_t sent_ = 0;
  std::string head_;
  size_t pos_ = 0;
  mutable bool timed_out_ = false;  // mutable: httplib's is_writable is const
  mutable bool send_timed_out_ = false;
  int file_fd_ = -1;
  off_t file_offset_ = 0;
  bool sendfile_unsupported_ = false;
  bool file_failed_ = false;
  std::vector<char> bounce_;
};

// What the route handlers need to know of the connection whose request they answer: set by
// Serve on the worker thread for the duration of one request (httplib calls the handlers
// synchronously from process_request, on that thread).
struct CurrentRequest {
  ConnStream* stream = nullptr;
  bool has_body = false;  // the request announced a body (Content-Length > 0 or chunked)
};
thread_local CurrentRequest tl_request;

// The placeholder a file-sourced body write passes to httplib (ConnStream::SendFrom): never
// read, sized so that pointer arithmetic on it stays in bounds. Zero-initialised static storage
// is never touched, so it costs no memory.
alignas(64) char kFilePlaceholder[kSendfileStep];

// httplib's accept loop hands each accepted socket to a TaskQueue. Running it inline on the
// listener thread is right here: our process_and_close_socket only registers the socket.
class InlineQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

class Server final : public httplib::Server {
 public:
  explicit Server(std::function<void(int)> admit) : admit_(std::move(admit)) {
    new_task_queue = [] { return new InlineQueue; };  // httplib takes ownership
  }
  // Debian's libcpp-httplib listens with a backlog of 5 (compiled in), so a burst of peers
  // connecting at once overflows the accept queue and their SYNs are retried after a whole
  // second. Linux lets listen(2) on a listening socket raise the backlog.
  void RaiseBacklog(int backlog) { ::listen(svr_sock_, backlog); }
  // Parses and answers one request from `strm`; false if the connection is done for.
  bool ServeOne(httplib::Stream& strm, bool close_connection, bool* connection_closed,
                const std::function<void(httplib::Request&)>& setup_request) {
    return process_request(strm, close_connection, *connection_closed, setup_request);
  }

 private:
  // httplib calls this (a private virtual, which a subclass may override though not call) for
  // every accepted socket; the socket is ours from here on.
  bool process_and_close_socket(socket_t sock) override {
    admit_(sock);
    return true;
  }

  std::function<void(int)> admit_;
};

}  // namespace

struct AgentServer::Impl {
  // A client connection while it is not being served.
  struct Conn {
    int fd = -1;
    std::string client;  // the peer's address, the key of the per-client cap
    // Past this the connection is closed: the head deadline, or the keep-alive one while idle.
    SteadyClock::time_point deadline;
    bool idle = false;    // kept alive, and no byte of its next request has arrived yet
    size_t head_len = 0;  // once queued: bytes of the request head (0: unknown, too long)
    int served = 0;       // requests answered on this connection
  };

  AgentOptions options;
  int root_fd = -1;
  int port = 0;
  Digest token_digest{};
  std::unique_ptr<MetricsRegistry> own_metrics;
  MetricsRegistry* metrics = nullptr;
  Counter* bytes_served = nullptr;
  Counter* read_errors = nullptr;
  Counter* aborted = nullptr;
  Counter* refused_per_client = nullptr;
  Counter* head_timeouts = nullptr;
  Counter* slow_readers = nullptr;
  Counter* idle_closed = nullptr;
  Counter* accepted = nullptr;
  Gauge* open_connections = nullptr;
  Server server{[this](int fd) { Admit(fd); }};
  int epoll_fd = -1;
  int wake_fd = -1;  // an eventfd that interrupts the poll thread's epoll_wait
  std::thread listener;
  std::thread poller;
  std::vector<std::thread> workers;                // workers[0] serves the control lane
  std::unique_ptr<agent_internal::Stager> stager;  // null without options.data_cache_dir
  // The served directory as a store, for GET /v1/checkpoint's chunk lookups (resolved beneath
  // the root, as ServeObject does), and how durable roots are opened (the cluster token).
  std::shared_ptr<PosixStore> tier;
  StoreOptions durable_options;
  // POST /v1/drain: drains of the tier's drain records (ckpt/drain.h), one at a time, on a
  // thread of their own; a request during a drain runs one more after it (new records).
  Mutex drain_mu;
  CondVar drain_cv;
  DrainStatus drain GUARDED_BY(drain_mu);
  bool drain_wanted GUARDED_BY(drain_mu) = false;
  bool drain_stop GUARDED_BY(drain_mu) = false;
  std::atomic<bool> drain_cancel{false};  // Stop: end a drain after its current record
  std::thread drainer;

  Mutex mu;
  CondVar data_cv;
  CondVar control_cv;
  std::unordered_map<int, Conn> waiting GUARDED_BY(mu);            // by fd: on the poll thread
  std::deque<Conn> data_ready GUARDED_BY(mu);                      // heads in, for a worker
  std::deque<Conn> control_ready GUARDED_BY(mu);                   // /healthz and /metrics
  std::unordered_map<std::string, int> per_client GUARDED_BY(mu);  // open connections
  bool stopping GUARDED_BY(mu) = false;

  Mutex stop_mu;
  bool stopped GUARDED_BY(stop_mu) = false;

  ~Impl() {
    if (root_fd >= 0) ::close(root_fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  // --- Connections ---------------------------------------------------------------------------

  // On the listener thread, for each accepted socket.
  void Admit(int fd) EXCLUDES(mu) {
    // Every read and send here is bounded by a poll; sendfile has no MSG_DONTWAIT, so the
    // socket itself must not block.
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    accepted->Increment();
    std::string client;
    int client_port = 0;
    if (!SocketAddress(fd, /*peer=*/true, &client, &client_port)) {
      ::close(fd);
      return;
    }
    {
      MutexLock lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      if (per_client[client] >= options.max_connections_per_client) {
        // At the cap, an idle kept-alive connection of this client makes room (the oldest
        // one): keep-alive must not turn a client's own idle connections into refusals (many
        // ranks of one node restoring at once), while the cap still bounds what it holds.
        auto oldest = waiting.end();
        for (auto it = waiting.begin(); it != waiting.end(); ++it) {
          if (it->second.idle && it->second.client == client &&
              (oldest == waiting.end() || it->second.deadline < oldest->second.deadline)) {
            oldest = it;
          }
        }
        if (oldest != waiting.end()) {
          idle_closed->Increment();
          Drop(TakeWaiting(oldest->first));
        }
      }
      int& open = per_client[client];
      if (open < options.max_connections_per_client) {
        ++open;
        open_connections->Add(1);
        Conn c;
        c.fd = fd;
        c.client = client;
        c.deadline = SteadyClock::now() + std::chrono::milliseconds(options.header_timeout_ms);
        Park(std::move(c));
        return;
      }
    }
    refused_per_client->Increment();
    AnswerAndClose(fd, "503 Service Unavailable",
                   "too many connections from " + client + " (at most " +
                       std::to_string(options.max_connections_per_client) + ")");
  }

  // Hands a connection to the poll thread, which waits for its (next) request head. With
  // EPOLLET, bytes that arrived before the registration are reported at once.
  void Park(Conn c) REQUIRES(mu) {
    const int fd = c.fd;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    waiting.emplace(fd, std::move(c));
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) Drop(TakeWaiting(fd));
  }

  Conn TakeWaiting(int fd) REQUIRES(mu) {
    auto it = waiting.find(fd);
    Conn c = std::move(it->second);
    waiting.erase(it);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    return c;
  }

  // Forgets a connection that is closed (or about to be, by AnswerAndClose).
  void Forget(const Conn& c) REQUIRES(mu) {
    auto it = per_client.find(c.client);
    if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
    open_connections->Add(-1);
  }
  void Drop(const Conn& c) REQUIRES(mu) {
    Forget(c);
    ::close(c.fd);
  }

  // Looks at what arrived on a waiting connection: queues it once its head is complete, drops
  // it if the client went away.
  void Inspect(int fd, std::string& buf) REQUIRES(mu) {
    auto it = waiting.find(fd);
    if (it == waiting.end()) return;  // a stale event: served or closed meanwhile
    Conn& c = it->second;
    ssize_t n;
    do {
      n = ::recv(fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // closed by the client, or reset
      Drop(TakeWaiting(fd));
      return;
    }
    if (c.idle) {  // the next request on a kept-alive connection has begun
      c.idle = false;
      c.deadline = SteadyClock::now() + std::chrono::milliseconds(options.header_timeout_ms);
    }
    const std::string_view seen(buf.data(), static_cast<size_t>(n));
    const size_t end = HeadEnd(seen);
    if (end == 0 && seen.size() < kMaxHead) return;  // wait for more
    Conn ready = TakeWaiting(fd);
    ready.head_len = end;
    if (end > 0 && IsControlRequest(seen.substr(0, end))) {
      control_ready.push_back(std::move(ready));
      control_cv.NotifyOne();
    } else {
      data_ready.push_back(std::move(ready));
      data_cv.NotifyOne();
    }
  }

  // The poll thread: waits for request heads and enforces their deadlines.
  void PollLoop() EXCLUDES(mu) {
    std::vector<epoll_event> events(64);
    std::string buf(kMaxHead, '\0');
    int timeout_ms = 0;
    while (true) {
      const int n =
          ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout_ms);
      std::vector<Conn> expired;
      {
        MutexLock lock(mu);
        if (stopping) return;
        for (int i = 0; i < n; ++i) {
          const int fd = events[i].data.fd;
          if (fd == wake_fd) {
            uint64_t v;
            (void)!::read(wake_fd, &v, sizeof(v));
            continue;
          }
          Inspect(fd, buf);
        }
        // Deadlines; the next wait lasts until the nearest one (at most 1 s).
        const auto now = SteadyClock::now();
        auto next = now + std::chrono::seconds(1);
        std::vector<int> late;
        for (const auto& [fd, c] : waiting) {
          if (c.deadline <= now) {
            late.push_back(fd);
          } else {
            next = std::min(next, c.deadline);
          }
        }
        for (int fd : late) {
          Conn c = TakeWaiting(fd);
          Forget(c);
          expired.push_back(std::move(c));
        }
        timeout_ms = std::max(1, MsUntil(next));
      }
      for (const Conn& c : expired) {
        if (c.idle) {
          ::close(c.fd);  // a kept-alive connection that stayed idle: nothing to answer
        } else {
          head_timeouts->Increment();
          AnswerAndClose(c.fd, "408 Request Timeout",
                         "request head not received within " +
                             std::to_string(options.header_timeout_ms) + " ms");
        }
      }
    }
  }

  // A worker: serves queued connections of one lane until Stop.
  void WorkLoop(bool control) EXCLUDES(mu) {
    while (true) {
      Conn c;
      {
        MutexLock lock(mu);
        std::deque<Conn>& queue = control ? control_ready : data_ready;
        CondVar& cv = control ? control_cv : data_cv;
        while (!stopping && queue.empty()) cv.Wait(mu);
        if (stopping) return;  // Stop closes what is still queued
        c = std::move(queue.front());
        queue.pop_front();
      }
      Serve(std::move(c));
    }
  }

  // Answers the request whose head has arrived on c, then parks or closes the connection.
  void Serve(Conn c) EXCLUDES(mu) {
    ConnStream strm(c.fd, SteadyClock::now() + std::chrono::milliseconds(options.body_timeout_ms),
                    options.io_timeout_ms, options.min_send_bytes_per_s);
    bool reuse = strm.Prefetch(c.head_len);
    if (reuse) {
      ++c.served;
      const bool close_connection =
          options.keep_alive_timeout_s <= 0 || c.served >= kMaxRequestsPerConnection;
      bool connection_closed = false;
      tl_request = CurrentRequest{&strm, false};
      const bool ok =
          server.ServeOne(strm, close_connection, &connection_closed, [](httplib::Request& req) {
            // No route takes a body. One announced is refused unread (413, by the pre-routing
            // handler), so a client trickling it holds no worker; what follows the head on
            // this connection may be the rest of it, so the connection is closed after the
            // answer, never read for a next request.
            if (req.has_header("Transfer-Encoding") ||
                std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > 0) {
              tl_request.has_body = true;
              req.headers.erase("Connection");
              req.set_header("Connection", "close");
            }
          });
      const bool has_body = tl_request.has_body;
      tl_request = CurrentRequest{};
      if (strm.send_timed_out()) {
        // Reset rather than close: a close would leave the kernel delivering the megabytes
        // already in the send buffer, at the slow reader's pace.
        slow_readers->Increment();
        const linger abort{1, 0};
        ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
      }
      reuse = ok && !close_connection && !connection_closed && !has_body && !strm.timed_out();
    }
    MutexLock lock(mu);
    if (!reuse || stopping) {
      Drop(c);
      return;
    }
    c.idle = true;
    c.head_len = 0;
    c.deadline = SteadyClock::now() + std::chrono::seconds(options.keep_alive_timeout_s);
    Park(std::move(c));
  }

  // Stops the poll thread and the workers (each finishes the request it serves) and closes
  // every connection left.
  void Shutdown() EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      stopping = true;
    }
    data_cv.NotifyAll();
    control_cv.NotifyAll();
    const uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));
    if (poller.joinable()) poller.join();
    for (std::thread& t : workers) t.join();
    workers.clear();
    MutexLock lock(mu);
    std::vector<int> fds;
    for (const auto& [fd, c] : waiting) fds.push_back(fd);
    for (int fd : fds) Drop(TakeWaiting(fd));
    for (const Conn& c : data_ready) Drop(c);
    for (const Conn& c : control_ready) Drop(c);
    data_ready.clear();
    control_ready.clear();
  }

  // --- Requests ------------------------------------------------------------------------------

  void Text(httplib::Response& res, int status, const std::string& text) {
    res.status = status;
    res.set_content(text + "\n", "text/plain; charset=utf-8");
  }

  // True if the request carries the agent's token (or none is configured). The comparison
  // is of SHA-256 digests with CRYPTO_memcmp, so its time depends on neither the token's
  // length nor where a guess first differs.
  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (options.token.empty()) return true;  // allow_unauthenticated
    const std::string value = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "bearer ";
    const bool presented = StartsWithIgnoreCase(value, kBearer);
    if (presented) {
      std::string_view token = std::string_view(value).substr(kBearer.size());
      while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
      while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
      const Digest d = Sha256(token);
      if (CRYPTO_memcmp(d.data(), token_digest.data(), d.size()) == 0) return true;
    }
    res.set_header("WWW-Authenticate",
                   presented ? "Bearer realm=\"gantry-agent\", error=\"invalid_token\""
                             : "Bearer realm=\"gantry-agent\"");
    Text(res, 401,
         presented ? "the agent token is wrong"
                   : "this agent requires 'Authorization: Bearer TOKEN' with the cluster's agent "
                     "token ($GANTRY_AGENT_TOKEN)");
    return false;
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
        [this, file, first](size_t offset, size_t length, httplib::DataSink& sink) -> bool {
          ConnStream* strm = tl_request.stream;
          if (strm == nullptr) return false;  // not on a worker: cannot happen
          // The bytes go from the file to the socket in the kernel (sendfile); httplib's sink
          // only counts them, so it gets the placeholder in place of a buffer.
          const size_t n = std::min(length, kSendfileStep);
          strm->SendFrom(file->fd, first + offset);
          const bool sent = sink.write(kFilePlaceholder, n);
          strm->SendFrom(-1, 0);
          if (!sent) {
            // A read error, or the file shrank under us (written in place by something other
            // than a PosixStore): the connection ends short, so the client sees an error.
            (strm->file_failed() ? read_errors : aborted)->Increment();
            return false;
          }
          bytes_served->Increment(n);
          return true;
        });
  }

  void Json(httplib::Response& res, int status, const nlohmann::json& j) {
    res.status = status;
    res.set_content(j.dump() + "\n", "application/json");
  }

  // POST and GET /v1/stage (agent.h): answered from the stager's memory; the staging itself
  // runs on its threads.
  void ServeStage(const httplib::Request& req, httplib::Response& res) {
    if (stager == nullptr) {
      return Text(res, 501,
                  "this agent stages no datasets: it was started without --data-cache DIR");
    }
    const std::string dataset = req.get_param_value("dataset");
    if (req.method == "DELETE") {
      const std::string job = req.get_param_value("job");
      if (dataset.empty() || job.empty()) {
        return Text(res, 400, "DELETE /v1/stage needs ?dataset=URL&job=ID");
      }
      std::optional<StageState> s = stager->Release(dataset, job);
      if (!s) return Text(res, 404, "dataset '" + dataset + "' was never asked to be staged here");
      return Json(res, 200, StageStateToJson(*s));
    }
    if (req.method == "POST") {
      if (dataset.empty()) return Text(res, 400, "POST /v1/stage needs ?dataset=URL");
      Result<StageState> s = stager->Request(dataset, req.get_param_value("job"));
      if (!s.ok()) return Text(res, HttpStatusFor(s.status().code()), s.status().message());
      return Json(res, 202, StageStateToJson(*s));
    }
    if (dataset.empty()) {
      nlohmann::json all = nlohmann::json::array();
      for (const StageState& s : stager->List()) all.push_back(StageStateToJson(s));
      return Json(res, 200, nlohmann::json{{"datasets", std::move(all)}});
    }
    std::optional<StageState> s = stager->Get(dataset);
    if (!s) return Text(res, 404, "dataset '" + dataset + "' was never asked to be staged here");
    Json(res, 200, StageStateToJson(*s));
  }

  // GET /v1/checkpoint?url=URL (agent.h): how much of the newest committed checkpoint at URL
  // this node's local tier holds. The manifest is read from the durable root on this worker:
  // gantryd asks once per node while a job waits, not per chunk.
  void ServeCheckpoint(const httplib::Request& req, httplib::Response& res) {
    const std::string url = req.get_param_value("url");
    if (url.empty()) return Text(res, 400, "GET /v1/checkpoint needs ?url=URL");
    Result<ckpt::TierCopy> copy = LocalCopy(url);
    if (!copy.ok()) return Text(res, HttpStatusFor(copy.status().code()), copy.status().message());
    Json(res, 200, TierCopyToJson(url, *copy));
  }
  Result<ckpt::TierCopy> LocalCopy(const std::string& url) {
    GANTRY_RETURN_IF_ERROR(agent_internal::CheckStageUrl(url, options.stage_allow, "checkpoint"));
    GANTRY_ASSIGN_OR_RETURN(ckpt::CheckpointLocation where, ckpt::ParseCheckpointLocation(url));
    GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> root,
                            OpenObjectStore(where.root, durable_options));
    ckpt::CheckpointCatalog catalog(*root);
    return catalog.LatestCopyIn(where.job, *tier);
  }

  // POST and GET /v1/drain (agent.h): answered at once; the drain runs on `drainer`.
  void ServeDrain(const httplib::Request& req, httplib::Response& res) EXCLUDES(drain_mu) {
    MutexLock lock(drain_mu);
    if (req.method == "POST") {
      drain_wanted = true;
      drain_cv.NotifyAll();
      DrainStatus now = drain;
      now.state = "draining";  // this request's drain is queued or running
      return Json(res, 202, DrainStatusToJson(now));
    }
    DrainStatus now = drain;
    if (drain_wanted) now.state = "draining";
    Json(res, 200, DrainStatusToJson(now));
  }
  void DrainLoop() EXCLUDES(drain_mu) {
    for (;;) {
      bool sweep = false;  // the agent's own periodic drain, of old records only
      {
        MutexLock lock(drain_mu);
        if (options.drain_every_seconds > 0) {
          const auto due =
              std::chrono::steady_clock::now() + std::chrono::seconds(options.drain_every_seconds);
          while (!drain_wanted && !drain_stop) {
            if (!drain_cv.WaitUntil(drain_mu, due) && std::chrono::steady_clock::now() >= due) {
              sweep = true;
              break;
            }
          }
        } else {
          while (!drain_wanted && !drain_stop) drain_cv.Wait(drain_mu);
        }
        if (drain_stop) return;
        sweep = sweep && !drain_wanted;  // a request drains every record anyway
        drain_wanted = false;
        drain.state = "draining";
      }
      ckpt::DrainOptions o;
      if (sweep) o.min_age_seconds = options.drain_min_age_seconds;
      o.store_options = durable_options;
      // Any process on the node can write a record naming any root: the agent writes only
      // where it may read (stage_allow), as for GET /v1/checkpoint.
      o.allow = [this](const std::string& url) {
        return agent_internal::CheckStageUrl(url, options.stage_allow, "checkpoint");
      };
      o.clock = options.clock;
      o.cancel = &drain_cancel;
      Result<ckpt::DrainReport> r = ckpt::DrainLocalTier(tier, o);
      if (r.ok()) {
        metrics->GetCounter(kDrainParts, kDrainPartsHelp).Increment(r->parts_written);
        metrics->GetCounter(kDrainCommits, kDrainCommitsHelp).Increment(r->committed.size());
        metrics->GetCounter(kDrainBytes, kDrainBytesHelp).Increment(r->bytes_copied);
        metrics->GetCounter(kDrainLeft, kDrainLeftHelp, {{"why", "failed"}}).Increment(r->failed);
        metrics->GetCounter(kDrainLeft, kDrainLeftHelp, {{"why", "discarded"}})
            .Increment(r->discarded);
      }
      if (sweep) {
        metrics
            ->GetCounter("gantry_agent_drain_sweeps_total",
                         "The agent's own periodic drains (of records older than its minimum "
                         "age), besides those asked for.")
            .Increment();
      }
      MutexLock lock(drain_mu);
      ++drain.runs;
      drain.state = "idle";
      drain.last = r.ok() ? *r : ckpt::DrainReport{};
      drain.error = r.ok() ? "" : r.status().ToString();
    }
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
  const std::pair<const char*, int> positive[] = {
      {"threads", options.threads},
      {"header_timeout_ms", options.header_timeout_ms},
      {"body_timeout_ms", options.body_timeout_ms},
      {"io_timeout_ms", options.io_timeout_ms},
      {"max_connections_per_client", options.max_connections_per_client}};
  if (options.keep_alive_timeout_s < 0 || options.min_send_bytes_per_s < 0) {
    return InvalidArgument(
        "gantry-agent: keep_alive_timeout_s and min_send_bytes_per_s must not be negative");
  }
  for (const auto& [name, value] : positive) {
    if (value < 1) {
      return InvalidArgument("gantry-agent: " + std::string(name) + " must be at least 1 (got " +
                             std::to_string(value) + ")");
    }
  }
  if (options.token.empty() && !options.allow_unauthenticated) {
    return InvalidArgument(
        "gantry-agent: no token: peers must present the cluster's agent token (--token-file or "
        "$" +
        std::string(kAgentTokenEnv) + ")");
  }
  if (!IsValidAgentToken(options.token)) {
    return InvalidArgument("gantry-agent: the token may hold only printable ASCII without spaces");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->token_digest = Sha256(options.token);
  impl->root_fd = ::open(options.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (impl->root_fd < 0) {
    const int err = errno;
    const std::string msg = "gantry-agent: root '" + options.root + "': " + std::strerror(err);
    if (err == ENOENT) return NotFound(msg);
    return FailedPrecondition(msg);
  }
  impl->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->epoll_fd < 0 || impl->wake_fd < 0) {
    return Internal(std::string("gantry-agent: epoll/eventfd: ") + std::strerror(errno));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = impl->wake_fd;
  ::epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, impl->wake_fd, &wake);

  if (options.metrics == nullptr) impl->own_metrics = std::make_unique<MetricsRegistry>();
  impl->metrics = options.metrics != nullptr ? options.metrics : impl->own_metrics.get();
  MetricsRegistry& m = *impl->metrics;
  impl->bytes_served =
      &m.GetCounter("gantry_agent_bytes_served_total", "Object bytes sent to peers.");
  impl->read_errors = &m.GetCounter("gantry_agent_errors_total",
                                    "Requests that failed or were cut short.", {{"kind", "read"}});
  impl->aborted = &m.GetCounter("gantry_agent_errors_total",
                                "Requests that failed or were cut short.", {{"kind", "client"}});
  constexpr std::string_view kClosedHelp =
      "Connections the agent closed unserved or cut short: over the per-client cap, no request "
      "head in time, or a response read too slowly.";
  impl->refused_per_client = &m.GetCounter("gantry_agent_connections_closed_total", kClosedHelp,
                                           {{"reason", "per_client_limit"}});
  impl->head_timeouts = &m.GetCounter("gantry_agent_connections_closed_total", kClosedHelp,
                                      {{"reason", "header_timeout"}});
  impl->slow_readers = &m.GetCounter("gantry_agent_connections_closed_total", kClosedHelp,
                                     {{"reason", "slow_reader"}});
  impl->idle_closed =
      &m.GetCounter("gantry_agent_idle_connections_closed_total",
                    "Idle kept-alive connections closed to make room for a new one from the same "
                    "client (at max_connections_per_client).");
  impl->accepted =
      &m.GetCounter("gantry_agent_connections_accepted_total",
                    "Client connections accepted (kept-alive ones serve many requests).");
  impl->open_connections =
      &m.GetGauge("gantry_agent_open_connections", "Client connections open now.");

  PosixStoreOptions tier_options;
  tier_options.create_root = false;
  GANTRY_ASSIGN_OR_RETURN(impl->tier, OpenPosixStore(options.root, tier_options));
  // A root served by a peer's agent (an http:// URL) takes the same cluster token as this one.
  if (!options.token.empty()) impl->durable_options.agent_token = options.token;

  if (!options.data_cache_dir.empty()) {
    if (options.stage_threads < 1) {
      return InvalidArgument("gantry-agent: stage_threads must be at least 1");
    }
    agent_internal::StagerOptions so;
    so.cache_dir = options.data_cache_dir;
    so.cache_bytes = options.data_cache_bytes;
    so.threads = options.stage_threads;
    so.allow = options.stage_allow;
    so.pin_seconds = options.stage_pin_seconds;
    so.clock = options.clock != nullptr ? options.clock : &DefaultClock();
    // A peer's agent (an http:// dataset) takes the same cluster token as this one.
    if (!options.token.empty()) so.store_options.agent_token = options.token;
    so.metrics = impl->metrics;
    impl->stager = std::make_unique<agent_internal::Stager>(std::move(so));
  }

  Impl* p = impl.get();
  Server& s = impl->server;
  s.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, which would let a second agent bind the same port
  // and silently share its traffic; SO_REUSEADDR alone allows quick restarts.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.set_pre_routing_handler([p](const httplib::Request& req, httplib::Response& res) {
    // No route takes a body. httplib reads one (a POST's, say) after this handler and before
    // its routes, so every request that announces one is answered here, unread.
    const auto refuse_body = [p, &res] {
      p->Text(res, 413, "the agent's routes take no request body");
      return httplib::Server::HandlerResponse::Handled;
    };
    if (req.path == "/healthz") {
      return tl_request.has_body ? refuse_body() : httplib::Server::HandlerResponse::Unhandled;
    }
    if (!p->Authorized(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (!std::string_view(req.path).starts_with(kObjectsPrefix)) {
      return tl_request.has_body ? refuse_body() : httplib::Server::HandlerResponse::Unhandled;
    }
    p->ServeObject(req, res);  // reads no body (another method is 405)
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/healthz",
        [p](const httplib::Request&, httplib::Response& res) { p->Text(res, 200, "ok"); });
  const auto stage = [p](const httplib::Request& req, httplib::Response& res) {
    p->ServeStage(req, res);
  };
  s.Get(std::string(kStagePath), stage);
  s.Post(std::string(kStagePath), stage);
  s.Delete(std::string(kStagePath), stage);
  const auto drain = [p](const httplib::Request& req, httplib::Response& res) {
    p->ServeDrain(req, res);
  };
  s.Get(std::string(kDrainPath), drain);
  s.Post(std::string(kDrainPath), drain);
  s.Get(std::string(kCheckpointPath),
        [p](const httplib::Request& req, httplib::Response& res) { p->ServeCheckpoint(req, res); });
  s.Get("/metrics", [p](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(p->metrics->PrometheusText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // Counted before the answer is written (httplib's post-routing handler), not after (its
  // logger): a client that has its answer and then reads /metrics, served by another thread,
  // must find its request counted.
  s.set_post_routing_handler(
      [p](const httplib::Request& req, httplib::Response& res) { p->Log(req, res); });

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
  impl->poller = std::thread([p] { p->PollLoop(); });
  impl->workers.emplace_back([p] { p->WorkLoop(/*control=*/true); });
  for (int i = 0; i < options.threads; ++i) {
    impl->workers.emplace_back([p] { p->WorkLoop(/*control=*/false); });
  }
  impl->drainer = std::thread([p] { p->DrainLoop(); });
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
  MutexLock lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->server.stop();  // no more Admit calls once the listener has returned
  if (impl_->listener.joinable()) impl_->listener.join();
  impl_->Shutdown();
  if (impl_->stager != nullptr) impl_->stager->Stop();  // after the routes that call it
  {
    MutexLock lock(impl_->drain_mu);
    impl_->drain_stop = true;
    impl_->drain_cancel = true;
    impl_->drain_cv.NotifyAll();
  }
  if (impl_->drainer.joinable()) impl_->drainer.join();  // after the record being drained
}

}  // namespace gantry
