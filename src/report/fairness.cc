// Fairness of a run as share against entitlement: at every instant the cluster is contended
// (teams want more GPUs than it has), each team that wants GPUs is entitled to its weighted
// max-min fair share of them (water-filling: no team is entitled to more than it wants or than
// its quota), and Jain's index over the teams' used/entitled ratios says how evenly the
// scheduler honoured those entitlements. The index is averaged over contended time.
//
// A job wants its GPUs from its submission until it ends (or until the run ends, if it never
// started); it uses them while any of its runs holds them: its last run and those a failure or
// preemption ended (SimResult::interrupted_runs), so a requeued job is not counted as starved
// while it ran. Cancelled jobs that never started are left out (their cancel time is not in
// the outcome).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "gantry/report/result.h"
#include "report/report_internal.h"

namespace gantry::report_internal {
namespace {

struct Step {
  Time t;
  int team;
  int32_t demand;  // change of the team's wanted GPUs
  int32_t usage;   // change of its used GPUs
};

}  // namespace

double ShareFairness(const SimResult& r, double* contended_fraction) {
  return ShareFairness(r, contended_fraction, nullptr);
}

double ShareFairness(const SimResult& r, double* contended_fraction,
                     std::vector<TeamEntitlement>* per_team) {
  if (contended_fraction != nullptr) *contended_fraction = 0;
  if (per_team != nullptr) per_team->assign(r.teams.size(), TeamEntitlement{});
  const Workload* w = r.workload;
  if (w == nullptr || r.cluster == nullptr || r.cluster->total_gpus() <= 0) return 1;
  const size_t n = std::min(w->jobs.size(), r.outcomes.size());
  int teams = static_cast<int>(r.teams.size());
  Time run_end = std::numeric_limits<Time>::min();
  Time run_start = std::numeric_limits<Time>::max();
  for (size_t i = 0; i < n; ++i) {
    teams = std::max(teams, w->jobs[i].team + 1);
    run_start = std::min(run_start, w->jobs[i].submit);
    run_end = std::max({run_end, r.outcomes[i].end, w->jobs[i].submit});
  }
  if (per_team != nullptr) per_team->resize(static_cast<size_t>(teams));
  if (n == 0 || teams == 0) return 1;

  std::vector<Step> steps;
  steps.reserve(4 * n);
  for (size_t i = 0; i < n; ++i) {
    const Job& job = w->jobs[i];
    const JobOutcome& o = r.outcomes[i];
    if (job.team < 0 || job.gpus <= 0) continue;
    if (o.cancelled && o.start < 0) continue;
    const Time until = o.end >= 0 ? o.end : run_end;
    steps.push_back({job.submit, job.team, job.gpus, 0});
    steps.push_back({until, job.team, -job.gpus, 0});
    if (o.start >= 0) {
      steps.push_back({o.start, job.team, 0, job.gpus});
      steps.push_back({until, job.team, 0, -job.gpus});
    }
  }
  for (const InterruptedRun& run : r.interrupted_runs) {
    if (run.job < 0 || static_cast<size_t>(run.job) >= n) continue;
    const Job& job = w->jobs[run.job];
    if (job.team < 0 || job.gpus <= 0) continue;
    steps.push_back({run.start, job.team, 0, job.gpus});
    steps.push_back({run.end, job.team, 0, -job.gpus});
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.t < b.t; });

  std::vector<double> weight(teams, 1.0), quota(teams, std::numeric_limits<double>::infinity());
  for (int t = 0; t < static_cast<int>(r.teams.size()); ++t) {
    if (r.teams[t].shares > 0) weight[t] = r.teams[t].shares;
    if (r.teams[t].quota_gpus != kNoQuota) quota[t] = r.teams[t].quota_gpus;
  }
  const double capacity = r.cluster->total_gpus();
  std::vector<int64_t> demand(teams, 0), usage(teams, 0);
  std::vector<double> cap(teams), entitled;
  std::vector<int> order;
  int64_t total_demand = 0;
  double weighted_index = 0, contended = 0;
  for (size_t i = 0; i < steps.size();) {
    const Time t = steps[i].t;
    for (; i < steps.size() && steps[i].t == t; ++i) {
      demand[steps[i].team] += steps[i].demand;
      usage[steps[i].team] += steps[i].usage;
      total_demand += steps[i].demand;
    }
    if (i == steps.size() || total_demand <= capacity) continue;
    const double dt = static_cast<double>(steps[i].t - t);
    if (dt <= 0) continue;
    for (int k = 0; k < teams; ++k) cap[k] = std::min<double>(demand[k], quota[k]);
    WaterFill(capacity, cap, weight, &entitled, &order);
    double sum = 0, sum_sq = 0;
    int count = 0;
    for (int k : order) {
      if (entitled[k] <= 0) continue;
      const double x = static_cast<double>(usage[k]) / entitled[k];
      sum += x;
      sum_sq += x * x;
      ++count;
    }
    // No team using anything (the index is undefined): the instant does not count.
    if (sum_sq <= 0) continue;
    if (per_team != nullptr) {
      for (int k : order) {
        (*per_team)[k].used_gpu_seconds += static_cast<double>(usage[k]) * dt;
        (*per_team)[k].entitled_gpu_seconds += entitled[k] * dt;
      }
    }
    weighted_index += sum * sum / (count * sum_sq) * dt;
    contended += dt;
  }
  if (contended_fraction != nullptr && run_end > run_start) {
    *contended_fraction = contended / static_cast<double>(run_end - run_start);
  }
  return contended > 0 ? weighted_index / contended : 1;
}

}  // namespace gantry::report_internal
