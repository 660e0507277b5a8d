// HttpStore: a read-only ObjectStore over a peer's gantry-agent (include/gantry/agent/agent.h),
// so the checkpoint engine reads a peer's node-local tier through the same interface as every
// other tier.
//
// Get is GET BASE/v1/objects/KEY, GetRange the same with a single `Range: bytes=A-B`, Head is
// HEAD. Put, Delete and List fail with Unimplemented "read-only". Every request carries a
// connect timeout, a total timeout and a low-speed limit, so a hung or trickling peer costs a
// bounded time and fails with DeadlineExceeded ("timed out after N ms"), a dead one with
// Unavailable; the caller then moves on to the next source. HTTP answers map to codes as for
// S3 (403 PermissionDenied, 404 NotFound, 503 Unavailable, ...; see docs/storage.md). A body
// shorter than its Content-Length (a peer that died mid-transfer) or a malformed answer is an
// error, never a short read reported as success.
//
// Thread-safe: many Gets may run at once. Idle libcurl handles are pooled, so sequential
// requests from one thread reuse a kept-alive connection.
//
//   HttpStoreOptions o;
//   o.timeout_ms = 2000;
//   GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> peer,
//                           OpenHttpStore("http://node7:7070", o));
//   GANTRY_ASSIGN_OR_RETURN(std::string chunk, peer->Get("chunks/ab/cd/abcd..."));
#pragma once

#include <memory>
#include <string>

#include "gantry/common/status.h"
#include "gantry/storage/object_store.h"

namespace gantry {

struct HttpStoreOptions {
  // Time to establish the TCP connection. Default: 2000 ms.
  int connect_timeout_ms = 2000;
  // Whole request, connect included; 0 means no limit (the low-speed limit still applies).
  // Default: 5000 ms, ample for a 4 MiB chunk on any data-centre network.
  int timeout_ms = 5000;
  // A transfer slower than low_speed_bytes_per_s for low_speed_time_s seconds is abandoned, so a
  // peer that trickles bytes cannot hold a reader up to the total timeout (or forever when it is
  // 0). 0 disables the check. Defaults: 1 MiB/s over 2 s.
  long low_speed_bytes_per_s = 1 << 20;
  int low_speed_time_s = 2;
  // Idle connections kept for reuse. Default: 16.
  int max_idle_connections = 16;
  // Sent as `Authorization: Bearer TOKEN` with every request (the agent answers 401 without
  // it, which is PermissionDenied here); empty sends none. Default: $GANTRY_AGENT_TOKEN
  // (DefaultAgentToken in object_store.h).
  std::string token = DefaultAgentToken();
};

// Opens a store over the agent at `base_url` ("http://host:port", optionally with a path prefix
// such as "http://proxy/agent-7"; a trailing '/' is ignored). Nothing is contacted until the
// first request. InvalidArgument if the URL is not http:// with a host.
Result<std::unique_ptr<ObjectStore>> OpenHttpStore(const std::string& base_url,
                                                   const HttpStoreOptions& options);

}  // namespace gantry
