// The "power" admission plugin: a job starts only if, with its GPUs busy, the cluster and every
// topology domain it touches stay within their power caps (cluster spec `power:`,
// docs/formats/cluster.md#power). It decides on the placement the placement plugin chose
// (AdmissionPlugin::AdmitPlacement), so a cap on one rack holds back only jobs placed there. A
// refused job waits with reason kPower; like a job over its quota it holds no reservation. A
// placement refused for a domain's cap is tried again off that domain (engine.cc, TryPlace).
//
// The engine adds this plugin to every profile when the cluster has caps (engine.cc, Init), so
// a cap holds whichever profile runs; a profile may also name it.
#include <unordered_map>

#include "builtin_plugins.h"
#include "gantry/sched/power.h"

namespace gantry {
namespace {

class PowerAdmission final : public AdmissionPlugin {
 public:
  explicit PowerAdmission(const Cluster& cluster)
      : meter_(cluster), idle_mw_(meter_.cluster_mw()) {}
  std::string_view name() const override { return "power"; }
  int64_t HeadroomMilli(int) const override { return kNoHeadroomLimit; }

  // A domain over its cap is named in `avoid`, so that the engine tries the job elsewhere: a
  // full rack does not hold back a job that another rack has power for.
  bool AdmitPlacement(const JobRequest& job, const Placement& placement,
                      std::vector<std::pair<NodeIndex, NodeIndex>>* avoid) override {
    std::string why;
    over_.clear();
    if (meter_.Fits(placement, &why, &over_)) return true;
    for (DomainIndex d : over_) {
      const Domain& dom = meter_.cluster().domains()[d];
      if (avoid != nullptr) avoid->emplace_back(dom.first_node, dom.end_node);
    }
    refusals_[job.index] = std::move(why);
    return false;
  }

  void OnJobStarted(const JobRequest& job, const Placement& placement, Time) override {
    meter_.Add(placement, +1);
    running_[job.index] = placement;
    refusals_.erase(job.index);
  }

  void OnJobEnded(const JobRequest& job, Time) override {
    auto it = running_.find(job.index);
    if (it == running_.end()) return;
    meter_.Add(it->second, -1);
    running_.erase(it);
  }

  std::string Explain(const JobRequest& job) const override {
    std::string out;
    auto it = refusals_.find(job.index);
    if (it != refusals_.end()) out = it->second + "; ";
    const int64_t least = meter_.MinAddedMilliwatts(job.gpus, job.gpu_type_mask);
    out += "it adds at least " + FormatWatts(least);
    if (meter_.cluster_cap_mw() > 0) {
      out += "; the cluster draws " + FormatWatts(meter_.cluster_mw()) + " of its " +
             FormatWatts(meter_.cluster_cap_mw()) + " cap";
      if (idle_mw_ + least > meter_.cluster_cap_mw()) out += " (it can never fit under that cap)";
    }
    return out;
  }

 private:
  PowerMeter meter_;
  const int64_t idle_mw_;  // the cluster's draw with every GPU idle
  std::unordered_map<JobIndex, Placement> running_;
  std::unordered_map<JobIndex, std::string> refusals_;  // the last refusal of each pending job
  std::vector<DomainIndex> over_;
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<AdmissionPlugin>> NewPower(const PluginArgs& args,
                                                  const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<AdmissionPlugin>(new PowerAdmission(*ctx.cluster));
}

}  // namespace builtin
}  // namespace gantry
