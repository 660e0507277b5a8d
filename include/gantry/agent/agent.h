// AgentServer: the HTTP server inside gantry-agent, which serves a node's local tier directory
// to its peers, read-only, so a restoring node can fetch chunks from a neighbour's NVMe instead
// of the durable tier. The client side is HttpStore (include/gantry/storage/http_store.h).
//
// Routes (docs/storage.md, "Peer agent"):
//   GET|HEAD /v1/objects/KEY   the file ROOT/KEY; one byte range (`Range: bytes=A-B`, `A-`,
//                              `-N`) answers 206 with Content-Range, an unsatisfiable one 416;
//                              a key that ValidateKey rejects 400; a missing object 404
//   GET /healthz               "ok"
//   GET /metrics               Prometheus text: requests by route and status, bytes served,
//                              errors
// Keys resolve beneath ROOT only: "..", absolute keys and symlinks are refused, so no request
// reads outside the served directory. Bodies are streamed from the file in pieces (a 4 MiB chunk
// is never copied whole into memory), from one open descriptor, so a reader sees one whole
// version of an object even while a PosixStore writer renames a new one over it.
//
// There is no authentication: bind to a trusted network. Thread-safe; Stop() may be called from
// any thread (not from a request handler).
//
//   AgentOptions o;
//   o.root = "/nvme/gantry";
//   GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<AgentServer> agent, AgentServer::Start(o));
//   std::cout << agent->url();  // "http://127.0.0.1:40121"
#pragma once

#include <memory>
#include <string>

#include "gantry/common/metrics.h"
#include "gantry/common/status.h"

namespace gantry {

struct AgentOptions {
  // The directory served (the root of a posix ObjectStore, e.g. a node-local tier). Required;
  // must exist.
  std::string root;
  // Address to listen on. Default: 127.0.0.1 (use the node's cluster-network address to serve
  // peers).
  std::string host = "127.0.0.1";
  // 0: any free port (see AgentServer::port()).
  int port = 0;
  // Requests served at once; more wait in a queue. Default: 8.
  int threads = 8;
  // Seconds an idle connection is kept open for a next request; 0: one request per connection.
  // The HTTP library ties up a thread per open connection, idle or not, so with keep-alive an
  // idle peer connection blocks a waiting one for this long (and that peer may time out): only
  // turn it on with more threads than concurrent readers. Default: 0.
  int keep_alive_timeout_s = 0;
  // Where the metrics go; nullptr: a registry owned by the server.
  MetricsRegistry* metrics = nullptr;
};

class AgentServer {
 public:
  // Opens the root, binds the address and starts serving on background threads. NotFound or
  // FailedPrecondition for a bad root, Unavailable if the address cannot be bound.
  static Result<std::unique_ptr<AgentServer>> Start(const AgentOptions& options);
  ~AgentServer();  // Stops.
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const;
  // "http://HOST:PORT", the base URL peers pass to OpenHttpStore.
  std::string url() const;
  const std::string& root() const;
  MetricsRegistry& metrics();

  // Stops accepting, lets requests in flight finish (bounded by the I/O timeouts) and joins the
  // threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit AgentServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry
