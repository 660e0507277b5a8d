// What gantryd's web page shows beyond the job list: GPU occupancy per topology domain, each
// team's usage against its quota now and over the last two hours, and the most recent
// decisions. The control loop keeps it in an OverviewTracker and publishes a copy with each
// snapshot (ControlSnapshot::overview); GET /v1/overview serves it, scoped by token.
//
// Memory is bounded whatever the uptime: the usage history is a ring of at most
// kUsageHistorySamples samples taken at most once per kUsageSampleInterval (two hours), shared
// between snapshots (each sample is immutable, so a snapshot copies pointers, not samples), and
// the decision list keeps the last kRecentDecisions.
//
// Not thread-safe: the control loop calls Update; readers see only published copies.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/control/state_store.h"
#include "gantry/sched/free_index.h"

namespace gantry::control {

inline constexpr size_t kUsageHistorySamples = 720;
inline constexpr Duration kUsageSampleInterval = 10;  // seconds
inline constexpr size_t kRecentDecisions = 50;
// Events read from the store per Update: a restart on a long log catches up over a few cycles
// instead of stalling one.
inline constexpr int kEventsPerUpdate = 10000;

// GPUs of one innermost topology domain ("cluster" for nodes outside any domain).
struct DomainOccupancy {
  std::string domain;
  std::string level;  // the topology level's name, e.g. "nvlink"; empty for "cluster"
  int total_gpus = 0;
  int busy_gpus = 0;  // not free for new jobs: booked, or on drained or down nodes
};

struct TeamUsage {
  std::string team;
  int quota_gpus = kNoQuota;
  int running_gpus = 0;  // of jobs starting or running
  int pending_gpus = 0;
  int pending_jobs = 0;
};

// Running GPUs per team at one instant, indexed like Overview::teams.
struct UsageSample {
  Time time = 0;
  std::vector<int> running_gpus;
};

// A start decision, a confirmed start, a requeue or an end, from the state store's event log.
struct Decision {
  int64_t seq = 0;
  Time time = 0;
  std::string kind;  // "decide", "start", "requeue", "finish"
  std::string job;
  std::string team;
  int gpus = 0;
  std::string detail;  // the placement, the requeue's or the end's reason
};

struct Overview {
  std::vector<DomainOccupancy> occupancy;                   // by domain order in the cluster spec
  std::vector<TeamUsage> teams;                             // the spec's teams, then "(other)"
  std::vector<std::shared_ptr<const UsageSample>> history;  // oldest first
  std::vector<Decision> decisions;                          // oldest first
};

class OverviewTracker {
 public:
  // `teams`: the engine's teams, in its order; jobs of accounts not among them count for
  // `shared_team` (the controller's "(other)").
  OverviewTracker(std::vector<Team> teams, int shared_team);

  // Brings the overview to `now`: occupancy from `free`, usage from `active` (the store's
  // active jobs), a history sample when kUsageSampleInterval has passed since the last, and
  // the decisions logged since the last call. `team_of`, when given, is each active job's
  // index in `teams` (the caller knows it already); else it is looked up by name.
  Status Update(Time now, const Cluster& cluster, const FreeIndex& free,
                const std::vector<std::shared_ptr<const JobRecord>>& active,
                const StateStore& store, const std::vector<int>* team_of = nullptr);

  // A copy for a snapshot.
  Overview Current() const;

 private:
  std::vector<Team> teams_;
  int shared_team_;
  Overview now_;  // occupancy, teams (history and decisions are filled in by Current)
  std::deque<std::shared_ptr<const UsageSample>> history_;
  std::deque<Decision> decisions_;
  int64_t last_seq_ = 0;
};

}  // namespace gantry::control
