#include "gantry/sim/simulator.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <queue>

#include "gantry/sched/engine.h"
#include "invariant_checker.h"

namespace gantry {
namespace {

// Counts pending jobs by GPU count, to ask "how many pending jobs ask for at most F GPUs" in
// O(log) for the fragmentation metric.
class Fenwick {
 public:
  explicit Fenwick(int n) : tree_(n + 1, 0) {}
  void Add(int i, int delta) {
    for (++i; i < static_cast<int>(tree_.size()); i += i & -i) tree_[i] += delta;
  }
  int64_t PrefixSum(int i) const {  // sum of [0, i]
    int64_t s = 0;
    if (i >= static_cast<int>(tree_.size()) - 1) i = static_cast<int>(tree_.size()) - 2;
    for (++i; i > 0; i -= i & -i) s += tree_[i];
    return s;
  }

 private:
  std::vector<int64_t> tree_;
};

// Innermost topology level whose one domain holds every node of the placement; -1 for a single
// node, levels().size() when no domain holds them all.
int SpanLevel(const Cluster& c, const Placement& p) {
  if (p.size() <= 1) return -1;
  NodeIndex lo = p[0].node, hi = p[0].node;
  for (const Slot& s : p) {
    lo = std::min(lo, s.node);
    hi = std::max(hi, s.node);
  }
  for (DomainIndex d = c.nodes()[lo].domain; d >= 0; d = c.domains()[d].parent) {
    const Domain& dom = c.domains()[d];
    if (dom.first_node <= lo && hi < dom.end_node) return dom.level;
  }
  return static_cast<int>(c.levels().size());
}

// The simulator knows what really happened: the trace's run times. Oracle profiles read them
// through this, and only through this; the engine sees JobRequests, which carry no run time.
class TraceRuntimeOracle final : public RuntimeOracle {
 public:
  explicit TraceRuntimeOracle(const std::vector<Job>& jobs) : jobs_(jobs) {}
  Duration TrueRunTime(const JobRequest& job) const override { return jobs_[job.index].run_time; }

 private:
  const std::vector<Job>& jobs_;
};

int64_t PeakRssKb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

}  // namespace

Result<SimResult> Simulate(const Cluster& cluster, const std::vector<Team>& teams,
                           const Workload& workload, const Profile& profile,
                           const SimOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  const TraceRuntimeOracle oracle(workload.jobs);
  EngineOptions engine_options;
  engine_options.oracle = &oracle;
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::Create(cluster, teams, profile, engine_options));
  const auto& jobs = workload.jobs;
  SimResult result;
  result.profile = profile.name;
  result.workload = &workload;
  result.cluster = &cluster;
  result.teams = teams;
  result.outcomes.resize(jobs.size());

  std::vector<JobIndex> order(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].index != static_cast<JobIndex>(i)) {
      return InvalidArgument("workload job " + jobs[i].id + " has index " +
                             std::to_string(jobs[i].index) + " at position " + std::to_string(i));
    }
    order[i] = static_cast<JobIndex>(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](JobIndex a, JobIndex b) { return jobs[a].submit < jobs[b].submit; });

  using FinishEvent = std::pair<Time, JobIndex>;
  std::priority_queue<FinishEvent, std::vector<FinishEvent>, std::greater<>> finishes;
  InvariantChecker checker(cluster, teams);
  Fenwick pending_by_gpus(cluster.total_gpus() + 1);
  std::vector<StartDecision> starts;

  const Time first = jobs.empty() ? 0 : jobs[order.front()].submit;
  const Time last_submit = jobs.empty() ? 0 : jobs[order.back()].submit;
  Duration sample_every =
      std::max<Duration>(1, (last_submit - first) / std::max(1, options.target_samples));
  Time next_sample = first;
  const int num_teams = static_cast<int>(teams.size());
  std::vector<int32_t> team_busy(num_teams, 0);

  size_t next_submit = 0;
  int64_t events = 0, pending = 0, running = 0, busy = 0;
  const int64_t total_events = static_cast<int64_t>(jobs.size()) * 2;
  int64_t next_progress = 0;
  Time prev = first;

  while (next_submit < order.size() || !finishes.empty()) {
    Time now = kInfiniteTime;
    if (next_submit < order.size()) now = jobs[order[next_submit]].submit;
    if (!finishes.empty()) now = std::min(now, finishes.top().first);

    // Account the interval [prev, now) during which the state was constant.
    if (now > prev) {
      const double dt = static_cast<double>(now - prev);
      result.busy_gpu_seconds += dt * static_cast<double>(busy);
      result.total_wait_job_seconds += dt * static_cast<double>(pending);
      const int free_total = cluster.total_gpus() - static_cast<int>(busy);
      result.frag_wait_job_seconds +=
          dt * static_cast<double>(pending_by_gpus.PrefixSum(free_total));
      while (next_sample < now) {
        result.samples.push_back({next_sample, static_cast<int32_t>(busy),
                                  static_cast<int32_t>(pending), static_cast<int32_t>(running),
                                  team_busy});
        next_sample += sample_every;
        if (static_cast<int>(result.samples.size()) >= 2 * options.target_samples) {
          // Long drain after the last submit: halve the resolution and keep going.
          std::vector<TimeSample> kept;
          for (size_t i = 0; i < result.samples.size(); i += 2)
            kept.push_back(std::move(result.samples[i]));
          result.samples = std::move(kept);
          sample_every *= 2;
          next_sample = result.samples.back().t + sample_every;
        }
      }
      prev = now;
    }

    while (!finishes.empty() && finishes.top().first == now) {
      const JobIndex j = finishes.top().second;
      finishes.pop();
      const Job& job = jobs[j];
      if (options.check_invariants) checker.OnFinish(job, engine->placement(j));
      GANTRY_RETURN_IF_ERROR(engine->Finish(j, now));
      --running;
      busy -= job.gpus;
      team_busy[job.team] -= job.gpus;
      ++events;
    }
    while (next_submit < order.size() && jobs[order[next_submit]].submit == now) {
      const Job& job = jobs[order[next_submit++]];
      GANTRY_RETURN_IF_ERROR(engine->Submit(job, now));
      pending_by_gpus.Add(job.gpus, 1);
      ++pending;
      ++events;
    }

    starts.clear();
    engine->Schedule(now, &starts);
    for (const StartDecision& d : starts) {
      const Job& job = jobs[d.job];
      if (options.check_invariants) {
        GANTRY_RETURN_IF_ERROR(checker.OnStart(job, now, d.placement));
      }
      JobOutcome& o = result.outcomes[d.job];
      const Duration limit = std::max<Duration>(job.time_limit, 1);
      o.killed_at_limit = job.run_time > limit;
      o.start = now;
      o.end = now + std::min(job.run_time, limit);
      o.nodes_spanned = static_cast<int32_t>(d.placement.size());
      o.span_level = SpanLevel(cluster, d.placement);
      o.backfilled = d.reason == Reason::kStartedBackfill;
      finishes.push({o.end, d.job});
      pending_by_gpus.Add(job.gpus, -1);
      --pending;
      ++running;
      busy += job.gpus;
      team_busy[job.team] += job.gpus;
    }
    if (options.check_invariants) {
      for (const StartDecision& d : starts) {
        GANTRY_RETURN_IF_ERROR(checker.CheckFree(d.placement, engine->free_index()));
      }
    }
    if (options.progress && events >= next_progress) {
      options.progress(total_events ? static_cast<double>(events) / total_events : 1.0);
      next_progress = events + std::max<int64_t>(1, total_events / 200);
    }
  }
  result.samples.push_back({prev, static_cast<int32_t>(busy), static_cast<int32_t>(pending),
                            static_cast<int32_t>(running), team_busy});
  if (options.progress) options.progress(1.0);

  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.perf.wall_seconds = wall;
  result.perf.events = events;
  result.perf.cycles = engine->stats().cycles;
  result.perf.events_per_second = wall > 0 ? static_cast<double>(events) / wall : 0;
  result.perf.peak_rss_kb = PeakRssKb();
  Summarize(result);
  return result;
}

}  // namespace gantry
