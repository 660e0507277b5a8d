// gantryd's REST API: jobs with their reasons and start estimates, the queue, nodes, team usage,
// the profile in use, health, cancelling a job, and Prometheus metrics, over HTTP
// (cpp-httplib), scoped by bearer tokens.
//
// Every /v1 endpoint but /v1/health needs `Authorization: Bearer <token>`. A team's token sees
// only that team's jobs: another team's job is 404, exactly like a job that does not exist, so
// a token cannot learn what other teams run. The operator token sees every job. /metrics is
// open (Prometheus scrapes without credentials on a cluster's management network) unless
// ApiOptions::metrics_need_token. The document is docs/openapi.yaml.
//
// The server reads only ControlSnapshot objects the control loop publishes, so requests never
// touch the engine and never wait for a cycle -- except GET /v1/jobs/{id}, which asks
// ApiOptions::explain for the job's sentence as of now (between cycles). /v1/jobs and
// /v1/queue answer a page at a time (`limit`, default 1000, at most 10000; `cursor` from the
// previous page's `next`), with lookups by id through the snapshot's index. The one write, DELETE
// /v1/jobs/{id}, goes through ApiOptions::cancel (Controller::RequestCancel in gantryd): a team's
// token may cancel only its own jobs (another team's is 404, as for reading).
//
//   ApiOptions o;  o.team_tokens = {{"t0k3n", "vision"}};  o.operator_token = "...";
//   auto api = ApiServer::Start(o, [&] { return controller->Snapshot(); }, &metrics);
//   ... (*api)->port() ...
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "gantry/common/metrics.h"
#include "gantry/common/status.h"
#include "gantry/control/controller.h"

namespace gantry::control {

struct ApiOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                    // 0: any free port (see ApiServer::port)
  std::map<std::string, std::string> team_tokens;  // token -> team name
  std::string operator_token;                      // sees and may do everything; empty: none
  bool metrics_need_token = false;
  int threads = 4;
  int read_timeout_s = 5;  // a client that sends nothing for this long is dropped
  // Cancels a job on behalf of `by` ("team physics", "operator"); called on the API's threads.
  // Null: DELETE answers 501. Its NotFound is 404, FailedPrecondition 409, others 503.
  std::function<Status(const std::string& id, const std::string& by)> cancel;
  // The sentence for one job as of now (Controller::ExplainNow in gantryd), for GET
  // /v1/jobs/{id}; the lists show each job's sentence as of its last change. Null, or an
  // error: the snapshot's sentence.
  std::function<Result<std::string>(const std::string& id)> explain;
  // Where the web page's chart library (Vega) is: a node_modules directory; empty:
  // $GANTRY_WEB_DIR, else the build's web/node_modules.
  std::string web_dir;
};

class ApiServer {
 public:
  using SnapshotSource = std::function<std::shared_ptr<const ControlSnapshot>()>;

  // Listens at once and serves on its own threads until Stop or destruction. InvalidArgument
  // for a token that is empty or given twice; Unavailable when the port cannot be bound.
  static Result<std::unique_ptr<ApiServer>> Start(const ApiOptions& options,
                                                  SnapshotSource snapshot,
                                                  MetricsRegistry* metrics);
  ~ApiServer();
  int port() const;
  void Stop();

 private:
  class Impl;
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Team tokens from a file's text: one "TEAM TOKEN" per line; blank lines and lines starting
// with '#' are skipped. InvalidArgument naming source:line for a line that is not two words, a
// token given twice, or a token with characters outside printable ASCII.
Result<std::map<std::string, std::string>> ParseTeamTokens(const std::string& text,
                                                           const std::string& source);

// The teams of `team_tokens` (token -> team) that `cluster` does not name, sorted: their
// tokens would see an empty queue forever, as no job of theirs reaches the engine.
std::vector<std::string> TokenTeamsNotInCluster(
    const std::map<std::string, std::string>& team_tokens, const Cluster& cluster);

// The JSON of one job as the API shows it (also what `gantry queue --json` will print).
std::string JobViewJson(const JobView& job);
// The JSON of one node (/v1/nodes, `gantry nodes --json`) and one team (/v1/usage, `gantry
// usage --json`).
std::string NodeViewJson(const NodeView& node);
std::string TeamViewJson(const TeamView& team);

}  // namespace gantry::control
