// Built-in admission and preemption plugins, and the list of built-in plugin names.
//
// "quota": each team may hold at most quota_gpus GPUs at once (a hard cap, like Slurm's
// GrpTRES=gres/gpu=N or a Kueue ClusterQueue's nominal quota without borrowing). Teams without a
// quota share the rest of the cluster. Cohorts with borrowing and lending will be a second
// admission plugin beside this one.
#include <climits>

#include "gantry/sched/plugin.h"

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
  void OnJobStarted(const Job& job) override { used_[job.team] += job.gpus; }
  void OnJobEnded(const Job& job) override { used_[job.team] -= job.gpus; }
  std::string Explain(const Job& job) const override {
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
  std::vector<JobIndex> SelectVictims(const Job&, Time) override { return {}; }
};

}  // namespace

Result<std::unique_ptr<AdmissionPlugin>> CreateAdmissionPlugin(const std::string& name,
                                                               const PluginArgs& args,
                                                               const std::vector<Team>& teams) {
  if (name == "quota") {
    GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
    return std::unique_ptr<AdmissionPlugin>(new QuotaAdmission(teams));
  }
  return NotFound("unknown admission plugin '" + name + "' (known: quota)");
}

Result<std::unique_ptr<PreemptionPlugin>> CreatePreemptionPlugin(const std::string& name,
                                                                 const PluginArgs& args) {
  if (name == "none" || name.empty()) {
    GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
    return std::unique_ptr<PreemptionPlugin>(new NoPreemption());
  }
  return NotFound("unknown preemption plugin '" + name + "' (known: none)");
}

std::vector<std::pair<std::string, std::vector<std::string>>> BuiltinPluginNames() {
  return {
      {"priority", {"age", "fairshare", "job-size", "qos", "oracle-runtime", "oracle-service"}},
      {"admission", {"quota"}},
      {"placement", {"first-fit", "best-fit", "topology"}},
      {"backfill", {"none", "easy", "conservative"}},
      {"preemption", {"none"}},
  };
}

}  // namespace gantry
