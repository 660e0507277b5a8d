// `gantry queue` and `gantry explain JOB`: gantryd's queue with each job's reason and start
// estimate (like `squeue --start`), and one job's explanation, through its REST API
// (control/api_client.h). A team's token shows that team's jobs; the operator's, all.
#include <time.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "gantry/common/daemon.h"
#include "gantry/control/api.h"
#include "gantry/control/api_client.h"

namespace gantry::cli {
namespace {

struct QueueOptions {
  std::string server;
  std::string token_file;
  bool all = false;
  bool json = false;
  std::string job;
};

// UTC, as gantryd's times are Unix seconds.
std::string When(Time t) {
  if (t < 0) return "-";
  char buf[32];
  const time_t tt = static_cast<time_t>(t);
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<control::ApiClient> Client(const QueueOptions& o) {
  control::ApiClientOptions c;
  c.server = o.server.empty() ? control::DefaultServer() : o.server;
  if (!o.token_file.empty()) {
    GANTRY_ASSIGN_OR_RETURN(c.token, ReadSecretFile(o.token_file));
  } else if (const char* t = std::getenv("GANTRY_TOKEN"); t != nullptr) {
    c.token = t;
  }
  return control::ApiClient(c);
}

int RunQueue(const QueueOptions& o) {
  Result<control::ApiClient> client = Client(o);
  if (!client.ok()) return ReportFailure("queue", client.status());
  Result<std::vector<control::JobView>> jobs = o.all ? client->Jobs() : client->Queue();
  if (!jobs.ok()) return ReportFailure("queue", jobs.status());
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const control::JobView& v : *jobs) out.push_back(nlohmann::json::parse(JobViewJson(v)));
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%-12s %-12s %-10s %5s %-9s %-14s %-20s %s\n", "JOBID", "TEAM", "USER", "GPUS",
              "PHASE", "REASON", "START", "NODES");
  for (const control::JobView& v : *jobs) {
    const control::JobRecord& r = v.record;
    std::string nodes;
    for (const control::NodeGpus& s : r.placement) {
      nodes += (nodes.empty() ? "" : ",") + s.node;
    }
    // Pending: the plan's estimate; started: when it started.
    const Time start = r.phase == control::JobPhase::kPending ? v.estimated_start : r.started;
    std::printf("%-12s %-12s %-10s %5d %-9s %-14s %-20s %s\n", r.id.c_str(), r.team.c_str(),
                r.user.c_str(), r.gpus, control::JobPhaseName(r.phase), v.reason.c_str(),
                When(start).c_str(), nodes.empty() ? "-" : nodes.c_str());
  }
  return kExitOk;
}

int RunExplain(const QueueOptions& o) {
  Result<control::ApiClient> client = Client(o);
  if (!client.ok()) return ReportFailure("explain", client.status());
  Result<control::JobView> v = client->Job(o.job);
  if (!v.ok()) return ReportFailure("explain", v.status());
  if (o.json) {
    std::printf("%s\n", nlohmann::json::parse(JobViewJson(*v)).dump(2).c_str());
    return kExitOk;
  }
  const control::JobRecord& r = v->record;
  std::printf("job %s (team %s, user %s, %d GPUs): %s, reason %s\n", r.id.c_str(), r.team.c_str(),
              r.user.c_str(), r.gpus, control::JobPhaseName(r.phase), v->reason.c_str());
  std::printf("  %s\n", v->explain.c_str());
  if (r.phase == control::JobPhase::kPending) {
    std::printf("  estimated start: %s\n", v->estimated_start >= 0
                                               ? When(v->estimated_start).c_str()
                                               : "none yet (no reservation holds it)");
  }
  if (r.requeues > 0) std::printf("  requeued %d time(s)\n", r.requeues);
  return kExitOk;
}

void AddClientFlags(CLI::App* cmd, QueueOptions* o) {
  cmd->add_option("--server", o->server,
                  "gantryd's API, http://HOST[:PORT] (default: $GANTRY_SERVER, else "
                  "http://127.0.0.1:8642)");
  cmd->add_option("--token-file", o->token_file,
                  "file holding your team's (or the operator's) token (default: $GANTRY_TOKEN)");
  cmd->add_flag("--json", o->json, "print JSON (the API's job objects) for scripts");
}

}  // namespace

void RegisterQueueCommands(CLI::App& app) {
  auto o = std::make_shared<QueueOptions>();
  CLI::App* queue = app.add_subcommand(
      "queue",
      "Show gantryd's pending jobs with reasons and start estimates (like squeue --start)");
  AddClientFlags(queue, o.get());
  queue->add_flag("--all", o->all, "every active job, started ones too, by submit time");
  queue->footer(
      "\nPending jobs come in the order the plan expects them to start; START is the estimate "
      "(UTC) or, with --all, when a job started.\nExit status: 0, 1 gantryd unreachable or the "
      "token refused, 2 usage, 3 bad input.\n\nExample:\n  GANTRY_TOKEN=... gantry queue "
      "--server http://head:8642");
  queue->callback([o] {
    const int rc = RunQueue(*o);
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });

  auto e = std::make_shared<QueueOptions>();
  CLI::App* explain =
      app.add_subcommand("explain", "Say why one of gantryd's jobs waits, and when it may start");
  explain->add_option("JOB", e->job, "the job id (Slurm's)")->required();
  AddClientFlags(explain, e.get());
  explain->footer(
      "\nA job of another team, or one that ended, is not found (exit 3).\n\nExample:\n  gantry "
      "explain 4242 --token-file ~/.gantry-token");
  explain->callback([e] {
    const int rc = RunExplain(*e);
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gantry::cli
