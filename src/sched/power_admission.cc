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
//
// With `reserve: true`, power is reserved as EASY reserves GPUs (Reserve): the first job of a
// cycle refused for the cluster's cap is promised the watts it lacks at the earliest time
// running whole-GPU jobs, ending at their time limits, free them; until the next cycle another
// job is admitted only if it ends by then or leaves the reserved job enough. Without it, small
// jobs that keep taking the watts as they free can hold a large one back for as long as they
// come. Off by default: on the Philly sample under a cap it cut the wait of jobs of 16 GPUs or
// more by over a third but raised the mean wait up to 3x and lengthened the longest
// (docs/performance.md, "Power reservations"). Shared GPUs are assumed to draw until the
// reservation (a share's end does not always free a GPU), and domain caps are not reserved.
#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "builtin_plugins.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/power.h"

namespace gantry {
namespace {

class PowerAdmission final : public AdmissionPlugin {
 public:
  PowerAdmission(const PluginContext& ctx, bool reserve)
      : reserve_(reserve),
        meter_(*ctx.cluster),
        idle_mw_(meter_.cluster_mw()),
        shares_(ctx.shared_gpus),
        shared_gpu_of_(ctx.shared_gpu_of) {
    if (shares_ != nullptr) open_charged_.assign(ctx.cluster->nodes().size(), 0);
  }
  std::string_view name() const override { return "power"; }
  int64_t HeadroomMilli(int) const override { return kNoHeadroomLimit; }

  // A domain over its cap is named in `avoid`, so that the engine tries the job elsewhere: a
  // full rack does not hold back a job that another rack has power for.
  bool AdmitPlacement(const JobRequest& job, const Placement& placement, Time end,
                      std::vector<std::pair<NodeIndex, NodeIndex>>* avoid) override {
    SettleBooked();
    std::string why;
    over_.clear();
    if (!meter_.Fits(placement, &why, &over_)) {
      for (DomainIndex d : over_) {
        const Domain& dom = meter_.cluster().domains()[d];
        if (avoid != nullptr) avoid->emplace_back(dom.first_node, dom.end_node);
      }
      refusals_[job.index] = std::move(why);
      return false;
    }
    if (reserved_ >= 0 && job.index != reserved_ && end > reserved_at_) {
      const int64_t added = meter_.AddedMilliwatts(placement);
      if (added > spare_mw_) {
        refusals_[job.index] = "the cluster's power is reserved for job " + reserved_id_ +
                               ", expected to start by t=" + std::to_string(reserved_at_);
        return false;
      }
      spare_mw_ -= added;
    }
    return true;
  }

  Time Reserve(const JobRequest& job, Time now) override {
    reserved_ = -1;
    const int64_t cap = meter_.cluster_cap_mw();
    if (!reserve_ || cap == 0) return kInfiniteTime;
    SettleBooked();
    const int64_t need = meter_.MinAddedMilliwatts(job.gpus, job.gpu_type_mask);
    int64_t draw = meter_.cluster_mw();
    if (draw + need <= cap) return kInfiniteTime;  // refused for a domain's cap: not reserved
    for (auto it = ends_.begin(); it != ends_.end();) {
      const Time t = it->first;
      for (; it != ends_.end() && it->first == t; ++it) draw -= it->second;
      if (draw + need > cap) continue;
      reserved_ = job.index;
      reserved_id_ = job.id;
      reserved_at_ = std::max(t, now);
      spare_mw_ = cap - draw - need;
      return reserved_at_;
    }
    return kInfiniteTime;
  }

  void BeginCycle(Time) override { reserved_ = -1; }

  void OnJobStarted(const JobRequest& job, const Placement& placement, Time start) override {
    SettleBooked();
    Run& run = running_[job.index];
    run.placement = placement;
    run.end = ends_.end();
    refusals_.erase(job.index);
    if (!TracksShare(job)) {
      meter_.Add(placement, +1);
      if (reserve_) {
        run.end = ends_.emplace(start + std::max<Duration>(job.time_limit, 1),
                                meter_.AddedMilliwatts(placement));
      }
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
    const Placement& placement = it->second.placement;
    auto booked = TracksShare(job) ? booked_.find(job.index) : booked_.end();
    if (!TracksShare(job) || booked != booked_.end()) {
      meter_.Add(placement, -1);
      if (booked != booked_.end()) booked_.erase(booked);
    } else {
      Settle(placement.front().node);
    }
    if (it->second.end != ends_.end()) ends_.erase(it->second.end);
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

  struct Run {
    Placement placement;
    std::multimap<Time, int64_t>::iterator end;  // in ends_; ends_.end() if not kept there
  };

  const bool reserve_;  // the `reserve` argument
  PowerMeter meter_;
  const int64_t idle_mw_;  // the cluster's draw with every GPU idle
  // Whole-GPU jobs running (kept only with reserve_): when each is expected to end and the
  // watts it adds to idle.
  std::multimap<Time, int64_t> ends_;
  // This cycle's reservation (Reserve): for job reserved_ (-1: none), from reserved_at_, with
  // spare_mw_ left over then for jobs that run past it.
  JobIndex reserved_ = -1;
  std::string reserved_id_;
  Time reserved_at_ = 0;
  int64_t spare_mw_ = 0;
  const SharedGpus* shares_;  // null outside an engine
  std::function<int32_t(JobIndex)> shared_gpu_of_;
  std::vector<int> open_charged_;                   // per node: shared GPUs charged
  std::unordered_map<JobIndex, NodeIndex> booked_;  // waiting share preemptors: a whole GPU each
  std::unordered_map<JobIndex, Run> running_;
  std::unordered_map<JobIndex, std::string> refusals_;  // the last refusal of each pending job
  std::vector<DomainIndex> over_;
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<AdmissionPlugin>> NewPower(const PluginArgs& args,
                                                  const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"reserve"}));
  GANTRY_ASSIGN_OR_RETURN(const bool reserve, args.Bool("reserve", false));
  return std::unique_ptr<AdmissionPlugin>(new PowerAdmission(ctx, reserve));
}

}  // namespace builtin
}  // namespace gantry
