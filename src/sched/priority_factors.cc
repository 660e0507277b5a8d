// Built-in priority factors (queue ordering). With Slurm's multifactor plugin as the model:
//   age        min(wait, max_age) / max_age; with max_age = inf, wait / 1 day (plain FIFO)
//   fairshare  2^(-U/S): U = the team's share of decayed GPU usage (half-life), S = its share of
//              all teams' shares (quota by default). 1 for an idle team, 0.5 at exactly its share
//   job-size   gpus / cluster GPUs (or 1 minus that with favor_small)
//   qos        min(qos, max_qos) / max_qos; when the cluster spec defines QOS, Slurm's factor
//              instead: the job's QOS priority / the highest QOS priority (0 for an unknown level)
//   oracle-runtime  -run_time / 1 day: shortest job first. An ORACLE: reads the true run time,
//                   which no real scheduler knows, from the RuntimeOracle (registry.h) only
//                   the simulator provides; for upper-bound comparisons only
//   oracle-service  -(gpus * run_time) / 1 GPU-day: smallest service first (Tiresias-style),
//                   also an oracle. Without preemption a job's remaining service is its whole
//                   service, so this is also shortest-remaining-service-first.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "builtin_plugins.h"

namespace gantry {
namespace {

class AgeFactor final : public PriorityFactor {
 public:
  explicit AgeFactor(Duration max_age) : max_age_(max_age) {}
  std::string_view name() const override { return "age"; }
  Duration max_age() const override { return max_age_; }
  std::string Describe(const JobRequest& job) const override { return "age"; }

 private:
  Duration max_age_;
};

class FairShareFactor final : public PriorityFactor {
 public:
  FairShareFactor(Duration half_life, size_t teams)
      : half_life_(static_cast<double>(half_life)),
        usage_(teams, 0.0),
        running_(teams, 0),
        updated_(teams, 0),
        value_(teams, 1.0),
        shares_(teams, 1.0) {}

  std::string_view name() const override { return "fairshare"; }
  double TeamValue(int team) const override { return value_[team]; }

  void OnJobStarted(const JobRequest& job, Time now) override {
    Advance(job.team, now);
    running_[job.team] += GpusUsed(job);  // a share counts its fraction of a GPU
  }
  void OnJobEnded(const JobRequest& job, Time now) override {
    Advance(job.team, now);
    running_[job.team] -= GpusUsed(job);
  }

  void Refresh(Time now, const TeamUsageView& view) override {
    const auto& teams = *view.teams;
    double total_usage = 0, total_shares = 0;
    for (size_t t = 0; t < usage_.size(); ++t) {
      Advance(static_cast<int>(t), now);
      total_usage += usage_[t];
      shares_[t] = teams[t].shares > 0 ? teams[t].shares : 1.0;
      total_shares += shares_[t];
    }
    for (size_t t = 0; t < usage_.size(); ++t) {
      if (total_usage <= 0) {
        value_[t] = 1.0;
        continue;
      }
      const double u = usage_[t] / total_usage;
      const double s = shares_[t] / total_shares;
      value_[t] = std::exp2(-u / s);
    }
  }

  std::string Describe(const JobRequest& job) const override {
    char buf[128];
    std::snprintf(buf, sizeof buf, "fairshare=%.4f (team decayed usage %.0f GPU-h)",
                  value_[job.team], usage_[job.team] / 3600.0);
    return buf;
  }

 private:
  // Decays the team's usage to `now` and adds what its running GPUs used meanwhile:
  // U(t) = U(t0) d + R * h/ln2 * (1 - d), with d = 2^(-(t - t0)/h).
  void Advance(int team, Time now) {
    const double dt = static_cast<double>(now - updated_[team]);
    if (dt <= 0) return;
    const double decay = std::exp2(-dt / half_life_);
    usage_[team] =
        usage_[team] * decay + running_[team] * (half_life_ / std::log(2.0)) * (1.0 - decay);
    updated_[team] = now;
  }

  double half_life_;
  std::vector<double> usage_;    // decayed GPU-seconds
  std::vector<double> running_;  // GPUs in use now
  std::vector<Time> updated_;
  std::vector<double> value_;
  std::vector<double> shares_;
};

class JobSizeFactor final : public PriorityFactor {
 public:
  JobSizeFactor(bool favor_small, int cluster_gpus)
      : favor_small_(favor_small), cluster_gpus_(cluster_gpus > 0 ? cluster_gpus : 1) {}
  std::string_view name() const override { return "job-size"; }
  double JobValue(const JobRequest& job) const override {
    const double f = std::min(1.0, static_cast<double>(job.gpus) / cluster_gpus_);
    return favor_small_ ? 1.0 - f : f;
  }

 private:
  bool favor_small_;
  int cluster_gpus_;
};

class QosFactor final : public PriorityFactor {
 public:
  QosFactor(int max_qos, const Cluster& cluster)
      : max_qos_(max_qos > 0 ? max_qos : 1), cluster_(cluster) {
    for (const Qos& q : cluster.qos()) max_priority_ = std::max(max_priority_, q.priority);
  }
  std::string_view name() const override { return "qos"; }
  double JobValue(const JobRequest& job) const override {
    // With QOS in the cluster spec, Slurm's factor: the QOS priority over the highest of them.
    if (!cluster_.qos().empty()) {
      const Qos* q = cluster_.FindQos(job.qos);
      if (q == nullptr || max_priority_ <= 0) return 0;
      return static_cast<double>(q->priority) / static_cast<double>(max_priority_);
    }
    return std::clamp(static_cast<double>(job.qos) / max_qos_, 0.0, 1.0);
  }

 private:
  int max_qos_;
  const Cluster& cluster_;
  int64_t max_priority_ = 0;
};

class OracleFactor final : public PriorityFactor {
 public:
  OracleFactor(bool by_service, const RuntimeOracle& oracle)
      : by_service_(by_service), oracle_(oracle) {}
  std::string_view name() const override {
    return by_service_ ? "oracle-service" : "oracle-runtime";
  }
  double JobValue(const JobRequest& job) const override {
    const double run = static_cast<double>(oracle_.TrueRunTime(job)) / 86400.0;
    return by_service_ ? -run * job.gpus : -run;
  }

 private:
  bool by_service_;
  const RuntimeOracle& oracle_;
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<PriorityFactor>> NewAge(const PluginArgs& args, const PluginContext&) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"max_age"}));
  GANTRY_ASSIGN_OR_RETURN(Duration max_age, args.DurationArg("max_age", 7 * 86400));
  if (max_age <= 0) return InvalidArgument("plugin 'age': max_age must be positive");
  return std::unique_ptr<PriorityFactor>(new AgeFactor(max_age));
}

Result<std::unique_ptr<PriorityFactor>> NewFairShare(const PluginArgs& args,
                                                     const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"half_life"}));
  GANTRY_ASSIGN_OR_RETURN(Duration half_life, args.DurationArg("half_life", 7 * 86400));
  if (half_life <= 0 || half_life >= kInfiniteTime) {
    return InvalidArgument("plugin 'fairshare': half_life must be a positive, finite duration");
  }
  return std::unique_ptr<PriorityFactor>(new FairShareFactor(half_life, ctx.teams->size()));
}

Result<std::unique_ptr<PriorityFactor>> NewJobSize(const PluginArgs& args,
                                                   const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"favor_small"}));
  GANTRY_ASSIGN_OR_RETURN(bool favor_small, args.Bool("favor_small", false));
  return std::unique_ptr<PriorityFactor>(new JobSizeFactor(favor_small, ctx.cluster->total_gpus()));
}

Result<std::unique_ptr<PriorityFactor>> NewQos(const PluginArgs& args, const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"max_qos"}));
  GANTRY_ASSIGN_OR_RETURN(int64_t max_qos, args.Integer("max_qos", 3));
  return std::unique_ptr<PriorityFactor>(new QosFactor(static_cast<int>(max_qos), *ctx.cluster));
}

namespace {

Result<std::unique_ptr<PriorityFactor>> NewOracle(const PluginArgs& args, const PluginContext& ctx,
                                                  bool by_service) {
  const char* name = by_service ? "oracle-service" : "oracle-runtime";
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  if (ctx.oracle == nullptr) {
    return FailedPrecondition(std::string("plugin '") + name +
                              "' is an oracle: it reads true run times, which only the trace "
                              "simulator knows, and this driver provides no RuntimeOracle");
  }
  return std::unique_ptr<PriorityFactor>(new OracleFactor(by_service, *ctx.oracle));
}

}  // namespace

Result<std::unique_ptr<PriorityFactor>> NewOracleRuntime(const PluginArgs& args,
                                                         const PluginContext& ctx) {
  return NewOracle(args, ctx, false);
}

Result<std::unique_ptr<PriorityFactor>> NewOracleService(const PluginArgs& args,
                                                         const PluginContext& ctx) {
  return NewOracle(args, ctx, true);
}

}  // namespace builtin
}  // namespace gantry
