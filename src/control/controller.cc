#include "gantry/control/controller.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "gantry/common/units.h"

namespace gantry::control {

namespace {
// Every value Reason (a uint8_t) can take: the queue depth is counted in a flat table.
constexpr size_t kReasonCount = 256;
}  // namespace

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
    EngineOptions options;
    options.data_locality = &locality_;
    GANTRY_ASSIGN_OR_RETURN(engine_, Engine::Create(cluster_, teams_, profile_, options));
    overview_ = std::make_unique<OverviewTracker>(teams_, shared_team_);
    // Restart: every job the store has not seen end, reconciled with the resource manager
    // (its writes in one commit). Nodes first, so that a job the resource manager reports on a
    // down node is requeued rather than adopted there.
    GANTRY_RETURN_IF_ERROR(store_->Batch([&]() -> Status {
      CycleReport unused;
      GANTRY_RETURN_IF_ERROR(ObserveNodes(now, &unused));
      GANTRY_ASSIGN_OR_RETURN(std::vector<RmJob> observed, rm_->Jobs());
      std::map<std::string, const RmJob*> by_id;
      for (const RmJob& o : observed) by_id[o.request.id] = &o;
      GANTRY_ASSIGN_OR_RETURN(std::vector<JobRecord> active, store_->ActiveJobs());
      // Grace times under way when gantryd stopped go on: their victims are known before the
      // jobs are reconciled, so a victim that exited meanwhile is requeued, not finished.
      GANTRY_ASSIGN_OR_RETURN(std::vector<GracePreemption> preemptions, store_->Preemptions());
      GANTRY_RETURN_IF_ERROR(LoadSignals(active, preemptions));
      // Where the jobs that declared a checkpoint ran before (their start events), so that
      // one that ended or was requeued while gantryd was away has those nodes drained, and a
      // requeued one's restore is placed where its copy is.
      std::set<std::string> with_checkpoint;
      for (const JobRecord& r : active) {
        if (!r.checkpoint.empty()) with_checkpoint.insert(r.id);
      }
      GANTRY_ASSIGN_OR_RETURN(auto started_on, store_->StartedOn(with_checkpoint));
      for (const JobRecord& r : active) {
        auto nodes = started_on.find(r.id);
        if (nodes == started_on.end()) continue;
        ran_on_[r.id] = RanOn{r.checkpoint, std::move(nodes->second)};
      }
      opening_ = true;
      for (const JobRecord& r : active) {
        auto it = by_id.find(r.id);
        const RmJob* o = it == by_id.end() ? nullptr : it->second;
        if (o != nullptr && EndedWithinGrace(*o)) continue;
        GANTRY_RETURN_IF_ERROR(Apply(r, o, now, nullptr));
        // Requeued before the restart: its drains (and the wait for them) are asked afresh.
        if (r.phase == JobPhase::kPending && r.requeues > 0 && stopping_.count(r.id) == 0) {
          GANTRY_RETURN_IF_ERROR(AskToDrain(r.id, now, /*restart=*/true));
        }
      }
      for (const GracePreemption& p : preemptions) GANTRY_RETURN_IF_ERROR(RestoreInEngine(p, now));
      EndGraceTimes(now);
      GANTRY_RETURN_IF_ERROR(RequeueInterrupted(now, &unused));
      opening_ = false;
      return Status::Ok();
    }));
    opening_ = false;
    return Publish(now);
  }

  Status Cycle(Time now, CycleReport* report) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> engine_lock(engine_mu_);
    Status s = CycleInner(now, report);
    ++cycles_;
    if (s.ok()) s = Publish(now);
    engine_lock.unlock();
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
      metrics_
          ->GetCounter("gantry_jobs_requeued_total",
                       "Jobs held again and decided anew after their node went down (or Slurm "
                       "requeued them itself).")
          .Increment(static_cast<uint64_t>(report->requeued));
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
    snap->profile = profile_;
    GANTRY_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const JobRecord>> active,
                            store_->ActiveJobRefs());
    // Queue depth per (team, reason): the reason codes are read from the engine every cycle,
    // so the counts are exact whatever the views below reuse.
    std::vector<int> depth(teams_.size() * kReasonCount, 0);
    std::vector<int> team_of(active.size());
    std::vector<CachedView> views;
    views.reserve(active.size());
    snap->jobs.reserve(active.size());
    // The last cycle's views are in the same order (submit time, then id) as `active`: walk
    // both together. An unchanged job is the same record object, so matching costs a pointer
    // comparison, not a lookup by id.
    size_t k = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      const std::shared_ptr<const JobRecord>& r = active[i];
      while (k < views_.size() && views_[k].record != r && SubmitOrder(*views_[k].record, *r)) ++k;
      CachedView c;
      if (k < views_.size() && (views_[k].record == r || (views_[k].record->submit == r->submit &&
                                                          views_[k].record->id == r->id))) {
        c = std::move(views_[k++]);
      }
      if (c.record != r) {
        auto t = team_index_.find(r->team);
        c.team = t == team_index_.end() ? shared_team_ : t->second;
      }
      team_of[i] = c.team;
      // The engine's index of the job: the one seen last cycle while the engine still has it
      // live (a job resubmitted or ended there leaves its old index done), else a lookup.
      JobIndex index = c.index;
      if (index < 0 || engine_->status(index).phase == JobStatus::Phase::kDone) {
        auto it = by_id_.find(r->id);
        index = it != by_id_.end() ? it->second : -1;
      }
      Reason reason = Reason::kPriority;
      Time estimate = -1;
      if (index >= 0) {
        const JobStatus& st = engine_->status(index);
        reason = st.reason;
        if (st.phase == JobStatus::Phase::kPending) {
          if (st.reserved_start < kInfiniteTime) estimate = st.reserved_start;
          ++depth[static_cast<size_t>(c.team) * kReasonCount + static_cast<size_t>(reason)];
        }
      }
      // Staging progress, for the few jobs that declared data.
      std::vector<StagingView> staging;
      uint64_t staging_sig = 0;
      auto waiting = waiting_.find(r->id);
      if (stager_ != nullptr && !r->datasets.empty()) {
        for (Stager::Part& p : stager_->JobProgress(r->id)) {
          staging_sig = staging_sig * 1000003 +
                        std::hash<std::string>()(p.node + p.dataset + p.progress.state) +
                        static_cast<uint64_t>(p.progress.bytes_done);
          staging.push_back({std::move(p.node), std::move(p.dataset), std::move(p.progress.state),
                             p.progress.bytes_done, p.progress.bytes_total,
                             std::move(p.progress.error)});
        }
      }
      const bool draining = waiting != waiting_.end() && stager_->DrainPending(r->id);
      if (waiting != waiting_.end())
        staging_sig ^= draining ? 0x7f4a7c159e3779b9ull : 0x9e3779b97f4a7c15ull;
      const bool stopping = !stopping_.empty() && stopping_.count(r->id) > 0;
      if (stopping) staging_sig ^= 0x5851f42d4c957f2dull;
      // The view (and its sentence) is rebuilt only when something it shows changed: the
      // record (a new one from the store), the engine's index, reason or estimate, or staging.
      if (c.view == nullptr || c.record != r || c.index != index || c.reason != reason ||
          c.estimate != estimate || c.staging_sig != staging_sig) {
        auto v = std::make_shared<JobView>();
        v->record = *r;
        if (index >= 0) {
          v->reason = ReasonName(reason);
          v->explain = engine_->Explain(index);
          v->estimated_start = estimate;
        }
        v->staging = std::move(staging);
        if (waiting != waiting_.end()) {
          v->reason = "StagingData";
          v->data_wait_until = waiting->second.deadline;
          v->explain = WaitingSentence(*v, draining);
        }
        if (stopping) {
          v->reason = "Requeued";
          v->explain =
              "Requeued; the resource manager is still stopping its last run. It is queued "
              "again once that run has stopped.";
        }
        c.record = r;
        c.index = index;
        c.reason = reason;
        c.estimate = estimate;
        c.staging_sig = staging_sig;
        c.view = std::move(v);
        ++explained_;
      }
      snap->jobs.push_back(c.view);
      views.push_back(std::move(c));
    }
    views_ = std::move(views);
    BuildNodesAndTeams(active, team_of, now, snap.get());
    GANTRY_RETURN_IF_ERROR(
        overview_->Update(now, cluster_, engine_->free_index(), active, *store_, &team_of));
    snap->overview = overview_->Current();
    if (metrics_ != nullptr) {
      // Series seen before and empty now go to zero rather than keep a stale depth.
      std::map<std::pair<std::string, std::string>, int> named;
      for (size_t i = 0; i < depth.size(); ++i) {
        if (depth[i] == 0) continue;
        named[{teams_[i / kReasonCount].name, ReasonName(static_cast<Reason>(i % kReasonCount))}] =
            depth[i];
      }
      for (const auto& key : queue_series_) named.emplace(key, 0);
      for (const auto& [key, n] : named) {
        metrics_
            ->GetGauge("gantry_queue_jobs", "Pending jobs per team and reason.",
                       {{"team", key.first}, {"reason", key.second}})
            .Set(n);
        queue_series_.insert(key);
      }
      // Nodes per engine state (every state, so a drained node that comes back reads 0).
      std::map<std::string, int> by_state = {{"up", 0}, {"drained", 0}, {"down", 0}};
      for (const NodeView& n : snap->nodes) ++by_state[n.state];
      for (const auto& [state, count] : by_state) {
        metrics_
            ->GetGauge("gantry_nodes", "Nodes per state (up, drained, down).", {{"state", state}})
            .Set(count);
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

  // The API's views of nodes and teams, from the cluster spec, the engine and the active jobs.
  // `team_of[i]`: the index in teams_ of active[i]'s team.
  void BuildNodesAndTeams(const std::vector<std::shared_ptr<const JobRecord>>& active,
                          const std::vector<int>& team_of, Time now, ControlSnapshot* snap) {
    std::map<std::string, size_t> node_at;
    for (size_t i = 0; i < cluster_.nodes().size(); ++i) {
      const Node& n = cluster_.nodes()[i];
      NodeView v;
      v.name = n.name;
      switch (engine_->node_state(static_cast<NodeIndex>(i))) {
        case NodeState::kUp:
          v.state = "up";
          break;
        case NodeState::kDrained:
          v.state = "drained";
          break;
        case NodeState::kDown:
          v.state = "down";
          break;
      }
      auto seen = rm_nodes_.find(n.name);
      if (seen != rm_nodes_.end()) {
        v.rm_state = seen->second.rm_state;
        v.reason = seen->second.reason;
      }
      v.gpu_type = cluster_.gpu_types()[static_cast<size_t>(n.gpu_type)].name;
      v.gpus = n.gpus;
      for (DomainIndex d = n.domain; d >= 0;
           d = cluster_.domains()[static_cast<size_t>(d)].parent) {
        v.domains.push_back(cluster_.domains()[static_cast<size_t>(d)].name);
      }
      if (!v.domains.empty()) v.domain = v.domains.front();
      node_at[n.name] = snap->nodes.size();
      snap->nodes.push_back(std::move(v));
    }
    for (const Team& t : teams_) {
      TeamView v;
      v.name = t.name;
      v.quota_gpus = t.quota_gpus;
      v.shares = t.shares;
      snap->teams.push_back(std::move(v));
    }
    for (size_t i = 0; i < active.size(); ++i) {
      const JobRecord& r = *active[i];
      TeamView& team = snap->teams[static_cast<size_t>(team_of[i])];
      if (r.phase == JobPhase::kPending) {
        ++team.pending_jobs;
        team.pending_gpus += r.gpus;
        continue;
      }
      ++team.running_jobs;
      if (r.started >= 0 && now > r.started) {
        team.gpu_seconds += static_cast<double>(r.gpus) * static_cast<double>(now - r.started);
      }
      for (const NodeGpus& s : r.placement) {
        auto n = node_at.find(s.node);
        if (n == node_at.end()) continue;
        snap->nodes[n->second].gpus_used += s.gpus;
        snap->nodes[n->second].jobs.push_back(r.id);
      }
    }
    for (size_t i = 0; i < teams_.size(); ++i) {
      snap->teams[i].running_gpus = engine_->team_running_gpus(static_cast<int>(i));
    }
    // The shared team of accounts the spec does not name shows only when it has jobs.
    TeamView& other = snap->teams.back();
    if (other.running_jobs + other.pending_jobs == 0) snap->teams.pop_back();
  }

  // Brings the engine's node states in line with the resource manager's; jobs a down node
  // interrupted are queued for RequeueInterrupted.
  Status ObserveNodes(Time now, CycleReport* report) {
    GANTRY_ASSIGN_OR_RETURN(std::vector<RmNode> nodes, rm_->Nodes());
    for (RmNode& o : nodes) {
      auto it = node_index_.find(o.name);
      if (it == node_index_.end()) continue;  // not in the spec: not Gantry's to place on
      const NodeIndex n = it->second;
      const NodeState was = engine_->node_state(n);
      const NodeState want = o.state;
      const std::string name = o.name;
      rm_nodes_[name] = std::move(o);
      if (was == want) continue;
      std::vector<JobIndex> interrupted;
      switch (want) {
        case NodeState::kUp:
          GANTRY_RETURN_IF_ERROR(engine_->Up(n, now));
          break;
        case NodeState::kDrained:
          // The engine drains only a node that is up (a down node's jobs are already gone).
          if (was == NodeState::kDown) GANTRY_RETURN_IF_ERROR(engine_->Up(n, now));
          GANTRY_RETURN_IF_ERROR(engine_->Drain(n, now));
          break;
        case NodeState::kDown:
          GANTRY_RETURN_IF_ERROR(engine_->Down(n, now, &interrupted));
          break;
      }
      ++report->node_changes;
      const RmNode& seen = rm_nodes_[name];
      GANTRY_RETURN_IF_ERROR(store_->LogEvent(
          now, "", std::string("node-") + NodeStateWord(want),
          name + (seen.reason.empty() ? "" : ": " + seen.reason) + " (" + seen.rm_state + ")"));
      for (JobIndex j : interrupted) {
        const std::string& id = requests_[static_cast<size_t>(j)].id;
        to_requeue_[id] = {"node " + name + " went down"};
      }
    }
    return Status::Ok();
  }

  static const char* NodeStateWord(NodeState s) {
    switch (s) {
      case NodeState::kUp:
        return "up";
      case NodeState::kDrained:
        return "drain";
      case NodeState::kDown:
        return "down";
    }
    return "?";
  }

  // Holds every interrupted job again in the resource manager, then records the requeue and
  // gives the job back to the engine as pending (its submit time, and so its age, kept) -- a
  // running one once the resource manager has stopped it (stopping_). The
  // resource manager acts first: after a crash in between the store still says running and the
  // resource manager says held, which Reconcile requeues. A transient failure is retried next
  // cycle; a job that has ended meanwhile is left to the observation that finishes it.
  Status RequeueInterrupted(Time now, CycleReport* report) {
    for (auto it = to_requeue_.begin(); it != to_requeue_.end();) {
      const std::string id = it->first;
      const ToRequeue what = it->second;
      Status s = rm_->Requeue(id);
      if (s.code() == StatusCode::kPermissionDenied) {
        // It may not be requeued (its flag changed since the observation that made it a
        // victim): it runs on, and its preemptor -- of this cycle, or waiting since it was
        // signalled -- is withdrawn (Withdraw).
        it = to_requeue_.erase(it);
        std::string by = what.preemptor;
        if (auto sg = signalled_.find(id); by.empty() && sg != signalled_.end()) by = sg->second.by;
        GANTRY_RETURN_IF_ERROR(ForgetSignal(id));
        if (!by.empty()) withdrawn_.insert(by);
        GANTRY_RETURN_IF_ERROR(
            store_->LogEvent(now, id, "requeue-refused", s.ToString() + "; it runs on"));
        continue;
      }
      if (!s.ok() && s.code() != StatusCode::kFailedPrecondition &&
          s.code() != StatusCode::kNotFound) {
        GANTRY_RETURN_IF_ERROR(store_->LogEvent(now, id, "requeue-retry", s.ToString()));
        ++it;
        continue;
      }
      it = to_requeue_.erase(it);
      GANTRY_RETURN_IF_ERROR(ForgetSignal(id));
      if (!s.ok()) {
        GANTRY_RETURN_IF_ERROR(store_->LogEvent(now, id, "requeue-refused", s.ToString()));
        continue;
      }
      GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(id));
      if (r.phase == JobPhase::kStarting || r.phase == JobPhase::kRunning) {
        GANTRY_RETURN_IF_ERROR(store_->Requeue(id, now, what.why));
      }
      if (r.phase != JobPhase::kDone && what.running) {
        // Queued again once the resource manager reports its run stopped (Apply).
        GANTRY_RETURN_IF_ERROR(EndInEngine(id, now));
        stopping_.insert(id);
      } else if (r.phase != JobPhase::kDone) {
        GANTRY_RETURN_IF_ERROR(Resubmit(id, now));
      }
      ++report->requeued;
    }
    return Status::Ok();
  }

  // Preemptors with a victim that could not be requeued: a start of this cycle is dropped (its
  // GPUs are still in use), and one waiting for signalled victims (a grace time) waits no
  // more; either is queued again as it was, pending, and decided afresh. The victim's engine
  // run ended with an immediate decision; the next observation books it running again
  // (Apply). A signalled victim stays running in the engine, never a victim again.
  Status Withdraw(Time now, std::vector<StartDecision>* starts) {
    if (starts != nullptr) {
      std::erase_if(*starts, [&](const StartDecision& d) {
        return withdrawn_.count(requests_[static_cast<size_t>(d.job)].id) > 0;
      });
    }
    for (const std::string& id : withdrawn_) {
      if (by_id_.count(id) == 0) continue;  // ended meanwhile
      GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(id));
      if (r.phase == JobPhase::kRunning) continue;
      if (r.phase == JobPhase::kStarting) {
        // Released in an earlier cycle (the victim's requeue first failed for a while, then was
        // refused): it waits in the resource manager for GPUs the victim keeps. Held again,
        // then queued as it was once the resource manager reports it held -- never decided
        // twice, even had it started on GPUs the victim left free (RequeueInterrupted).
        to_requeue_[id] = {"a victim may not be requeued and runs on", /*running=*/true};
        GANTRY_RETURN_IF_ERROR(store_->LogEvent(
            now, id, "preemption-withdrawn",
            "a victim may not be requeued and runs on; held again and decided afresh"));
        continue;
      }
      GANTRY_RETURN_IF_ERROR(EndInEngine(id, now));
      if (r.phase == JobPhase::kDone) continue;
      GANTRY_RETURN_IF_ERROR(SubmitNew(r, now));
      GANTRY_RETURN_IF_ERROR(store_->LogEvent(
          now, id, "preemption-withdrawn",
          "a victim may not be requeued and runs on; decided again in a later cycle"));
    }
    withdrawn_.clear();
    return Status::Ok();
  }

  // One cycle: observe (every write of it one commit), schedule, then make the decisions
  // durable (one commit) before any of them reaches the resource manager.
  Status CycleInner(Time now, CycleReport* report) {
    *report = CycleReport();
    GANTRY_RETURN_IF_ERROR(store_->Batch([&] { return Observe(now, report); }));
    // A signalled victim refused at the end of its grace time (Observe): its preemptor stops
    // waiting before the engine schedules.
    if (!withdrawn_.empty()) GANTRY_RETURN_IF_ERROR(Withdraw(now, nullptr));

    // What the nodes hold, as the stager last heard: the data-locality score's view.
    if (stager_ != nullptr) {
      locality_.Clear();
      for (const auto& [node, dataset] : stager_->Held()) {
        if (auto n = node_index_.find(node); n != node_index_.end()) {
          locality_.Set(dataset, n->second, 1.0);
        }
      }
      for (const Stager::HeldCheckpoint& h : stager_->HeldCheckpoints()) {
        if (auto n = node_index_.find(h.node); n != node_index_.end()) {
          locality_.Set(h.checkpoint, n->second, h.copy.fraction());
        }
      }
    }
    std::vector<StartDecision> decisions;
    engine_->Schedule(now, &decisions);
    report->waiting_for_data = 0;
    // Preemption first: the victims are stopped (or signalled) before their GPUs are handed on.
    // A decision that only signalled victims (a grace time) is no start yet.
    std::vector<StartDecision> starts;
    starts.reserve(decisions.size());
    for (StartDecision& d : decisions) {
      if (!d.preempted.empty()) GANTRY_RETURN_IF_ERROR(Preempt(d, now, report));
      if (d.reason != Reason::kPreempting) starts.push_back(std::move(d));
    }
    if (!to_requeue_.empty()) GANTRY_RETURN_IF_ERROR(RequeueInterrupted(now, report));
    if (!withdrawn_.empty()) GANTRY_RETURN_IF_ERROR(Withdraw(now, &starts));
    std::vector<std::vector<NodeGpus>> placements;
    placements.reserve(starts.size());
    for (const StartDecision& d : starts) placements.push_back(NodeGpusOf(d.placement));
    // Durable before acted on: after a crash past this commit the restart finds them starting
    // and asks the resource manager.
    GANTRY_RETURN_IF_ERROR(store_->Batch([&]() -> Status {
      for (size_t i = 0; i < starts.size(); ++i) {
        const JobRequest& req = requests_[static_cast<size_t>(starts[i].job)];
        GANTRY_RETURN_IF_ERROR(store_->Decide(req.id, placements[i], now));
      }
      return Status::Ok();
    }));
    for (size_t i = 0; i < starts.size(); ++i) {
      const JobRequest& req = requests_[static_cast<size_t>(starts[i].job)];
      if (stager_ != nullptr && wait_for_data_ > 0 &&
          (datasets_of_.count(req.id) > 0 || stager_->DrainPending(req.id))) {
        waiting_[req.id] = Waiting{placements[i], now, now + wait_for_data_};
        GANTRY_RETURN_IF_ERROR(store_->LogEvent(
            now, req.id, "stage-wait",
            datasets_of_.count(req.id) > 0
                ? "held until its data is on its nodes"
                : "held until the saves its last run left on its nodes are drained"));
        continue;
      }
      GANTRY_RETURN_IF_ERROR(StartInRm(req.id, placements[i], now, report));
    }
    if (stager_ != nullptr) GANTRY_RETURN_IF_ERROR(Stage(now, report));
    return Status::Ok();
  }

  // The victims of decision `d`: held again now (their engine runs already ended) and decided
  // anew, or, with a grace time, signalled and left to run until it is over.
  Status Preempt(const StartDecision& d, Time now, CycleReport* report) {
    const std::string& by = requests_[static_cast<size_t>(d.job)].id;
    if (d.reason == Reason::kPreempting) {
      // Durable before the first signal: a gantryd restarted within the grace time carries the
      // preemption on rather than choosing (and signalling) victims again.
      GracePreemption p;
      p.preemptor = by;
      for (JobIndex v : d.preempted) p.victims.push_back(requests_[static_cast<size_t>(v)].id);
      p.placement = NodeGpusOf(d.placement);
      p.signalled = now;
      p.grace_end = d.victims_end_by;
      // The record replaces the preemptor's earlier one: victims of that one still running go
      // on in it, keeping their own grace ends.
      for (const auto& [victim, s] : signalled_) {
        if (s.by == by) p.earlier.emplace_back(victim, s.grace_end);
      }
      GANTRY_RETURN_IF_ERROR(store_->AddPreemption(p));
    }
    for (JobIndex v : d.preempted) {
      const std::string& id = requests_[static_cast<size_t>(v)].id;
      ++report->preempted;
      if (metrics_ != nullptr) {
        metrics_
            ->GetCounter("gantry_preemptions_total",
                         "Running jobs preempted (held again and decided anew), by how.",
                         {{"how", d.reason == Reason::kPreempting ? "grace" : "now"}})
            .Increment();
      }
      if (d.reason != Reason::kPreempting) {
        to_requeue_[id] = {"preempted by " + by, /*running=*/true, by};
        GANTRY_RETURN_IF_ERROR(store_->LogEvent(now, id, "preempt", "by " + by));
        continue;
      }
      const Time grace_end = engine_->status(v).grace_end;
      Status s = rm_->Signal(id, preempt_signal_);
      GANTRY_RETURN_IF_ERROR(
          store_->LogEvent(now, id, "preempt-signal",
                           "SIG" + preempt_signal_ + " for " + by +
                               ", held again at t=" + std::to_string(grace_end) +
                               (s.ok() ? "" : " (signal failed: " + s.ToString() + ")")));
      signalled_[id] = Signalled{by, grace_end};
    }
    return Status::Ok();
  }

  // Signalled victims whose grace time is over are held again and requeued (by
  // RequeueInterrupted, which runs next and forgets their signal once it is done).
  void EndGraceTimes(Time now) {
    for (const auto& [id, s] : signalled_) {
      if (now >= s.grace_end) {
        to_requeue_[id] = {"preempted by " + s.by + " (grace time over)", /*running=*/true};
      }
    }
  }

  // A signalled victim that ended within its grace time (it saved its checkpoint and exited) is
  // preempted, not done: true when `o` is one, queued to be requeued to go on. One its user
  // cancelled is done (false).
  bool EndedWithinGrace(const RmJob& o) {
    if (o.state != ObservedState::kFinished || signalled_.empty()) return false;
    auto s = signalled_.find(o.request.id);
    if (s == signalled_.end() || o.end_state == "cancelled") return false;
    to_requeue_[o.request.id] = {"preempted by " + s->second.by + " (ended within its grace time)"};
    return true;
  }

  // Forgets victim `id`'s signal (it was requeued, or it ended); when none of its preemptor's
  // victims is left signalled, the preemption's record goes too: the engine starts the
  // preemptor in a later cycle, and a restart has nothing left to carry on.
  Status ForgetSignal(const std::string& id) {
    auto it = signalled_.find(id);
    if (it == signalled_.end()) return Status::Ok();
    const std::string by = it->second.by;
    signalled_.erase(it);
    for (const auto& [victim, s] : signalled_) {
      if (s.by == by) return Status::Ok();
    }
    return store_->EndPreemption(by);
  }

  // Restart: the signals of the recorded preemptions whose victims still run (or were about to
  // start), whatever became of their preemptor: a victim that got its signal was told to save
  // its checkpoint and stop, so it is held again at its grace end even when nobody waits for its
  // GPUs any more -- as without a restart, where a cancelled preemptor leaves its victims'
  // signals in place. A preemption with no victim left is over.
  Status LoadSignals(const std::vector<JobRecord>& active,
                     const std::vector<GracePreemption>& preemptions) {
    std::map<std::string, JobPhase> phase;
    for (const JobRecord& r : active) phase[r.id] = r.phase;
    for (const GracePreemption& p : preemptions) {
      bool any = false;
      const auto load = [&](const std::string& v, Time grace_end) {
        auto ph = phase.find(v);
        if (ph == phase.end() || ph->second == JobPhase::kPending) return;
        signalled_[v] = Signalled{p.preemptor, grace_end};
        any = true;
      };
      for (const std::string& v : p.victims) load(v, p.grace_end);
      for (const auto& [v, grace_end] : p.earlier) load(v, grace_end);
      if (!any) GANTRY_RETURN_IF_ERROR(store_->EndPreemption(p.preemptor));
    }
    return Status::Ok();
  }

  // Restart: the engine waits for the recorded preemption's victims that it runs, as it did
  // before (Engine::RestorePreempting), so it neither starts the preemptor early nor chooses
  // other victims. When it cannot -- the preemptor is no longer pending (cancelled, or released
  // by hand), or the placement is no longer free (e.g. its node was drained) -- the engine is
  // still told the victims were signalled (Engine::RestoreSignalled), so that no preemptor,
  // this one decided anew included, signals them again or moves their grace end later; they
  // are requeued at their grace end all the same, and the event log says so.
  Status RestoreInEngine(const GracePreemption& p, Time now) {
    // The engine's index of victim `v` when it runs there and its signal was loaded, else -1.
    const auto running = [&](const std::string& v) -> JobIndex {
      auto it = by_id_.find(v);
      if (it == by_id_.end() || signalled_.count(v) == 0) return -1;
      return engine_->status(it->second).phase == JobStatus::Phase::kRunning ? it->second : -1;
    };
    for (const auto& [v, grace_end] : p.earlier) {
      const JobIndex j = running(v);
      if (j >= 0) GANTRY_RETURN_IF_ERROR(KeepSignalled({j}, p.preemptor, grace_end, now));
    }
    std::vector<JobIndex> victims;
    for (const std::string& v : p.victims) {
      const JobIndex j = running(v);
      if (j >= 0) victims.push_back(j);
    }
    if (victims.empty()) return Status::Ok();
    const std::string held_again =
        std::to_string(victims.size()) +
        " signalled victim(s), held again at t=" + std::to_string(p.grace_end);
    auto pre = by_id_.find(p.preemptor);
    if (pre == by_id_.end() || engine_->status(pre->second).phase != JobStatus::Phase::kPending) {
      GANTRY_RETURN_IF_ERROR(KeepSignalled(victims, p.preemptor, p.grace_end, now));
      return store_->LogEvent(now, p.preemptor, "preempt-orphaned",
                              "no longer pending; its " + held_again);
    }
    Status s = Status::Ok();
    Placement placement;
    for (const NodeGpus& slot : p.placement) {
      auto n = node_index_.find(slot.node);
      if (n == node_index_.end()) {
        s = FailedPrecondition("node " + slot.node + " is not in the cluster spec");
        break;
      }
      placement.push_back({n->second, slot.gpus});
    }
    if (s.ok()) s = engine_->RestorePreempting(pre->second, victims, placement, p.grace_end, now);
    if (!s.ok()) {
      GANTRY_RETURN_IF_ERROR(KeepSignalled(victims, p.preemptor, p.grace_end, now));
      return store_->LogEvent(now, p.preemptor, "preempt-restore-failed",
                              s.ToString() + "; decided anew, its " + held_again);
    }
    return store_->LogEvent(now, p.preemptor, "preempt-restored", "waits for " + held_again);
  }

  // Restart: the engine keeps `victims` of `preemptor` signalled until `grace_end`, with no
  // preemptor waiting for them.
  Status KeepSignalled(const std::vector<JobIndex>& victims, const std::string& preemptor,
                       Time grace_end, Time now) {
    Status s = engine_->RestoreSignalled(victims, grace_end, now);
    if (s.ok()) return s;
    return store_->LogEvent(now, preemptor, "preempt-restore-failed", s.ToString());
  }

  // Node names and GPUs of an engine placement.
  std::vector<NodeGpus> NodeGpusOf(const Placement& placement) const {
    std::vector<NodeGpus> out;
    out.reserve(placement.size());
    for (const Slot& slot : placement) {
      out.push_back({cluster_.nodes()[static_cast<size_t>(slot.node)].name, slot.gpus});
    }
    return out;
  }

  // Why a decided job has not been released yet.
  static std::string WaitingSentence(const JobView& v, bool draining) {
    int64_t done = 0;
    int64_t total = 0;
    int parts_done = 0;
    for (const StagingView& s : v.staging) {
      done += s.bytes_done;
      total += s.bytes_total;
      parts_done += s.state == "done" ? 1 : 0;
    }
    std::string nodes;
    for (const NodeGpus& slot : v.record.placement) nodes += (nodes.empty() ? "" : ",") + slot.node;
    std::string why;
    if (!v.staging.empty()) {
      why = "its data is staged there (" + std::to_string(parts_done) + " of " +
            std::to_string(v.staging.size()) + " datasets on nodes done, " + FormatBytes(done) +
            " of " + FormatBytes(total) + ")";
    }
    if (draining) {
      why += std::string(why.empty() ? "" : " and ") +
             "the saves its last run left on the nodes it ran on are drained";
    }
    if (why.empty()) why = "it is released";  // between a drain's end and the next cycle
    return "Decided to start on " + nodes + "; held until " + why +
           "; released by t=" + std::to_string(v.data_wait_until) + " at the latest.";
  }

  // Releases a decided job in the resource manager.
  Status StartInRm(const std::string& id, const std::vector<NodeGpus>& placement, Time now,
                   CycleReport* report) {
    Status s = rm_->Start(id, placement);
    if (s.ok()) {
      ++report->started;
      return Status::Ok();
    }
    if (s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kNotFound) {
      ++report->refused;
      GANTRY_RETURN_IF_ERROR(store_->Requeue(id, now, "start refused: " + s.message()));
      return Resubmit(id, now);
    }
    // Transient: the release may or may not have happened; the next observation tells (held:
    // requeue; released or running: confirmed).
    return store_->LogEvent(now, id, "start-unconfirmed", s.ToString());
  }

  // Hands the stager this cycle's targets -- decided jobs waiting for their data, pending ones
  // on the nodes the reservation plan expects them to start on, and pending ones that declared
  // a checkpoint location with the nodes they ran on (whose local tiers may hold their newest
  // checkpoint) -- and releases the waiting jobs whose data is in place, whose staging failed,
  // or whose wait ran out.
  Status Stage(Time now, CycleReport* report) {
    std::vector<StageTarget> targets;
    const auto pending = [&](const std::string& id) {
      auto b = by_id_.find(id);
      return b != by_id_.end() && engine_->status(b->second).phase == JobStatus::Phase::kPending;
    };
    for (const auto& [id, ran] : ran_on_) {
      if (datasets_of_.count(id) > 0 || !pending(id)) continue;
      targets.push_back({id,
                         {},
                         {},
                         ran.checkpoint,
                         std::vector<std::string>(ran.nodes.begin(), ran.nodes.end())});
    }
    for (const auto& [id, datasets] : datasets_of_) {
      StageTarget t{id, {}, datasets};
      if (auto r = ran_on_.find(id); r != ran_on_.end() && pending(id)) {
        t.checkpoint = r->second.checkpoint;
        t.checkpoint_nodes.assign(r->second.nodes.begin(), r->second.nodes.end());
      }
      if (auto w = waiting_.find(id); w != waiting_.end()) {
        for (const NodeGpus& slot : w->second.placement) t.nodes.push_back(slot.node);
      } else if (pending(id)) {
        for (const Slot& slot : engine_->planned_placement(by_id_.at(id))) {
          t.nodes.push_back(cluster_.nodes()[static_cast<size_t>(slot.node)].name);
        }
      }
      if (!t.nodes.empty() || !t.checkpoint_nodes.empty()) targets.push_back(std::move(t));
    }
    stager_->Want(std::move(targets));
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const std::string id = it->first;
      const Waiting w = it->second;
      std::string outcome;
      std::string detail;
      // A save its last run left on a node is finished first: it may be newer than anything
      // the job could restore, and a start before it commits would race it for the step.
      const bool draining = stager_->DrainPending(id);
      const bool data = datasets_of_.count(id) > 0;
      std::string failure = data && !draining ? stager_->Failure(id) : "";
      if (!draining && (!data || stager_->Ready(id))) {
        outcome = data ? "staged" : "drained";
        detail = data ? "its data is on its nodes"
                      : "the saves its last run left on its nodes were drained";
      } else if (!failure.empty()) {
        outcome = "failed";
        detail = "staging failed, it reads from the source: " + failure;
      } else if (now >= w.deadline) {
        outcome = "timeout";
        detail = draining ? "the drains of the nodes it ran on did not end within "
                          : "its data was not staged within ";
        detail += FormatDuration(wait_for_data_);
      } else {
        ++report->waiting_for_data;
        ++it;
        continue;
      }
      it = waiting_.erase(it);
      GANTRY_RETURN_IF_ERROR(store_->LogEvent(now, id, "stage-" + outcome, detail));
      if (metrics_ != nullptr) {
        metrics_
            ->GetCounter("gantry_data_starts_total",
                         "Jobs with declared data, or requeued with checkpoint saves left on "
                         "nodes, released after waiting for them, by outcome (staged, drained, "
                         "failed, timeout).",
                         {{"outcome", outcome}})
            .Increment();
        metrics_
            ->GetHistogram("gantry_data_wait_seconds",
                           "Time from a start decision to the release of a job that waited for "
                           "its data.",
                           {}, Histogram::LatencyBuckets())
            .Observe(static_cast<double>(now - w.decided));
      }
      GANTRY_RETURN_IF_ERROR(StartInRm(id, w.placement, now, report));
    }
    if (metrics_ != nullptr) {
      metrics_
          ->GetGauge("gantry_jobs_waiting_for_data",
                     "Decided jobs held back until their declared data is on their nodes.")
          .Set(report->waiting_for_data);
    }
    return Status::Ok();
  }

  // What the resource manager reports, brought into the store and the engine.
  Status Observe(Time now, CycleReport* report) {
    GANTRY_RETURN_IF_ERROR(ObserveNodes(now, report));
    GANTRY_ASSIGN_OR_RETURN(std::vector<RmJob> observed, rm_->Jobs());
    report->observed = static_cast<int>(observed.size());
    // Views into `observed`, hashed: with 100k jobs a tree of copied ids cost tens of ms a cycle.
    std::unordered_set<std::string_view> seen;
    seen.reserve(observed.size());
    for (const RmJob& o : observed) seen.insert(o.request.id);
    NoteRequeueable(observed);
    std::erase_if(drained_unseen_, [&](const std::string& id) { return seen.count(id) == 0; });
    // Endings first (ended, or gone from the resource manager), so that what they free is free
    // before jobs started behind Gantry's back are adopted.
    std::vector<std::string> vanished;
    for (const auto& [id, j] : by_id_) {
      if (seen.count(id) == 0) vanished.push_back(id);
    }
    for (const std::string& id : stopping_) {
      if (seen.count(id) == 0) vanished.push_back(id);
    }
    for (const std::string& id : vanished) {
      to_requeue_.erase(id);
      GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(id));
      GANTRY_RETURN_IF_ERROR(Apply(r, nullptr, now, report));
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (const RmJob& o : observed) {
        if ((o.state == ObservedState::kFinished) != (pass == 0)) continue;
        if (EndedWithinGrace(o)) continue;
        if (o.state == ObservedState::kFinished && !signalled_.empty()) {
          GANTRY_RETURN_IF_ERROR(ForgetSignal(o.request.id));  // cancelled by its user
        }
        if (o.state == ObservedState::kFinished) to_requeue_.erase(o.request.id);
        // A job about to be requeued is settled by RequeueInterrupted, not by what the
        // resource manager said before it was held again.
        if (!to_requeue_.empty() && to_requeue_.count(o.request.id) > 0) continue;
        // A decided job waiting for its data is held on purpose.
        if ((o.state == ObservedState::kHeld || o.stopping) && !waiting_.empty() &&
            waiting_.count(o.request.id) > 0) {
          continue;
        }
        // The record without copying it: most jobs of a deep queue are held and stay so.
        Result<std::shared_ptr<const JobRecord>> r = store_->GetRef(o.request.id);
        if (r.status().code() == StatusCode::kNotFound) {
          GANTRY_RETURN_IF_ERROR(Accept(o, now, report));
          continue;
        }
        if (!r.ok()) return r.status();
        if ((*r)->phase == JobPhase::kDone) continue;
        GANTRY_RETURN_IF_ERROR(Apply(**r, &o, now, report));
      }
    }
    EndGraceTimes(now);
    return RequeueInterrupted(now, report);
  }

  // Jobs the resource manager will not requeue are no preemption's victims: the engine's
  // requests (whose addresses it keeps) follow the latest report. Such jobs are few, so only
  // they are looked up.
  void NoteRequeueable(const std::vector<RmJob>& observed) {
    std::set<std::string> now;
    for (const RmJob& o : observed) {
      if (!o.requeueable) now.insert(o.request.id);
    }
    const auto mark = [&](const std::string& id, bool preemptible) {
      auto it = by_id_.find(id);
      if (it == by_id_.end()) return;
      JobRequest& q = requests_[static_cast<size_t>(it->second)];
      if (q.preemptible == preemptible) return;
      q.preemptible = preemptible;
      engine_->PreemptibleChanged();
    };
    for (const std::string& id : not_requeueable_) {
      if (now.count(id) == 0) mark(id, true);
    }
    for (const std::string& id : now) mark(id, false);
    not_requeueable_ = std::move(now);
  }

  // A job the store has never seen.
  Status Accept(const RmJob& o, Time now, CycleReport* report) {
    // A held job is Gantry's to place. One first seen running (or released onto pinned nodes)
    // was started while gantryd was away -- by Slurm's own scheduler after fail-open, or by an
    // administrator -- and is adopted where it runs, so its GPUs count. One released without
    // nodes is Slurm's to place; it is adopted once it runs. An ended one is history, but for
    // the saves it may have left on the nodes it ran on.
    const bool adopt = o.state == ObservedState::kRunning ||
                       (o.state == ObservedState::kReleased && !o.placement.empty());
    if (o.state == ObservedState::kFinished) return DrainUnseen(o, now);
    if (o.state != ObservedState::kHeld && !adopt) return Status::Ok();
    JobRecord record = o.request;
    GANTRY_ASSIGN_OR_RETURN(record.qos, QosLevelOf(record, now));
    Status added = store_->AddJob(record, now);
    if (!added.ok()) return added;
    GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(o.request.id));
    ++report->submitted;
    return Apply(r, &o, now, report);
  }

  // Brings one recorded job in line with what the resource manager reports (null: it does not
  // know the job). The same rules serve a restart and every cycle.
  Status Apply(const JobRecord& r, const RmJob* o, Time now, CycleReport* report) {
    const ObservedState obs = o == nullptr ? ObservedState::kUnknown : o->state;
    const bool stopping = obs == ObservedState::kRunning && o->stopping;
    // Requeued (by Gantry, or before a restart) while its last run is being stopped: not a
    // start behind Gantry's back. It waits out of the engine (RequeueInterrupted).
    if (stopping && r.phase == JobPhase::kPending && r.requeues > 0) {
      if (stopping_.insert(r.id).second) GANTRY_RETURN_IF_ERROR(EndInEngine(r.id, now));
      return Status::Ok();
    }
    if (!stopping_.empty() && stopping_.erase(r.id) > 0 && r.phase == JobPhase::kPending) {
      if (obs == ObservedState::kHeld || obs == ObservedState::kReleased) {
        GANTRY_RETURN_IF_ERROR(SubmitNew(r, now));
      }
      // Its processes are gone: what they saved is on the local tiers now. A requeued job
      // that starts again waits for those drains; an ended one is drained below.
      if (obs != ObservedState::kFinished && obs != ObservedState::kUnknown) {
        GANTRY_RETURN_IF_ERROR(AskToDrain(r.id, now, obs == ObservedState::kHeld));
      }
    }
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
      case RecoveryAction::kHoldAgain:
        // The resource manager requeued it on its own (its node failed): hold it and decide.
        to_requeue_[r.id] = {"requeued by the resource manager"};
        return Status::Ok();
      case RecoveryAction::kFinish:
      case RecoveryAction::kLost: {
        const std::string why =
            o == nullptr ? "lost: the resource manager no longer knows it" : o->end_state;
        GANTRY_RETURN_IF_ERROR(store_->Finish(r.id, now, why.empty() ? "ended" : why));
        if (report != nullptr) ++report->finished;
        // A save its last moments left short of the durable root is finished on its nodes --
        // also on those it ran on unseen (released, and ended, while gantryd was away).
        if (o != nullptr) NoteRanOn(r, o->placement);
        GANTRY_RETURN_IF_ERROR(AskToDrain(r.id, now, /*restart=*/false));
        ran_on_.erase(r.id);
        return EndInEngine(r.id, now, why == "cancelled");
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
    for (const NodeGpus& s : placement) {
      auto n = node_index_.find(s.node);
      if (n != node_index_.end() && engine_->node_state(n->second) == NodeState::kDown) {
        // Reported on a down node: it cannot run there; hold it and decide again.
        to_requeue_[r.id] = {"on node " + s.node + ", which is down"};
        return Status::Ok();
      }
    }
    if (r.phase == JobPhase::kPending) {
      // Released by someone else: record it as decided there.
      GANTRY_RETURN_IF_ERROR(store_->Decide(r.id, placement, now));
      GANTRY_RETURN_IF_ERROR(
          store_->LogEvent(now, r.id, "released-outside", "started without a Gantry decision"));
    }
    if (o.state == ObservedState::kRunning) NoteRanOn(r, o.placement);
    if (o.state == ObservedState::kRunning) {
      Result<JobRecord> cur = store_->Get(r.id);
      if (!cur.ok()) return cur.status();
      if (cur->phase == JobPhase::kStarting) {
        GANTRY_RETURN_IF_ERROR(store_->Started(r.id, now, o.placement));
        if (report != nullptr) ++report->confirmed;
        // Seen running at this observation: the time since the decision, to the cycle.
        if (metrics_ != nullptr && report != nullptr && cur->decided >= 0) {
          metrics_
              ->GetHistogram("gantry_decision_to_running_seconds",
                             "From a start decision to the resource manager reporting the job "
                             "running (whole seconds, observed once per cycle).",
                             {}, {1, 2, 5, 10, 30, 60, 300, 1800})
              .Observe(static_cast<double>(now - cur->decided));
        }
      }
    }
    if (ours_running) return Status::Ok();  // the engine already books it there
    if (it != by_id_.end()) GANTRY_RETURN_IF_ERROR(EndInEngine(r.id, now));
    GANTRY_ASSIGN_OR_RETURN(JobRequest * req, NewRequest(r, now));
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
    GANTRY_ASSIGN_OR_RETURN(JobRequest * req, NewRequest(r, now));
    if (req->gpu_type_mask == 0) {
      return store_->Finish(r.id, now, "rejected: none of its GPU types is in the cluster");
    }
    Status s = engine_->Submit(*req, now);
    if (!s.ok()) return store_->Finish(r.id, now, "rejected: " + s.message());
    by_id_[r.id] = req->index;
    if (!r.datasets.empty()) datasets_of_[r.id] = r.datasets;
    return Status::Ok();
  }

  // Job `r`, which declared a checkpoint location, ran on `placement`.
  void NoteRanOn(const JobRecord& r, const std::vector<NodeGpus>& placement) {
    if (r.checkpoint.empty() || placement.empty()) return;
    RanOn& ran = ran_on_[r.id];
    ran.checkpoint = r.checkpoint;
    for (const NodeGpus& s : placement) ran.nodes.insert(s.node);
  }

  // An ended job the store never saw ran while gantryd was away (fail-open hands held jobs to
  // Slurm's own scheduler): the nodes it ran on are asked to drain, once, while the resource
  // manager still names them (Slurm: for MinJobAge after the end).
  Status DrainUnseen(const RmJob& o, Time now) {
    if (o.request.checkpoint.empty() || o.placement.empty() ||
        !drained_unseen_.insert(o.request.id).second) {
      return Status::Ok();
    }
    NoteRanOn(o.request, o.placement);
    Status s = AskToDrain(o.request.id, now, /*restart=*/false);
    ran_on_.erase(o.request.id);
    return s;
  }

  // Takes the job out of the engine (wherever it stands there) and submits it again, pending.
  Status Resubmit(const std::string& id, Time now) {
    GANTRY_RETURN_IF_ERROR(EndInEngine(id, now));
    GANTRY_ASSIGN_OR_RETURN(JobRecord r, store_->Get(id));
    // Its last run may have left a save on a node (the process was stopped, or saved at a
    // preemption signal and exited): finished there before the job starts again.
    GANTRY_RETURN_IF_ERROR(AskToDrain(id, now, /*restart=*/true));
    return SubmitNew(r, now);
  }

  // Asks the agents of the nodes a job that declared a checkpoint location ran on to drain
  // their local tiers; a `restart`ed job waits for those drains at its next start.
  // During Open, before a stager is set, the request waits for set_stager.
  Status AskToDrain(const std::string& id, Time now, bool restart) {
    auto ran = ran_on_.find(id);
    if (ran == ran_on_.end() || ran->second.nodes.empty()) return Status::Ok();
    const std::vector<std::string> nodes(ran->second.nodes.begin(), ran->second.nodes.end());
    if (stager_ == nullptr) {
      if (opening_) deferred_drains_.push_back({id, nodes, restart, now});
      return Status::Ok();
    }
    return DrainLogged(id, nodes, restart, now);
  }

  Status DrainLogged(const std::string& id, const std::vector<std::string>& nodes, bool restart,
                     Time now) {
    stager_->DrainAfterEnd(nodes, restart ? id : "");
    std::string list;
    for (const std::string& n : nodes) list += (list.empty() ? "" : ",") + n;
    return store_->LogEvent(
        now, id, "checkpoint-drain",
        "asked the agents of " + list + " to finish saves left in their local tier" +
            (restart && wait_for_data_ > 0 ? "; it starts again once they have" : ""));
  }

  // Takes the job out of the engine: finished, or cancelled (`cancelled`, or when pending).
  Status EndInEngine(const std::string& id, Time now, bool cancelled = false) {
    waiting_.erase(id);
    if (cancelled) GANTRY_RETURN_IF_ERROR(ForgetSignal(id));
    datasets_of_.erase(id);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return Status::Ok();
    const JobIndex j = it->second;
    by_id_.erase(it);
    switch (engine_->status(j).phase) {
      case JobStatus::Phase::kRunning:
        return cancelled ? engine_->Cancel(j, now) : engine_->Finish(j, now);
      case JobStatus::Phase::kPending:
        return engine_->Cancel(j, now);
      default:
        return Status::Ok();
    }
  }

  // The engine's QoS level of a job: the cluster spec's level of the QOS the resource manager
  // named (Cluster::QosLevel), so a restart under an edited spec sees the new levels; a record
  // that names none (older records, resource managers without QOS) keeps its own. A name the
  // spec does not list is logged once per gantryd run, not every cycle.
  Result<int> QosLevelOf(const JobRecord& r, Time now) {
    if (r.qos_name.empty()) return r.qos;
    bool unknown = false;
    const int level = cluster_.QosLevel(r.qos_name, &unknown);
    if (unknown && unknown_qos_.insert(r.qos_name).second) {
      GANTRY_RETURN_IF_ERROR(store_->LogEvent(
          now, r.id, "qos-unknown",
          "QOS '" + r.qos_name + "' is not in the cluster spec: its jobs get QoS level 0"));
    }
    return level;
  }

  Result<JobRequest*> NewRequest(const JobRecord& r, Time now) {
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
    GANTRY_ASSIGN_OR_RETURN(q.qos, QosLevelOf(r, now));
    q.checkpoint_interval = r.checkpoint_interval;
    q.restart_cost = r.restart_cost;
    q.datasets = r.datasets;
    q.checkpoint = r.checkpoint;
    q.preemptible = not_requeueable_.count(r.id) == 0;
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
  DataLocalityMap locality_;  // the engine's (EngineOptions::data_locality): outlives it
  std::unique_ptr<Engine> engine_;
  // Every request the engine was given, at stable addresses; a job submitted again (after a
  // refused start or a requeue) gets a new entry and index.
  std::deque<JobRequest> requests_;
  std::map<std::string, JobIndex> by_id_;  // the engine's current index of each active job
  // Jobs to hold again and requeue (preempted, interrupted by a down node, or requeued by the
  // resource manager itself), with why; kept across cycles until the resource manager did it.
  // `running`: a preemption's victim, which the requeue stops; queued again once it has
  // (stopping_).
  struct ToRequeue {
    ToRequeue() = default;
    ToRequeue(std::string w, bool r = false, std::string p = {})
        : why(std::move(w)), running(r), preemptor(std::move(p)) {}
    std::string why;
    bool running = false;
    std::string preemptor;  // a victim of this cycle's preemption: who takes its GPUs
  };
  std::map<std::string, ToRequeue> to_requeue_;
  std::set<std::string> withdrawn_;  // preemptors whose victim's requeue was refused (Withdraw)
  std::map<std::string, RmNode> rm_nodes_;  // the latest report of each node
  int64_t cycles_ = 0;
  MetricsRegistry* metrics_ = nullptr;
  Stager* stager_ = nullptr;
  Duration wait_for_data_ = 0;
  // The declared datasets of every job in the engine that declared any (few: a map walked
  // every cycle, not the whole queue).
  std::map<std::string, std::vector<std::string>> datasets_of_;
  // Drains asked for while Open reconciled, before set_stager (gantryd sets it after Open).
  struct DeferredDrain {
    std::string id;
    std::vector<std::string> nodes;
    bool restart;
    Time at;
  };
  std::vector<DeferredDrain> deferred_drains_;
  bool opening_ = false;
  // Jobs that declared a checkpoint location, with every node they were seen running on: the
  // nodes whose local tier may hold their newest checkpoint, asked while they wait, and drained
  // when they end or are requeued. Kept until the job ends; a restarted gantryd rebuilds them
  // from the store's start events (Open).
  struct RanOn {
    std::string checkpoint;
    std::set<std::string> nodes;
  };
  std::map<std::string, RanOn> ran_on_;
  // Jobs Gantry requeued whose last run the resource manager is still stopping (Slurm's
  // COMPLETING: the processes got their signal and may still be writing a save). Out of the
  // engine until it has let go: then queued again, and the nodes it ran on asked to drain --
  // a drain begun earlier could list the local tier before that last save reached it.
  std::set<std::string> stopping_;
  // Jobs the resource manager last reported it will not requeue (NoteRequeueable).
  std::set<std::string> not_requeueable_;
  // Ended jobs the store never saw whose nodes were asked to drain (DrainUnseen), while the
  // resource manager still lists them.
  std::set<std::string> drained_unseen_;
  // Decided jobs held back until their data is on their nodes.
  struct Waiting {
    std::vector<NodeGpus> placement;
    Time decided = 0;
    Time deadline = 0;
  };
  std::map<std::string, Waiting> waiting_;
  // Victims signalled for a preemption with a grace time: by whom, and until when they run.
  struct Signalled {
    std::string by;
    Time grace_end = 0;
  };
  std::map<std::string, Signalled> signalled_;
  std::string preempt_signal_ = "TERM";
  std::set<std::string> unknown_qos_;  // QOS names not in the spec, logged once each
  std::set<std::pair<std::string, std::string>> queue_series_;
  // The view published for each active job and what it was built from; reused while these
  // stay the same. In the order of the last Publish's active jobs (submit time, then id).
  struct CachedView {
    std::shared_ptr<const JobRecord> record;
    int team = 0;  // index in teams_
    JobIndex index = -1;
    Reason reason = Reason::kPriority;
    Time estimate = -1;
    uint64_t staging_sig = 0;  // of the staging progress the view shows
    std::shared_ptr<const JobView> view;
  };
  static bool SubmitOrder(const JobRecord& a, const JobRecord& b) {
    return a.submit != b.submit ? a.submit < b.submit : a.id < b.id;
  }
  std::vector<CachedView> views_;
  int64_t explained_ = 0;  // views (and sentences) built, for the tests
  // Held by the loop while it uses the engine (a cycle, Open), and by ExplainNow.
  mutable std::mutex engine_mu_;
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
  {
    std::lock_guard<std::mutex> lock(impl->engine_mu_);
    GANTRY_RETURN_IF_ERROR(impl->Open(now));
  }
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

void Controller::set_preempt_signal(const std::string& signal) { impl_->preempt_signal_ = signal; }

void Controller::set_stager(Stager* stager, Duration wait_for_data) {
  impl_->stager_ = stager;
  impl_->wait_for_data_ = std::max<Duration>(wait_for_data, 0);
  if (stager == nullptr) return;
  for (const Impl::DeferredDrain& d : impl_->deferred_drains_) {
    // Best effort: the drain is asked for either way; only its event could be lost.
    (void)impl_->DrainLogged(d.id, d.nodes, d.restart, d.at);
  }
  impl_->deferred_drains_.clear();
}

Status Controller::RequestCancel(const std::string& id, const std::string& by, Time now) {
  StateStore* store = impl_->store_;
  GANTRY_ASSIGN_OR_RETURN(JobRecord r, store->Get(id));
  if (r.phase == JobPhase::kDone)
    return NotFound("job " + id + " has ended (" + r.end_reason + ")");
  // Durable before acted on: the request is in the log even if gantryd dies right after.
  GANTRY_RETURN_IF_ERROR(store->LogEvent(now, id, "cancel", "requested by " + by));
  return impl_->rm_->Cancel(id);
}

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

Result<std::string> Controller::ExplainNow(const std::string& id) const {
  std::lock_guard<std::mutex> lock(impl_->engine_mu_);
  return Explain(id);
}

int64_t Controller::views_built() const { return impl_->explained_; }

const JobView* ControlSnapshot::Find(std::string_view id) const {
  std::call_once(by_id_once_, [this] {
    by_id_.reserve(jobs.size());
    for (const auto& v : jobs) by_id_.emplace(v->record.id, v.get());
  });
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

const std::vector<const JobView*>& ControlSnapshot::Queue() const {
  std::call_once(queue_once_, [this] {
    for (const auto& v : jobs) {
      if (v->record.phase == JobPhase::kPending) queue_.push_back(v.get());
    }
    // `jobs` is by submit time then id already: a stable sort on the estimate keeps that order
    // among equal estimates.
    std::stable_sort(queue_.begin(), queue_.end(), [](const JobView* a, const JobView* b) {
      const Time ea = a->estimated_start < 0 ? kInfiniteTime : a->estimated_start;
      const Time eb = b->estimated_start < 0 ? kInfiniteTime : b->estimated_start;
      return ea < eb;
    });
  });
  return queue_;
}

}  // namespace gantry::control
