// Summarize(), summary.json and the terminal comparison table.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gantry/report/result.h"
#include "report/report_internal.h"

namespace gantry {
namespace {

using report_internal::BoundedSlowdown;
using report_internal::NearestRank;
using report_internal::Round6;

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

struct TeamAccumulator {
  double gpu_seconds = 0;
  double wait_sum = 0;
  double slowdown_sum = 0;
  int64_t jobs = 0;
  int64_t completed = 0;
  double energy_kwh = 0;
};

}  // namespace

void Summarize(SimResult& result) {
  SimSummary s;
  s.profile = result.profile;
  const Workload* w = result.workload;
  const size_t n = w != nullptr ? std::min(w->jobs.size(), result.outcomes.size()) : 0;
  s.jobs = static_cast<int64_t>(n);

  size_t team_count = result.teams.size();
  if (w != nullptr) team_count = std::max(team_count, w->teams.size());
  std::vector<TeamAccumulator> acc(team_count);

  std::vector<double> waits, jcts, slowdowns, estimate_errors;
  waits.reserve(n);
  jcts.reserve(n);
  slowdowns.reserve(n);
  Time min_submit = 0, max_end = 0;
  bool any_submit = false, any_end = false;
  for (size_t i = 0; i < n; ++i) {
    const Job& job = w->jobs[i];
    const JobOutcome& o = result.outcomes[i];
    if (!any_submit || job.submit < min_submit) min_submit = job.submit;
    any_submit = true;
    if (o.backfilled) ++s.jobs_backfilled;
    if (o.first_estimate >= 0 && o.first_start >= 0) {
      estimate_errors.push_back(static_cast<double>(std::abs(o.first_start - o.first_estimate)));
    }
    if (o.killed_at_limit) ++s.jobs_killed_at_limit;
    TeamAccumulator* team = nullptr;
    if (job.team >= 0 && static_cast<size_t>(job.team) < acc.size()) {
      team = &acc[static_cast<size_t>(job.team)];
      ++team->jobs;
      team->energy_kwh += o.energy_kwh;  // every run's, also of jobs that did not complete
    }
    s.job_energy_kwh += o.energy_kwh;
    if (o.cancelled) {
      ++s.jobs_cancelled;
      continue;
    }
    if (o.held) {
      ++s.jobs_held;
      continue;
    }
    if (o.start < 0) {
      ++s.jobs_never_started;
      continue;
    }
    if (o.end < 0) continue;
    ++s.jobs_completed;
    if (!any_end || o.end > max_end) max_end = o.end;
    any_end = true;
    const double wait = static_cast<double>(o.start - job.submit);
    const double jct = static_cast<double>(o.end - job.submit);
    const double bsld = BoundedSlowdown(job.submit, o.start, o.end);
    waits.push_back(wait);
    jcts.push_back(jct);
    slowdowns.push_back(bsld);
    if (team != nullptr) {
      ++team->completed;
      // A share (gpu_milli) counts as its fraction of a GPU.
      team->gpu_seconds += GpusUsed(job) * static_cast<double>(o.end - o.start);
      team->wait_sum += wait;
      team->slowdown_sum += bsld;
    }
  }
  s.jobs_unfinished = s.jobs - s.jobs_completed - s.jobs_cancelled;
  s.cluster_events = result.cluster_events;
  s.node_failures = result.node_failures;
  s.health_events = result.health_events;
  s.spare_swaps = result.spare_swaps;
  s.requeues = result.requeues;
  s.preemptions = result.preemptions;
  for (const JobOutcome& o : result.outcomes) {
    if (o.preemptions > 0) ++s.jobs_preempted;
    s.max_preemptions_per_job = std::max(s.max_preemptions_per_job, o.preemptions);
  }
  s.preemption_plugin = result.preemption_plugin;
  s.preemption_lost_gpu_hours = result.preemption_lost_gpu_seconds / 3600.0;
  s.preemption_restart_gpu_hours = result.preemption_restart_gpu_seconds / 3600.0;
  s.lost_gpu_hours = result.lost_gpu_seconds / 3600.0;
  s.restart_gpu_hours = result.restart_gpu_seconds / 3600.0;
  s.goodput =
      result.busy_gpu_seconds > 0
          ? 1.0 - (result.lost_gpu_seconds + result.restart_gpu_seconds) / result.busy_gpu_seconds
          : 1.0;
  s.makespan = any_end ? max_end - min_submit : 0;

  s.wait_mean = Mean(waits);
  s.jct_mean = Mean(jcts);
  s.bounded_slowdown_mean = Mean(slowdowns);
  std::sort(waits.begin(), waits.end());
  std::sort(jcts.begin(), jcts.end());
  std::sort(slowdowns.begin(), slowdowns.end());
  std::sort(estimate_errors.begin(), estimate_errors.end());
  s.jobs_with_estimate = static_cast<int64_t>(estimate_errors.size());
  s.estimate_error_p50 = NearestRank(estimate_errors, 0.50);
  s.estimate_error_p90 = NearestRank(estimate_errors, 0.90);
  s.wait_p50 = NearestRank(waits, 0.50);
  s.wait_p95 = NearestRank(waits, 0.95);
  s.wait_p99 = NearestRank(waits, 0.99);
  s.jct_p50 = NearestRank(jcts, 0.50);
  s.jct_p95 = NearestRank(jcts, 0.95);
  s.jct_p99 = NearestRank(jcts, 0.99);
  s.bounded_slowdown_p95 = NearestRank(slowdowns, 0.95);

  const int total_gpus = result.cluster != nullptr ? result.cluster->total_gpus() : 0;
  if (total_gpus > 0 && s.makespan > 0) {
    s.gpu_utilization = result.busy_gpu_seconds /
                        (static_cast<double>(total_gpus) * static_cast<double>(s.makespan));
    s.fragmented_gpu_share = result.fragmented_gpu_seconds /
                             (static_cast<double>(total_gpus) * static_cast<double>(s.makespan));
  }

  if (w != nullptr) {
    s.jobs_skipped = w->stats.rows_skipped;
    // std::map iterates in key order, so the list is deterministic.
    for (const auto& [reason, count] : w->stats.skipped_by_reason) {
      s.skipped_by_reason.emplace_back(reason, count);
    }
  }

  s.frag_wait_job_hours = result.frag_wait_job_seconds / 3600.0;
  s.total_wait_job_hours = result.total_wait_job_seconds / 3600.0;
  s.frag_wait_fraction = result.total_wait_job_seconds > 0
                             ? result.frag_wait_job_seconds / result.total_wait_job_seconds
                             : 0;

  double all_gpu_seconds = 0;
  for (const TeamAccumulator& a : acc) all_gpu_seconds += a.gpu_seconds;
  double jain_sum = 0, jain_sum_sq = 0;
  int jain_n = 0;
  s.teams.reserve(team_count);
  for (size_t t = 0; t < team_count; ++t) {
    const TeamAccumulator& a = acc[t];
    TeamSummary ts;
    if (t < result.teams.size()) {
      ts.name = result.teams[t].name;
      ts.quota_gpus = result.teams[t].quota_gpus;
    } else {
      ts.name = w->teams[t];
    }
    ts.jobs = a.jobs;
    ts.jobs_completed = a.completed;
    ts.energy_kwh = a.energy_kwh;
    ts.gpu_hours = a.gpu_seconds / 3600.0;
    ts.share_of_usage = all_gpu_seconds > 0 ? a.gpu_seconds / all_gpu_seconds : 0;
    if (ts.quota_gpus > 0 && s.makespan > 0) {
      const double quota_gpu_seconds =
          static_cast<double>(ts.quota_gpus) * static_cast<double>(s.makespan);
      ts.quota_gpu_hours = quota_gpu_seconds / 3600.0;
      ts.quota_utilization = a.gpu_seconds / quota_gpu_seconds;
    }
    if (a.completed > 0) {
      ts.mean_wait_s = a.wait_sum / static_cast<double>(a.completed);
      ts.mean_slowdown = a.slowdown_sum / static_cast<double>(a.completed);
      jain_sum += ts.mean_slowdown;
      jain_sum_sq += ts.mean_slowdown * ts.mean_slowdown;
      ++jain_n;
    }
    s.teams.push_back(std::move(ts));
  }
  s.jain_fairness = jain_n > 0 && jain_sum_sq > 0
                        ? (jain_sum * jain_sum) / (static_cast<double>(jain_n) * jain_sum_sq)
                        : 0;
  std::vector<report_internal::TeamEntitlement> entitlement;
  s.share_fairness = report_internal::ShareFairness(result, &s.contended_fraction, &entitlement);
  double all_used = 0, all_entitled = 0;
  for (const auto& e : entitlement) {
    all_used += e.used_gpu_seconds;
    all_entitled += e.entitled_gpu_seconds;
  }
  for (size_t t = 0; t < s.teams.size() && t < entitlement.size(); ++t) {
    TeamSummary& ts = s.teams[t];
    const report_internal::TeamEntitlement& e = entitlement[t];
    ts.contended_gpu_hours = e.used_gpu_seconds / 3600.0;
    ts.entitled_gpu_hours = e.entitled_gpu_seconds / 3600.0;
    ts.contended_share = all_used > 0 ? e.used_gpu_seconds / all_used : 0;
    ts.entitled_share = all_entitled > 0 ? e.entitled_gpu_seconds / all_entitled : 0;
    ts.entitlement_ratio =
        e.entitled_gpu_seconds > 0 ? e.used_gpu_seconds / e.entitled_gpu_seconds : 0;
  }
  s.oracle = result.oracle;
  s.as_recorded = result.as_recorded;
  s.replay_error = std::move(result.summary.replay_error);  // set apart from Summarize
  s.energy_kwh = result.energy_joules / 3.6e6;
  s.idle_energy_kwh = std::max(0.0, s.energy_kwh - s.job_energy_kwh);
  s.peak_watts = result.peak_watts;
  s.domain_power = result.domain_power;
  if (result.cluster != nullptr) {
    const PowerSpec& p = result.cluster->power();
    s.cap_watts = p.cap_watts;
    s.capped_watts_factor = p.capped_watts_factor;
    s.capped_slowdown = p.capped_slowdown;
  }
  result.summary = std::move(s);
}

void SetReplayError(SimResult& result, const SimResult& recorded) {
  ReplayError e;
  e.against = recorded.summary.profile.empty() ? recorded.profile : recorded.summary.profile;
  const Workload* w = result.workload;
  const size_t n =
      w == nullptr ? 0
                   : std::min({w->jobs.size(), result.outcomes.size(), recorded.outcomes.size()});
  std::vector<double> wait_abs, jct_abs;
  double wait_signed = 0, jct_signed = 0;
  const auto completed = [](const JobOutcome& o) {
    return o.start >= 0 && o.end >= 0 && !o.cancelled && !o.held;
  };
  for (size_t i = 0; i < n; ++i) {
    const JobOutcome& o = result.outcomes[i];
    const JobOutcome& r = recorded.outcomes[i];
    const bool in_run = completed(o), in_history = completed(r);
    if (in_run != in_history) ++e.jobs_not_compared;
    if (!in_run || !in_history) continue;
    // Same submit in both, so wait and JCT differences are start and end differences.
    const double dw = static_cast<double>(o.start - r.start);
    const double dj = static_cast<double>(o.end - r.end);
    wait_abs.push_back(std::abs(dw));
    jct_abs.push_back(std::abs(dj));
    wait_signed += dw;
    jct_signed += dj;
  }
  e.jobs_compared = static_cast<int64_t>(wait_abs.size());
  if (!wait_abs.empty()) {
    const double count = static_cast<double>(wait_abs.size());
    e.wait_abs_mean = Mean(wait_abs);
    e.jct_abs_mean = Mean(jct_abs);
    e.wait_bias = wait_signed / count;
    e.jct_bias = jct_signed / count;
    std::sort(wait_abs.begin(), wait_abs.end());
    std::sort(jct_abs.begin(), jct_abs.end());
    e.wait_abs_p50 = NearestRank(wait_abs, 0.50);
    e.wait_abs_p90 = NearestRank(wait_abs, 0.90);
    e.jct_abs_p50 = NearestRank(jct_abs, 0.50);
    e.jct_abs_p90 = NearestRank(jct_abs, 0.90);
  }
  result.summary.replay_error = std::move(e);
}

nlohmann::ordered_json SummaryToJson(const SimResult& result) {
  const SimSummary& s = result.summary;
  nlohmann::ordered_json j;
  j["profile"] = s.profile;
  j["oracle"] = s.oracle;
  j["as_recorded"] = s.as_recorded;
  nlohmann::ordered_json run;
  run["cluster"] = result.cluster != nullptr ? result.cluster->name() : "";
  run["cluster_gpus"] = result.cluster != nullptr ? result.cluster->total_gpus() : 0;
  run["trace_source"] = result.workload != nullptr ? result.workload->source : "";
  run["trace_format"] = result.workload != nullptr ? result.workload->format : "";
  // Only when simulated: summaries of the event-driven simulator keep their shape.
  if (result.cycle > 0 || result.launch_latency > 0 || result.end_latency > 0) {
    run["cycle_s"] = result.cycle;
    run["launch_latency_s"] = result.launch_latency;
    run["end_latency_s"] = result.end_latency;
  }
  j["run"] = std::move(run);
  j["jobs"] = s.jobs;
  j["jobs_completed"] = s.jobs_completed;
  j["jobs_unfinished"] = s.jobs_unfinished;
  j["jobs_never_started"] = s.jobs_never_started;
  j["jobs_skipped"] = s.jobs_skipped;
  nlohmann::ordered_json reasons = nlohmann::ordered_json::object();
  for (const auto& [reason, count] : s.skipped_by_reason) reasons[reason] = count;
  j["skipped_by_reason"] = std::move(reasons);
  nlohmann::ordered_json absent = nlohmann::ordered_json::object();
  int64_t rounded = 0, shared = 0;
  if (result.workload != nullptr) {
    for (const auto& [type, n] : result.workload->stats.gpu_types_not_in_cluster) absent[type] = n;
    rounded = result.workload->stats.fractional_gpu_rounded;
    for (const Job& job : result.workload->jobs) shared += IsShare(job);
  }
  j["gpu_types_not_in_cluster"] = std::move(absent);
  // Shares kept their gpu_milli, so the engine shared GPUs: none was rounded.
  j["fractional_gpus_rounded"] = shared > 0 ? 0 : rounded;
  j["fractional_gpus_shared"] = shared;
  j["jobs_killed_at_limit"] = s.jobs_killed_at_limit;
  j["jobs_backfilled"] = s.jobs_backfilled;
  j["jobs_cancelled"] = s.jobs_cancelled;
  j["jobs_held"] = s.jobs_held;
  j["cluster_events"] = s.cluster_events;
  j["node_failures"] = s.node_failures;
  j["health_events"] = s.health_events;
  j["spare_swaps"] = s.spare_swaps;
  j["requeues"] = s.requeues;
  j["preemptions"] = s.preemptions;
  j["jobs_preempted"] = s.jobs_preempted;
  j["max_preemptions_per_job"] = s.max_preemptions_per_job;
  j["preemption_plugin"] = s.preemption_plugin;
  j["preemption_lost_gpu_hours"] = Round6(s.preemption_lost_gpu_hours);
  j["preemption_restart_gpu_hours"] = Round6(s.preemption_restart_gpu_hours);
  j["lost_gpu_hours"] = Round6(s.lost_gpu_hours);
  j["restart_gpu_hours"] = Round6(s.restart_gpu_hours);
  j["goodput"] = Round6(s.goodput);
  j["makespan_s"] = s.makespan;
  j["jct_mean_s"] = Round6(s.jct_mean);
  j["jct_p50_s"] = Round6(s.jct_p50);
  j["jct_p95_s"] = Round6(s.jct_p95);
  j["jct_p99_s"] = Round6(s.jct_p99);
  j["wait_mean_s"] = Round6(s.wait_mean);
  j["wait_p50_s"] = Round6(s.wait_p50);
  j["wait_p95_s"] = Round6(s.wait_p95);
  j["wait_p99_s"] = Round6(s.wait_p99);
  j["bounded_slowdown_mean"] = Round6(s.bounded_slowdown_mean);
  j["bounded_slowdown_p95"] = Round6(s.bounded_slowdown_p95);
  j["gpu_utilization"] = Round6(s.gpu_utilization);
  j["jain_fairness"] = Round6(s.jain_fairness);
  j["share_fairness"] = Round6(s.share_fairness);
  j["contended_fraction"] = Round6(s.contended_fraction);
  j["frag_wait_job_hours"] = Round6(s.frag_wait_job_hours);
  j["total_wait_job_hours"] = Round6(s.total_wait_job_hours);
  j["frag_wait_fraction"] = Round6(s.frag_wait_fraction);
  j["fragmented_gpu_share"] = Round6(s.fragmented_gpu_share);
  j["jobs_with_estimate"] = s.jobs_with_estimate;
  j["estimate_error_p50_s"] = Round6(s.estimate_error_p50);
  j["estimate_error_p90_s"] = Round6(s.estimate_error_p90);
  nlohmann::ordered_json teams = nlohmann::ordered_json::array();
  for (const TeamSummary& t : s.teams) {
    nlohmann::ordered_json tj;
    tj["name"] = t.name;
    if (t.quota_gpus == kNoQuota) {
      tj["quota_gpus"] = nullptr;
    } else {
      tj["quota_gpus"] = t.quota_gpus;
    }
    tj["jobs"] = t.jobs;
    tj["jobs_completed"] = t.jobs_completed;
    tj["gpu_hours"] = Round6(t.gpu_hours);
    tj["share_of_usage"] = Round6(t.share_of_usage);
    tj["quota_gpu_hours"] = Round6(t.quota_gpu_hours);
    tj["quota_utilization"] = Round6(t.quota_utilization);
    tj["contended_gpu_hours"] = Round6(t.contended_gpu_hours);
    tj["entitled_gpu_hours"] = Round6(t.entitled_gpu_hours);
    tj["contended_share"] = Round6(t.contended_share);
    tj["entitled_share"] = Round6(t.entitled_share);
    tj["entitlement_ratio"] = Round6(t.entitlement_ratio);
    tj["mean_wait_s"] = Round6(t.mean_wait_s);
    tj["mean_slowdown"] = Round6(t.mean_slowdown);
    tj["energy_kwh"] = Round6(t.energy_kwh);
    teams.push_back(std::move(tj));
  }
  j["teams"] = std::move(teams);
  if (s.replay_error) {
    const ReplayError& e = *s.replay_error;
    nlohmann::ordered_json rj;
    rj["against"] = e.against;
    rj["jobs_compared"] = e.jobs_compared;
    rj["jobs_not_compared"] = e.jobs_not_compared;
    rj["wait_abs_mean_s"] = Round6(e.wait_abs_mean);
    rj["wait_abs_p50_s"] = Round6(e.wait_abs_p50);
    rj["wait_abs_p90_s"] = Round6(e.wait_abs_p90);
    rj["wait_bias_s"] = Round6(e.wait_bias);
    rj["jct_abs_mean_s"] = Round6(e.jct_abs_mean);
    rj["jct_abs_p50_s"] = Round6(e.jct_abs_p50);
    rj["jct_abs_p90_s"] = Round6(e.jct_abs_p90);
    rj["jct_bias_s"] = Round6(e.jct_bias);
    j["replay_error"] = std::move(rj);
  } else {
    j["replay_error"] = nullptr;
  }
  if (result.as_recorded) {
    const RecordedReplay& rr = result.recorded;
    nlohmann::ordered_json aj;
    aj["jobs_without_start"] = rr.jobs_without_start;
    aj["jobs_start_before_submit"] = rr.jobs_start_before_submit;
    aj["example_jobs"] = rr.example_jobs;
    aj["peak_busy_gpus"] = rr.peak_busy_gpus;
    aj["over_capacity"] =
        result.cluster != nullptr && rr.peak_busy_gpus > result.cluster->total_gpus();
    j["recorded"] = std::move(aj);
  }
  nlohmann::ordered_json power;
  power["energy_kwh"] = Round6(s.energy_kwh);
  power["job_energy_kwh"] = Round6(s.job_energy_kwh);
  power["idle_energy_kwh"] = Round6(s.idle_energy_kwh);
  power["peak_watts"] = Round6(s.peak_watts);
  if (s.cap_watts > 0) {
    power["cap_watts"] = Round6(s.cap_watts);
  } else {
    power["cap_watts"] = nullptr;
  }
  nlohmann::ordered_json domains = nlohmann::ordered_json::array();
  for (const DomainPower& d : s.domain_power) {
    nlohmann::ordered_json dj;
    dj["domain"] = d.domain;
    dj["cap_watts"] = Round6(d.cap_watts);
    dj["peak_watts"] = Round6(d.peak_watts);
    domains.push_back(std::move(dj));
  }
  power["domains"] = std::move(domains);
  power["capped_clock"] = s.capped_slowdown != 1 || s.capped_watts_factor != 1;
  power["capped_watts_factor"] = Round6(s.capped_watts_factor);
  power["capped_slowdown"] = Round6(s.capped_slowdown);
  j["power"] = std::move(power);
  nlohmann::ordered_json perf;
  perf["wall_seconds"] = Round6(result.perf.wall_seconds);
  perf["events"] = result.perf.events;
  perf["cycles"] = result.perf.cycles;
  perf["events_per_second"] = Round6(result.perf.events_per_second);
  perf["peak_rss_kb"] = result.perf.peak_rss_kb;
  j["performance"] = std::move(perf);
  return j;
}

Status WriteSummaryJson(const SimResult& result, const std::string& path) {
  std::string text = SummaryToJson(result).dump(2);
  text += '\n';
  return report_internal::WriteFileAtomically(path, text);
}

std::string SummaryTable(const std::vector<const SimResult*>& results) {
  using report_internal::AppendFixed;
  using report_internal::CompactDuration;
  const std::vector<std::string> header = {
      "profile",  "jobs",     "done",    "makespan", "util%",    "wait avg", "wait p50",
      "wait p95", "wait p99", "JCT avg", "JCT p95",  "BSLD avg", "Jain",     "frag%"};
  std::vector<std::vector<std::string>> rows;
  bool any_oracle = false;
  bool any_recorded = false;
  for (const SimResult* r : results) {
    if (r == nullptr) continue;
    const SimSummary& s = r->summary;
    // Marked as in the report: an oracle is an upper bound, the recorded history is no policy.
    std::string name = s.profile.empty() ? r->profile : s.profile;
    if (r->oracle) name += " *";
    if (r->as_recorded) name += " (recorded)";
    any_oracle = any_oracle || r->oracle;
    any_recorded = any_recorded || r->as_recorded;
    auto fixed = [](double v, int decimals) {
      std::string out;
      AppendFixed(out, v, decimals);
      return out;
    };
    rows.push_back(
        {name, std::to_string(s.jobs),
         std::to_string(s.jobs_completed), CompactDuration(static_cast<double>(s.makespan)),
         fixed(100 * s.gpu_utilization, 1), CompactDuration(s.wait_mean),
         CompactDuration(s.wait_p50), CompactDuration(s.wait_p95), CompactDuration(s.wait_p99),
         CompactDuration(s.jct_mean), CompactDuration(s.jct_p95), fixed(s.bounded_slowdown_mean, 2),
         fixed(s.jain_fairness, 3), fixed(100 * s.frag_wait_fraction, 1)});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) out += "  ";
      const std::string pad(width[c] - cells[c].size(), ' ');
      // Names read left-aligned, numbers right-aligned so their digits line up.
      if (c == 0) {
        out += cells[c];
        if (c + 1 < cells.size()) out += pad;
      } else {
        out += pad;
        out += cells[c];
      }
    }
    out += '\n';
  };
  emit(header);
  size_t total = 0;
  for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c > 0 ? 2 : 0);
  out += std::string(total, '-');
  out += '\n';
  for (const auto& row : rows) emit(row);
  if (any_oracle) {
    out += "* oracle: reads the trace's true run times -- an upper bound, not a policy a live "
           "scheduler can run\n";
  }
  if (any_recorded) out += "(recorded): the trace's own start times, replayed\n";
  return out;
}

}  // namespace gantry
