// Google Benchmark: the engine's per-event costs with a deep pending queue on a 12,500-node
// (100,000-GPU) DGX H100 cluster: one scheduling cycle after one job finishes, one Submit, and
// one query of the blocked head's planned placement.
// Engines, clusters and jobs are built outside the timed loops (not included in the times).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/sched/engine.h"
#include "gantry/sched/profile.h"
#include "gantry/workload/synth.h"
#include "gantry/workload/trace.h"
#include "sched/benchmark_support.h"

namespace gantry {
namespace {

using bench::BigCluster;

const char* kProfiles[] = {"fifo", "slurm-like"};

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "engine_benchmark: %s\n", why.c_str());
  std::abort();
}

// A full cluster (one 8-GPU filler job per node) with `pending` Philly-shaped jobs waiting.
// Jobs live in a deque so that references stay valid as clones are appended.
class DeepQueue {
 public:
  DeepQueue(const char* profile_name, int pending) {
    const Cluster& cluster = BigCluster();
    SynthOptions o;
    o.jobs = pending;
    o.cluster_gpus = cluster.total_gpus();
    o.seed = 42;
    Result<Workload> w = SynthesizeWorkload(o);
    if (!w.ok()) Die(w.status().ToString());
    workload_ = std::move(w).value();
    Result<std::vector<Team>> teams = ResolveWorkload(workload_, cluster, {});
    Result<Profile> profile = FindProfile(profile_name, {});
    if (!teams.ok()) Die(teams.status().ToString());
    if (!profile.ok()) Die(profile.status().ToString());
    auto engine = Engine::Create(cluster, *teams, *profile);
    if (!engine.ok()) Die(engine.status().ToString());
    engine_ = std::move(engine).value();

    // Fillers in batches smaller than any profile's max_jobs, one cycle per batch, so every
    // filler starts.
    const int nodes = static_cast<int>(cluster.nodes().size());
    std::vector<StartDecision> starts;
    for (int n = 0; n < nodes; ++n) {
      Job filler = workload_.jobs[0];
      filler.gpus = 8;
      filler.nodes = 1;
      filler.gpus_per_node = 8;
      filler.run_time = filler.time_limit = 86400 + n;
      Add(filler, now_);
      if ((n + 1) % 64 == 0 || n + 1 == nodes) {
        engine_->Schedule(now_++, &starts);
      }
    }
    for (const StartDecision& d : starts) running_.push_back(d.job);
    if (engine_->free_index().total_free() != 0) Die("fillers did not fill the cluster");
    for (const Job& j : workload_.jobs) Add(j, now_);
    ++now_;
  }

  // One job finishes, one cycle runs, each job it starts is replaced in the queue by a clone.
  int FinishOneAndSchedule() {
    const JobIndex done = running_.front();
    running_.pop_front();
    if (!engine_->Finish(done, now_).ok()) Die("Finish failed");
    starts_.clear();
    engine_->Schedule(now_, &starts_);
    for (const StartDecision& d : starts_) {
      running_.push_back(d.job);
      Add(jobs_[d.job], now_);
    }
    ++now_;
    return static_cast<int>(starts_.size());
  }

  void SubmitClone() { Add(workload_.jobs[next_template_++ % workload_.jobs.size()], now_); }

  Engine& engine() { return *engine_; }

 private:
  void Add(const Job& templ, Time now) {
    Job& j = jobs_.emplace_back(templ);
    j.index = static_cast<JobIndex>(jobs_.size() - 1);
    j.submit = now;
    if (!engine_->Submit(j, now).ok()) Die("Submit failed");
  }

  Workload workload_;
  std::unique_ptr<Engine> engine_;
  std::deque<Job> jobs_;
  std::deque<JobIndex> running_;
  std::vector<StartDecision> starts_;
  size_t next_template_ = 0;
  Time now_ = 1;
};

// Cost of one event in a saturated cluster: Finish + Schedule with `range(1)` jobs pending.
void BM_EngineFinishAndSchedule(benchmark::State& state) {
  DeepQueue q(kProfiles[state.range(0)], static_cast<int>(state.range(1)));
  int64_t started = 0;
  for (auto _ : state) started += q.FinishOneAndSchedule();
  state.counters["starts_per_cycle"] =
      benchmark::Counter(static_cast<double>(started) / static_cast<double>(state.iterations()));
  state.counters["pending"] = static_cast<double>(q.engine().pending_count());
  state.SetLabel(kProfiles[state.range(0)]);
}
BENCHMARK(BM_EngineFinishAndSchedule)
    ->ArgNames({"profile", "pending"})
    ->Args({0, 10000})
    ->Args({1, 10000})
    ->Unit(benchmark::kMicrosecond);

// Cost of a live driver asking where the blocked head will start (Engine::planned_placement)
// after each event, in the saturated cluster above: under EASY (slurm-like) a walk over the
// running jobs that end by the head's estimate and one placement search, paid on the first
// call after a cycle (the simulator never asks). Only the call is timed; the head is found from
// status_changes() while the timer is paused.
void BM_EngineHeadPlannedPlacement(benchmark::State& state) {
  DeepQueue q("slurm-like", static_cast<int>(state.range(0)));
  JobIndex head = -1;
  int64_t planned = 0, slots = 0;
  for (auto _ : state) {
    state.PauseTiming();
    q.FinishOneAndSchedule();
    const Engine& e = q.engine();
    if (head < 0 || e.status(head).phase != JobStatus::Phase::kPending ||
        e.status(head).reserved_start >= kInfiniteTime) {
      head = -1;
    }
    for (JobIndex j : e.status_changes()) {
      if (e.status(j).reserved_start < kInfiniteTime) head = j;
    }
    state.ResumeTiming();
    if (head >= 0) {
      const Placement& p = e.planned_placement(head);
      planned += p.empty() ? 0 : 1;
      slots += static_cast<int64_t>(p.size());
    }
  }
  state.counters["planned_share"] =
      benchmark::Counter(static_cast<double>(planned) / static_cast<double>(state.iterations()));
  state.counters["nodes_per_plan"] =
      benchmark::Counter(planned > 0 ? static_cast<double>(slots) / planned : 0.0);
}
BENCHMARK(BM_EngineHeadPlannedPlacement)
    ->ArgNames({"pending"})
    ->Arg(10000)
    ->Unit(benchmark::kMicrosecond);

// Cost of one Submit into a queue `range(1)` deep (no cycle runs).
void BM_EngineSubmit(benchmark::State& state) {
  DeepQueue q(kProfiles[state.range(0)], static_cast<int>(state.range(1)));
  for (auto _ : state) q.SubmitClone();
  state.SetLabel(kProfiles[state.range(0)]);
}
BENCHMARK(BM_EngineSubmit)->ArgNames({"profile", "pending"})->Args({0, 10000})->Args({1, 10000});

}  // namespace
}  // namespace gantry
