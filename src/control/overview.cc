#include "gantry/control/overview.h"

#include <map>
#include <utility>

namespace gantry::control {

OverviewTracker::OverviewTracker(std::vector<Team> teams, int shared_team)
    : teams_(std::move(teams)), shared_team_(shared_team) {}

Status OverviewTracker::Update(Time now, const Cluster& cluster, const FreeIndex& free,
                               const std::vector<std::shared_ptr<const JobRecord>>& active,
                               const StateStore& store, const std::vector<int>* team_of) {
  // Occupancy per innermost domain, in the spec's order.
  now_.occupancy.clear();
  std::map<int, size_t> slot;  // domain index (-1: none) -> occupancy entry
  for (size_t i = 0; i < cluster.nodes().size(); ++i) {
    const Node& n = cluster.nodes()[i];
    auto [it, added] = slot.emplace(n.domain, now_.occupancy.size());
    if (added) {
      DomainOccupancy d;
      if (n.domain >= 0) {
        const Domain& dom = cluster.domains()[static_cast<size_t>(n.domain)];
        d.domain = dom.name;
        if (dom.level >= 0 && static_cast<size_t>(dom.level) < cluster.levels().size()) {
          d.level = cluster.levels()[static_cast<size_t>(dom.level)];
        }
      } else {
        d.domain = "cluster";
      }
      now_.occupancy.push_back(std::move(d));
    }
    DomainOccupancy& d = now_.occupancy[it->second];
    d.total_gpus += n.gpus;
    d.busy_gpus += n.gpus - free.free(static_cast<NodeIndex>(i));
  }

  // Usage per team.
  std::map<std::string, size_t> team_index;
  now_.teams.assign(teams_.size(), TeamUsage());
  for (size_t t = 0; t < teams_.size(); ++t) {
    now_.teams[t].team = teams_[t].name;
    now_.teams[t].quota_gpus = teams_[t].quota_gpus;
    team_index[teams_[t].name] = t;
  }
  for (size_t i = 0; i < active.size(); ++i) {
    const JobRecord& r = *active[i];
    size_t t;
    if (team_of != nullptr && i < team_of->size()) {
      t = static_cast<size_t>((*team_of)[i]);
    } else {
      auto it = team_index.find(r.team);
      t = it != team_index.end() ? it->second : static_cast<size_t>(shared_team_);
    }
    if (t >= now_.teams.size()) continue;
    TeamUsage& u = now_.teams[t];
    if (r.phase == JobPhase::kPending) {
      u.pending_gpus += r.gpus;
      ++u.pending_jobs;
    } else if (r.phase == JobPhase::kStarting || r.phase == JobPhase::kRunning) {
      u.running_gpus += r.gpus;
    }
  }
  if (history_.empty() || now - history_.back()->time >= kUsageSampleInterval) {
    auto sample = std::make_shared<UsageSample>();
    sample->time = now;
    for (const TeamUsage& u : now_.teams) sample->running_gpus.push_back(u.running_gpus);
    history_.push_back(std::move(sample));
    while (history_.size() > kUsageHistorySamples) history_.pop_front();
  }

  // Decisions logged since the last call.
  GANTRY_ASSIGN_OR_RETURN(std::vector<StoreEvent> events,
                          store.Events(last_seq_, kEventsPerUpdate));
  const int64_t first_new = last_seq_;
  for (StoreEvent& e : events) {
    last_seq_ = e.seq;
    if (e.kind != "decide" && e.kind != "start" && e.kind != "requeue" && e.kind != "finish") {
      continue;
    }
    Decision d;
    d.seq = e.seq;
    d.time = e.time;
    d.kind = std::move(e.kind);
    d.job = std::move(e.job);
    d.detail = std::move(e.detail);
    decisions_.push_back(std::move(d));
    while (decisions_.size() > kRecentDecisions) decisions_.pop_front();
  }
  // The job's team and size, looked up only for the new decisions kept: at most
  // kRecentDecisions, however long the backlog was; active jobs first, the store for ended ones.
  std::map<std::string, const JobRecord*> wanted;
  for (const Decision& d : decisions_) {
    if (d.seq > first_new) wanted.emplace(d.job, nullptr);
  }
  if (!wanted.empty()) {
    for (const auto& r : active) {
      auto it = wanted.find(r->id);
      if (it != wanted.end()) it->second = r.get();
    }
  }
  for (Decision& d : decisions_) {
    if (d.seq <= first_new) continue;
    const JobRecord* r = wanted[d.job];
    if (r != nullptr) {
      d.team = r->team;
      d.gpus = r->gpus;
      continue;
    }
    Result<JobRecord> ended = store.Get(d.job);
    if (ended.ok()) {
      d.team = ended->team;
      d.gpus = ended->gpus;
    } else if (ended.status().code() != StatusCode::kNotFound) {
      return ended.status();
    }
  }
  return Status::Ok();
}

Overview OverviewTracker::Current() const {
  Overview o = now_;
  o.history.assign(history_.begin(), history_.end());
  o.decisions.assign(decisions_.begin(), decisions_.end());
  return o;
}

}  // namespace gantry::control
