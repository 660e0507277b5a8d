#include "gantry/control/controller.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <utility>

namespace gantry::control {

class Controller::Impl {
 public:
  Impl(const Cluster& cluster, const Profile& profile, StateStore* store, ResourceManager* rm)
      : cluster_(cluster), profile_(profile), store_(store), rm_(rm) {}

  Status Open(Time now) {
    teams_ = cluster_.teams();
    for (size_t i = 0; i < teams_.size(); ++i) team_index_[teams_[i].name] = static_cast<int>(i);
    // Jobs of accounts the spec does not name share one team under the default quota.
    shared_team_ = static_cast<int>(teams_.size());
    teams_.push_back(Team{"(other)", cluster_.default_quota_gpus(), 1.0});
    for (size_t i = 0; i < cluster_.nodes().size(); ++i) {
      node_index_[cluster_.nodes()[i].name] = static_cast<NodeIndex>(i);
    }
    GANTRY_ASSIGN_OR_RETURN(engine_, Engine::Create(cluster_, teams_, profile_));
    overview_ = std::make_unique<OverviewTracker>(teams_, shared_team_);
    // Restart: every job the store has not seen end, reconciled with the resource manager.
    GANTRY_ASSIGN_OR_RETURN(std::vector<RmJob> observed, rm_->Jobs());
    std::map<std::string, const RmJob*> by_id;
    for (const RmJob& o : observed) by_id[o.request.id] = &o;
    GANTRY_ASSIGN_OR_RETURN(std::vector<JobRecord> active, store_->ActiveJobs());
    for (const JobRecord& r : active) {
      auto it = by_id.find(r.id);
      GANTRY_RETURN_IF_ERROR(Apply(r, it == by_id.end() ? nullptr : it->second, now, nullptr));
    }
    return Publish(now);
  }

  Status Cycle(Time now, CycleReport* report) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = CycleInner(now, report);
    ++cycles_;
    if (s.ok()) s = Publish(now);
    if (metrics_ != nullptr) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      metrics_
          ->GetHistogram("gantry_cycle_seconds", "Wall time of one control cycle.", {},
                         Histogram::LatencyBuckets())
          .Observe(seconds);
      metrics_
          ->GetCounter("gantry_decisions_total", "Start decisions sent to the resource manager.")
          .Increment(static_cast<uint64_t>(report->started));
      metrics_
          ->GetCounter("gantry_starts_refused_total",
                       "Starts the resource manager refused (the job went back to pending).")
          .Increment(static_cast<uint64_t>(report->refused));
      metrics_->GetCounter("gantry_cycle_errors_total", "Cycles that ended in an error.")
          .Increment(s.ok() ? 0 : 1);
    }
    return s;
  }

  // Builds and publishes the snapshot the API reads, and the gauges derived from it.
  Status Publish(Time now) {
    auto snap = std::make_shared<ControlSnapshot>();
    snap->time = now;
    snap->cycles = cycles_;
    snap->total_gpus = cluster_.total_gpus();
    snap->busy_gpus = snap->total_gpus - engine_->free_index().total_free();
    GANTRY_ASSIGN_OR_RETURN(std::vector<JobRecord> active, store_->ActiveJobs());
    GANTRY_RETURN_IF_ERROR(
        overview_->Update(now, cluster_, engine_->free_index(), active, *store_));
    snap->overview = overview_->Current();
    std::map<std::pair<std::string, std::string>, int> depth;  // (team, reason) -> jobs
    for (JobRecord& r : active) {
      JobView v;
      auto it = by_id_.find(r.id);
      if (it != by_id_.end()) {
        const JobStatus& st = engine_->status(it->second);
        v.reason = ReasonName(st.reason);
        v.explain = engine_->Explain(it->second);
        if (st.phase == JobStatus::Phase::kPending && st.reserved_start < kInfiniteTime) {
          v.estimated_start = st.reserved_start;
        }
        if (st.phase == JobStatus::Phase::kPending) ++depth[{r.team, v.reason}];
      }
      v.record = std::move(r);
      snap->jobs.push_back(std::move(v));
    }
    if (metrics_ != nullptr) {
      // Series seen before and empty now go to zero rather than keep a stale depth.
      for (const auto& key : queue_series_) depth.emplace(key, 0);
      for (const auto& [key, n] : depth) {
        metrics_
            ->GetGauge("gantry_queue_jobs", "Pending jobs per team and reason.",
                       {{"team", key.first}, {"reason", key.second}})
            .Set(n);
        queue_series_.insert(key);
      }
      // Busy GPUs per innermost topology domain (the whole cluster when flat).
      std::map<std::string, int> busy;
      const FreeIndex& free = engine_->free_index();
      for (size_t i = 0; i < cluster_.nodes().size(); ++i) {
        const Node& n = cluster_.nodes()[i];
        const std::string domain =
            n.domain >= 0 ? cluster_.domains()[static_cast<size_t>(n.domain)].name : "cluster";
        busy[domain] += n.gpus - free.free(static_cast<NodeIndex>(i));
      }
      for (const auto& [domain, gpus] : busy) {
        metrics_
            ->GetGauge("gantry_gpus_busy",
                       "GPUs not free for new jobs (booked, or on drained or down nodes) per "
                       "innermost topology domain.",
                       {{"domain", domain}})
            .Set(gpus);
      }
    }
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    snapshot_ = std::move(snap);
    return Status::Ok();
  }

  Status CycleInner(Time now, CycleReport* report) {
    *report = CycleReport();
    GANTRY_ASSIGN_OR_RETURN(std::vector<RmJob> observed, rm_->Jobs());
    report->observed = static_cast<int>(observed.size());
    std::set<std::string> seen;
    for (const RmJob& o : observed) seen.insert(o.request.id);
    // Endings first (ended, or gone from the resource manager), so that what they free is free
    // before jobs started behind Gantry's back are adopted.
    std::vector<std::string> vanished;
    for (const auto& [id, j] : by_id_) {
      if (seen.count(id) == 0) vanished.push_back(id);
    }
    for (const std::string& id : vanished) {
      GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(id));
      GANTRY_RETURN_IF_ERROR(Apply(r, nullptr, now, report));
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (const RmJob& o : observed) {
        if ((o.state == ObservedState::kFinished) != (pass == 0)) continue;
        Result<JobRecord> r = store_->Get(o.request.id);
        if (r.status().code() == StatusCode::kNotFound) {
          GANTRY_RETURN_IF_ERROR(Accept(o, now, report));
          continue;
        }
        if (!r.ok()) return r.status();
        if (r->phase == JobPhase::kDone) continue;
        GANTRY_RETURN_IF_ERROR(Apply(*r, &o, now, report));
      }
    }

    std::vector<StartDecision> starts;
    engine_->Schedule(now, &starts);
    for (const StartDecision& d : starts) {
      const JobRequest& req = requests_[static_cast<size_t>(d.job)];
      std::vector<NodeGpus> placement;
      for (const Slot& slot : d.placement) {
        placement.push_back({cluster_.nodes()[static_cast<size_t>(slot.node)].name, slot.gpus});
      }
      // Durable before acted on: after a crash here the restart finds it starting and asks.
      GANTRY_RETURN_IF_ERROR(store_->Decide(req.id, placement, now));
      Status s = rm_->Start(req.id, placement);
      if (s.ok()) {
        ++report->started;
        continue;
      }
      if (s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kNotFound) {
        ++report->refused;
        GANTRY_RETURN_IF_ERROR(store_->Requeue(req.id, now, "start refused: " + s.message()));
        GANTRY_RETURN_IF_ERROR(Resubmit(req.id, now));
        continue;
      }
      // Transient: the release may or may not have happened; the next observation tells
      // (held: requeue; released or running: confirmed).
      GANTRY_RETURN_IF_ERROR(store_->LogEvent(now, req.id, "start-unconfirmed", s.ToString()));
    }
    return Status::Ok();
  }

  // A job the store has never seen.
  Status Accept(const RmJob& o, Time now, CycleReport* report) {
    // Only a held job is Gantry's to place. One first seen released, running or ended was
    // started by someone else before gantryd ever saw it, and stays theirs.
    if (o.state != ObservedState::kHeld) return Status::Ok();
    Status added = store_->AddJob(o.request, now);
    if (!added.ok()) return added;
    GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(o.request.id));
    ++report->submitted;
    return Apply(r, &o, now, report);
  }

  // Brings one recorded job in line with what the resource manager reports (null: it does not
  // know the job). The same rules serve a restart and every cycle.
  Status Apply(const JobRecord& r, const RmJob* o, Time now, CycleReport* report) {
    const ObservedState obs = o == nullptr ? ObservedState::kUnknown : o->state;
    const bool in_engine = by_id_.count(r.id) > 0;
    switch (Reconcile(r.phase, obs)) {
      case RecoveryAction::kResubmit:
        return in_engine ? Status::Ok() : SubmitNew(r, now);
      case RecoveryAction::kRequeue:
        GANTRY_RETURN_IF_ERROR(
            store_->Requeue(r.id, now,
                            in_engine ? "held again by the resource manager"
                                      : "restart: the release never reached the resource manager"));
        return Resubmit(r.id, now);
      case RecoveryAction::kAdopt:
        return Adopt(r, *o, now, report);
      case RecoveryAction::kFinish:
      case RecoveryAction::kLost: {
        const std::string why =
            o == nullptr ? "lost: the resource manager no longer knows it" : o->end_state;
        GANTRY_RETURN_IF_ERROR(store_->Finish(r.id, now, why.empty() ? "ended" : why));
        if (report != nullptr) ++report->finished;
        return EndInEngine(r.id, now);
      }
    }
    return Status::Ok();
  }

  Status Adopt(const JobRecord& r, const RmJob& o, Time now, CycleReport* report) {
    auto it = by_id_.find(r.id);
    const bool ours_running =
        it != by_id_.end() && engine_->status(it->second).phase == JobStatus::Phase::kRunning;
    const std::vector<NodeGpus>& placement = o.placement.empty() ? r.placement : o.placement;
    if (placement.empty()) {
      // Released with no node list pinned (by hand): nowhere to book it until it runs.
      return Status::Ok();
    }
    if (r.phase == JobPhase::kPending) {
      // Released by someone else: record it as decided there.
      GANTRY_RETURN_IF_ERROR(store_->Decide(r.id, placement, now));
      GANTRY_RETURN_IF_ERROR(
          store_->LogEvent(now, r.id, "released-outside", "started without a Gantry decision"));
    }
    if (o.state == ObservedState::kRunning) {
      Result<JobRecord> cur = store_->Get(r.id);
      if (!cur.ok()) return cur.status();
      if (cur->phase == JobPhase::kStarting) {
        GANTRY_RETURN_IF_ERROR(store_->Started(r.id, now, o.placement));
        if (report != nullptr) ++report->confirmed;
      }
    }
    if (ours_running) return Status::Ok();  // the engine already books it there
    if (it != by_id_.end()) GANTRY_RETURN_IF_ERROR(EndInEngine(r.id, now));
    GANTRY_ASSIGN_OR_RETURN(JobRequest * req, NewRequest(r));
    Placement p;
    for (const NodeGpus& s : placement) {
      auto n = node_index_.find(s.node);
      if (n == node_index_.end()) {
        return store_->LogEvent(now, r.id, "adopt-failed",
                                "node " + s.node +
                                    " is not in the "
                                    "cluster spec");
      }
      p.push_back({n->second, s.gpus});
    }
    const Time start = o.start >= 0 ? std::min(o.start, now) : now;
    Status s = engine_->Adopt(*req, p, std::max(start, req->submit), now);
    if (!s.ok()) return store_->LogEvent(now, r.id, "adopt-failed", s.ToString());
    by_id_[r.id] = req->index;
    return Status::Ok();
  }

  // A pending job for the engine, under a fresh index.
  Status SubmitNew(const JobRecord& r, Time now) {
    GANTRY_ASSIGN_OR_RETURN(JobRequest * req, NewRequest(r));
    if (req->gpu_type_mask == 0) {
      return store_->Finish(r.id, now, "rejected: none of its GPU types is in the cluster");
    }
    Status s = engine_->Submit(*req, now);
    if (!s.ok()) return store_->Finish(r.id, now, "rejected: " + s.message());
    by_id_[r.id] = req->index;
    return Status::Ok();
  }

  // Takes the job out of the engine (wherever it stands there) and submits it again, pending.
  Status Resubmit(const std::string& id, Time now) {
    GANTRY_RETURN_IF_ERROR(EndInEngine(id, now));
    GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(id));
    return SubmitNew(r, now);
  }

  Status EndInEngine(const std::string& id, Time now) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return Status::Ok();
    const JobIndex j = it->second;
    by_id_.erase(it);
    switch (engine_->status(j).phase) {
      case JobStatus::Phase::kRunning:
        return engine_->Finish(j, now);
      case JobStatus::Phase::kPending:
        return engine_->Cancel(j, now);
      default:
        return Status::Ok();
    }
  }

  Result<JobRequest*> NewRequest(const JobRecord& r) {
    JobRequest q;
    q.index = static_cast<JobIndex>(requests_.size());
    q.id = r.id;
    auto t = team_index_.find(r.team);
    q.team = t == team_index_.end() ? shared_team_ : t->second;
    q.submit = r.submit;
    q.gpus = r.gpus;
    q.gpus_per_node = r.gpus_per_node;
    q.nodes = r.nodes;
    q.time_limit = r.time_limit;
    q.qos = r.qos;
    q.checkpoint_interval = r.checkpoint_interval;
    q.restart_cost = r.restart_cost;
    if (!r.gpu_types.empty()) {
      uint32_t mask = 0;
      for (const std::string& name : r.gpu_types) {
        const GpuTypeIndex g = cluster_.FindGpuType(name);
        if (g >= 0) mask |= 1u << g;
      }
      q.gpu_type_mask = mask;
    }
    requests_.push_back(std::move(q));
    return &requests_.back();
  }

  const Cluster& cluster_;
  Profile profile_;
  StateStore* store_;
  ResourceManager* rm_;
  std::vector<Team> teams_;
  std::map<std::string, int> team_index_;
  int shared_team_ = 0;
  std::map<std::string, NodeIndex> node_index_;
  std::unique_ptr<Engine> engine_;
  // Every request the engine was given, at stable addresses; a job submitted again (after a
  // refused start or a requeue) gets a new entry and index.
  std::deque<JobRequest> requests_;
  std::map<std::string, JobIndex> by_id_;  // the engine's current index of each active job
  int64_t cycles_ = 0;
  MetricsRegistry* metrics_ = nullptr;
  std::set<std::pair<std::string, std::string>> queue_series_;
  std::unique_ptr<OverviewTracker> overview_;
  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const ControlSnapshot> snapshot_ = std::make_shared<ControlSnapshot>();
};

Controller::Controller(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Controller::~Controller() = default;

Result<std::unique_ptr<Controller>> Controller::Open(const Cluster& cluster, const Profile& profile,
                                                     StateStore* store, ResourceManager* rm,
                                                     Time now) {
  auto impl = std::make_unique<Impl>(cluster, profile, store, rm);
  GANTRY_RETURN_IF_ERROR(impl->Open(now));
  return std::unique_ptr<Controller>(new Controller(std::move(impl)));
}

Status Controller::Cycle(Time now, CycleReport* report) {
  CycleReport local;
  return impl_->Cycle(now, report != nullptr ? report : &local);
}

const Engine& Controller::engine() const { return *impl_->engine_; }

std::shared_ptr<const ControlSnapshot> Controller::Snapshot() const {
  std::lock_guard<std::mutex> lock(impl_->snapshot_mu_);
  return impl_->snapshot_;
}

void Controller::set_metrics(MetricsRegistry* metrics) { impl_->metrics_ = metrics; }

Result<JobStatus> Controller::JobStatusOf(const std::string& id) const {
  auto it = impl_->by_id_.find(id);
  if (it == impl_->by_id_.end()) return NotFound("the engine has no job '" + id + "'");
  return impl_->engine_->status(it->second);
}

Result<std::string> Controller::Explain(const std::string& id) const {
  auto it = impl_->by_id_.find(id);
  if (it == impl_->by_id_.end()) return NotFound("the engine has no job '" + id + "'");
  return impl_->engine_->Explain(it->second);
}

}  // namespace gantry::control
