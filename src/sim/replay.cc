#include "gantry/sim/replay.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace gantry {
namespace {

constexpr size_t kExampleJobs = 5;

// A change of the replayed state. At one instant ends come first, then submits, then starts,
// as the simulator orders finishes before submissions before the cycle's starts.
struct Step {
  Time t;
  int kind;  // 0: end, 1: submit, 2: start
  JobIndex job;
  bool operator<(const Step& o) const {
    return t != o.t ? t < o.t : kind != o.kind ? kind < o.kind : job < o.job;
  }
};

}  // namespace

Status CheckRecordedStarts(const Workload& workload) {
  const std::vector<Job>& jobs = workload.jobs;
  const bool any_recorded =
      std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.recorded_start >= 0; });
  if (jobs.empty() || any_recorded) return Status::Ok();
  return InvalidArgument(std::string(kAsRecordedProfile) +
                         " replays the start times a trace records, and this " + workload.format +
                         " trace (" + workload.source +
                         ") records none; traces that do: sacct (Start), helios (start_time), "
                         "openb (scheduled_time), swf (wait time)");
}

Result<SimResult> ReplayRecorded(const Cluster& cluster, const std::vector<Team>& teams,
                                 const Workload& workload, const SimOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  const std::vector<Job>& jobs = workload.jobs;
  SimResult result;
  result.profile = std::string(kAsRecordedProfile);
  result.workload = &workload;
  result.cluster = &cluster;
  result.teams = teams;
  result.as_recorded = true;
  result.outcomes.resize(jobs.size());

  GANTRY_RETURN_IF_ERROR(CheckRecordedStarts(workload));

  std::vector<Step> steps;
  steps.reserve(3 * jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    if (job.index != static_cast<JobIndex>(i)) {
      return InvalidArgument("workload job " + job.id + " has index " + std::to_string(job.index) +
                             " at position " + std::to_string(i));
    }
    const bool no_start = job.recorded_start < 0;
    if (no_start || job.recorded_start < job.submit) {
      // Reported, never invented: the job stays unstarted in this run.
      ++(no_start ? result.recorded.jobs_without_start : result.recorded.jobs_start_before_submit);
      if (result.recorded.example_jobs.size() < kExampleJobs) {
        result.recorded.example_jobs.push_back(job.id);
      }
      continue;
    }
    JobOutcome& o = result.outcomes[i];
    o.start = o.first_start = job.recorded_start;
    o.end = job.recorded_start + job.run_time;  // the recorded run, limit or not
    o.nodes_spanned = 0;                        // the trace does not say where it ran
    steps.push_back({job.submit, 1, job.index});
    steps.push_back({o.start, 2, job.index});
    steps.push_back({o.end, 0, job.index});
  }
  std::sort(steps.begin(), steps.end());

  // Sample as the simulator does: about target_samples points over the run, each the state
  // after every step at or before its instant.
  const Time first = steps.empty() ? 0 : steps.front().t;
  const Time last = steps.empty() ? 0 : steps.back().t;
  const Duration every =
      std::max<Duration>(1, (last - first) / std::max(1, options.target_samples));
  int64_t busy = 0, pending = 0, running = 0;
  std::vector<int32_t> team_busy(teams.size(), 0);
  const auto sample = [&](Time t) {
    TimeSample s;
    s.t = t;
    s.busy_gpus = static_cast<int32_t>(busy);
    s.pending_jobs = static_cast<int32_t>(pending);
    s.running_jobs = static_cast<int32_t>(running);
    s.team_busy_gpus = team_busy;
    result.samples.push_back(std::move(s));
  };
  Time next_sample = first;
  Time prev = first;
  size_t next_progress = 0;
  for (size_t i = 0; i < steps.size();) {
    const Time now = steps[i].t;
    const double dt = static_cast<double>(now - prev);
    result.busy_gpu_seconds += dt * static_cast<double>(busy);
    result.total_wait_job_seconds += dt * static_cast<double>(pending);
    while (next_sample < now) {
      sample(next_sample);
      next_sample += every;
    }
    for (; i < steps.size() && steps[i].t == now; ++i) {
      const Job& job = jobs[steps[i].job];
      const int sign = steps[i].kind == 2 ? 1 : -1;
      if (steps[i].kind == 1) {
        ++pending;
        continue;
      }
      if (steps[i].kind == 2) --pending;
      running += sign;
      busy += sign * job.gpus;
      if (job.team >= 0 && static_cast<size_t>(job.team) < team_busy.size()) {
        team_busy[job.team] += sign * job.gpus;
      }
      result.recorded.peak_busy_gpus = std::max(result.recorded.peak_busy_gpus, busy);
    }
    prev = now;
    if (options.progress && i >= next_progress) {
      options.progress(static_cast<double>(i) / static_cast<double>(steps.size()));
      next_progress = i + std::max<size_t>(1, steps.size() / 200);
    }
  }
  sample(prev);
  if (options.progress) options.progress(1.0);

  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.perf.wall_seconds = wall;
  result.perf.events = static_cast<int64_t>(steps.size());
  result.perf.events_per_second = wall > 0 ? static_cast<double>(steps.size()) / wall : 0;
  Summarize(result);
  return result;
}

}  // namespace gantry
