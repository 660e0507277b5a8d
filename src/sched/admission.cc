// Built-in admission and preemption plugins.
//
// "quota": each team may hold at most quota_gpus GPUs at once (a hard cap, like Slurm's
// GrpTRES=gres/gpu=N or a Kueue ClusterQueue's nominal quota without borrowing). Teams without a
// quota share the rest of the cluster. Cohorts with borrowing and lending are the "kueue"
// admission plugin (kueue.cc). Counted in milli-GPUs (MilliGpus, job_request.h): a share of a
// GPU charges its gpu_milli, so a 1-GPU quota holds four 250-milli jobs at once.
#include "builtin_plugins.h"

namespace gantry {
namespace {

class QuotaAdmission final : public AdmissionPlugin {
 public:
  explicit QuotaAdmission(const std::vector<Team>& teams) : teams_(teams), used_(teams.size(), 0) {}
  std::string_view name() const override { return "quota"; }
  int64_t HeadroomMilli(int team) const override {
    return HasQuota(team) ? QuotaMilli(team) - used_[team] : kNoHeadroomLimit;
  }
  bool CanEverAdmit(const JobRequest& job) const override {
    return !HasQuota(job.team) || MilliGpus(job) <= QuotaMilli(job.team);
  }
  void OnJobStarted(const JobRequest& job, const Placement&, Time) override {
    used_[job.team] += MilliGpus(job);
  }
  void OnJobEnded(const JobRequest& job, Time) override { used_[job.team] -= MilliGpus(job); }
  std::string Explain(const JobRequest& job) const override {
    return "team " + teams_[job.team].name + " uses " + MilliGpusText(used_[job.team]) +
           " of its " + std::to_string(teams_[job.team].quota_gpus) +
           "-GPU quota; this job needs " + MilliGpusText(MilliGpus(job));
  }

 private:
  bool HasQuota(int team) const { return teams_[team].quota_gpus != kNoQuota; }
  int64_t QuotaMilli(int team) const { return GpusToMilli(teams_[team].quota_gpus); }

  const std::vector<Team>& teams_;
  std::vector<int64_t> used_;  // per team, milli-GPUs
};

class NoPreemption final : public PreemptionPlugin {
 public:
  std::string_view name() const override { return "none"; }
  std::vector<JobIndex> SelectVictims(const JobRequest&, Time) override { return {}; }
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<AdmissionPlugin>> NewQuota(const PluginArgs& args,
                                                  const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<AdmissionPlugin>(new QuotaAdmission(*ctx.teams));
}

Result<std::unique_ptr<PreemptionPlugin>> NewNoPreemption(const PluginArgs& args,
                                                          const PluginContext&) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<PreemptionPlugin>(new NoPreemption());
}

}  // namespace builtin
}  // namespace gantry
