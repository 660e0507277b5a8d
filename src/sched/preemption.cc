// Built-in preemption plugins: the order in which running jobs are preempted, whether a job may
// be preempted yet, and preemption by priority or QoS for a blocked job.
//
// "kueue-order": victims in Kueue's order (most recently started first, among those admission
// ranks alike): the order that needs no knowledge of checkpoints.
//
// "checkpoint-aware": victims cheapest first, where the cost of preempting a running job is
//
//     cost = GPUs x (work lost since its last checkpoint + its restart cost)
//
// in GPU-seconds. The model is the simulator's (sim/failures.h, CheckpointModel): a run that
// resumed from a checkpoint first spends its restart cost loading it; after that the job
// checkpoints every `interval` seconds of useful work (its own JobRequest::checkpoint_interval,
// else the plugin's default_interval, which should match the simulator's --checkpoint-model).
// A job that checkpointed a moment ago is therefore nearly free to preempt; one just before its
// next checkpoint costs a whole interval of work on every GPU. With GraceTime the victim saves a
// final checkpoint when signalled, so it loses only what it does during the grace. The restart
// cost is the job's own JobRequest::restart_cost when it declares one; else it depends on where
// its checkpoint is restored from (argument `tier`): node-local NVMe (`local`, restart_local,
// default 60 s: the preempted job restarts where its shards are cached), a peer's memory or disk
// (`peer`, restart_peer, 120 s: Gemini-style replicas pulled over the network), or the durable
// tier (`durable`, the default; restart_durable, 300 s: S3/Ceph, the simulator's default
// restart cost).
//
// Victims are taken in order of cost per GPU they free (per_gpu: true, the default): the
// preemptor needs GPUs, and the cheapest GPUs are those of jobs that just checkpointed, whatever
// their size. per_gpu: false orders by total cost, which favours small victims and then needs
// more of them; on the Philly comparison (docs/scheduling.md) it saves less.
//
// Both take the common arguments:
//   mode            none | priority | qos | fairshare: what SelectVictims offers a blocked job.
//                   priority: any running job of a lower QoS level; qos: jobs whose QOS is in
//                   the blocked job's QOS preempt list (cluster spec `qos[].preempt`, Slurm's
//                   PreemptType=preempt/qos); fairshare: jobs of other teams that would still
//                   hold at least as many GPUs per share as the blocked job's team holds with
//                   it (Kueue's LessThanOrEqualToFinalShare on a shared pool, below). none
//                   (default): only admission preempts.
//   min_run_time    Slurm's PreemptExemptTime: younger runs are never victims. Default 0.
//   grace_time      Slurm's GraceTime: a victim is signalled and runs on this long before the
//                   preemptor gets its GPUs (engine.h). Default 0.
//   max_preemptions a job preempted this often is no victim any more (default 5, as the
//                   kueue plugin's); a job never preempts a job that preempted it.
#include <algorithm>
#include <cmath>

#include "builtin_plugins.h"

namespace gantry {
namespace {

enum class Mode : uint8_t { kNone, kPriority, kQos, kFairShare };

struct CommonArgs {
  Mode mode = Mode::kNone;
  Duration min_run_time = 0;
  Duration grace_time = 0;
  int max_preemptions = 5;
};

// Keeps what every preemption plugin needs to know of running jobs.
class TrackingPreemption : public PreemptionPlugin {
 public:
  TrackingPreemption(const PluginContext& ctx, CommonArgs args)
      : cluster_(*ctx.cluster), args_(args) {
    if (ctx.teams != nullptr) {
      for (const Team& t : *ctx.teams) shares_.push_back(t.shares > 0 ? t.shares : 1.0);
    }
  }

  bool preempts() const override { return args_.mode != Mode::kNone; }
  bool orders_victims() const override { return true; }
  Duration min_run_time() const override { return args_.min_run_time; }
  Duration grace_time() const override { return args_.grace_time; }
  Duration GraceTimeOf(const JobRequest& victim) const override {
    const Qos* q = cluster_.FindQos(victim.qos);
    return q != nullptr && q->grace_time != kQosGraceUnset ? q->grace_time : args_.grace_time;
  }

  bool MayPreempt(JobIndex v, JobIndex preemptor, Time now) const override {
    if (static_cast<size_t>(v) >= runs_.size() || !runs_[v].running) return false;
    const Run& r = runs_[v];
    if (!r.job->preemptible) return false;
    if (now - r.start < args_.min_run_time) return false;
    if (static_cast<int>(r.preempted_by.size()) >= args_.max_preemptions) return false;
    if (static_cast<size_t>(preemptor) < runs_.size()) {
      const std::vector<JobIndex>& mine = runs_[preemptor].preempted_by;
      if (std::find(mine.begin(), mine.end(), v) != mine.end()) return false;
    }
    return true;
  }

  std::vector<JobIndex> SelectVictims(const JobRequest& blocked, Time now) override {
    std::vector<JobIndex> out;
    if (args_.mode == Mode::kNone) return out;
    if (args_.mode == Mode::kFairShare) return FairShareVictims(blocked, now);
    const Qos* mine = args_.mode == Mode::kQos ? cluster_.FindQos(blocked.qos) : nullptr;
    if (args_.mode == Mode::kQos && (mine == nullptr || mine->preempt.empty())) return out;
    for (JobIndex v : running_) {
      const JobRequest& job = *runs_[v].job;
      if (args_.mode == Mode::kPriority) {
        if (job.qos >= blocked.qos) continue;
      } else {
        const Qos* theirs = cluster_.FindQos(job.qos);
        if (theirs == nullptr || std::find(mine->preempt.begin(), mine->preempt.end(),
                                           theirs->name) == mine->preempt.end()) {
          continue;
        }
      }
      if (MayPreempt(v, blocked.index, now)) out.push_back(v);
    }
    // Lowest QoS first (Slurm preempts the least important jobs first), then this plugin's order.
    std::sort(out.begin(), out.end(), [&](JobIndex a, JobIndex b) {
      const int qa = runs_[a].job->qos, qb = runs_[b].job->qos;
      if (qa != qb) return qa < qb;
      const double ka = VictimKey(a, now), kb = VictimKey(b, now);
      if (ka != kb) return ka < kb;
      return a > b;
    });
    return out;
  }

  void OnJobStarted(const JobRequest& job, Time start, bool resumed) override {
    if (static_cast<size_t>(job.index) >= runs_.size()) runs_.resize(job.index + 1);
    TeamGpus(job.team) += job.gpus;
    Run& r = runs_[job.index];
    r.job = &job;
    r.start = start;
    r.resumed = resumed;
    r.running = true;
    r.slot = running_.size();
    running_.push_back(job.index);
  }
  void OnJobEnded(const JobRequest& job, Time) override {
    if (static_cast<size_t>(job.index) >= runs_.size() || !runs_[job.index].running) return;
    Run& r = runs_[job.index];
    r.running = false;
    TeamGpus(job.team) -= job.gpus;
    const JobIndex last = running_.back();
    running_[r.slot] = last;
    runs_[last].slot = r.slot;
    running_.pop_back();
  }
  void OnPreempted(JobIndex victim, JobIndex preemptor, Time) override {
    if (static_cast<size_t>(victim) >= runs_.size()) runs_.resize(victim + 1);
    runs_[victim].preempted_by.push_back(preemptor);
  }

 protected:
  struct Run {
    const JobRequest* job = nullptr;
    Time start = 0;
    bool resumed = false;
    bool running = false;
    size_t slot = 0;                     // position in running_
    std::vector<JobIndex> preempted_by;  // every job that preempted it, in order
  };
  const Run* RunOf(JobIndex v) const {
    return static_cast<size_t>(v) < runs_.size() && runs_[v].running ? &runs_[v] : nullptr;
  }

  const Cluster& cluster_;
  const CommonArgs args_;
  std::vector<Run> runs_;  // per job index
  std::vector<JobIndex> running_;

 private:
  int64_t& TeamGpus(int team) {
    if (static_cast<size_t>(team) >= team_gpus_.size()) team_gpus_.resize(team + 1, 0);
    return team_gpus_[team];
  }
  double Shares(int team) const {
    return static_cast<size_t>(team) < shares_.size() ? shares_[team] : 1.0;
  }

  // Fair-share preemption on a shared pool. The blocked job's team would hold
  // `mine` = (its GPUs + the job's) / its shares. A running job of another team is a victim
  // only if its team, without it (and without the victims listed before it), still holds at
  // least `mine` per share: then the preemption never leaves the victim's team below the
  // preemptor's, so the victim's team cannot preempt back for the same GPUs (no thrash), and
  // every preemption moves the allocation toward the weighted max-min fair one. Victims come
  // from the team furthest above `mine` first, cheapest (VictimKey) first within a team; the
  // engine takes the shortest prefix with which the job fits, so every prefix is valid.
  std::vector<JobIndex> FairShareVictims(const JobRequest& blocked, Time now) {
    std::vector<JobIndex> out;
    const double mine =
        static_cast<double>(TeamGpus(blocked.team) + blocked.gpus) / Shares(blocked.team);
    std::vector<std::vector<JobIndex>> by_team(team_gpus_.size());
    for (JobIndex v : running_) {
      const int team = runs_[v].job->team;
      if (team == blocked.team) continue;
      if (static_cast<double>(team_gpus_[team]) / Shares(team) <= mine) continue;
      if (MayPreempt(v, blocked.index, now)) by_team[team].push_back(v);
    }
    std::vector<int64_t> left = team_gpus_;
    for (auto& jobs : by_team) {
      std::sort(jobs.begin(), jobs.end(), [&](JobIndex a, JobIndex b) {
        const double ka = VictimKey(a, now), kb = VictimKey(b, now);
        return ka != kb ? ka < kb : a > b;
      });
    }
    while (true) {
      int best = -1;
      size_t pick = 0;
      double best_share = mine;
      for (size_t t = 0; t < by_team.size(); ++t) {
        const double share = static_cast<double>(left[t]) / Shares(static_cast<int>(t));
        if (share <= best_share) continue;
        for (size_t i = 0; i < by_team[t].size(); ++i) {
          const int gpus = runs_[by_team[t][i]].job->gpus;
          if (static_cast<double>(left[t] - gpus) / Shares(static_cast<int>(t)) >= mine) {
            best = static_cast<int>(t);
            pick = i;
            best_share = share;
            break;
          }
        }
      }
      if (best < 0) return out;
      const JobIndex v = by_team[best][pick];
      by_team[best].erase(by_team[best].begin() + static_cast<std::ptrdiff_t>(pick));
      left[best] -= runs_[v].job->gpus;
      out.push_back(v);
    }
  }

  std::vector<double> shares_;      // per team, from the cluster spec (1 when unset)
  std::vector<int64_t> team_gpus_;  // GPUs each team's running jobs hold
};

class KueueOrder final : public TrackingPreemption {
 public:
  using TrackingPreemption::TrackingPreemption;
  std::string_view name() const override { return "kueue-order"; }
  // Most recently started first.
  double VictimKey(JobIndex v, Time) const override {
    const Run* r = RunOf(v);
    return r ? -static_cast<double>(r->start) : 0;
  }
};

enum class Tier : uint8_t { kLocal, kPeer, kDurable };

struct CheckpointArgs {
  Duration default_interval = 3600;
  Tier tier = Tier::kDurable;
  Duration restart_local = 60;
  Duration restart_peer = 120;
  Duration restart_durable = 300;
  bool per_gpu = true;
};

class CheckpointAware final : public TrackingPreemption {
 public:
  CheckpointAware(const PluginContext& ctx, CommonArgs common, CheckpointArgs args)
      : TrackingPreemption(ctx, common), ck_(args) {}
  std::string_view name() const override { return "checkpoint-aware"; }

  double VictimKey(JobIndex v, Time now) const override {
    const Run* r = RunOf(v);
    if (r == nullptr) return 0;
    const Duration restart = RestartCost(*r->job);
    const double per_gpu = static_cast<double>(LostWork(*r, now) + restart);
    return ck_.per_gpu ? per_gpu : per_gpu * r->job->gpus;
  }

 private:
  Duration RestartCost(const JobRequest& job) const {
    if (job.restart_cost > 0) return job.restart_cost;
    switch (ck_.tier) {
      case Tier::kLocal:
        return ck_.restart_local;
      case Tier::kPeer:
        return ck_.restart_peer;
      case Tier::kDurable:
        break;
    }
    return ck_.restart_durable;
  }

  // Seconds of useful work the run would lose if signalled at `now`: since its last periodic
  // checkpoint, or with GraceTime, the work it does after its final checkpoint at the signal
  // (the simulator's model, sim/simulator.cc).
  Duration LostWork(const Run& r, Time now) const {
    const JobRequest& job = *r.job;
    const Duration interval =
        job.checkpoint_interval > 0 ? job.checkpoint_interval : ck_.default_interval;
    const Duration overhead = r.resumed ? RestartCost(job) : 0;
    const auto useful_at = [&](Time t) { return std::max<Duration>(0, t - r.start - overhead); };
    const Duration grace = GraceTimeOf(job);
    const Duration useful = useful_at(now + grace);
    if (interval <= 0) return useful;
    Duration saved = useful / interval * interval;
    if (grace > 0) saved = std::max(saved, useful_at(now));
    return useful - saved;
  }

  const CheckpointArgs ck_;
};

Result<CommonArgs> ParseCommon(const PluginArgs& args, const std::string& plugin) {
  CommonArgs c;
  GANTRY_ASSIGN_OR_RETURN(const std::string mode, args.String("mode", "none"));
  if (mode == "none") {
    c.mode = Mode::kNone;
  } else if (mode == "priority") {
    c.mode = Mode::kPriority;
  } else if (mode == "qos") {
    c.mode = Mode::kQos;
  } else if (mode == "fairshare") {
    c.mode = Mode::kFairShare;
  } else {
    return InvalidArgument("plugin '" + plugin + "': argument 'mode': '" + mode +
                           "' is not one of none, priority, qos, fairshare");
  }
  GANTRY_ASSIGN_OR_RETURN(c.min_run_time, args.DurationArg("min_run_time", 0));
  GANTRY_ASSIGN_OR_RETURN(c.grace_time, args.DurationArg("grace_time", 0));
  if (c.min_run_time < 0 || c.grace_time < 0 || c.min_run_time >= kInfiniteTime ||
      c.grace_time >= kInfiniteTime) {
    return InvalidArgument("plugin '" + plugin +
                           "': min_run_time and grace_time must be finite and not negative");
  }
  GANTRY_ASSIGN_OR_RETURN(const int64_t max_preemptions, args.Integer("max_preemptions", 5));
  if (max_preemptions < 0 || max_preemptions > 1000000) {
    return InvalidArgument("plugin '" + plugin +
                           "': argument 'max_preemptions' must be in [0, 1000000]");
  }
  c.max_preemptions = static_cast<int>(max_preemptions);
  return c;
}

const std::vector<std::string> kCommonArgs = {"mode", "min_run_time", "grace_time",
                                              "max_preemptions"};

}  // namespace

namespace builtin {

Result<std::unique_ptr<PreemptionPlugin>> NewKueueOrder(const PluginArgs& args,
                                                        const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown(kCommonArgs));
  GANTRY_ASSIGN_OR_RETURN(const CommonArgs common, ParseCommon(args, "kueue-order"));
  return std::unique_ptr<PreemptionPlugin>(new KueueOrder(ctx, common));
}

Result<std::unique_ptr<PreemptionPlugin>> NewCheckpointAware(const PluginArgs& args,
                                                             const PluginContext& ctx) {
  std::vector<std::string> known = kCommonArgs;
  for (const char* k : {"default_interval", "tier", "restart_local", "restart_peer",
                        "restart_durable", "per_gpu"}) {
    known.emplace_back(k);
  }
  GANTRY_RETURN_IF_ERROR(args.CheckKnown(known));
  GANTRY_ASSIGN_OR_RETURN(const CommonArgs common, ParseCommon(args, "checkpoint-aware"));
  CheckpointArgs ck;
  GANTRY_ASSIGN_OR_RETURN(ck.default_interval, args.DurationArg("default_interval", 3600));
  GANTRY_ASSIGN_OR_RETURN(ck.restart_local, args.DurationArg("restart_local", 60));
  GANTRY_ASSIGN_OR_RETURN(ck.restart_peer, args.DurationArg("restart_peer", 120));
  GANTRY_ASSIGN_OR_RETURN(ck.restart_durable, args.DurationArg("restart_durable", 300));
  GANTRY_ASSIGN_OR_RETURN(ck.per_gpu, args.Bool("per_gpu", true));
  for (Duration d : {ck.default_interval, ck.restart_local, ck.restart_peer, ck.restart_durable}) {
    if (d < 0 || d >= kInfiniteTime) {
      return InvalidArgument(
          "plugin 'checkpoint-aware': intervals and restart costs must be finite and not "
          "negative");
    }
  }
  GANTRY_ASSIGN_OR_RETURN(const std::string tier, args.String("tier", "durable"));
  if (tier == "local") {
    ck.tier = Tier::kLocal;
  } else if (tier == "peer") {
    ck.tier = Tier::kPeer;
  } else if (tier == "durable") {
    ck.tier = Tier::kDurable;
  } else {
    return InvalidArgument("plugin 'checkpoint-aware': argument 'tier': '" + tier +
                           "' is not one of local, peer, durable");
  }
  return std::unique_ptr<PreemptionPlugin>(new CheckpointAware(ctx, common, ck));
}

}  // namespace builtin
}  // namespace gantry
