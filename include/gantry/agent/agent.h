// AgentServer: the HTTP server inside gantry-agent, which serves a node's local tier directory
// to its peers, read-only, so a restoring node can fetch chunks from a neighbour's NVMe instead
// of the durable tier, and stages datasets into the node's shard cache when gantryd asks. The
// client sides are HttpStore (include/gantry/storage/http_store.h) and stage_client.h.
//
// Routes (docs/storage.md, "Peer agent"):
//   GET|HEAD /v1/objects/KEY   the file ROOT/KEY; one byte range (`Range: bytes=A-B`, `A-`,
//                              `-N`) answers 206 with Content-Range, an unsatisfiable one 416;
//                              a key that ValidateKey rejects 400; a missing object 404
//   any request with a body    413, unread (no route takes one), connection closed
//   POST /v1/stage?dataset=URL[&job=ID]
//                              stage the dataset into the node's shard cache in the
//                              background (data/stage.h): 202 with its state as JSON (a
//                              StageState, stage_client.h); a dataset queued, staging or done
//                              answers its state, a failed one is retried; a URL that is not
//                              file://, s3://, http:// or https:// 400; no data_cache_dir 501
//                              A request naming a job pins what is staged for it (below).
//   DELETE /v1/stage?dataset=URL&job=ID
//                              the job no longer needs it pinned: 200 its state; 404 if
//                              never asked
//   GET /v1/stage?dataset=URL  200 its state; 404 if never asked
//   GET /v1/stage              200 {"datasets": [state, ...]}
//   GET /v1/checkpoint?url=URL how much of the newest committed checkpoint at URL (a root, or
//                              ROOT/ckpt/JOB: ckpt::ParseCheckpointLocation) this node's tier
//                              (ROOT) holds: 200 {"checkpoint", "step", "chunks",
//                              "chunks_held", "bytes", "bytes_held"} (a TierCopy,
//                              stage_client.h); 404 when the job has no committed checkpoint;
//                              400 for a URL that is not file://, s3://, http:// or https://,
//                              403 for one outside stage_allow. The manifest is read from the
//                              durable root by the serving worker (one listing and one read),
//                              the chunks looked up beneath ROOT. gantryd asks it of the nodes
//                              a waiting job ran on (include/gantry/control/stager.h).
//   POST /v1/drain             finish, in the background, the saves whose process ended before
//                              they were durable: the drain records in ROOT (ckpt/drain.h),
//                              each to its own durable root, which must be under stage_allow
//                              (others are skipped: any process on the node can write a
//                              record); 202 {"state": "draining", "runs", "error", "last"}
//                              (a DrainStatus, stage_client.h). One drain at a time; a request
//                              during one runs another after it. gantryd asks when a job that
//                              declared a checkpoint ends, on every node it ran on. Without a
//                              request the agent also sweeps every drain_every_seconds,
//                              draining records older than drain_min_age_seconds: a save left
//                              by a job gantryd never saw end (it ran and ended while gantryd
//                              was away, past the time Slurm still reports it) is finished too.
//   GET /v1/drain              200 the drain state: "draining" or "idle", drains finished,
//                              the last one's report
//   GET /healthz               "ok"
//   GET /metrics               Prometheus text: requests by route and status, bytes served,
//                              errors, staging (bytes fetched per dataset, datasets staging,
//                              failures by code), drains (parts, commits, bytes, records left)
// Staging, and the checkpoint route, read whatever URL a token holder names (under
// stage_allow), as the agent's user and with its credentials (S3 keys from its environment):
// the token is the cluster's trust boundary.
// Stagings run on stage_threads threads of their own, so they never delay object reads or
// /healthz; Stop() cancels them between shards. A dataset staged at the request of a job stays
// pinned in the shard cache (no process on the node evicts its shards) until every job that
// asked for it released it (DELETE, when gantryd sees the job start or end) or until
// stage_pin_seconds after the last request, whichever comes first: a waiting job's data is not
// evicted by the next staging, and a forgotten pin cannot hold the cache for ever.
//
// Keys resolve beneath ROOT only: "..", absolute keys and symlinks are refused, so no request
// reads outside the served directory. Bodies are streamed from the file in pieces (a 4 MiB chunk
// is never copied whole into memory), from one open descriptor, so a reader sees one whole
// version of an object even while a PosixStore writer renames a new one over it.
//
// Every route but /healthz requires `Authorization: Bearer TOKEN` with the cluster's agent token
// (AgentOptions::token); a missing or wrong token is answered 401 with a WWW-Authenticate
// header. /healthz stays open so liveness probes need no secret; it reveals nothing.
//
// Slow or hostile clients cannot starve it: a connection is read by one poll thread until its
// whole request head has arrived (bounded by header_timeout_ms, then it is answered 408 and
// closed), and only then handed to a worker, so clients trickling headers hold no worker;
// idle keep-alive connections hold none either. A request announcing a body is answered 413
// without reading it; every send must progress within io_timeout_ms and a whole response keep
// up min_send_bytes_per_s. Bodies go from the file to the socket with sendfile(2). Keep-alive
// is on (keep_alive_timeout_s). One client address may hold at most
// max_connections_per_client connections; more are answered 503 and closed. /healthz and
// /metrics are served by a thread of their own, so transfers to slow readers never delay them.
//
// Thread-safe; Stop() may be called from any thread (not from a request handler).
//
//   AgentOptions o;
//   o.root = "/nvme/gantry";
//   o.token = token_from_secret;
//   GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<AgentServer> agent, AgentServer::Start(o));
//   std::cout << agent->url();  // "http://127.0.0.1:40121"
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gantry/common/metrics.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"

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
  // Object requests served at once (each needs its whole head received first); more wait in a
  // queue. /healthz and /metrics have a thread of their own besides. Default: 8.
  int threads = 8;
  // Seconds an idle connection is kept open for a next request; 0: one request per connection.
  // Idle connections wait on the poll thread, not on a worker, and count against
  // max_connections_per_client. Peer readers (HttpStore) reuse a connection only while it has
  // been idle for less than a second, so any value above 1 avoids a race with this close.
  // Default: 5.
  int keep_alive_timeout_s = 5;
  // The bearer token peers must send (printable ASCII, no spaces). Required unless
  // allow_unauthenticated; gantry-agent reads it from --token-file or $GANTRY_AGENT_TOKEN.
  std::string token;
  // Serve without a token (tests, or a network where every host is trusted). Default: false.
  bool allow_unauthenticated = false;
  // Time a client has to send a request's line and headers, counted from its connection (or,
  // on a kept-alive connection, from the request's first byte); then it is answered 408 and
  // closed. Default: 10000 ms.
  int header_timeout_ms = 10000;
  // Bound on every read after a request's head (the routes take no body: a request that
  // announces one is answered 413 unread and its connection closed). Default: 10000 ms.
  int body_timeout_ms = 10000;
  // Each send to a client must make progress within this time, or the response is abandoned.
  // Default: 5000 ms.
  int io_timeout_ms = 5000;
  // A response must also keep up this average rate after io_timeout_ms of grace (a 4 MiB chunk
  // gets 5 s + 16 s), or it is abandoned: a client that reads a few bytes every few seconds
  // cannot hold a worker for hours. 0: no minimum. Default: 256 KiB/s.
  int64_t min_send_bytes_per_s = 256 << 10;
  // Connections one client address may hold open at once (waiting, idle or being served);
  // more are answered 503 and closed. A restoring peer reads with a few dozen threads at most.
  // Default: 64.
  int max_connections_per_client = 64;
  // Where the metrics go; nullptr: a registry owned by the server.
  MetricsRegistry* metrics = nullptr;
  // The node-local shard cache that POST /v1/stage stages datasets into (the directory the
  // node's training jobs open as their loader's cache_dir, e.g. GANTRY_DATA_CACHE_DIR), and its
  // byte budget (0: no limit). Empty: staging is off and the /v1/stage routes answer 501.
  std::string data_cache_dir;
  uint64_t data_cache_bytes = 0;
  // Datasets staged at once, on threads of their own (not the object workers). Default: 2.
  int stage_threads = 2;
  // The longest a staged dataset stays pinned for the jobs that asked for it, counted from the
  // latest request (a job that never releases it). 0: staged datasets are never pinned.
  // Default: 6 h (gantryd's --data-wait is 10 min; a reservation rarely plans further ahead).
  int64_t stage_pin_seconds = 6 * 3600;
  // The clock of the pins' leases. Default: the real clock; tests pass a SimulatedClock.
  Clock* clock = nullptr;
  // URL prefixes a staged dataset, or a checkpoint location asked about (GET /v1/checkpoint),
  // must start with ("s3://datasets/", "file:///lustre/data/"); another is refused with 403
  // (PermissionDenied). A file:// URL is compared after resolving
  // "..", "." and symlinks, and a prefix matches whole path components only. The agent reads
  // as its own user (often root) and the cache is readable by every job on the node, while any
  // holder of the agent token -- a job restoring checkpoints from peers has it -- may ask: set
  // this on any cluster with more than one user. Empty: every URL is allowed.
  std::vector<std::string> stage_allow;
  // The agent's own drain sweep (besides the drains gantryd asks for): every this many seconds
  // of real time, records older than drain_min_age_seconds (by `clock`) are drained. A save
  // still being made durable by its live process is younger (or, if older, a drain racing it
  // copies chunks twice and agrees with it: ckpt/drain.h). 0: drain only when asked.
  // Defaults: every 10 min, records older than 1 h.
  int64_t drain_every_seconds = 600;
  int64_t drain_min_age_seconds = 3600;
};

class AgentServer {
 public:
  // Opens the root, binds the address and starts serving on background threads. NotFound or
  // FailedPrecondition for a bad root, InvalidArgument for bad options (no token without
  // allow_unauthenticated, a token with spaces), Unavailable if the address cannot be bound.
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

  // Stops accepting, lets requests in flight finish (bounded by the I/O timeouts), cancels
  // stagings in flight (each stops after the shard it is fetching) and a drain (after the
  // record it is draining; the rest stay for the next) and joins the threads.
  // Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit AgentServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry
