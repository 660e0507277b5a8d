// gantryd's control loop and REST API under load, without Slurm: the real Controller, StateStore
// (SQLite on disk, synchronous=FULL) and ApiServer over a minimal in-process resource manager
// that lists N held jobs at once, starts what it is told and ends each job a fixed time after
// it starts. It answers the questions of issue 10's benchmarks that do not need Slurm's own
// timing: how long gantryd takes to accept a burst of jobs (every one durable before it is
// acted on), how long a cycle takes with a deep queue, how many start decisions per second it
// makes, its memory with N jobs in its database, and how many API requests per second it serves.
//
//   control_bench [--jobs 100000] [--cluster dgx-h100:nodes=1024] [--api-seconds 3]
//                 [--api-clients 4] [--dir DIR] [--json]
//
// Simulated time: each cycle is one second later than the last; a job runs 600 s. Wall times
// are measured around Controller::Cycle only (the fake resource manager's own work is outside).
#include <httplib.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/rng.h"
#include "gantry/control/api.h"
#include "gantry/control/controller.h"
#include "gantry/control/state_store.h"
#include "gantry/sched/profile.h"

namespace {

using gantry::Duration;
using gantry::Time;
using gantry::control::NodeGpus;
using gantry::control::ObservedState;
using gantry::control::RmJob;

constexpr Duration kRunFor = 600;

// Lists every job it holds; a started job runs kRunFor seconds, then is listed once as
// finished and forgotten (as Slurm purges ended jobs).
class BenchRm : public gantry::control::ResourceManager {
 public:
  void Add(RmJob job) { jobs_.emplace(job.request.id, std::move(job)); }
  void Advance(Time now) {
    now_ = now;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      RmJob& j = it->second;
      if (j.state == ObservedState::kFinished) {
        it = jobs_.erase(it);
        continue;
      }
      if (j.state == ObservedState::kRunning && now >= j.start + kRunFor) {
        j.state = ObservedState::kFinished;
        j.end_state = "completed";
      }
      ++it;
    }
  }
  gantry::Result<std::vector<RmJob>> Jobs() override {
    std::vector<RmJob> out;
    out.reserve(jobs_.size());
    for (const auto& [id, j] : jobs_) out.push_back(j);
    return out;
  }
  gantry::Result<std::vector<gantry::control::RmNode>> Nodes() override {
    return std::vector<gantry::control::RmNode>{};  // every node up, none listed as changed
  }
  gantry::Status Requeue(const std::string& id) override {
    return gantry::Unimplemented("no requeue in the bench");
  }
  gantry::Status Cancel(const std::string& id) override {
    return gantry::Unimplemented("no cancel in the bench");
  }
  gantry::Status Signal(const std::string& id, const std::string& signal) override {
    return gantry::Unimplemented("no preemption in the bench");
  }
  gantry::Status Start(const std::string& id, const std::vector<NodeGpus>& placement) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return gantry::NotFound("no job " + id);
    it->second.state = ObservedState::kRunning;
    it->second.placement = placement;
    it->second.start = now_;
    return gantry::Status::Ok();
  }
  size_t size() const { return jobs_.size(); }

 private:
  std::map<std::string, RmJob> jobs_;
  Time now_ = 0;
};

long RssKb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return -1;
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Requests per second of `clients` threads sending GET `path_of(i)` for `seconds`.
nlohmann::json Hammer(int port, const std::string& token, int clients, double seconds,
                      const std::function<std::string(uint64_t)>& path_of) {
  std::atomic<int64_t> ok{0}, failed{0};
  std::atomic<int64_t> bytes{0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_keep_alive(true);
      const httplib::Headers h = {{"Authorization", "Bearer " + token}};
      for (uint64_t i = c; std::chrono::steady_clock::now() < until; i += clients) {
        auto r = cli.Get(path_of(i), h);
        if (r && r->status == 200) {
          ++ok;
          bytes += static_cast<int64_t>(r->body.size());
        } else {
          ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = Seconds(std::chrono::steady_clock::now() - t0);
  return {{"requests", ok.load()},
          {"failed", failed.load()},
          {"rps", static_cast<double>(ok.load()) / wall},
          {"mean_body_bytes", ok.load() > 0 ? bytes.load() / ok.load() : 0}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gantryd's control loop and API under load (no Slurm)"};
  int64_t jobs = 100000;
  std::string cluster_spec = "dgx-h100:nodes=1024";
  double api_seconds = 3;
  int api_clients = 4;
  std::string dir;
  bool json_out = false;
  app.add_option("--jobs", jobs, "Held jobs listed at once")->capture_default_str();
  app.add_option("--cluster", cluster_spec, "Cluster spec or shorthand")->capture_default_str();
  app.add_option("--api-seconds", api_seconds, "Seconds per API endpoint")->capture_default_str();
  app.add_option("--api-clients", api_clients, "Concurrent API clients")->capture_default_str();
  app.add_option("--dir", dir, "Directory for the state database (default: a temp dir)");
  app.add_flag("--json", json_out, "Print the result as JSON");
  CLI11_PARSE(app, argc, argv);

  auto cluster = gantry::LoadCluster(cluster_spec);
  if (!cluster.ok()) {
    std::cerr << "control_bench: " << cluster.status().ToString() << "\n";
    return 2;
  }
  auto profile = gantry::FindProfile("slurm-like", {});
  if (!profile.ok()) return 2;
  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/gantry-control-bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
  }
  auto store = gantry::control::StateStore::Open(dir + "/state.db");
  if (!store.ok()) {
    std::cerr << "control_bench: " << store.status().ToString() << "\n";
    return 1;
  }

  // N jobs of 1..8 GPUs on one node, or 16 on two, over eight teams.
  BenchRm rm;
  gantry::Rng rng(42);
  for (int64_t i = 0; i < jobs; ++i) {
    RmJob j;
    j.request.id = std::to_string(1000000 + i);
    j.request.user = "u" + std::to_string(i % 97);
    j.request.team = "team" + std::to_string(i % 8);
    j.request.queue = "gantry";
    j.request.submit = 0;
    const int shape = static_cast<int>(rng.Below(10));
    j.request.gpus = shape < 9 ? 1 << (shape % 4) : 16;
    j.request.nodes = shape < 9 ? 1 : 2;
    j.request.gpus_per_node = j.request.gpus / j.request.nodes;
    j.request.time_limit = 2 * kRunFor;
    rm.Add(std::move(j));
  }
  const long rss_before = RssKb("VmRSS:");

  auto controller =
      gantry::control::Controller::Open(*cluster, *profile, store->get(), &rm, /*now=*/0);
  if (!controller.ok()) {
    std::cerr << "control_bench: " << controller.status().ToString() << "\n";
    return 1;
  }
  gantry::control::Controller& ctl = **controller;
  gantry::MetricsRegistry metrics;
  ctl.set_metrics(&metrics);

  nlohmann::json out;
  out["jobs"] = jobs;
  out["cluster"] = cluster_spec;
  out["gpus"] = cluster->total_gpus();

  // 1. The burst: one cycle records every job (durably) and makes the first decisions.
  Time now = 1;
  gantry::control::CycleReport report;
  auto t0 = std::chrono::steady_clock::now();
  if (auto s = ctl.Cycle(now, &report); !s.ok()) {
    std::cerr << "control_bench: " << s.ToString() << "\n";
    return 1;
  }
  const double ingest_s = Seconds(std::chrono::steady_clock::now() - t0);
  out["ingest"] = {{"seconds", ingest_s},
                   {"jobs_per_second", static_cast<double>(report.submitted) / ingest_s},
                   {"submitted", report.submitted},
                   {"started", report.started}};

  // 2. Steady cycles with a deep queue and nothing ending: what every idle second costs.
  // CPU time of this thread as well as wall time: on a shared machine the wall time also
  // counts the time other processes held the CPUs.
  std::vector<double> idle, idle_cpu;
  for (int i = 0; i < 5; ++i) {
    rm.Advance(++now);
    t0 = std::chrono::steady_clock::now();
    const double c0 = ThreadCpuSeconds();
    if (!ctl.Cycle(now, &report).ok()) return 1;
    idle_cpu.push_back(ThreadCpuSeconds() - c0);
    idle.push_back(Seconds(std::chrono::steady_clock::now() - t0));
  }
  out["idle_cycle_seconds_p50"] = Median(idle);
  out["idle_cycle_cpu_seconds_p50"] = Median(idle_cpu);
  out["rss_kb_with_all_jobs"] = RssKb("VmRSS:");
  out["rss_kb_before_controller"] = rss_before;

  // 3. The API on the deep queue's snapshot.
  gantry::control::ApiOptions api_options;
  api_options.operator_token = "bench-operator";
  auto api = gantry::control::ApiServer::Start(
      api_options, [&] { return ctl.Snapshot(); }, &metrics);
  if (!api.ok()) {
    std::cerr << "control_bench: " << api.status().ToString() << "\n";
    return 1;
  }
  const int port = (*api)->port();
  const auto snap = ctl.Snapshot();
  std::vector<std::string> ids;
  for (const auto& v : snap->jobs) ids.push_back(v->record.id);
  out["api"]["health"] = Hammer(port, "", api_clients, api_seconds,
                                [](uint64_t) { return std::string("/v1/health"); });
  out["api"]["job_by_id"] =
      Hammer(port, "bench-operator", api_clients, api_seconds,
             [&](uint64_t i) { return "/v1/jobs/" + ids[(i * 2654435761u) % ids.size()]; });
  out["api"]["queue"] = Hammer(port, "bench-operator", api_clients, api_seconds,
                               [](uint64_t) { return std::string("/v1/queue"); });
  out["api"]["metrics"] =
      Hammer(port, "", api_clients, api_seconds, [](uint64_t) { return std::string("/metrics"); });
  (*api)->Stop();

  // 4. Drain: jobs end kRunFor seconds after they start; decisions per second of cycle time.
  int64_t decisions = report.started;
  double cycle_wall = 0;
  int cycles = 0;
  std::vector<double> busy;
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (rm.size() > 0 && std::chrono::steady_clock::now() < drain_until) {
    now += 60;
    rm.Advance(now);
    t0 = std::chrono::steady_clock::now();
    if (auto s = ctl.Cycle(now, &report); !s.ok()) {
      std::cerr << "control_bench: " << s.ToString() << "\n";
      return 1;
    }
    const double w = Seconds(std::chrono::steady_clock::now() - t0);
    cycle_wall += w;
    ++cycles;
    decisions += report.started;
    if (report.started > 0) busy.push_back(w);
  }
  out["drain"] = {{"cycles", cycles},
                  {"decisions", decisions},
                  {"cycle_seconds", cycle_wall},
                  {"decisions_per_second", cycle_wall > 0 ? decisions / cycle_wall : 0},
                  {"busy_cycle_seconds_p50", Median(busy)},
                  {"jobs_left", rm.size()}};
  out["peak_rss_kb"] = RssKb("VmHWM:");
  struct stat st {};
  out["state_db_bytes"] =
      ::stat((dir + "/state.db").c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  if (own_dir) std::filesystem::remove_all(dir);

  if (json_out) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("jobs %lld on %d GPUs (%s)\n", static_cast<long long>(jobs), out["gpus"].get<int>(),
              cluster_spec.c_str());
  std::printf("burst: %d jobs recorded and submitted in %.2f s (%.0f jobs/s), %d started\n",
              out["ingest"]["submitted"].get<int>(), ingest_s,
              out["ingest"]["jobs_per_second"].get<double>(), out["ingest"]["started"].get<int>());
  std::printf("idle cycle with the queue deep: %.3f s (p50), %.3f s of CPU\n", Median(idle),
              Median(idle_cpu));
  std::printf("decisions: %lld in %d cycles, %.0f per second of cycle time\n",
              static_cast<long long>(decisions), cycles,
              out["drain"]["decisions_per_second"].get<double>());
  std::printf(
      "memory: %ld kB RSS with every job recorded (%ld kB before the controller), "
      "peak %ld kB\n",
      out["rss_kb_with_all_jobs"].get<long>(), rss_before, out["peak_rss_kb"].get<long>());
  for (const auto& [name, r] : out["api"].items()) {
    std::printf("api %-10s %8.0f requests/s (%lld failed, %lld bytes each)\n", name.c_str(),
                r["rps"].get<double>(), static_cast<long long>(r["failed"].get<int64_t>()),
                static_cast<long long>(r["mean_body_bytes"].get<int64_t>()));
  }
  return 0;
}
