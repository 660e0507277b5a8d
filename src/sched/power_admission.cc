// The "power" admission plugin: a job starts only if, with its GPUs busy, the cluster and every
// topology domain it touches stay within their power caps (cluster spec `power:`,
// docs/formats/cluster.md#power). It decides on the placement the placement plugin chose
// (AdmissionPlugin::AdmitPlacement), so a cap on one rack holds back only jobs placed there. A
// refused job waits with reason kPower; like a job over its quota it holds no reservation. A
// placement refused for a domain's cap is tried again off that domain (engine.cc, TryPlace).
//
// The engine adds this plugin to every profile when the cluster has caps (engine.cc, Init), so
// a cap holds whichever profile runs; a profile may also name it.
//
// Shares (fractional jobs) draw as the hardware does: a shared GPU is one busy GPU however many
// shares it holds, so a share that joins one adds nothing and is never refused. The meter is
// charged, per node, the shared GPUs open there (the engine's SharedGpus), brought up to date
// at every share's start and end; and one whole GPU for a share that preempts and waits for its
// victims (its GPU is booked but not yet shared), until the engine starts it. Outside an engine
// (no SharedGpus) each share counts as a busy GPU: conservative.
#include <functional>
#include <unordered_map>

#include "builtin_plugins.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/power.h"

namespace gantry {
namespace {

class PowerAdmission final : public AdmissionPlugin {
 public:
  explicit PowerAdmission(const PluginContext& ctx)
      : meter_(*ctx.cluster),
        idle_mw_(meter_.cluster_mw()),
        shares_(ctx.shared_gpus),
        shared_gpu_of_(ctx.shared_gpu_of) {
    if (shares_ != nullptr) open_charged_.assign(ctx.cluster->nodes().size(), 0);
  }
  std::string_view name() const override { return "power"; }
  int64_t HeadroomMilli(int) const override { return kNoHeadroomLimit; }

  // A domain over its cap is named in `avoid`, so that the engine tries the job elsewhere: a
  // full rack does not hold back a job that another rack has power for.
  bool AdmitPlacement(const JobRequest& job, const Placement& placement,
                      std::vector<std::pair<NodeIndex, NodeIndex>>* avoid) override {
    SettleBooked();
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
    SettleBooked();
    running_[job.index] = placement;
    refusals_.erase(job.index);
    if (!TracksShare(job)) {
      meter_.Add(placement, +1);
    } else if (shared_gpu_of_(job.index) < 0) {
      booked_.emplace(job.index, placement.front().node);
      meter_.Add(placement, +1);
    } else {
      Settle(placement.front().node);
    }
  }

  void OnJobEnded(const JobRequest& job, Time) override {
    SettleBooked();
    auto it = running_.find(job.index);
    if (it == running_.end()) return;
    auto booked = TracksShare(job) ? booked_.find(job.index) : booked_.end();
    if (!TracksShare(job) || booked != booked_.end()) {
      meter_.Add(it->second, -1);
      if (booked != booked_.end()) booked_.erase(booked);
    } else {
      Settle(it->second.front().node);
    }
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
  bool TracksShare(const JobRequest& job) const {
    return shares_ != nullptr && shared_gpu_of_ && IsShare(job);
  }

  // Charges node `n` for the shared GPUs open there now.
  void Settle(NodeIndex n) {
    const int delta = shares_->open_on(n) - open_charged_[n];
    if (delta == 0) return;
    meter_.Add({Slot{n, delta}}, +1);
    open_charged_[n] += delta;
  }

  // Waiting share preemptors the engine has started since: their booked GPU is a shared GPU now.
  void SettleBooked() {
    for (auto it = booked_.begin(); it != booked_.end();) {
      if (shared_gpu_of_(it->first) < 0) {
        ++it;
        continue;
      }
      const NodeIndex n = it->second;
      meter_.Add({Slot{n, 1}}, -1);
      it = booked_.erase(it);
      Settle(n);
    }
  }

  PowerMeter meter_;
  const int64_t idle_mw_;     // the cluster's draw with every GPU idle
  const SharedGpus* shares_;  // null outside an engine
  std::function<int32_t(JobIndex)> shared_gpu_of_;
  std::vector<int> open_charged_;                   // per node: shared GPUs charged
  std::unordered_map<JobIndex, NodeIndex> booked_;  // waiting share preemptors: a whole GPU each
  std::unordered_map<JobIndex, Placement> running_;
  std::unordered_map<JobIndex, std::string> refusals_;  // the last refusal of each pending job
  std::vector<DomainIndex> over_;
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<AdmissionPlugin>> NewPower(const PluginArgs& args,
                                                  const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<AdmissionPlugin>(new PowerAdmission(ctx));
}

}  // namespace builtin
}  // namespace gantry
