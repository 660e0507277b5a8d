// The cluster model: GPU types, nodes, the topology tree above the nodes, and teams with quotas.
//
// Nodes are numbered so that every topology domain (an NVLink domain, a rack, a leaf switch, a
// spine...) covers one contiguous range of node indices; placement code relies on that to scan a
// domain as a range. A Cluster is immutable once built (ClusterBuilder) and safe to share between
// threads. Free capacity lives elsewhere (sched::FreeIndex); this is only the shape.
//
//   ClusterBuilder b("tiny", {"leaf", "spine"});
//   auto h100 = b.AddGpuType({"H100", 80, 70, 700});
//   b.OpenDomain("spine0", 1);
//   b.OpenDomain("leaf0", 0);
//   b.AddNode({.name = "n1", .gpu_type = *h100, .gpus = 8});
//   b.CloseDomain(); b.CloseDomain();
//   Result<Cluster> c = std::move(b).Build();
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gantry/common/status.h"

namespace gantry {

using NodeIndex = int32_t;
using DomainIndex = int32_t;
using GpuTypeIndex = int32_t;
inline constexpr int kMaxGpuTypes = 32;  // GPU type sets are 32-bit masks
inline constexpr uint32_t kAnyGpuType = 0xFFFFFFFFu;
inline constexpr int kNoQuota = -1;

struct GpuType {
  std::string name;
  int memory_gb = 0;
  double idle_watts = 0;
  double busy_watts = 0;
  // > 0: each GPU of this type is cut into this many fixed slices (MIG-like), the unit in which
  // GPU shares are placed (the packing experiment, sim/packing.h); 0: shares in milli-GPUs.
  int mig_slices = 0;
};

struct Node {
  std::string name;
  GpuTypeIndex gpu_type = 0;
  int gpus = 0;
  int cpus = 0;
  int64_t memory_mb = 0;
  DomainIndex domain = -1;  // innermost domain holding this node; -1 when the cluster is flat
};

// A topology domain. Level 0 is the innermost level above nodes (Cluster::levels()[0]).
struct Domain {
  std::string name;
  int level = 0;
  DomainIndex parent = -1;
  NodeIndex first_node = 0;  // [first_node, end_node) are the nodes below this domain
  NodeIndex end_node = 0;
  int gpus = 0;  // total GPUs below this domain
};

// A user's fair-share weight inside one team (Slurm: the user association's RawShares).
struct UserShares {
  std::string user;
  double shares = 1.0;
};

// Kueue's ClusterQueue settings of a team, read by the "kueue" admission plugin
// (docs/formats/cluster.md#clusterqueues-and-cohorts). Other plugins ignore them.
enum class WithinClusterQueue : uint8_t { kNever, kLowerPriority, kLowerOrNewerEqualPriority };
enum class ReclaimWithinCohort : uint8_t { kNever, kLowerPriority, kAny };
enum class BorrowWithinCohort : uint8_t { kNever, kLowerPriority };
enum class FlavorFungibility : uint8_t { kBorrow, kPreempt, kTryNextFlavor };
inline constexpr char kAnyFlavor[] = "*";  // a flavor covering every GPU type

// A ClusterQueue's quota on one flavor (a GPU type, or kAnyFlavor).
struct FlavorQuota {
  std::string flavor;
  int nominal = 0;
  int borrowing_limit = kNoQuota;  // most it may use above nominal; kNoQuota: no limit
  int lending_limit = kNoQuota;    // most of its unused nominal others may borrow; kNoQuota: all
};

struct QueueSettings {
  std::string cohort;  // empty: no cohort (borrows and lends nothing)
  // Flavors in the order admission tries them. Empty: quota_gpus on kAnyFlavor (no quota at
  // all when quota_gpus is kNoQuota).
  std::vector<FlavorQuota> quotas;
  WithinClusterQueue within_cluster_queue = WithinClusterQueue::kNever;
  ReclaimWithinCohort reclaim_within_cohort = ReclaimWithinCohort::kNever;
  BorrowWithinCohort borrow_within_cohort = BorrowWithinCohort::kNever;
  int borrow_max_priority = INT32_MAX;  // borrowWithinCohort.maxPriorityThreshold
  FlavorFungibility when_can_borrow = FlavorFungibility::kBorrow;
  FlavorFungibility when_can_preempt = FlavorFungibility::kTryNextFlavor;
  double fair_weight = 1.0;  // fairSharing.weight; 0: always the first to lose borrowed GPUs
};

// A cohort: ClusterQueues (and child cohorts) that lend each other unused nominal quota.
struct Cohort {
  std::string name;
  std::string parent;  // empty: a root cohort
};

// A team (Slurm account, Kueue ClusterQueue, Philly virtual cluster) and its GPU quota.
struct Team {
  std::string name;
  int quota_gpus = kNoQuota;  // hard cap on GPUs in use at once; kNoQuota = shared pool
  double shares = 1.0;        // fair-share weight; defaults to the quota when one is set
  QueueSettings queue{};      // Kueue ClusterQueue settings ("kueue" admission plugin)
};

// Teams' weighted max-min fair shares of `capacity` (water-filling): team t wants at most
// cap[t] (its demand, already limited by its quota) and has weight w[t] > 0; teams with cap 0 get
// 0. `order` receives the teams with cap > 0 in the order they saturate. The one definition of a
// team's entitlement: the share_fairness metric measures against it, and the backfill option
// below_share_first schedules by it.
void WaterFill(double capacity, const std::vector<double>& cap, const std::vector<double>& w,
               std::vector<double>* out, std::vector<int>* order);

// Where a team sits in Slurm's account tree, and its users' shares. Teams form the tree
// through `parent` (empty: a child of the root); a flat list of teams is the one-level tree.
// Fair Tree (src/sched/fair_tree.h) uses each team's `shares` at its level and `users` for the
// users inside it (a user not listed has 1 share). Kept beside Team, not in it, so the many
// `Team{name, quota, shares}` initializers stay as they are.
struct Account {
  std::string team;
  std::string parent;
  std::vector<UserShares> users;
};

// A quality of service (Slurm's QOS): jobs name it by its level (JobRequest::qos); a live job
// that names its QOS (Slurm's squeue) gets its level by Cluster::QosLevel. Its priority
// is normalized by the highest priority of all QOS into the QoS priority factor; usage_factor
// multiplies the fair-share usage its jobs are charged; preempt lists the QOS (by name) its jobs
// may preempt (recorded for preemption policies; the engine's own preemption does not read it).
// grace_time is Slurm's QOS GraceTime: how long a job of this QOS runs on after it is signalled
// for preemption; it belongs to the victim's QOS, as in Slurm. kQosGraceUnset leaves it to the
// profile's preemption plugin (its grace_time argument).
inline constexpr int64_t kQosGraceUnset = -1;
struct Qos {
  std::string name;
  int level = 0;
  int64_t priority = 0;
  double usage_factor = 1.0;
  std::vector<std::string> preempt;
  int64_t grace_time = kQosGraceUnset;  // seconds
};

// The power model and caps of a cluster (docs/formats/cluster.md#power). A GPU's watts come
// from its GpuType (idle_watts, busy_watts); this holds what is cluster-wide. A spec without a
// `power` section has no caps and full clocks: energy is still reported, nothing is limited.
struct PowerSpec {
  double cap_watts = 0;   // the whole cluster's cap; 0: none
  double node_watts = 0;  // each node's draw besides its GPUs (CPUs, memory, NICs, fans)
  // Capped clock: a busy GPU draws max(idle_watts, busy_watts * capped_watts_factor) and every
  // job runs capped_slowdown times as long. 1 and 1: full clocks.
  double capped_watts_factor = 1;
  double capped_slowdown = 1;
  // Each domain's cap (indexed like Cluster::domains()); 0: none. Empty when no domain has one.
  // ClusterBuilder::Build fills it from CapDomainPower and CapLevelPower.
  std::vector<double> domain_cap_watts;
  bool capped_clock() const { return capped_watts_factor != 1 || capped_slowdown != 1; }
  bool has_caps() const { return cap_watts > 0 || !domain_cap_watts.empty(); }
};

class Cluster {
 public:
  const std::string& name() const { return name_; }
  // Names of the topology levels above nodes, innermost first (e.g. {"nvlink", "leaf", "spine"}).
  const std::vector<std::string>& levels() const { return levels_; }
  const std::vector<GpuType>& gpu_types() const { return gpu_types_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Domain>& domains() const { return domains_; }
  // Teams named in the spec with their quotas (may be empty: one shared pool).
  const std::vector<Team>& teams() const { return teams_; }
  // Account-tree entries of the teams that have a parent or users (FindAccount: by team name,
  // or null for a team at the root with no users listed).
  const std::vector<Account>& accounts() const { return accounts_; }
  const Account* FindAccount(const std::string& team) const;
  // QOS the spec defines (may be empty: a job's QoS level is then its own priority).
  const std::vector<Qos>& qos() const { return qos_; }
  // The QOS whose level is `level`, or null.
  const Qos* FindQos(int level) const;
  // The QoS level of a job whose QOS is called `name` (a Slurm job's QOS): the level of the
  // spec's QOS of that name (case-insensitive, as Slurm's QOS names are); 0 for an empty name
  // and for any name the spec does not define. `unknown`, when given, is set to whether `name`
  // is such a name other than Slurm's default QOS "normal" (a QOS the operator forgot to list).
  int QosLevel(std::string_view name, bool* unknown = nullptr) const;
  // Quota applied to a team the spec does not name: kNoQuota unless the spec says otherwise.
  int default_quota_gpus() const { return default_quota_gpus_; }
  // Kueue cohorts named in the spec (cohorts that teams name without listing them are roots).
  const std::vector<Cohort>& cohorts() const { return cohorts_; }
  const PowerSpec& power() const { return power_; }
  // Watts one busy GPU of type `t` draws (at the capped clock when the spec has one).
  double BusyWatts(GpuTypeIndex t) const;
  // What the whole cluster, or one domain, draws with every GPU idle: idle GPUs plus node_watts.
  double IdleWatts() const;
  double IdleWatts(DomainIndex d) const;

  int total_gpus() const { return total_gpus_; }
  int max_gpus_per_node() const { return max_gpus_per_node_; }
  // Total GPUs of the types in `mask`.
  int GpusOfTypes(uint32_t mask) const;
  // Index of the GPU type called `name` (case-insensitive), or -1.
  GpuTypeIndex FindGpuType(const std::string& name) const;
  // Index of the team called `name`, or -1.
  int FindTeam(const std::string& name) const;
  // Ancestors of a node's innermost domain, innermost first; empty for a flat cluster.
  std::vector<DomainIndex> DomainPath(NodeIndex node) const;

 private:
  friend class ClusterBuilder;
  std::string name_;
  std::vector<std::string> levels_;
  std::vector<GpuType> gpu_types_;
  std::vector<Node> nodes_;
  std::vector<Domain> domains_;
  std::vector<Team> teams_;
  std::vector<Account> accounts_;
  std::vector<Qos> qos_;
  std::vector<Cohort> cohorts_;
  PowerSpec power_;
  int default_quota_gpus_ = kNoQuota;
  int total_gpus_ = 0;
  int max_gpus_per_node_ = 0;
};

// Builds a Cluster; domains nest like brackets. Not thread-safe.
class ClusterBuilder {
 public:
  ClusterBuilder(std::string name, std::vector<std::string> levels);

  // Returns the new type's index, or an error for a duplicate name or too many types.
  Result<GpuTypeIndex> AddGpuType(GpuType type);
  // Opens a domain at `level` inside the currently open one (whose level must be higher).
  Status OpenDomain(std::string name, int level);
  Status CloseDomain();
  // Adds a node to the innermost open domain (or to the flat cluster when none is open).
  Status AddNode(Node node);
  Status AddTeam(Team team);
  // The account-tree entry of a team added with AddTeam; parents are checked at Build.
  Status AddAccount(Account account);
  // A QOS; names and levels must be unique, usage_factor >= 0, preempt names checked at Build.
  Status AddQos(Qos qos);
  void AddCohort(Cohort cohort) { cluster_.cohorts_.push_back(std::move(cohort)); }
  void SetDefaultQuota(int gpus) { cluster_.default_quota_gpus_ = gpus; }
  // The power model (its domain_cap_watts is ignored: caps of domains come from the two calls
  // below). Checked at Build: factor in (0, 1], slowdown >= 1, every cap at least the idle draw
  // below it.
  void SetPower(PowerSpec power) { cluster_.power_ = std::move(power); }
  // A cap on the domain called `domain`, or on every domain of level `level`; where several
  // apply to one domain the lowest holds. Names are checked at Build.
  void CapDomainPower(std::string domain, double watts) {
    domain_caps_.emplace_back(std::move(domain), watts);
  }
  void CapLevelPower(std::string level, double watts) {
    level_caps_.emplace_back(std::move(level), watts);
  }

  // Checks the whole (every domain closed, names unique, at least one node) and returns it.
  Result<Cluster> Build() &&;

 private:
  Status BuildPower();

  Cluster cluster_;
  std::vector<std::pair<std::string, double>> domain_caps_, level_caps_;
  std::vector<DomainIndex> open_;
  Status first_error_;
};

// Reads a cluster spec (YAML, format in docs/formats/cluster.md) or expands a shorthand such as
// "dgx-h100:nodes=256" or "gb200-nvl72:racks=8" (`gantry cluster show --help` lists them).
Result<Cluster> LoadCluster(const std::string& spec_or_shorthand);
Result<Cluster> LoadClusterSpecFile(const std::string& path);
Result<Cluster> ParseClusterSpec(const std::string& yaml_text, const std::string& source_name);
Result<Cluster> GenerateCluster(const std::string& shorthand);
// One line per shorthand generator with its parameters and defaults, for --help.
std::vector<std::string> ClusterShorthandHelp();
// The GPU types the shorthands know (H100, H200, A100, ...) with memory and power, for tools
// that meet a type by name only (gantry cluster import reads "h100" from Slurm's GRES).
const std::vector<GpuType>& KnownGpuTypes();

}  // namespace gantry
