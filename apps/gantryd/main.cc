// gantryd: Gantry's live control plane. Runs the scheduling engine with the real clock against
// a Slurm cluster: jobs submitted with plain sbatch to Gantry-managed partitions are held by
// Gantry's job_submit.lua; gantryd decides where and when each runs, pins its nodes and
// releases it, and serves the queue with reasons and estimates over a REST API.
//
//   gantryd --cluster cluster.yaml --state /var/lib/gantry/state.db --partition gantry
//           --tokens /etc/gantry/tokens --operator-token-file /etc/gantry/operator-token
//
// Exit status: 0 after SIGINT/SIGTERM (or --cycles), 2 usage error, 3 the state or the cluster
// cannot be opened (another gantryd holds the state), 4 the API address cannot be bound.
#include <signal.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/daemon.h"
#include "gantry/common/metrics.h"
#include "gantry/common/paths.h"
#include "gantry/control/api.h"
#include "gantry/control/controller.h"
#include "gantry/control/cycle_clock.h"
#include "gantry/control/failopen.h"
#include "gantry/control/slurm_rm.h"
#include "gantry/control/stager.h"
#include "gantry/control/state_store.h"
#include "gantry/sched/profile.h"
#include "gantry/slurm/slurm.h"
#include "gantry/storage/object_store.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitCannotOpen = 3;
constexpr int kExitCannotListen = 4;

int Usage(const std::string& what) {
  std::cerr << "gantryd: " << what << "\n";
  return kExitUsage;
}

std::string Now() {
  char buf[32];
  const time_t t = time(nullptr);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What --check looked at, to print.
struct CheckedConfig {
  std::string cluster_spec;
  const gantry::Cluster& cluster;
  std::string profile;
  std::string state;
  std::string heartbeat;
  int64_t fail_open_after;
  std::string listen;
  const std::map<std::string, std::string>& team_tokens;  // token -> team
  std::string operator_token_file;                        // empty: none
  std::vector<std::string> secret_files;                  // empty entries: not given
  std::vector<std::string> partitions;
  gantry::slurm::SlurmOptions slurm;
  std::string staging;
};

// --check: what the flags already proved (they parsed, the spec and profile loaded, the
// tokens read), then the paths gantryd writes and Slurm's commands. Warnings do not fail it.
int CheckOnly(const CheckedConfig& c) {
  int status = 0;
  auto fail = [&status](int code, const std::string& what) {
    std::cerr << "gantryd --check: " << what << "\n";
    if (status == 0) status = code;
  };
  if (gantry::Status s = gantry::CheckWritablePath(c.state); !s.ok()) {
    fail(kExitCannotOpen, "--state: " + s.message());
  }
  if (!c.heartbeat.empty()) {
    if (gantry::Status s = gantry::CheckWritablePath(c.heartbeat); !s.ok()) {
      fail(kExitCannotOpen, "--heartbeat: " + s.message());
    }
  }
  if (gantry::Status s = gantry::slurm::SlurmClient(c.slurm).CheckCommands(); !s.ok()) {
    fail(kExitUsage, s.message());
  }
  for (const std::string& f : c.secret_files) {
    if (f.empty()) continue;
    if (gantry::Status s = gantry::CheckSecretFileMode(f); !s.ok()) {
      std::cerr << "gantryd --check: warning: " << s.message() << "\n";
    }
  }
  for (const std::string& team :
       gantry::control::TokenTeamsNotInCluster(c.team_tokens, c.cluster)) {
    std::cerr << "gantryd --check: warning: a token of team '" << team
              << "', which the cluster spec does not name\n";
  }
  std::string partitions;
  for (const std::string& p : c.partitions) partitions += (partitions.empty() ? "" : " ") + p;
  std::cout << "cluster     " << c.cluster_spec << ": " << c.cluster.nodes().size() << " nodes, "
            << c.cluster.total_gpus() << " GPUs, " << c.cluster.teams().size() << " teams\n"
            << "profile     " << c.profile << "\n"
            << "state       " << c.state << "\n"
            << "partitions  " << partitions << "\n"
            << "api         " << c.listen << ", " << c.team_tokens.size()
            << " team tokens, operator "
            << (c.operator_token_file.empty() ? "token none"
                                              : "token from " + c.operator_token_file)
            << "\n"
            << "fail-open   "
            << (c.heartbeat.empty() ? "off (no --heartbeat)"
                                    : "heartbeat " + c.heartbeat + ", after " +
                                          std::to_string(c.fail_open_after) + " s")
            << "\n"
            << "staging     " << c.staging << "\n"
            << (status == 0 ? "ok" : "NOT ok") << std::endl;
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gantryd: Gantry's live control plane. Decides where and when the jobs of Gantry-managed\n"
      "Slurm partitions run (they are held at submission by Gantry's job_submit.lua), starts\n"
      "them on the chosen nodes, and serves the queue with reasons and start estimates over\n"
      "HTTP (docs/control.md, docs/openapi.yaml). Every accepted job and decision is written to\n"
      "the state database before it is acted on; a restarted gantryd picks up where it was."};
  std::string cluster_spec, state_path, profile_name = "gantry", profiles_file;
  std::vector<std::string> partitions;
  std::string slurm_conf, slurm_bin, listen = "127.0.0.1:8642", port_file, tokens_file,
                                     operator_token_file;
  double interval = 1.0;
  double cycle_offset = gantry::control::kDefaultCycleOffsetSeconds;
  int64_t cycles = 0;
  std::string heartbeat_file;
  int64_t fail_open_after = 0;
  bool metrics_need_token = false;
  std::vector<std::string> agent_urls;
  std::string agent_template, agent_token_file;
  int64_t data_wait = 600;
  std::string preempt_signal = "TERM";
  bool check = false;
  app.add_option("--cluster", cluster_spec,
                 "Cluster spec (YAML; `gantry cluster import --from-slurm` writes one)")
      ->required();
  app.add_option("--state", state_path, "State database (SQLite; created if missing)")->required();
  app.add_option("--profile", profile_name, "Scheduling profile")->capture_default_str();
  app.add_option("--profiles", profiles_file, "Extra profiles (YAML)");
  app.add_option("--partition", partitions,
                 "A Gantry-managed partition, as job_submit.lua's GANTRY_MANAGED_PARTITIONS "
                 "(repeat; default: gantry)");
  app.add_option("--slurm-conf", slurm_conf, "slurm.conf (default: $SLURM_CONF)");
  app.add_option("--slurm-bin", slurm_bin, "Directory of squeue, scontrol, ... (default /usr/bin)");
  app.add_option("--listen", listen, "API address HOST:PORT (port 0: any)")->capture_default_str();
  app.add_option("--port-file", port_file, "Write the API's port here once listening");
  app.add_option("--tokens", tokens_file, "Team tokens: one 'TEAM TOKEN' per line");
  app.add_option("--operator-token-file", operator_token_file,
                 "The operator's token (sees every job)");
  app.add_flag("--metrics-need-token", metrics_need_token, "Require a token for /metrics");
  app.add_option("--interval", interval, "Seconds between cycles")->capture_default_str();
  app.add_option("--cycle-offset", cycle_offset,
                 "Cycles after the first begin this many seconds into each --interval of the "
                 "wall clock (e.g. 12:00:07.25 with the defaults), so that Slurm's whole-second "
                 "stamps and gantryd's decisions line up the same way in every run; a cycle "
                 "that runs past the next start skips it")
      ->capture_default_str();
  app.add_option("--cycles", cycles, "Stop after this many cycles (0: run until a signal)");
  app.add_option("--heartbeat", heartbeat_file,
                 "Write a heartbeat here after every cycle (job_submit.lua's "
                 "GANTRY_HEARTBEAT_FILE; fail-open, docs/slurm.md)");
  app.add_option("--fail-open-after", fail_open_after,
                 "Seconds without a heartbeat after which Slurm schedules the managed partitions "
                 "itself (0: never)")
      ->capture_default_str();
  app.add_option("--agent", agent_urls,
                 "NODE=URL of a node's gantry-agent, for staging jobs' declared datasets "
                 "(#GANTRY --dataset) onto it; repeatable");
  app.add_option("--agent-url-template", agent_template,
                 "The agent of every node not named by --agent, with {node} for its name, e.g. "
                 "http://{node}:7070");
  app.add_option("--agent-token-file", agent_token_file,
                 "The agents' bearer token (default: $GANTRY_AGENT_TOKEN)");
  app.add_option("--data-wait", data_wait,
                 "Seconds a decided job that declared data is held until its data is on its "
                 "nodes, and a requeued one until the checkpoint saves its last run left on "
                 "nodes are drained (0: never hold; data is then staged only ahead of time)")
      ->capture_default_str();
  app.add_option("--preempt-signal", preempt_signal,
                 "The signal a job preempted with a grace time gets (the profile's preemption "
                 "grace_time; Slurm's GraceTime sends TERM); it is requeued when the grace time "
                 "is over or when it exits")
      ->capture_default_str();
  app.add_flag("--check", check,
               "Check the configuration and exit, as a service manager does before each start "
               "(deploy/systemd/gantryd.service): the flags, the cluster spec, the profile, the "
               "token files (and that only their owner may read them), that the state "
               "database and the heartbeat can be written where they are named, and that "
               "Slurm's commands are there. Opens nothing for writing and asks slurmctld "
               "nothing; prints what it found");
  app.footer(
      "Exit status: 0 after SIGINT/SIGTERM or --cycles (--check: all is well), 2 usage error "
      "or a configuration --check refuses, 3 the state database or the cluster cannot be "
      "opened (--check: the state or heartbeat cannot be written there), 4 the API address "
      "cannot be bound.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  if (!(interval > 0) || !std::isfinite(interval)) return Usage("--interval must be positive");
  if (!std::isfinite(cycle_offset)) return Usage("--cycle-offset must be a number of seconds");
  if (partitions.empty()) partitions = {"gantry"};
  if (fail_open_after < 0) return Usage("--fail-open-after must be 0 or more");
  if (data_wait < 0) return Usage("--data-wait must be 0 or more");
  if (gantry::Status s = gantry::slurm::CheckSignalName(preempt_signal); !s.ok()) {
    return Usage("--preempt-signal " + s.message());
  }
  auto agents_by_node = gantry::control::ParseAgentUrls(agent_urls);
  if (!agents_by_node.ok()) return Usage("--agent " + agents_by_node.status().message());
  const bool staging = !agents_by_node->empty() || !agent_template.empty();
  if (!agent_template.empty() && agent_template.find("{node}") == std::string::npos) {
    return Usage("--agent-url-template must contain {node}");
  }
  gantry::Result<std::string> agent_token = gantry::AgentTokenFrom(agent_token_file);
  if (!agent_token.ok()) return Usage("--agent-token-file: " + agent_token.status().message());
  // Both are written by renaming a new file onto them.
  for (const auto& [flag, file] :
       {std::pair{"--heartbeat", &heartbeat_file}, std::pair{"--port-file", &port_file}}) {
    if (gantry::Status s = gantry::control::CheckNotStateFile(state_path, *file, flag); !s.ok()) {
      return Usage(s.message());
    }
  }
  // One file for both would leave job_submit.lua a port number where it reads a heartbeat.
  if (!heartbeat_file.empty() && !port_file.empty() &&
      gantry::LocalPathWithin(heartbeat_file, port_file)) {
    return Usage("--heartbeat and --port-file name the same file " + heartbeat_file);
  }
  if (fail_open_after > 0 && heartbeat_file.empty()) {
    return Usage("--fail-open-after needs --heartbeat (where job_submit.lua reads it)");
  }

  gantry::control::ApiOptions api_options;
  if (gantry::Status s = gantry::ParseHostPort(listen, &api_options.host, &api_options.port);
      !s.ok()) {
    return Usage("--listen " + s.message());
  }
  if (!tokens_file.empty()) {
    std::ifstream f(tokens_file);
    if (!f) return Usage("--tokens: cannot read " + tokens_file);
    std::stringstream text;
    text << f.rdbuf();
    auto tokens = gantry::control::ParseTeamTokens(text.str(), tokens_file);
    if (!tokens.ok()) return Usage("--tokens: " + tokens.status().message());
    api_options.team_tokens = std::move(tokens).value();
  }
  if (!operator_token_file.empty()) {
    auto token = gantry::ReadSecretFile(operator_token_file);
    if (!token.ok()) return Usage("--operator-token-file: " + token.status().message());
    api_options.operator_token = std::move(token).value();
  }
  if (api_options.team_tokens.empty() && api_options.operator_token.empty()) {
    std::cerr << "gantryd: no --tokens and no --operator-token-file: only /v1/health and "
                 "/metrics will answer\n";
  }
  api_options.metrics_need_token = metrics_need_token;

  gantry::Result<gantry::Cluster> cluster = gantry::LoadCluster(cluster_spec);
  if (!cluster.ok()) return Usage("--cluster: " + cluster.status().message());
  std::vector<gantry::Profile> extra;
  if (!profiles_file.empty()) {
    auto loaded = gantry::LoadProfilesFile(profiles_file);
    if (!loaded.ok()) return Usage("--profiles: " + loaded.status().message());
    extra = std::move(loaded).value();
  }
  gantry::Result<gantry::Profile> profile = gantry::FindProfile(profile_name, extra);
  if (!profile.ok()) return Usage("--profile: " + profile.status().message());

  if (check) {
    return CheckOnly(
        {.cluster_spec = cluster_spec,
         .cluster = *cluster,
         .profile = profile->name,
         .state = state_path,
         .heartbeat = heartbeat_file,
         .fail_open_after = fail_open_after,
         .listen = listen,
         .team_tokens = api_options.team_tokens,
         .operator_token_file = operator_token_file,
         .secret_files = {tokens_file, operator_token_file, agent_token_file},
         .partitions = partitions,
         .slurm = {slurm_conf, slurm_bin},
         .staging = staging ? std::to_string(agents_by_node->size()) + " agents named" +
                                  (agent_template.empty() ? std::string()
                                                          : ", the rest at " + agent_template)
                            : "off (no --agent, no --agent-url-template)"});
  }

  // The stop signals go to the main loop alone, through sigtimedwait, which is also its sleep.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto store = gantry::control::StateStore::Open(state_path);
  if (!store.ok()) {
    std::cerr << "gantryd: " << store.status().message() << "\n";
    return kExitCannotOpen;
  }
  gantry::control::SlurmRmOptions rm_options;
  rm_options.slurm.slurm_conf = slurm_conf;
  rm_options.slurm.bin_dir = slurm_bin;
  rm_options.partitions = partitions;
  gantry::control::SlurmResourceManager rm(rm_options);
  gantry::MetricsRegistry metrics;
  auto controller =
      gantry::control::Controller::Open(*cluster, *profile, store->get(), &rm, time(nullptr));
  if (!controller.ok()) {
    std::cerr << "gantryd: recovering from " << state_path << ": " << controller.status().message()
              << "\n";
    return kExitCannotOpen;
  }
  (*controller)->set_metrics(&metrics);
  (*controller)->set_preempt_signal(preempt_signal);
  // Staging of declared datasets, on a thread of its own (its HTTP calls never hold a cycle).
  std::unique_ptr<gantry::control::StagingAgents> agents;
  std::unique_ptr<gantry::control::Stager> stager;
  if (staging) {
    agents = gantry::control::HttpStagingAgents(std::move(agents_by_node).value(), agent_template,
                                                *agent_token);
    stager = std::make_unique<gantry::control::Stager>(
        agents.get(), gantry::control::StagerOptions{.metrics = &metrics});
    (*controller)->set_stager(stager.get(), data_wait);
    stager->Start();
  }
  if (!heartbeat_file.empty()) {
    // Recovery reached Slurm: alive again, so job_submit.lua holds new jobs from now on.
    gantry::Status hb = gantry::control::WriteHeartbeat(
        heartbeat_file, {static_cast<gantry::Time>(time(nullptr)), fail_open_after});
    if (!hb.ok()) return Usage("--heartbeat: " + hb.message());
  }
  gantry::control::Controller* ctl = controller->get();
  api_options.cancel = [ctl](const std::string& id, const std::string& by) {
    return ctl->RequestCancel(id, by, time(nullptr));
  };
  api_options.explain = [ctl](const std::string& id) { return ctl->ExplainNow(id); };
  auto api = gantry::control::ApiServer::Start(
      api_options, [ctl] { return ctl->Snapshot(); }, &metrics);
  if (!api.ok()) {
    std::cerr << "gantryd: " << api.status().message() << "\n";
    return kExitCannotListen;
  }
  if (!port_file.empty()) {
    if (gantry::Status s = gantry::WritePortFile(port_file, (*api)->port()); !s.ok()) {
      return Usage("--port-file: " + s.message());
    }
  }
  std::cerr << Now() << " gantryd: " << cluster->nodes().size() << " nodes, profile "
            << profile->name << ", API on " << api_options.host << ":" << (*api)->port()
            << ", state " << state_path << std::endl;

  int exit_code = 0;
  for (int64_t n = 0; cycles == 0 || n < cycles; ++n) {
    gantry::control::CycleReport r;
    const time_t cycle_time = time(nullptr);
    gantry::Status s = ctl->Cycle(cycle_time, &r);
    if (s.ok() && !heartbeat_file.empty()) {
      // Only a cycle that reached Slurm counts as alive: a gantryd that cannot decide should
      // let the cluster fail open.
      gantry::Status hb =
          gantry::control::WriteHeartbeat(heartbeat_file, {cycle_time, fail_open_after});
      if (!hb.ok()) std::cerr << Now() << " gantryd: " << hb.ToString() << std::endl;
    }
    if (!s.ok()) {
      // Slurm unreachable or slow: try again next cycle; nothing was acted on unrecorded.
      std::cerr << Now() << " gantryd: cycle failed: " << s.ToString() << std::endl;
    } else if (r.submitted + r.started + r.refused + r.confirmed + r.finished + r.requeued +
                   r.node_changes >
               0) {
      std::cerr << Now() << " gantryd: " << r.observed << " jobs seen, " << r.submitted << " new, "
                << r.started << " started, " << r.refused << " refused, " << r.confirmed
                << " running, " << r.finished << " ended, " << r.requeued << " requeued, "
                << r.node_changes << " node changes" << std::endl;
    }
    if (cycles != 0 && n + 1 >= cycles) break;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const double wait = gantry::control::SecondsToNextCycle(
        static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9, interval,
        cycle_offset);
    struct timespec ts;
    ts.tv_sec = static_cast<time_t>(wait);
    ts.tv_nsec = static_cast<long>((wait - static_cast<double>(ts.tv_sec)) * 1e9);
    const int sig = sigtimedwait(&stop_signals, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      std::cerr << Now() << " gantryd: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping"
                << std::endl;
      break;
    }
  }
  (*api)->Stop();
  if (stager != nullptr) stager->Stop();
  return exit_code;
}
