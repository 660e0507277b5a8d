// A client of gantryd's REST API (docs/openapi.yaml), for `gantry queue` and `gantry explain`
// and any tool that reads the queue: the same JSON the server writes, read back into JobViews.
//
//   ApiClient c({"http://127.0.0.1:8642", token});
//   GANTRY_ASSIGN_OR_RETURN(std::vector<JobView> queue, c.Queue());
//
// Errors are codes: Unavailable when gantryd cannot be reached (or answers 5xx),
// PermissionDenied for a token it does not know (401), NotFound for a job the token cannot see
// (404), DataLoss for an answer that is not the documented JSON, InvalidArgument for a server
// address that is not http://HOST[:PORT].
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
};

// The server gantry's client commands use: $GANTRY_SERVER, else http://127.0.0.1:8642.
std::string DefaultServer();

class ApiClient {
 public:
  explicit ApiClient(ApiClientOptions options);

  // GET /v1/queue: the pending jobs the token may see, by estimated start.
  Result<std::vector<JobView>> Queue() const;
  // GET /v1/jobs: every active job the token may see.
  Result<std::vector<JobView>> Jobs() const;
  // GET /v1/jobs/{id}.
  Result<JobView> Job(const std::string& id) const;

 private:
  Result<std::string> Get(const std::string& path) const;
  ApiClientOptions options_;
};

// A JobView from the API's JSON for one job (JobViewJson's inverse).
Result<JobView> JobViewFromJson(const std::string& json);

}  // namespace gantry::control
