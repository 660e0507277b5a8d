// Slurm's multifactor priority factors (priority_multifactor.html), as PriorityFactor plugins:
//   fairtree        Fair Tree fair share per user within account (fair_tree.h): the account
//                   tree is the cluster spec's teams with their `parent` links, the users are
//                   the users who submit (with the spec's per-user shares). Usage is GPU-seconds
//                   times the job's QOS UsageFactor, decayed with half_life
//                   (PriorityDecayHalfLife; 0 = no decay) and cleared every reset_period
//                   (PriorityUsageResetPeriod). Its value moves per user, so the engine re-keys
//                   pending jobs after each recalculation (priority_recalc_interval, Slurm's
//                   PriorityCalcPeriod).
//   slurm-job-size  (min_nodes / nodes + cpus / cluster CPUs) / 2, or the favor_small mirror
//                   (PriorityFavorSmall). min_nodes is the gang's node count, or for an "any"
//                   job the fewest nodes that could hold it; a job's CPUs are its GPUs times the
//                   cluster's CPUs per GPU (the usual GPU-cluster binding); with no CPUs in the
//                   spec the factor is nodes only, as Slurm's is for a job with no CPU count.
//   partition       the job's partition (queue) PriorityJobFactor / the highest of them; the
//                   priorities come from the `priorities` argument ("gpu:10, debug:20"); an
//                   unlisted partition has 1, Slurm's default.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <unordered_map>

#include "builtin_plugins.h"
#include "fair_tree.h"
#include "slurm_priority.h"

namespace gantry {
namespace {

class FairTreeFactor final : public PriorityFactor {
 public:
  FairTreeFactor(const PluginContext& ctx, Duration half_life, Duration reset_period)
      : cluster_(*ctx.cluster),
        teams_(*ctx.teams),
        users_(ctx.users),
        half_life_(static_cast<double>(half_life)),
        reset_period_(reset_period) {
    // Accounts: every engine team, with its ancestors from the spec. Spec teams that no engine
    // team descends from have no jobs and no users: they would not change any rank.
    team_node_.assign(teams_.size(), -1);
    for (size_t t = 0; t < teams_.size(); ++t) {
      team_node_[t] = AccountNode(teams_[t].name, teams_[t].shares, 0);
      if (const Account* a = cluster_.FindAccount(teams_[t].name)) {
        for (const UserShares& u : a->users) Association(static_cast<int>(t), u.user, u.shares);
      }
    }
    Recompute();
  }

  std::string_view name() const override { return "fairtree"; }
  bool job_value_changes() const override { return true; }

  double JobValue(const JobRequest& job) const override {
    const int a = AssociationOf(job);
    if (dirty_) Recompute();
    return tree_.factor(assocs_[a].node);
  }

  void OnJobStarted(const JobRequest& job, Time now) override {
    Assoc& a = assocs_[AssociationOf(job)];
    Advance(a, now);
    a.running += GpusUsed(job) * UsageFactor(job);  // a share: its fraction
  }
  void OnJobEnded(const JobRequest& job, Time now) override {
    Assoc& a = assocs_[AssociationOf(job)];
    Advance(a, now);
    a.running -= GpusUsed(job) * UsageFactor(job);
  }
  void Refresh(Time now, const TeamUsageView&) override {
    for (Assoc& a : assocs_) Advance(a, now);
    Recompute();
  }

  std::string Describe(const JobRequest& job) const override {
    const int a = AssociationOf(job);
    if (dirty_) Recompute();
    const int node = assocs_[a].node;
    char buf[160];
    std::snprintf(buf, sizeof buf, "fairtree=%.4f (rank %d of %d users, level FS %.4g)",
                  tree_.factor(node), tree_.rank(node), tree_.user_count(), tree_.level_fs(node));
    return buf;
  }

 private:
  struct Assoc {
    int node;            // the user's node in tree_
    double running = 0;  // GPUs running now, times their QOS usage factor
    double usage = 0;    // decayed GPU-seconds as of `updated`
    Time updated = 0;
  };

  // The tree node of account `name`, created with its ancestors on first use.
  int AccountNode(const std::string& name, double shares, int depth) {
    if (auto it = account_node_.find(name); it != account_node_.end()) return it->second;
    int parent = FairTree::kRoot;
    const Account* a = cluster_.FindAccount(name);
    if (a != nullptr && !a->parent.empty() && depth <= static_cast<int>(cluster_.teams().size())) {
      const int p = cluster_.FindTeam(a->parent);
      parent = AccountNode(a->parent, p >= 0 ? cluster_.teams()[p].shares : 1.0, depth + 1);
    }
    const int node = tree_.AddAccount(name, parent, shares);
    account_node_.emplace(name, node);
    return node;
  }

  int Association(int team, const std::string& user, double shares) const {
    const auto key = std::make_pair(team, user);
    if (auto it = assoc_index_.find(key); it != assoc_index_.end()) return it->second;
    const int node = tree_.AddUser(user, team_node_[team], shares);
    assocs_.push_back({node});
    assoc_index_.emplace(key, static_cast<int>(assocs_.size()) - 1);
    dirty_ = true;  // one more user: every rank / users changes
    return static_cast<int>(assocs_.size()) - 1;
  }

  // The job's (team, user) association; a user the spec does not list joins with 1 share.
  int AssociationOf(const JobRequest& job) const {
    const auto key = std::make_pair(job.team, job.user);
    if (auto it = by_index_.find(key); it != by_index_.end()) return it->second;
    const std::string user =
        users_ != nullptr && job.user >= 0 && static_cast<size_t>(job.user) < users_->size()
            ? (*users_)[job.user]
            : "user" + std::to_string(job.user);
    double shares = 1.0;
    if (const Account* a = cluster_.FindAccount(teams_[job.team].name)) {
      for (const UserShares& u : a->users) {
        if (u.user == user) shares = u.shares;
      }
    }
    const int a = Association(job.team, user, shares);
    by_index_.emplace(key, a);
    return a;
  }

  double UsageFactor(const JobRequest& job) const {
    const Qos* q = cluster_.FindQos(job.qos);
    return q != nullptr ? q->usage_factor : 1.0;
  }

  // Brings one association's usage to `now`: decay by 2^(-dt/h) and add what ran meanwhile,
  // U(t) = U(t0) d + R h/ln2 (1 - d) (the continuous form of Slurm's per-period decay); with no
  // decay (half_life 0) U grows by R dt. Usage is cleared at each multiple of reset_period: what
  // accrued before the last boundary is gone, accrual restarts there. O(1), lazily per event.
  void Advance(Assoc& a, Time now) const {
    if (reset_period_ > 0) {
      const Time boundary = now - ((now % reset_period_) + reset_period_) % reset_period_;
      if (a.updated < boundary) {
        a.usage = 0;
        a.updated = boundary;
      }
    }
    const double dt = static_cast<double>(now - a.updated);
    if (dt <= 0) return;
    if (half_life_ > 0) {
      const double decay = std::exp2(-dt / half_life_);
      a.usage = a.usage * decay + a.running * (half_life_ / std::log(2.0)) * (1.0 - decay);
    } else {
      a.usage += a.running * dt;
    }
    a.updated = now;
  }

  void Recompute() const {
    for (const Assoc& a : assocs_) tree_.set_usage(a.node, a.usage);
    tree_.Compute();
    dirty_ = false;
  }

  struct PairHash {
    template <class A, class B>
    size_t operator()(const std::pair<A, B>& p) const {
      return std::hash<A>()(p.first) * 1000003u ^ std::hash<B>()(p.second);
    }
  };

  const Cluster& cluster_;
  const std::vector<Team>& teams_;
  const std::vector<std::string>* users_;
  double half_life_;
  Duration reset_period_;
  std::vector<int> team_node_;
  std::unordered_map<std::string, int> account_node_;
  // Associations appear when a job of a new (team, user) is first seen, from const JobValue.
  mutable FairTree tree_;
  mutable std::vector<Assoc> assocs_;
  mutable std::unordered_map<std::pair<int, std::string>, int, PairHash> assoc_index_;
  mutable std::unordered_map<std::pair<int, int>, int, PairHash> by_index_;
  mutable bool dirty_ = true;
};

class SlurmJobSize final : public PriorityFactor {
 public:
  SlurmJobSize(const Cluster& cluster, bool favor_small)
      : favor_small_(favor_small),
        nodes_(static_cast<int64_t>(cluster.nodes().size())),
        max_gpus_per_node_(std::max(1, cluster.max_gpus_per_node())) {
    int64_t gpus = 0;
    for (const Node& n : cluster.nodes()) {
      cpus_ += n.cpus;
      gpus += n.gpus;
    }
    cpus_per_gpu_ = gpus > 0 ? static_cast<double>(cpus_) / static_cast<double>(gpus) : 0;
  }
  std::string_view name() const override { return "slurm-job-size"; }
  double JobValue(const JobRequest& job) const override {
    const int64_t min_nodes =
        job.nodes > 0 ? job.nodes : (job.gpus + max_gpus_per_node_ - 1) / max_gpus_per_node_;
    const auto cpus = static_cast<int64_t>(std::llround(job.gpus * cpus_per_gpu_));
    return SlurmJobSizeFactor(min_nodes, cpus_ > 0 ? cpus : 0, nodes_, cpus_, favor_small_);
  }

 private:
  bool favor_small_;
  int64_t nodes_;
  int max_gpus_per_node_;
  int64_t cpus_ = 0;
  double cpus_per_gpu_ = 0;
};

class PartitionFactor final : public PriorityFactor {
 public:
  explicit PartitionFactor(std::vector<double> value) : value_(std::move(value)) {}
  std::string_view name() const override { return "partition"; }
  double JobValue(const JobRequest& job) const override {
    if (job.queue < 0 || static_cast<size_t>(job.queue) >= value_.size()) return default_;
    return value_[job.queue];
  }
  void set_default(double v) { default_ = v; }

 private:
  std::vector<double> value_;
  double default_ = 1.0;
};

// Parses "name:number, name:number".
Result<std::map<std::string, double>> ParsePairs(const std::string& plugin, const std::string& arg,
                                                 const std::string& text) {
  std::map<std::string, double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t") + 1);
      return s;
    };
    item = trim(item);
    if (item.empty()) continue;
    const size_t colon = item.rfind(':');
    char* end = nullptr;
    const std::string number = colon == std::string::npos ? "" : trim(item.substr(colon + 1));
    const double v = std::strtod(number.c_str(), &end);
    if (colon == std::string::npos || number.empty() || *end != '\0' || v < 0) {
      return InvalidArgument("plugin '" + plugin + "': argument '" + arg +
                             "': expected \"name:number, ...\" with numbers >= 0, got \"" + item +
                             "\"");
    }
    out[trim(item.substr(0, colon))] = v;
  }
  return out;
}

}  // namespace

namespace builtin {

Result<std::unique_ptr<PriorityFactor>> NewFairTree(const PluginArgs& args,
                                                    const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"half_life", "reset_period"}));
  GANTRY_ASSIGN_OR_RETURN(Duration half_life, args.DurationArg("half_life", 7 * 86400));
  if (half_life < 0 || half_life >= kInfiniteTime) {
    return InvalidArgument(
        "plugin 'fairtree': half_life must be 0 (no decay) or a finite duration");
  }
  GANTRY_ASSIGN_OR_RETURN(std::string reset, args.String("reset_period", "none"));
  Duration reset_period = 0;
  if (reset == "daily") {
    reset_period = 86400;
  } else if (reset == "weekly") {
    reset_period = 7 * 86400;
  } else if (reset != "none") {
    GANTRY_ASSIGN_OR_RETURN(reset_period, args.DurationArg("reset_period", 0));
    if (reset_period <= 0 || reset_period >= kInfiniteTime) {
      return InvalidArgument(
          "plugin 'fairtree': reset_period must be none, daily, weekly or a positive duration");
    }
  }
  if (half_life == 0 && reset_period == 0) {
    return InvalidArgument(
        "plugin 'fairtree': with no decay (half_life 0) usage must be reset (reset_period), as "
        "Slurm requires");
  }
  return std::unique_ptr<PriorityFactor>(new FairTreeFactor(ctx, half_life, reset_period));
}

Result<std::unique_ptr<PriorityFactor>> NewSlurmJobSize(const PluginArgs& args,
                                                        const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"favor_small"}));
  GANTRY_ASSIGN_OR_RETURN(bool favor_small, args.Bool("favor_small", false));
  return std::unique_ptr<PriorityFactor>(new SlurmJobSize(*ctx.cluster, favor_small));
}

Result<std::unique_ptr<PriorityFactor>> NewPartition(const PluginArgs& args,
                                                     const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"priorities"}));
  GANTRY_ASSIGN_OR_RETURN(std::string text, args.String("priorities", ""));
  GANTRY_ASSIGN_OR_RETURN(auto priorities, ParsePairs("partition", "priorities", text));
  double max = 1.0;  // an unlisted partition has PriorityJobFactor 1
  for (const auto& [name, p] : priorities) max = std::max(max, p);
  std::vector<double> value;
  if (ctx.queues != nullptr) {
    for (const std::string& q : *ctx.queues) {
      auto it = priorities.find(q);
      value.push_back((it == priorities.end() ? 1.0 : it->second) / max);
    }
  }
  auto f = std::make_unique<PartitionFactor>(std::move(value));
  f->set_default(1.0 / max);
  return std::unique_ptr<PriorityFactor>(std::move(f));
}

}  // namespace builtin
}  // namespace gantry
