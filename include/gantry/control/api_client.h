// A client of gantryd's REST API (docs/openapi.yaml), for `gantry queue|explain|cancel|nodes|
// usage` and any tool that reads the queue: the same JSON the server writes, read back into
// JobViews, NodeViews and TeamViews.
//
//   ApiClient c({"http://127.0.0.1:8642", token});
//   GANTRY_ASSIGN_OR_RETURN(std::vector<JobView> queue, c.Queue());
//
// Errors are codes: Unavailable when gantryd cannot be reached (or answers 5xx),
// PermissionDenied for a token it does not know (401), NotFound for a job the token cannot see
// (404), FailedPrecondition for a cancel of a job that is ending already (409), Unimplemented
// for a server that cannot cancel (501), DataLoss for an answer that is not the documented
// JSON, InvalidArgument for a server address that is not http://HOST[:PORT].
#pragma once

#include <string>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/control/controller.h"

namespace gantry::control {

struct ApiClientOptions {
  std::string server;  // "http://HOST[:PORT]"
  std::string token;   // bearer token; empty sends none
  int timeout_s = 10;
  int page_limit = 0;  // jobs per page of /v1/queue and /v1/jobs; 0: the server's default
};

// The server gantry's client commands use: $GANTRY_SERVER, else http://127.0.0.1:8642.
std::string DefaultServer();

class ApiClient {
 public:
  explicit ApiClient(ApiClientOptions options);

  // GET /v1/queue: the pending jobs the token may see, by estimated start; every page of it
  // (following each answer's `next`, from one snapshot while the server still pins it).
  Result<std::vector<JobView>> Queue() const;
  // GET /v1/jobs: every active job the token may see, every page of it.
  Result<std::vector<JobView>> Jobs() const;
  // GET /v1/jobs/{id}.
  Result<JobView> Job(const std::string& id) const;
  // DELETE /v1/jobs/{id}: gantryd cancels the job in Slurm; it ends within a cycle.
  Status Cancel(const std::string& id) const;
  // GET /v1/nodes.
  Result<std::vector<NodeView>> Nodes() const;
  // GET /v1/usage: the teams the token may see.
  Result<std::vector<TeamView>> Usage() const;

 private:
  // More pages than a 100-million-job queue at the default page size: a loop, not a queue.
  static constexpr int kMaxPages = 100000;
  Result<std::vector<JobView>> AllPages(const std::string& first) const;
  Result<std::string> Get(const std::string& path) const;
  Result<std::string> Send(const std::string& method, const std::string& path) const;
  ApiClientOptions options_;
};

// A JobView from the API's JSON for one job (JobViewJson's inverse).
Result<JobView> JobViewFromJson(const std::string& json);
// The inverses of NodeViewJson and TeamViewJson.
Result<NodeView> NodeViewFromJson(const std::string& json);
Result<TeamView> TeamViewFromJson(const std::string& json);

}  // namespace gantry::control
