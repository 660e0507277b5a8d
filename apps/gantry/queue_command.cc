// `gantry queue`, `gantry explain JOB`, `gantry cancel JOB`, `gantry nodes`, `gantry usage`:
// clients of gantryd's REST API (control/api_client.h) -- the queue with each job's reason and
// start estimate (like `squeue --start`), one job's explanation, cancelling a job, the nodes
// with their state and GPUs in use, and per-team usage against quota. A team's token shows
// (and cancels) that team's jobs; the operator's, all. And `gantry failopen`, which runs beside
// Slurm rather than against gantryd: when gantryd's heartbeat is stale it releases the held
// jobs to Slurm's own scheduler (control/failopen.h).
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
#include "gantry/control/failopen.h"
#include "gantry/slurm/slurm.h"

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

int RunCancel(const QueueOptions& o) {
  Result<control::ApiClient> client = Client(o);
  if (!client.ok()) return ReportFailure("cancel", client.status());
  Status s = client->Cancel(o.job);
  if (!s.ok()) return ReportFailure("cancel", s);
  if (o.json) {
    std::printf("%s\n", nlohmann::json({{"id", o.job}, {"status", "cancelling"}}).dump(2).c_str());
  } else {
    std::printf("job %s: cancel sent to Slurm; gantryd records its end at its next cycle\n",
                o.job.c_str());
  }
  return kExitOk;
}

int RunNodes(const QueueOptions& o) {
  Result<control::ApiClient> client = Client(o);
  if (!client.ok()) return ReportFailure("nodes", client.status());
  Result<std::vector<control::NodeView>> nodes = client->Nodes();
  if (!nodes.ok()) return ReportFailure("nodes", nodes.status());
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const control::NodeView& n : *nodes) {
      out.push_back(nlohmann::json::parse(control::NodeViewJson(n)));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%-16s %-8s %-18s %-8s %9s %-12s %s\n", "NODE", "STATE", "SLURM", "TYPE", "GPUS",
              "DOMAIN", "JOBS");
  for (const control::NodeView& n : *nodes) {
    std::string jobs;
    for (const std::string& j : n.jobs) jobs += (jobs.empty() ? "" : ",") + j;
    const std::string gpus = std::to_string(n.gpus_used) + "/" + std::to_string(n.gpus);
    std::printf("%-16s %-8s %-18s %-8s %9s %-12s %s\n", n.name.c_str(), n.state.c_str(),
                n.rm_state.empty() ? "-" : n.rm_state.c_str(), n.gpu_type.c_str(), gpus.c_str(),
                n.domain.empty() ? "-" : n.domain.c_str(), jobs.empty() ? "-" : jobs.c_str());
    if (!n.reason.empty()) std::printf("  reason: %s\n", n.reason.c_str());
  }
  return kExitOk;
}

int RunUsage(const QueueOptions& o) {
  Result<control::ApiClient> client = Client(o);
  if (!client.ok()) return ReportFailure("usage", client.status());
  Result<std::vector<control::TeamView>> teams = client->Usage();
  if (!teams.ok()) return ReportFailure("usage", teams.status());
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const control::TeamView& t : *teams) {
      out.push_back(nlohmann::json::parse(control::TeamViewJson(t)));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%-16s %7s %12s %8s %8s %12s %14s\n", "TEAM", "QUOTA", "RUNNING_GPUS", "RUNNING",
              "PENDING", "PENDING_GPUS", "GPU_HOURS");
  for (const control::TeamView& t : *teams) {
    const std::string quota = t.quota_gpus >= 0 ? std::to_string(t.quota_gpus) : "-";
    std::printf("%-16s %7s %12d %8d %8d %12d %14.2f\n", t.name.c_str(), quota.c_str(),
                t.running_gpus, t.running_jobs, t.pending_jobs, t.pending_gpus,
                t.gpu_seconds / 3600.0);
  }
  return kExitOk;
}

struct FailOpenOptions {
  std::string heartbeat;
  std::vector<std::string> partitions;
  std::string slurm_conf;
  std::string slurm_bin;
  bool force = false;
  bool dry_run = false;
};

int RunFailOpen(const FailOpenOptions& o) {
  const Time now = static_cast<Time>(time(nullptr));
  bool due = o.force;
  if (!due) {
    Result<control::Heartbeat> hb = control::ReadHeartbeat(o.heartbeat);
    if (hb.status().code() == StatusCode::kNotFound) {
      std::printf("no heartbeat at %s: fail-open is off, nothing released\n", o.heartbeat.c_str());
      return kExitOk;
    }
    if (!hb.ok()) return ReportFailure("failopen", hb.status());
    if (!control::FailOpenDue(*hb, now)) {
      if (hb->fail_open_after <= 0) {
        std::printf("fail-open is off (gantryd runs with --fail-open-after 0)\n");
      } else {
        std::printf("gantryd is alive (last cycle %lld s ago, limit %lld s): nothing released\n",
                    static_cast<long long>(now - hb->time),
                    static_cast<long long>(hb->fail_open_after));
      }
      return kExitOk;
    }
    std::printf("gantryd silent for %lld s (limit %lld s): failing open\n",
                static_cast<long long>(now - hb->time),
                static_cast<long long>(hb->fail_open_after));
  }
  slurm::SlurmOptions so;
  so.slurm_conf = o.slurm_conf;
  if (!o.slurm_bin.empty()) so.bin_dir = o.slurm_bin;
  slurm::SlurmClient client(so);
  Result<std::vector<slurm::SlurmJob>> jobs = client.Jobs();
  if (!jobs.ok()) return ReportFailure("failopen", jobs.status());
  const std::vector<std::string> partitions =
      o.partitions.empty() ? std::vector<std::string>{"gantry"} : o.partitions;
  int released = 0;
  int failed = 0;
  for (int64_t id : control::JobsToRelease(*jobs, partitions)) {
    if (o.dry_run) {
      std::printf("would release %lld\n", static_cast<long long>(id));
      continue;
    }
    Status s = client.Release(id);
    if (s.ok()) {
      ++released;
    } else if (s.code() != StatusCode::kFailedPrecondition && s.code() != StatusCode::kNotFound) {
      // Started or ended meanwhile is fine; anything else is reported and fails the run.
      std::fprintf(stderr, "gantry failopen: releasing %lld: %s\n", static_cast<long long>(id),
                   s.ToString().c_str());
      ++failed;
    }
  }
  if (!o.dry_run) std::printf("released %d held job(s) to Slurm's scheduler\n", released);
  return failed > 0 ? kExitFailure : kExitOk;
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

  auto c = std::make_shared<QueueOptions>();
  CLI::App* cancel =
      app.add_subcommand("cancel", "Cancel one of gantryd's jobs (scancel through gantryd)");
  cancel->add_option("JOB", c->job, "the job id (Slurm's)")->required();
  AddClientFlags(cancel, c.get());
  cancel->footer(
      "\nA team's token cancels only its own jobs; another team's job, or one that ended, is not "
      "found (exit 3).\n\nExample:\n  gantry cancel 4242 --token-file ~/.gantry-token");
  cancel->callback([c] {
    const int rc = RunCancel(*c);
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });

  auto n = std::make_shared<QueueOptions>();
  CLI::App* nodes =
      app.add_subcommand("nodes", "Show gantryd's nodes: state, GPUs in use, topology, jobs");
  AddClientFlags(nodes, n.get());
  nodes->footer(
      "\nSTATE is the engine's (up, drained, down), SLURM Slurm's own words. A team's token "
      "lists only its own jobs on each node.\n\nExample:\n  gantry nodes --json");
  nodes->callback([n] {
    const int rc = RunNodes(*n);
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });

  auto u = std::make_shared<QueueOptions>();
  CLI::App* usage =
      app.add_subcommand("usage", "Show each team's GPUs in use against its quota, and its queue");
  AddClientFlags(usage, u.get());
  usage->footer(
      "\nA team's token shows its own team; the operator's, every team.\n\nExample:\n  "
      "GANTRY_TOKEN=... gantry usage");
  usage->callback([u] {
    const int rc = RunUsage(*u);
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });

  auto f = std::make_shared<FailOpenOptions>();
  CLI::App* failopen = app.add_subcommand(
      "failopen",
      "When gantryd's heartbeat is stale, release the held jobs to Slurm's own scheduler");
  failopen->add_option("--heartbeat", f->heartbeat, "gantryd's heartbeat file (its --heartbeat)")
      ->required();
  failopen->add_option("--partition", f->partitions,
                       "a Gantry-managed partition (repeat; default: gantry)");
  failopen->add_option("--slurm-conf", f->slurm_conf, "slurm.conf (default: $SLURM_CONF)");
  failopen->add_option("--slurm-bin", f->slurm_bin, "directory of squeue and scontrol");
  failopen->add_flag("--force", f->force, "release even though gantryd looks alive");
  failopen->add_flag("--dry-run", f->dry_run, "list what would be released");
  failopen->footer(
      "\nRun it every minute on the controller host (cron or a systemd timer), as root or "
      "SlurmUser. It does nothing while gantryd's heartbeat is fresh, when there is no heartbeat "
      "file, or when gantryd runs with --fail-open-after 0. Released jobs are Slurm's to place; "
      "gantryd adopts those that run when it returns (docs/slurm.md, Fail-open).\nExit status: 0, "
      "1 Slurm unreachable, a release failed or a damaged heartbeat file, 2 usage.\n\nExample:\n"
      "  * * * * * root gantry failopen --heartbeat /run/gantry/heartbeat --partition gantry");
  failopen->callback([f] {
    const int rc = RunFailOpen(*f);
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gantry::cli
