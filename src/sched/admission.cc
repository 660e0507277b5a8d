// Built-in admission and preemption plugins.
//
// "quota": each team may hold at most quota_gpus GPUs at once (a hard cap, like Slurm's
// GrpTRES=gres/gpu=N or a Kueue ClusterQueue's nominal quota without borrowing). Teams without a
// quota share the rest of the cluster. Cohorts with borrowing and lending are the "kueue"
// admission plugin (kueue.cc).
#include <climits>

#include "builtin_plugins.h"

namespace gantry {
namespace {

class QuotaAdmission final : public AdmissionPlugin {
 public:
  explicit QuotaAdmission(const std::vector<Team>& teams) : teams_(teams), used_(teams.size(), 0) {}
  std::string_view name() const override { return "quota"; }
  int Headroom(int team) const override {
    const int q = teams_[team].quota_gpus;
    return q == kNoQuota ? INT_MAX : q - used_[team];
  }
  bool CanEverAdmit(const JobRequest& job) const override {
    return teams_[job.team].quota_gpus == kNoQuota || job.gpus <= teams_[job.team].quota_gpus;
  }
  void OnJobStarted(const JobRequest& job, const Placement&, Time) override {
    used_[job.team] += job.gpus;
  }
  void OnJobEnded(const JobRequest& job, Time) override { used_[job.team] -= job.gpus; }
  std::string Explain(const JobRequest& job) const override {
    return "team " + teams_[job.team].name + " uses " + std::to_string(used_[job.team]) +
           " of its " + std::to_string(teams_[job.team].quota_gpus) +
           "-GPU quota; this job needs " + std::to_string(job.gpus);
  }

 private:
  const std::vector<Team>& teams_;
  std::vector<int> used_;
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
