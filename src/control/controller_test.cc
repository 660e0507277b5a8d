#include "gantry/control/controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/test_support.h"
#include "control/fake_agents.h"
#include "gantry/common/rng.h"

namespace gantry::control {
namespace {

using test_support::TempDir;

// Four nodes of eight GPUs in two NVLink domains; two teams.
constexpr const char* kSpec = R"(
name: ctl
levels: [nvlink]
gpu_types:
  - {name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}
topology:
  - name: "nv-{n}"
    level: nvlink
    repeat: 2
    nodes:
      - {count: 2, gpu_type: H100, gpus: 8}
teams:
  - {name: vision, quota_gpus: 24}
  - {name: nlp}
)";

// Thrown out of the resource manager to stand for gantryd dying at that instant: the
// controller is dropped without finishing the call, as SIGKILL would leave it.
struct Crash {};

// A resource manager that keeps its own state across gantryd restarts, as Slurm does: jobs
// are submitted held, start only on release, run for their duration and end. It checks what a
// real one would enforce: a job starts only when held, a node never runs more GPUs than it has.
class FakeRm : public ResourceManager {
 public:
  struct Entry {
    RmJob job;
    Duration run_for = 0;
    int starts = 0;
    int interrupts = 0;            // runs a node failure ended
    Time stopped_at = -1;          // job.stopping: when its processes are gone
    bool waits_for_nodes = false;  // released onto nodes a stopping run still holds
  };

  explicit FakeRm(const Cluster& cluster) {
    for (const Node& n : cluster.nodes()) capacity_[n.name] = n.gpus;
  }

  void Submit(const std::string& id, const std::string& team, int gpus, int per_node,
              Duration run_for, Time now) {
    Entry e;
    e.job.request.id = id;
    e.job.request.user = "u";
    e.job.request.team = team;
    e.job.request.queue = "gpu";
    e.job.request.submit = now;
    e.job.request.gpus = gpus;
    e.job.request.gpus_per_node = per_node;
    e.job.request.nodes = per_node > 0 ? gpus / per_node : 0;
    e.job.request.time_limit = run_for * 2;
    e.job.state = ObservedState::kHeld;
    e.run_for = run_for;
    jobs_[id] = e;
  }

  // Ends jobs whose time has come: runs being stopped first, then those released onto their
  // nodes start there, then runs end.
  void Advance(Time now) {
    now_ = now;
    for (auto& [id, e] : jobs_) {
      if (!e.job.stopping || now < e.stopped_at) continue;
      for (const NodeGpus& s : e.job.placement) used_[s.node] -= s.gpus;
      RmJob held;  // held again, nowhere
      held.request = e.job.request;
      e.job = held;
    }
    for (auto& [id, e] : jobs_) {
      if (e.waits_for_nodes && e.job.state == ObservedState::kReleased && Fits(e.job.placement)) {
        e.waits_for_nodes = false;
        for (const NodeGpus& s : e.job.placement) used_[s.node] += s.gpus;
        e.job.state = ObservedState::kRunning;
        e.job.start = now_;
        ++e.starts;
      }
    }
    for (auto& [id, e] : jobs_) {
      if (e.job.state == ObservedState::kRunning && !e.job.stopping &&
          now >= e.job.start + e.run_for) {
        e.job.state = ObservedState::kFinished;
        e.job.end_state = "completed";
        for (const NodeGpus& s : e.job.placement) used_[s.node] -= s.gpus;
      }
    }
  }

  Result<std::vector<RmJob>> Jobs() override {
    std::vector<RmJob> out;
    for (const auto& [id, e] : jobs_) out.push_back(e.job);
    return out;
  }

  Result<std::vector<RmNode>> Nodes() override {
    std::vector<RmNode> out;
    for (const auto& [name, cap] : capacity_) {
      RmNode n;
      n.name = name;
      auto it = node_state_.find(name);
      n.state = it == node_state_.end() ? NodeState::kUp : it->second;
      n.rm_state = n.state == NodeState::kUp ? "idle" : "down";
      out.push_back(n);
    }
    return out;
  }

  // As Slurm does when a node fails: its jobs are killed and, being requeueable, put back in
  // the queue -- pending, not held, still pinned to the nodes they ran on.
  void NodeDown(const std::string& node) {
    node_state_[node] = NodeState::kDown;
    for (auto& [id, e] : jobs_) {
      if (e.job.state != ObservedState::kRunning) continue;
      bool there = false;
      for (const NodeGpus& s : e.job.placement) there = there || s.node == node;
      if (!there) continue;
      for (const NodeGpus& s : e.job.placement) used_[s.node] -= s.gpus;
      e.job.state = ObservedState::kReleased;
      e.job.start = -1;
      ++e.interrupts;
    }
  }

  Status Requeue(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    Entry& e = it->second;
    // Slurm requeues a finished batch job too, while slurmctld still remembers it.
    if (e.job.state == ObservedState::kFinished && !requeue_finished_) {
      return FailedPrecondition("job ended");
    }
    // Slurm timed out; gantryd asked, so the GPUs are no double booking (Start) until then.
    if (auto u = unavailable_requeue_.find(id); u != unavailable_requeue_.end()) {
      if (u->second-- > 0) return Unavailable("slurmctld did not answer");
      unavailable_requeue_.erase(u);  // answered: its GPUs are no longer asked for
    }
    // Its flag turned off after the observation that made it a victim.
    if (disable_requeue_.erase(id) > 0) e.job.requeueable = false;
    // As Slurm refuses a --no-requeue job ("Requested operation is presently disabled").
    if (!e.job.requeueable) return PermissionDenied("job may not be requeued");
    ++requeues_[id];
    if (e.job.state == ObservedState::kRunning && stop_time_ > 0) {
      // As Slurm does: the job is held at once, but its run is stopped (COMPLETING) and keeps
      // its nodes until its processes are gone.
      e.job.stopping = true;
      e.stopped_at = now_ + stop_time_;
      return Status::Ok();
    }
    if (e.job.state == ObservedState::kRunning) {
      for (const NodeGpus& s : e.job.placement) used_[s.node] -= s.gpus;
    }
    e.job.state = ObservedState::kHeld;
    e.job.placement.clear();
    e.job.start = -1;
    if (crash_after_requeue_) {
      crash_after_requeue_ = false;
      throw Crash{};
    }
    return Status::Ok();
  }

  Status Cancel(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    Entry& e = it->second;
    if (e.job.state == ObservedState::kFinished) return FailedPrecondition("job ended");
    if (e.job.state == ObservedState::kRunning) {
      for (const NodeGpus& s : e.job.placement) used_[s.node] -= s.gpus;
    }
    e.job.state = ObservedState::kFinished;
    e.job.end_state = "cancelled";
    return Status::Ok();
  }

  Status Signal(const std::string& id, const std::string& signal) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    if (it->second.job.state != ObservedState::kRunning) return FailedPrecondition("not running");
    signals_.push_back(id + ":" + signal);
    return Status::Ok();
  }
  // The job's program exits on its own (e.g. after saving a checkpoint on a signal).
  void Exit(const std::string& id, const std::string& end_state) {
    Entry& e = jobs_.at(id);
    for (const NodeGpus& s : e.job.placement) used_[s.node] -= s.gpus;
    e.job.state = ObservedState::kFinished;
    e.job.end_state = end_state;
  }

  Status Start(const std::string& id, const std::vector<NodeGpus>& placement) override {
    if (crash_before_start_) {
      crash_before_start_ = false;
      throw Crash{};
    }
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    Entry& e = it->second;
    if (refuse_.count(id) > 0) {
      refuse_.erase(id);
      return FailedPrecondition("refused " + id);
    }
    if (e.job.state != ObservedState::kHeld) {
      ++violations_;  // started again while not held: a double start
      return FailedPrecondition("job " + id + " is not held");
    }
    for (const NodeGpus& s : placement) {
      if (node_state_.count(s.node) > 0 && node_state_[s.node] != NodeState::kUp) {
        ++violations_;  // placed on a node that takes no jobs
        return FailedPrecondition("node " + s.node + " is not up");
      }
      // GPUs a run being stopped still holds are free to the engine (it lets go of them soon).
      if (used_[s.node] - StoppingGpus(s.node) - AskedToStopGpus(s.node) + s.gpus >
          capacity_[s.node]) {
        ++violations_;  // the engine booked GPUs that are busy
        return FailedPrecondition("node " + s.node + " is full");
      }
    }
    if (!Fits(placement)) {
      // Its nodes are still held by a run being stopped: released, it starts once they are
      // free (Advance).
      e.job.state = ObservedState::kReleased;
      e.job.placement = placement;
      e.waits_for_nodes = true;
      return Status::Ok();
    }
    for (const NodeGpus& s : placement) used_[s.node] += s.gpus;
    e.job.state = ObservedState::kRunning;
    e.job.placement = placement;
    e.job.start = now_;
    ++e.starts;
    if (crash_after_start_) {
      crash_after_start_ = false;
      throw Crash{};
    }
    return Status::Ok();
  }

  bool Fits(const std::vector<NodeGpus>& placement) {
    for (const NodeGpus& s : placement) {
      if (used_[s.node] + s.gpus > capacity_[s.node]) return false;
    }
    return true;
  }
  // GPUs of running jobs gantryd asked to requeue, in vain so far.
  int AskedToStopGpus(const std::string& node) const {
    int gpus = 0;
    for (const auto& [id, e] : jobs_) {
      if (e.job.state != ObservedState::kRunning || unavailable_requeue_.count(id) == 0) continue;
      for (const NodeGpus& s : e.job.placement) gpus += s.node == node ? s.gpus : 0;
    }
    return gpus;
  }
  int StoppingGpus(const std::string& node) const {
    int gpus = 0;
    for (const auto& [id, e] : jobs_) {
      if (!e.job.stopping) continue;
      for (const NodeGpus& s : e.job.placement) gpus += s.node == node ? s.gpus : 0;
    }
    return gpus;
  }

  std::map<std::string, Entry> jobs_;
  Duration stop_time_ = 0;  // > 0: a requeued run keeps its nodes this long (Slurm's KillWait)
  std::map<std::string, int> capacity_;
  std::map<std::string, int> used_;
  std::set<std::string> refuse_;
  std::set<std::string> disable_requeue_;  // jobs made not requeueable when asked to requeue
  std::map<std::string, int> unavailable_requeue_;  // requeues of a job that fail this often
  std::map<std::string, NodeState> node_state_;
  std::map<std::string, int> requeues_;
  bool crash_after_requeue_ = false;
  bool requeue_finished_ = false;
  std::vector<std::string> signals_;
  bool crash_before_start_ = false;
  bool crash_after_start_ = false;
  int violations_ = 0;
  Time now_ = 0;
};

class ControllerTest : public testing::Test {
 protected:
  void SetUp() override {
    Result<Cluster> c = ParseClusterSpec(kSpec, "test");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value();
    Result<Profile> p = FindProfile("fifo-easy", {});
    ASSERT_TRUE(p.ok());
    profile_ = *p;
    auto s = StateStore::Open(dir_.sub("state.db"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    rm_ = std::make_unique<FakeRm>(cluster_);
  }

  std::unique_ptr<Controller> Open(Time now) {
    auto c = Controller::Open(cluster_, profile_, store_.get(), rm_.get(), now);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  JobPhase PhaseOf(const std::string& id) {
    Result<JobRecord> r = store_->Get(id);
    EXPECT_TRUE(r.ok()) << id << ": " << r.status().ToString();
    return r.ok() ? r->phase : JobPhase::kDone;
  }

  // The store's event log, one line per event, for failure messages.
  std::string EventLog() {
    Result<std::vector<StoreEvent>> events = store_->Events(0, 100000);
    if (!events.ok()) return events.status().ToString();
    std::string all;
    for (const StoreEvent& e : *events) {
      all += std::to_string(e.time) + " " + e.job + " " + e.kind + " " + e.detail + "\n";
    }
    return all;
  }

  TempDir dir_;
  Cluster cluster_;
  Profile profile_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<FakeRm> rm_;
};

TEST_F(ControllerTest, StartsHeldJobsWhereTheEngineSaysAndFollowsThemToTheEnd) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  rm_->Submit("1", "vision", 16, 8, 100, 0);
  rm_->Submit("2", "nlp", 16, 8, 50, 0);
  rm_->Submit("3", "nlp", 8, 8, 10, 0);
  rm_->Advance(1);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(1, &r).ok());
  EXPECT_EQ(r.observed, 3);
  EXPECT_EQ(r.submitted, 3);
  EXPECT_EQ(r.started, 2);  // 1 and 2 fill the four nodes; 3 waits
  EXPECT_EQ(PhaseOf("1"), JobPhase::kStarting);
  EXPECT_EQ(PhaseOf("3"), JobPhase::kPending);
  Result<JobStatus> st = ctl->JobStatusOf("3");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->phase, JobStatus::Phase::kPending);
  EXPECT_NE(st->reason, Reason::kNone);
  // Job 1's two nodes form one NVLink domain, as the topology asks.
  const auto& p1 = rm_->jobs_["1"].job.placement;
  ASSERT_EQ(p1.size(), 2u);
  EXPECT_EQ(p1[0].node.substr(0, 4), p1[1].node.substr(0, 4));

  rm_->Advance(2);
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  EXPECT_EQ(r.confirmed, 2);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kRunning);

  rm_->Advance(60);  // job 2 ends; job 3 takes one of its nodes
  ASSERT_TRUE(ctl->Cycle(60, &r).ok());
  EXPECT_EQ(r.finished, 1);
  EXPECT_EQ(r.started, 1) << EventLog();
  EXPECT_EQ(PhaseOf("2"), JobPhase::kDone);
  EXPECT_EQ(store_->Get("2")->end_reason, "completed");
  EXPECT_EQ(rm_->jobs_["3"].starts, 1);
  EXPECT_EQ(rm_->violations_, 0);
}

TEST_F(ControllerTest, PublishesASnapshotAndMetricsEachCycle) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  MetricsRegistry metrics;
  ctl->set_metrics(&metrics);
  EXPECT_EQ(ctl->Snapshot()->time, 0);  // published by Open
  EXPECT_TRUE(ctl->Snapshot()->jobs.empty());
  rm_->Submit("1", "nlp", 32, 8, 100, 0);
  rm_->Submit("2", "nlp", 8, 8, 10, 0);
  rm_->Submit("3", "vision", 8, 8, 10, 0);
  rm_->Advance(1);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
  std::shared_ptr<const ControlSnapshot> snap = ctl->Snapshot();
  EXPECT_EQ(snap->time, 1);
  EXPECT_EQ(snap->cycles, 1);
  EXPECT_EQ(snap->busy_gpus, 32);
  ASSERT_EQ(snap->jobs.size(), 3u);
  EXPECT_EQ(snap->jobs[0]->record.id, "1");
  EXPECT_EQ(snap->jobs[0]->record.phase, JobPhase::kStarting);
  EXPECT_EQ(snap->jobs[1]->record.phase, JobPhase::kPending);
  EXPECT_FALSE(snap->jobs[1]->reason.empty());
  EXPECT_FALSE(snap->jobs[1]->explain.empty());
  std::string text = metrics.PrometheusText();
  EXPECT_NE(text.find("gantry_decisions_total 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_gpus_busy{domain=\"nv-0\"} 16"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_queue_jobs{reason="), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_cycle_seconds_count 1"), std::string::npos) << text;
  // Everything ends: the queue gauges go to zero instead of keeping their last depth.
  // Job 1, decided at 1, is seen running at 50.
  rm_->Advance(50);
  ASSERT_TRUE(ctl->Cycle(50, nullptr).ok());
  text = metrics.PrometheusText();
  EXPECT_NE(text.find("gantry_decision_to_running_seconds_count 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_decision_to_running_seconds_sum 49"), std::string::npos) << text;
  rm_->Advance(101);
  ASSERT_TRUE(ctl->Cycle(101, nullptr).ok());
  rm_->Advance(200);
  ASSERT_TRUE(ctl->Cycle(200, nullptr).ok());
  text = metrics.PrometheusText();
  EXPECT_EQ(text.find("gantry_queue_jobs{reason=\"Priority\",team=\"nlp\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("team=\"nlp\"} 0"), std::string::npos) << text;
  EXPECT_EQ(ctl->Snapshot()->jobs.size(), 0u);
}

// A job's view and sentence are built when it is new or something it shows changed, not for
// every pending job every cycle; the reasons (and the queue depth per reason) stay exact.
TEST_F(ControllerTest, BuildsAJobsSentenceOnlyWhenItChanges) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  MetricsRegistry metrics;
  ctl->set_metrics(&metrics);
  // 32 GPUs: the first four whole-node jobs of nlp run, the rest wait.
  for (int i = 0; i < 20; ++i) rm_->Submit(std::to_string(100 + i), "nlp", 8, 8, 50, 0);
  rm_->Advance(1);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
  rm_->Advance(2);
  ASSERT_TRUE(ctl->Cycle(2, nullptr).ok());
  const int64_t settled = ctl->views_built();
  EXPECT_GE(settled, 20);
  std::shared_ptr<const ControlSnapshot> before = ctl->Snapshot();
  for (Time t = 3; t < 8; ++t) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
  }
  EXPECT_EQ(ctl->views_built(), settled) << "idle cycles rebuilt views";
  std::shared_ptr<const ControlSnapshot> after = ctl->Snapshot();
  ASSERT_EQ(after->jobs.size(), 20u);
  for (size_t i = 0; i < after->jobs.size(); ++i) {
    EXPECT_EQ(after->jobs[i].get(), before->jobs[i].get()) << "a view not shared: " << i;
    // The reason shown is the engine's now, and the sentence the engine's for it.
    Result<JobStatus> st = ctl->JobStatusOf(after->jobs[i]->record.id);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(after->jobs[i]->reason, ReasonName(st->reason));
    EXPECT_EQ(after->jobs[i]->explain, *ctl->Explain(after->jobs[i]->record.id));
    EXPECT_EQ(*ctl->ExplainNow(after->jobs[i]->record.id),
              *ctl->Explain(after->jobs[i]->record.id));
  }
  // The queue depth per reason counts every pending job by its reason of this cycle.
  std::map<std::string, int> depth;
  for (const auto& v : after->jobs) {
    if (v->record.phase == JobPhase::kPending) ++depth[v->reason];
  }
  ASSERT_FALSE(depth.empty());
  std::string text = metrics.PrometheusText();
  for (const auto& [reason, n] : depth) {
    const std::string series =
        "gantry_queue_jobs{reason=\"" + reason + "\",team=\"nlp\"} " + std::to_string(n) + "\n";
    EXPECT_NE(text.find(series), std::string::npos) << series << text;
  }
  // Four jobs end and four more start: those eight change, and the waiting ones whose reason or
  // estimate moved; nothing else is rebuilt.
  rm_->Advance(60);
  ASSERT_TRUE(ctl->Cycle(60, nullptr).ok());
  std::shared_ptr<const ControlSnapshot> moved = ctl->Snapshot();
  int changed = 0;
  for (const auto& v : moved->jobs) {
    const JobView* old = before->Find(v->record.id);
    if (old == nullptr || old != v.get()) ++changed;
    Result<JobStatus> st = ctl->JobStatusOf(v->record.id);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(v->reason, ReasonName(st->reason)) << v->record.id;
    EXPECT_EQ(v->explain, *ctl->Explain(v->record.id)) << v->record.id;
  }
  EXPECT_EQ(ctl->views_built() - settled, changed);
  EXPECT_GE(changed, 4);
}

TEST_F(ControllerTest, ARefusedStartGoesBackToPendingAndStartsLater) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  rm_->Submit("1", "vision", 8, 8, 100, 0);
  rm_->refuse_.insert("1");
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(1, &r).ok());
  EXPECT_EQ(r.refused, 1);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kPending);
  EXPECT_EQ(store_->Get("1")->requeues, 1);
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(rm_->jobs_["1"].starts, 1);
  bool logged = false;
  Result<std::vector<StoreEvent>> events = store_->Events(0, 100);
  ASSERT_TRUE(events.ok());
  for (const StoreEvent& e : *events) {
    logged = logged || (e.kind == "requeue" && e.detail.find("refused 1") != std::string::npos);
  }
  EXPECT_TRUE(logged);
}

TEST_F(ControllerTest, RestartAdoptsRunningJobsAndKeepsTheQueue) {
  {
    auto ctl = Open(0);
    rm_->Submit("1", "nlp", 32, 8, 1000, 0);
    rm_->Submit("2", "nlp", 8, 8, 10, 5);
    ASSERT_TRUE(ctl->Cycle(10, nullptr).ok());
  }  // gantryd gone; Slurm runs on
  EXPECT_EQ(rm_->jobs_["1"].job.state, ObservedState::kRunning);
  rm_->Advance(20);
  auto ctl = Open(20);
  ASSERT_NE(ctl, nullptr);
  Result<JobStatus> one = ctl->JobStatusOf("1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->phase, JobStatus::Phase::kRunning);
  EXPECT_EQ(one->reason, Reason::kAdopted);
  EXPECT_EQ(ctl->JobStatusOf("2")->phase, JobStatus::Phase::kPending);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kRunning);  // confirmed on restart
  ASSERT_TRUE(ctl->Cycle(21, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["2"].starts, 0);  // the cluster is full until job 1 ends
  rm_->Advance(1001);
  ASSERT_TRUE(ctl->Cycle(1001, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["2"].starts, 1);
  EXPECT_EQ(rm_->violations_, 0);
}

TEST_F(ControllerTest, JobsReleasedOrCancelledBehindItsBackAreAccountedFor) {
  auto ctl = Open(0);
  rm_->Submit("1", "nlp", 32, 8, 1000, 0);
  rm_->Submit("2", "nlp", 8, 8, 100, 0);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());  // 1 takes the cluster, 2 waits
  EXPECT_EQ(PhaseOf("2"), JobPhase::kPending);
  // An administrator cancels 1 (Slurm forgets it) and releases 2 by hand onto a node.
  rm_->used_.clear();
  rm_->jobs_.erase("1");
  auto& two = rm_->jobs_["2"];
  two.job.state = ObservedState::kRunning;
  two.job.placement = {{"nv-1-n1", 8}};
  two.job.start = 2;
  rm_->used_["nv-1-n1"] = 8;
  rm_->Advance(3);
  ASSERT_TRUE(ctl->Cycle(3, nullptr).ok());
  EXPECT_EQ(PhaseOf("1"), JobPhase::kDone);
  EXPECT_NE(store_->Get("1")->end_reason.find("lost"), std::string::npos);
  EXPECT_EQ(PhaseOf("2"), JobPhase::kRunning);
  Result<JobStatus> st = ctl->JobStatusOf("2");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->phase, JobStatus::Phase::kRunning);
  EXPECT_EQ(ctl->engine().team_running_gpus(1), 8);  // nlp: 2 is booked where it runs
}

// Where a job runs in the fake, as node names.
std::set<std::string> NodesOf(const RmJob& j) {
  std::set<std::string> out;
  for (const NodeGpus& s : j.placement) out.insert(s.node);
  return out;
}

TEST_F(ControllerTest, ADownNodesJobsAreHeldAgainAndRunElsewhere) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  MetricsRegistry metrics;
  ctl->set_metrics(&metrics);
  rm_->Submit("1", "vision", 8, 8, 1000, 0);
  rm_->Submit("2", "nlp", 8, 8, 1000, 0);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(1, &r).ok());
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  ASSERT_EQ(PhaseOf("1"), JobPhase::kRunning);
  const std::string lost = *NodesOf(rm_->jobs_["1"].job).begin();
  const std::set<std::string> two_was = NodesOf(rm_->jobs_["2"].job);
  rm_->NodeDown(lost);  // Slurm kills job 1 and queues it again, unheld, pinned to `lost`
  rm_->Advance(3);
  ASSERT_TRUE(ctl->Cycle(3, &r).ok()) << EventLog();
  EXPECT_EQ(r.node_changes, 1);
  EXPECT_EQ(r.requeued, 1);
  EXPECT_EQ(rm_->requeues_["1"], 1);  // held again in the resource manager
  EXPECT_EQ(r.started, 1);            // and decided anew in the same cycle
  const Result<JobRecord> one = store_->Get("1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->phase, JobPhase::kStarting);
  EXPECT_EQ(one->requeues, 1);
  EXPECT_EQ(rm_->jobs_["1"].starts, 2);
  EXPECT_EQ(NodesOf(rm_->jobs_["1"].job).count(lost), 0u) << "restarted on the down node";
  EXPECT_EQ(NodesOf(rm_->jobs_["2"].job), two_was);  // job 2 was not touched
  EXPECT_EQ(rm_->jobs_["2"].starts, 1);
  EXPECT_EQ(ctl->engine().node_state(0) == NodeState::kDown ||
                ctl->engine().node_state(1) == NodeState::kDown ||
                ctl->engine().node_state(2) == NodeState::kDown ||
                ctl->engine().node_state(3) == NodeState::kDown,
            true);
  EXPECT_NE(EventLog().find("node-down " + lost), std::string::npos) << EventLog();
  const std::string text = metrics.PrometheusText();
  EXPECT_NE(text.find("gantry_jobs_requeued_total 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_nodes{state=\"down\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_nodes{state=\"up\"} 3"), std::string::npos) << text;
  // The snapshot shows the node down, and where each job runs.
  auto snap = ctl->Snapshot();
  for (const NodeView& n : snap->nodes) {
    if (n.name == lost) {
      EXPECT_EQ(n.state, "down");
      EXPECT_TRUE(n.jobs.empty());
      EXPECT_EQ(n.gpus_used, 0);
    }
  }
  // Nothing more happens to it while it runs elsewhere.
  rm_->Advance(4);
  ASSERT_TRUE(ctl->Cycle(4, &r).ok());
  EXPECT_EQ(PhaseOf("1"), JobPhase::kRunning);
  EXPECT_EQ(r.requeued, 0);
  EXPECT_EQ(rm_->violations_, 0);
  // The node comes back: the engine places on it again.
  rm_->node_state_[lost] = NodeState::kUp;
  ASSERT_TRUE(ctl->Cycle(5, &r).ok());
  EXPECT_EQ(r.node_changes, 1);
  EXPECT_NE(EventLog().find("node-up " + lost), std::string::npos);
  rm_->Submit("3", "nlp", 16, 8, 10, 5);
  ASSERT_TRUE(ctl->Cycle(6, &r).ok());
  EXPECT_EQ(r.started, 1) << EventLog();
  EXPECT_EQ(NodesOf(rm_->jobs_["3"].job).count(lost), 1u);
}

TEST_F(ControllerTest, ADrainedNodeKeepsItsJobsAndTakesNoNewOnes) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  rm_->Submit("1", "vision", 8, 8, 1000, 0);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
  const std::string busy = *NodesOf(rm_->jobs_["1"].job).begin();
  for (const auto& [name, cap] : rm_->capacity_) {
    if (name != busy) rm_->node_state_[name] = NodeState::kDrained;
  }
  rm_->node_state_[busy] = NodeState::kDrained;
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  EXPECT_EQ(r.node_changes, 4);
  EXPECT_EQ(r.requeued, 0);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kRunning);  // drained: its job goes on
  rm_->Submit("2", "nlp", 8, 8, 10, 2);
  ASSERT_TRUE(ctl->Cycle(3, &r).ok());
  EXPECT_EQ(r.started, 0);  // every node drained
  EXPECT_EQ(PhaseOf("2"), JobPhase::kPending);
  // A drained node that goes down: its job is requeued, and waits (nowhere to go).
  rm_->NodeDown(busy);
  ASSERT_TRUE(ctl->Cycle(4, &r).ok());
  EXPECT_EQ(r.requeued, 1);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kPending);
  rm_->node_state_.clear();  // all up again
  ASSERT_TRUE(ctl->Cycle(5, &r).ok());
  EXPECT_EQ(r.started, 2);
  EXPECT_EQ(rm_->violations_, 0);
}

// gantryd dies right after the resource manager held the interrupted job again, before the
// store knew: the restart sees it recorded running and held, and requeues it (Reconcile).
TEST_F(ControllerTest, ACrashDuringANodeDownRequeueLosesNothing) {
  auto ctl = Open(0);
  rm_->Submit("1", "vision", 8, 8, 1000, 0);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
  ASSERT_TRUE(ctl->Cycle(2, nullptr).ok());
  const std::string lost = *NodesOf(rm_->jobs_["1"].job).begin();
  rm_->NodeDown(lost);
  rm_->crash_after_requeue_ = true;
  EXPECT_THROW((void)ctl->Cycle(3, nullptr), Crash);
  ctl.reset();
  EXPECT_EQ(PhaseOf("1"), JobPhase::kRunning);  // the store never heard of the requeue
  ctl = Open(4);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kPending);
  ASSERT_TRUE(ctl->Cycle(5, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["1"].starts, 2);
  EXPECT_EQ(NodesOf(rm_->jobs_["1"].job).count(lost), 0u);
  EXPECT_EQ(rm_->violations_, 0);
}

// While gantryd was away a node failed and Slurm requeued its job on its own (pending, not
// held: Slurm would start it again wherever it likes). The restart holds it and decides.
TEST_F(ControllerTest, AJobTheResourceManagerRequeuedItselfIsHeldAndDecidedAgain) {
  {
    auto ctl = Open(0);
    rm_->Submit("1", "vision", 8, 8, 1000, 0);
    ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
    ASSERT_TRUE(ctl->Cycle(2, nullptr).ok());
    ASSERT_EQ(PhaseOf("1"), JobPhase::kRunning);
  }
  const std::string lost = *NodesOf(rm_->jobs_["1"].job).begin();
  rm_->NodeDown(lost);
  rm_->node_state_[lost] = NodeState::kUp;  // and back before gantryd returns
  ASSERT_EQ(rm_->jobs_["1"].job.state, ObservedState::kReleased);
  auto ctl = Open(10);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(rm_->requeues_["1"], 1);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kPending);
  EXPECT_NE(EventLog().find("requeued by the resource manager"), std::string::npos) << EventLog();
  ASSERT_TRUE(ctl->Cycle(11, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["1"].starts, 2);
  EXPECT_EQ(rm_->violations_, 0);
}

TEST_F(ControllerTest, CancelRecordsTheRequestAndTheNextCycleEndsTheJob) {
  auto ctl = Open(0);
  rm_->Submit("1", "nlp", 32, 8, 1000, 0);
  rm_->Submit("2", "nlp", 8, 8, 10, 0);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());  // 1 runs on everything; 2 waits
  EXPECT_EQ(ctl->RequestCancel("nope", "op", 2).code(), StatusCode::kNotFound);
  ASSERT_TRUE(ctl->RequestCancel("2", "team nlp", 2).ok());
  ASSERT_TRUE(ctl->RequestCancel("1", "operator", 2).ok());
  EXPECT_NE(EventLog().find("2 cancel requested by team nlp"), std::string::npos) << EventLog();
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(3, &r).ok());
  EXPECT_EQ(r.finished, 2);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kDone);
  EXPECT_EQ(store_->Get("1")->end_reason, "cancelled");
  EXPECT_EQ(store_->Get("2")->end_reason, "cancelled");
  EXPECT_EQ(ctl->JobStatusOf("1").status().code(), StatusCode::kNotFound);  // out of the engine
  EXPECT_EQ(ctl->engine().free_index().total_free(), 32);
  // Cancelling a job that has ended is NotFound, and nothing is sent.
  EXPECT_EQ(ctl->RequestCancel("1", "operator", 4).code(), StatusCode::kNotFound);
}

// A job that was started while gantryd was away (fail-open: Slurm's own scheduler) is adopted
// where it runs, so its GPUs count and no other job is placed onto them.
TEST_F(ControllerTest, AJobFirstSeenRunningIsAdoptedWhereItRuns) {
  auto ctl = Open(0);
  rm_->Submit("1", "vision", 16, 8, 1000, 0);
  auto& one = rm_->jobs_["1"];
  one.job.state = ObservedState::kRunning;
  one.job.placement = {{"nv-0-n0", 8}, {"nv-0-n1", 8}};
  one.job.start = 0;
  rm_->used_["nv-0-n0"] = rm_->used_["nv-0-n1"] = 8;
  rm_->Submit("2", "nlp", 32, 8, 10, 1);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  EXPECT_EQ(r.submitted, 2);
  EXPECT_EQ(r.started, 0);  // 32 GPUs do not fit beside the adopted 16
  EXPECT_EQ(PhaseOf("1"), JobPhase::kRunning);
  Result<JobStatus> st = ctl->JobStatusOf("1");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->reason, Reason::kAdopted);
  EXPECT_EQ(ctl->engine().team_running_gpus(0), 16);
  auto snap = ctl->Snapshot();
  ASSERT_EQ(snap->teams.size(), 2u);  // the shared "(other)" team shows only with jobs
  EXPECT_EQ(snap->teams[0].name, "vision");
  EXPECT_EQ(snap->teams[0].running_gpus, 16);
  EXPECT_EQ(snap->teams[0].quota_gpus, 24);
  EXPECT_EQ(snap->teams[1].pending_jobs, 1);
  EXPECT_EQ(snap->teams[1].pending_gpus, 32);
  EXPECT_EQ(snap->nodes[0].gpus_used, 8);
  EXPECT_EQ(snap->nodes[0].domain, "nv-0");
  EXPECT_EQ(snap->nodes[0].jobs, std::vector<std::string>{"1"});
  EXPECT_EQ(snap->profile.name, "fifo-easy");
  EXPECT_EQ(rm_->violations_, 0);
}

// gantryd dies at random instants (before or after Slurm applies a release, or between
// cycles) and restarts: every job runs exactly once, none is lost, none stays held, and no
// node ever runs more GPUs than it has.
TEST_F(ControllerTest, CrashesAtRandomInstantsLoseNothingAndStartNothingTwice) {
  Rng rng(77);
  const int kJobs = 60;
  Time now = 0;
  int submitted = 0;
  int crashes = 0;
  auto ctl = Open(now);
  auto all_finished = [&] {
    for (const auto& [id, e] : rm_->jobs_) {
      if (e.job.state != ObservedState::kFinished) return false;
    }
    return submitted == kJobs;
  };
  for (int step = 0; step < 400 && !all_finished(); ++step) {
    now += 5;
    while (submitted < kJobs && rng.Next() % 3 != 0) {
      const int per_node = 1 << (rng.Next() % 4);  // 1, 2, 4, 8
      const int nodes = per_node == 8 ? 1 + static_cast<int>(rng.Next() % 2) : 1;
      rm_->Submit("j" + std::to_string(submitted), submitted % 2 ? "nlp" : "vision",
                  per_node * nodes, per_node, 10 + static_cast<Duration>(rng.Next() % 60), now);
      ++submitted;
    }
    rm_->Advance(now);
    const uint64_t dice = rng.Next() % 10;
    if (dice == 0) rm_->crash_before_start_ = true;
    if (dice == 1) rm_->crash_after_start_ = true;
    try {
      if (ctl == nullptr || dice == 2) {
        ctl.reset();  // died between cycles
        ++crashes;
        ctl = Open(now);
        ASSERT_NE(ctl, nullptr);
      }
      ASSERT_TRUE(ctl->Cycle(now, nullptr).ok());
    } catch (const Crash&) {
      ctl.reset();
      ++crashes;
    }
    rm_->crash_before_start_ = rm_->crash_after_start_ = false;
  }
  EXPECT_GT(crashes, 10);
  EXPECT_EQ(rm_->violations_, 0);
  ASSERT_EQ(static_cast<int>(rm_->jobs_.size()), kJobs);
  for (const auto& [id, e] : rm_->jobs_) {
    EXPECT_EQ(e.job.state, ObservedState::kFinished) << id << " never ended";
    EXPECT_EQ(e.starts, 1) << id;
  }
  Result<std::vector<JobRecord>> active = store_->ActiveJobs();
  ASSERT_TRUE(active.ok());
  EXPECT_TRUE(active->empty()) << active->size() << " jobs still active, first " << (*active)[0].id;
}

// The same with nodes failing and coming back at random instants too: every job still ends
// having completed exactly once (one start per node failure that interrupted it, plus one), no
// job is ever started on a node that is not up, and none is left held or lost.
TEST_F(ControllerTest, CrashesAndNodeFailuresAtRandomInstantsLoseNothing) {
  Rng rng(2026);
  const int kJobs = 40;
  Time now = 0;
  int submitted = 0;
  int crashes = 0;
  int failures = 0;
  std::vector<std::string> names;
  for (const auto& [name, cap] : rm_->capacity_) names.push_back(name);
  auto ctl = Open(now);
  auto all_finished = [&] {
    for (const auto& [id, e] : rm_->jobs_) {
      if (e.job.state != ObservedState::kFinished) return false;
    }
    return submitted == kJobs;
  };
  for (int step = 0; step < 600 && !all_finished(); ++step) {
    now += 5;
    while (submitted < kJobs && rng.Next() % 3 != 0) {
      const int per_node = 1 << (rng.Next() % 4);
      rm_->Submit("j" + std::to_string(submitted), submitted % 2 ? "nlp" : "vision", per_node,
                  per_node, 10 + static_cast<Duration>(rng.Next() % 60), now);
      ++submitted;
    }
    rm_->Advance(now);
    // A node fails now and then (at most one down at a time) and comes back later.
    const std::string node = names[rng.Next() % names.size()];
    const bool any_down = std::any_of(rm_->node_state_.begin(), rm_->node_state_.end(),
                                      [](const auto& kv) { return kv.second != NodeState::kUp; });
    if (!any_down && rng.Next() % 8 == 0) {
      rm_->NodeDown(node);
      ++failures;
    } else if (any_down && rng.Next() % 4 == 0) {
      rm_->node_state_.clear();
    }
    const uint64_t dice = rng.Next() % 12;
    if (dice == 0) rm_->crash_before_start_ = true;
    if (dice == 1) rm_->crash_after_start_ = true;
    if (dice == 3) rm_->crash_after_requeue_ = true;
    try {
      if (ctl == nullptr || dice == 2) {
        ctl.reset();
        ++crashes;
        ctl = Open(now);
        ASSERT_NE(ctl, nullptr);
      }
      ASSERT_TRUE(ctl->Cycle(now, nullptr).ok()) << EventLog();
    } catch (const Crash&) {
      ctl.reset();
      ++crashes;
    }
    rm_->crash_before_start_ = rm_->crash_after_start_ = rm_->crash_after_requeue_ = false;
  }
  EXPECT_GT(crashes, 10);
  EXPECT_GT(failures, 3);
  EXPECT_EQ(rm_->violations_, 0);
  ASSERT_EQ(static_cast<int>(rm_->jobs_.size()), kJobs);
  int interrupted = 0;
  for (const auto& [id, e] : rm_->jobs_) {
    EXPECT_EQ(e.job.state, ObservedState::kFinished) << id << " never ended";
    EXPECT_EQ(e.job.end_state, "completed") << id;
    EXPECT_EQ(e.starts, 1 + e.interrupts) << id;
    interrupted += e.interrupts;
  }
  EXPECT_GT(interrupted, 0) << "no failure hit a running job: the test tested nothing";
  Result<std::vector<JobRecord>> active = store_->ActiveJobs();
  ASSERT_TRUE(active.ok());
  EXPECT_TRUE(active->empty()) << active->size() << " jobs still active";
}

// --- Jobs that declare data (set_stager) ---

class ControllerStagingTest : public ControllerTest {
 protected:
  void SubmitWithData(const std::string& id, int gpus, Duration run_for, Time now,
                      std::vector<std::string> datasets) {
    rm_->Submit(id, "nlp", gpus, 8, run_for, now);
    rm_->jobs_[id].job.request.datasets = std::move(datasets);
  }
  // Events of one job, "kind" each, in order.
  std::vector<std::string> KindsOf(const std::string& id) {
    std::vector<std::string> out;
    Result<std::vector<StoreEvent>> events = store_->Events(0, 100000);
    if (!events.ok()) return out;
    for (const StoreEvent& e : *events) {
      if (e.job == id) out.push_back(e.kind);
    }
    return out;
  }
  // A controller staging with `wait` (and metrics into `metrics`, when given) decides job `id`,
  // one node, declaring `datasets`, submitted at 0, in cycle 1; that cycle's report.
  CycleReport DecideOneJob(Controller& ctl, Duration wait, const std::string& id,
                           std::vector<std::string> datasets, MetricsRegistry* metrics = nullptr) {
    if (metrics != nullptr) ctl.set_metrics(metrics);
    ctl.set_stager(&stager_, wait);
    SubmitWithData(id, 8, 10, 0, std::move(datasets));
    rm_->Advance(1);
    CycleReport r;
    EXPECT_TRUE(ctl.Cycle(1, &r).ok());
    return r;
  }
  FakeAgents agents_;
  Stager stager_{&agents_, {.retry_after_s = 1000}};
};

// The point of it all: while a job waits behind another, its data goes to the node the plan
// expects it on, and when its turn comes it starts there at once, its data already local.
TEST_F(ControllerStagingTest, DataIsStagedOnThePlannedNodeWhileTheJobWaits) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  ctl->set_stager(&stager_, 600);
  rm_->Submit("1", "nlp", 32, 8, 100, 0);  // the whole cluster until t=101
  rm_->Submit("2", "nlp", 32, 8, 100, 0);  // then the whole cluster until t=201
  SubmitWithData("3", 16, 10, 0, {"s3://b/a"});
  rm_->Advance(1);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(1, &r).ok());
  EXPECT_EQ(r.started, 1);
  const Result<JobStatus> st = ctl->JobStatusOf("3");
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->phase, JobStatus::Phase::kPending);
  // Not the head (2 is), so EASY plans no nodes for it yet; 2 declared nothing: nothing staged.
  EXPECT_TRUE(agents_.asks.empty());
  // 2 starts at 101; 3 becomes the head and gets a plan: staged there while it waits.
  rm_->Advance(101);
  ASSERT_TRUE(ctl->Cycle(101, &r).ok());
  ASSERT_EQ(ctl->JobStatusOf("3")->phase, JobStatus::Phase::kPending);
  std::vector<std::string> planned;  // the nodes gantryd asked to stage onto
  for (const Stager::Part& p : stager_.JobProgress("3")) planned.push_back(p.node);
  ASSERT_EQ(planned.size(), 2u) << EventLog();
  stager_.Poll(102);
  stager_.Poll(103);
  stager_.Poll(104);
  EXPECT_EQ(agents_.asks.size(), 2u);
  for (const std::string& node : planned) {
    EXPECT_EQ((agents_.asks[{node, "s3://b/a"}]), 1) << node;
    EXPECT_EQ(stager_.Progress(node, "s3://b/a").state, "done") << node;
  }
  ASSERT_TRUE(ctl->Cycle(104, &r).ok());
  const JobView* v = ctl->Snapshot()->Find("3");
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->staging.size(), 2u);
  EXPECT_EQ(v->staging[0].state, "done");
  EXPECT_EQ(v->staging[0].bytes_done, 100);
  EXPECT_EQ(v->data_wait_until, -1);
  // 2 ends at 201: 3 starts on the nodes that hold its data, in that cycle, without waiting.
  rm_->Advance(201);
  ASSERT_TRUE(ctl->Cycle(201, &r).ok());
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(r.waiting_for_data, 0);
  std::vector<std::string> ran;
  for (const NodeGpus& s : rm_->jobs_["3"].job.placement) ran.push_back(s.node);
  EXPECT_EQ(ran, planned);
  EXPECT_EQ(rm_->violations_, 0);
  EXPECT_EQ(KindsOf("3"),
            (std::vector<std::string>{"submit", "decide", "stage-wait", "stage-staged"}))
      << EventLog();
}

// Nothing planned ahead (the cluster was free): the decided job is held back until its data is
// there, showing why, then released once.
TEST_F(ControllerStagingTest, ADecidedJobIsHeldUntilItsDataIsThere) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  MetricsRegistry metrics;
  CycleReport r = DecideOneJob(*ctl, 60, "7", {"s3://b/a", "file:///d/b"}, &metrics);
  EXPECT_EQ(r.started, 0);
  EXPECT_EQ(r.waiting_for_data, 1);
  EXPECT_EQ(rm_->jobs_["7"].job.state, ObservedState::kHeld);
  EXPECT_EQ(PhaseOf("7"), JobPhase::kStarting);
  const JobView* v = ctl->Snapshot()->Find("7");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->reason, "StagingData");
  EXPECT_EQ(v->data_wait_until, 61);
  EXPECT_NE(v->explain.find("held until its data is staged there (0 of 2"), std::string::npos)
      << v->explain;
  // Still held, not mistaken for a job the resource manager held again.
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  EXPECT_EQ(r.waiting_for_data, 1);
  EXPECT_EQ(PhaseOf("7"), JobPhase::kStarting);
  stager_.Poll(2);
  stager_.Poll(3);
  ASSERT_TRUE(ctl->Cycle(3, &r).ok());
  v = ctl->Snapshot()->Find("7");
  EXPECT_NE(v->explain.find("(0 of 2 datasets on nodes done, 100 B of 200 B)"),
            std::string::npos)
      << v->explain;  // the sentence follows the progress
  stager_.Poll(4);
  ASSERT_TRUE(ctl->Cycle(4, &r).ok());
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(r.waiting_for_data, 0);
  EXPECT_EQ(rm_->jobs_["7"].starts, 1);
  const std::string text = metrics.PrometheusText();
  EXPECT_NE(text.find("gantry_data_starts_total{outcome=\"staged\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_data_wait_seconds_sum 3"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_jobs_waiting_for_data 0"), std::string::npos) << text;
}

// Staging that fails, or an agent that never answers, does not hold a job forever: it is
// released (reading from the source), and why is in the log.
TEST_F(ControllerStagingTest, FailedOrSlowStagingReleasesTheJobAnyway) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  CycleReport r = DecideOneJob(*ctl, 30, "1", {"s3://b/missing"});
  EXPECT_EQ(r.waiting_for_data, 1);
  stager_.Poll(1);
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(KindsOf("1").back(), "stage-failed");
  // Every node's agent down: unreachable is retried, not failed; the wait runs out at 2 + 30.
  for (const Node& n : cluster_.nodes()) agents_.down.insert(n.name);
  SubmitWithData("2", 8, 10, 2, {"s3://b/a"});
  rm_->Advance(2);
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  stager_.Poll(2);
  ASSERT_TRUE(ctl->Cycle(31, &r).ok());
  EXPECT_EQ(r.waiting_for_data, 1);
  EXPECT_EQ(PhaseOf("2"), JobPhase::kStarting);
  ASSERT_TRUE(ctl->Cycle(32, &r).ok());
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(KindsOf("2").back(), "stage-timeout");
  EXPECT_EQ(rm_->violations_, 0);
}

// Without a wait (0), jobs are never held back: staging happens only ahead of time.
TEST_F(ControllerStagingTest, NoWaitStartsAtOnce) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  const CycleReport r = DecideOneJob(*ctl, 0, "1", {"s3://b/a"});
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(r.waiting_for_data, 0);
}

// gantryd killed while a job waits for its data: the restart finds it decided but held,
// decides it anew, and it is released once -- never twice, never held forever.
TEST_F(ControllerStagingTest, ARestartWhileAJobWaitsDecidesItAgain) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  DecideOneJob(*ctl, 600, "1", {"s3://b/a"});
  ASSERT_EQ(PhaseOf("1"), JobPhase::kStarting);
  ctl.reset();  // killed
  ctl = Open(2);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(PhaseOf("1"), JobPhase::kPending);  // requeued by the restart
  ctl->set_stager(&stager_, 600);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(2, &r).ok());
  EXPECT_EQ(r.waiting_for_data, 1);
  for (Time t = 3; t < 6; ++t) stager_.Poll(t);
  ASSERT_TRUE(ctl->Cycle(6, &r).ok());
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(rm_->jobs_["1"].starts, 1);
  EXPECT_EQ(rm_->violations_, 0);
}

// A job that declared a checkpoint location and was requeued waits; the agent of the node it
// ran on says its local tier holds the newest checkpoint; when that node and an otherwise
// equal one are free at once, the job goes where its restore reads locally.
TEST_F(ControllerStagingTest, ARequeuedJobPrefersTheNodeHoldingItsCheckpoint) {
  Result<Profile> gantry = FindProfile("gantry", {});
  ASSERT_TRUE(gantry.ok());
  profile_ = *gantry;  // topology placement, data-locality inside the domain
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  ctl->set_stager(&stager_, 600);
  const std::string ckpt = "s3://ck/runs/ckpt/c";
  // Found running (adopted): "a" on n0 until t=50, "c" on n1, "b" on the other domain.
  const auto running = [&](const std::string& id, int gpus, Duration run_for,
                           std::vector<NodeGpus> placement) {
    rm_->Submit(id, "nlp", gpus, 8, run_for, 0);
    auto& e = rm_->jobs_[id];
    e.job.state = ObservedState::kRunning;
    e.job.placement = placement;
    e.job.start = 0;
    for (const NodeGpus& s : placement) rm_->used_[s.node] += s.gpus;
  };
  running("a", 8, 50, {{"nv-0-n0", 8}});
  running("c", 8, 1000, {{"nv-0-n1", 8}});
  rm_->jobs_["c"].job.request.checkpoint = ckpt;
  running("b", 16, 1000, {{"nv-1-n0", 8}, {"nv-1-n1", 8}});
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(1, &r).ok());
  ASSERT_EQ(PhaseOf("c"), JobPhase::kRunning);
  stager_.Poll(1);
  EXPECT_TRUE(agents_.checkpoint_asks.empty());  // running: nothing to place

  // n1 goes down under "c": Slurm requeues it; nothing is free, so it waits.
  rm_->NodeDown("nv-0-n1");
  rm_->Advance(2);
  ASSERT_TRUE(ctl->Cycle(2, &r).ok()) << EventLog();
  EXPECT_EQ(r.requeued, 1);
  ASSERT_EQ(PhaseOf("c"), JobPhase::kPending);
  // n1's local tier holds all of c's newest checkpoint (n0's holds none of it). Its agent is
  // asked to drain what c's run left there, and is still draining.
  EXPECT_NE(EventLog().find("checkpoint-drain"), std::string::npos) << EventLog();
  EXPECT_TRUE(stager_.DrainPending("c"));
  agents_.draining.insert("nv-0-n1");
  agents_.copies[{"nv-0-n1", ckpt}] =
      ckpt::TierCopy{.step = 40, .chunks = 3, .chunks_held = 3, .bytes = 300, .bytes_held = 300};
  stager_.Poll(2);
  stager_.Poll(3);
  EXPECT_EQ(agents_.drains, std::vector<std::string>{"nv-0-n1"});
  EXPECT_EQ((agents_.checkpoint_asks[{"nv-0-n1", ckpt}]), 1);  // once while it waits
  EXPECT_EQ(agents_.checkpoint_asks.size(), 1u);               // only where it ran
  ASSERT_EQ(stager_.HeldCheckpoints().size(), 1u);
  EXPECT_EQ(stager_.HeldCheckpoints()[0].copy.fraction(), 1.0);

  // n1 is back when "a" ends: n0 and n1 are free, equal but for the checkpoint.
  // It is decided there but held until n1's drain has ended: that save may be newer than the
  // checkpoint it would restore.
  rm_->node_state_["nv-0-n1"] = NodeState::kUp;
  rm_->Advance(50);
  ASSERT_TRUE(ctl->Cycle(50, &r).ok()) << EventLog();
  EXPECT_EQ(r.started, 0);
  EXPECT_EQ(r.waiting_for_data, 1);
  EXPECT_EQ(PhaseOf("c"), JobPhase::kStarting);
  EXPECT_NE(EventLog().find("held until the saves its last run left"), std::string::npos);
  agents_.draining.clear();
  stager_.Poll(50);
  ASSERT_FALSE(stager_.DrainPending("c"));
  rm_->Advance(51);
  ASSERT_TRUE(ctl->Cycle(51, &r).ok()) << EventLog();
  EXPECT_EQ(r.started, 1);
  EXPECT_NE(EventLog().find("stage-drained"), std::string::npos) << EventLog();
  EXPECT_EQ(NodesOf(rm_->jobs_["c"].job), (std::set<std::string>{"nv-0-n1"})) << EventLog();
  EXPECT_EQ(rm_->violations_, 0);
  // Placed: no longer a target, so a later requeue asks afresh.
  EXPECT_TRUE(stager_.HeldCheckpoints().empty());

  // "c" ends: every node it ran on is asked to drain its local tier (a save its last moments
  // left short of the root is finished there); "a" and "b" declared no checkpoint.
  EXPECT_TRUE(stager_.PendingDrains().empty());
  rm_->Advance(1100);
  ASSERT_TRUE(ctl->Cycle(1100, &r).ok()) << EventLog();
  ASSERT_EQ(PhaseOf("c"), JobPhase::kDone);
  ASSERT_EQ(PhaseOf("b"), JobPhase::kDone);
  EXPECT_EQ(stager_.PendingDrains(), std::vector<std::string>{"nv-0-n1"});
  stager_.Poll(1100);
  EXPECT_EQ(agents_.drains, (std::vector<std::string>{"nv-0-n1", "nv-0-n1"}));
  stager_.Poll(1101);
  EXPECT_TRUE(stager_.PendingDrains().empty());
}

// gantryd killed while jobs that declared a checkpoint ran: on restart it knows from its log
// where they ran, so the nodes of one that ended while it was away are asked to drain, and one
// that was requeued meanwhile waits for the drains of the nodes it ran on -- though the stager
// is only set after Open, as gantryd does.
TEST_F(ControllerStagingTest, ARestartedGantrydDrainsWhereItsJobsRan) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  ctl->set_stager(&stager_, 600);
  rm_->Submit("c", "nlp", 8, 8, 10, 0);
  rm_->jobs_["c"].job.request.checkpoint = "s3://ck/ckpt/c";
  rm_->Submit("d", "nlp", 8, 8, 1000, 0);
  rm_->jobs_["d"].job.request.checkpoint = "s3://ck/ckpt/d";
  CycleReport r;
  for (Time t : {1, 2}) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, &r).ok()) << EventLog();
  }
  ASSERT_EQ(PhaseOf("c"), JobPhase::kRunning);
  ASSERT_EQ(PhaseOf("d"), JobPhase::kRunning);
  const std::string c_node = rm_->jobs_["c"].job.placement.at(0).node;
  const std::string d_node = rm_->jobs_["d"].job.placement.at(0).node;
  ctl.reset();  // killed; meanwhile "c" ends and d's node fails under it
  rm_->Advance(20);
  rm_->NodeDown(d_node);
  ctl = Open(21);
  ASSERT_NE(ctl, nullptr);
  EXPECT_TRUE(stager_.PendingDrains().empty());  // no stager yet
  ctl->set_stager(&stager_, 600);
  std::vector<std::string> want{c_node, d_node};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(stager_.PendingDrains(), want) << EventLog();
  EXPECT_TRUE(stager_.DrainPending("d"));
  EXPECT_FALSE(stager_.DrainPending("c"));  // ended: nothing waits for its drain
  for (const char* job : {"c", "d"}) {
    const std::vector<std::string> kinds = KindsOf(job);
    EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "checkpoint-drain"), 1) << job;
  }
}

// Jobs that ran while gantryd was away -- released by fail-open (or by hand) and ended before it
// came back -- never had a start gantryd saw: the nodes Slurm still names for them are drained,
// for a job gantryd knew pending and for one it never saw at all, once each; a job without a
// checkpoint, or that never ran, is not.
TEST_F(ControllerStagingTest, JobsThatRanWhileGantrydWasAwayAreDrainedWhereTheyRan) {
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  ctl->set_stager(&stager_, 600);
  rm_->Submit("big", "nlp", 32, 8, 1000, 0);  // takes the cluster: "known" waits behind it
  rm_->Submit("known", "nlp", 8, 8, 5, 0);
  rm_->jobs_["known"].job.request.checkpoint = "s3://ck/ckpt/known";
  CycleReport r;
  rm_->Advance(1);
  ASSERT_TRUE(ctl->Cycle(1, &r).ok()) << EventLog();
  ASSERT_EQ(PhaseOf("known"), JobPhase::kPending);
  ctl.reset();  // gone; Slurm schedules the held jobs itself (fail-open)
  const auto ran_and_ended = [&](const std::string& id, const std::string& node) {
    auto& e = rm_->jobs_[id];
    e.job.state = ObservedState::kFinished;
    e.job.end_state = "completed";
    e.job.placement = {{node, 8}};
  };
  ASSERT_TRUE(rm_->Cancel("big").ok());
  ran_and_ended("known", "nv-0-n1");
  rm_->Submit("unseen", "nlp", 8, 8, 5, 2);
  rm_->jobs_["unseen"].job.request.checkpoint = "s3://ck/ckpt/unseen";
  ran_and_ended("unseen", "nv-1-n0");
  rm_->Submit("plain", "nlp", 8, 8, 5, 2);  // no checkpoint declared
  ran_and_ended("plain", "nv-1-n1");
  rm_->Submit("never", "nlp", 8, 8, 5, 2);  // cancelled before it ran
  rm_->jobs_["never"].job.request.checkpoint = "s3://ck/ckpt/never";
  ASSERT_TRUE(rm_->Cancel("never").ok());
  ctl = Open(30);
  ASSERT_NE(ctl, nullptr);
  ctl->set_stager(&stager_, 600);
  EXPECT_EQ(PhaseOf("known"), JobPhase::kDone);
  EXPECT_EQ(stager_.PendingDrains(), std::vector<std::string>{"nv-0-n1"}) << EventLog();
  for (Time t : {31, 32}) {  // Slurm lists the ended jobs for a while (MinJobAge)
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, &r).ok()) << EventLog();
  }
  EXPECT_EQ(stager_.PendingDrains(), (std::vector<std::string>{"nv-0-n1", "nv-1-n0"}))
      << EventLog();
  for (const char* job : {"known", "unseen"}) {
    const std::vector<std::string> kinds = KindsOf(job);
    EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "checkpoint-drain"), 1) << job;
  }
  EXPECT_TRUE(KindsOf("plain").empty());
  EXPECT_TRUE(KindsOf("never").empty());
  EXPECT_FALSE(stager_.DrainPending("unseen"));  // ended: nothing waits for its drain
  EXPECT_EQ(store_->Get("unseen").status().code(), StatusCode::kNotFound);  // history still
}

// --- Preemption ---

class ControllerPreemptionTest : public ControllerTest {
 protected:
  // QoS 2 preempts QoS 0 (priority mode, or `mode`), first-fit, with or without a grace time.
  void UseProfile(Duration grace, const std::string& mode = "priority") {
    auto p = ParseProfiles(R"(
profiles:
  prio:
    priority: [{plugin: qos, weight: 1000, args: {max_qos: 3}}]
    placement: first-fit
    backfill: {mode: easy}
    preemption: {plugin: checkpoint-aware, args: {mode: )" +
                               mode + R"(, grace_time: )" + std::to_string(grace) + R"(}}
)",
                           "test");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    profile_ = (*p)[0];
  }
  // The test cluster with Slurm's QOS named: normal (level 0) and high (level 2), which may
  // preempt normal.
  void UseQosSpec() {
    Result<Cluster> c = ParseClusterSpec(std::string(kSpec) + R"(qos:
  - {name: normal, level: 0}
  - {name: high, level: 2, priority: 100, preempt: [normal]}
)",
                                         "test");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value();
  }
  // A job that names its QOS, as Slurm reports it; its level is left for the spec to say.
  void SubmitNamedQos(const std::string& id, int gpus, const std::string& qos, Duration run_for,
                      Time now) {
    rm_->Submit(id, "nlp", gpus, 8, run_for, now);
    rm_->jobs_[id].job.request.qos_name = qos;
  }
  void SubmitQos(const std::string& id, int gpus, int qos, Duration run_for, Time now) {
    rm_->Submit(id, "nlp", gpus, 8, run_for, now);
    rm_->jobs_[id].job.request.qos = qos;
  }
  // "low" (QoS 0, the whole cluster) runs from t=1; "high" (QoS 2, one node) arrives at 3 and
  // that cycle decides.
  CycleReport LowRunsThenHighArrives(Controller& ctl) {
    SubmitQos("low", 32, 0, 1000, 0);
    rm_->Advance(1);
    EXPECT_TRUE(ctl.Cycle(1, nullptr).ok());
    rm_->Advance(2);
    EXPECT_TRUE(ctl.Cycle(2, nullptr).ok());
    EXPECT_EQ(PhaseOf("low"), JobPhase::kRunning);
    SubmitQos("high", 8, 2, 100, 3);
    rm_->Advance(3);
    CycleReport r;
    EXPECT_TRUE(ctl.Cycle(3, &r).ok());
    return r;
  }
};

// Without a grace time the victim is held again in the resource manager (which stops it) and
// decided anew, keeping its age, before the preemptor is released onto its GPUs.
TEST_F(ControllerPreemptionTest, VictimsAreRequeuedBeforeThePreemptorStarts) {
  UseProfile(0);
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  MetricsRegistry metrics;
  ctl->set_metrics(&metrics);
  CycleReport r = LowRunsThenHighArrives(*ctl);
  EXPECT_EQ(r.preempted, 1);
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->requeues_["low"], 1);
  EXPECT_EQ(rm_->violations_, 0);
  Result<JobRecord> low = store_->Get("low");
  ASSERT_TRUE(low.ok());
  EXPECT_EQ(low->phase, JobPhase::kPending);
  EXPECT_EQ(low->requeues, 1);
  EXPECT_EQ(low->submit, 0);  // its age kept
  // Queued again once the resource manager no longer reports its run (held at once here).
  EXPECT_FALSE(ctl->JobStatusOf("low").ok());
  rm_->Advance(4);
  ASSERT_TRUE(ctl->Cycle(4, &r).ok());
  EXPECT_EQ(ctl->JobStatusOf("low")->phase, JobStatus::Phase::kPending);
  EXPECT_NE(metrics.PrometheusText().find("gantry_preemptions_total{how=\"now\"} 1"),
            std::string::npos);
  EXPECT_NE(EventLog().find("low preempt by high"), std::string::npos) << EventLog();
}

// A job the resource manager will not requeue (sbatch --no-requeue) is no victim: the
// preemptor waits. Once the job may be requeued (scontrol update Requeue=1) it is preempted.
TEST_F(ControllerPreemptionTest, AJobThatCannotBeRequeuedIsNotPreempted) {
  UseProfile(0);
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  SubmitQos("low", 32, 0, 1000, 0);
  rm_->jobs_["low"].job.requeueable = false;
  rm_->Advance(1);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
  rm_->Advance(2);
  ASSERT_TRUE(ctl->Cycle(2, nullptr).ok());
  SubmitQos("high", 8, 2, 100, 3);
  for (Time t = 3; t < 6; ++t) {
    rm_->Advance(t);
    CycleReport r;
    ASSERT_TRUE(ctl->Cycle(t, &r).ok());
    EXPECT_EQ(r.preempted, 0) << t;
  }
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->requeues_["low"], 0);
  EXPECT_EQ(ctl->JobStatusOf("high")->phase, JobStatus::Phase::kPending);
  EXPECT_EQ(EventLog().find("requeue-refused"), std::string::npos) << EventLog();
  rm_->jobs_["low"].job.requeueable = true;
  rm_->Advance(6);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(6, &r).ok());
  EXPECT_EQ(r.preempted, 1);
  EXPECT_EQ(rm_->requeues_["low"], 1);
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->violations_, 0);
}

// A victim whose requeue flag turned off between the observation that made it one and its
// requeue (scontrol update Requeue=0) is refused by the resource manager and runs on: the
// preemption is withdrawn -- its preemptor is not released onto GPUs still in use but queued
// again -- the victim is booked running again, and it is no victim after.
TEST_F(ControllerPreemptionTest, ARequeueRefusedAfterTheObservationWithdrawsThePreemption) {
  UseProfile(0);
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  rm_->disable_requeue_.insert("low");  // at its requeue
  CycleReport r = LowRunsThenHighArrives(*ctl);
  EXPECT_EQ(r.preempted, 1);  // decided, then refused
  EXPECT_EQ(r.requeued, 0);
  EXPECT_EQ(r.started, 0);
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kHeld);
  EXPECT_EQ(PhaseOf("low"), JobPhase::kRunning);
  EXPECT_EQ(PhaseOf("high"), JobPhase::kPending);
  EXPECT_EQ(store_->Get("low")->requeues, 0);
  EXPECT_NE(EventLog().find("low requeue-refused"), std::string::npos) << EventLog();
  EXPECT_NE(EventLog().find("high preemption-withdrawn"), std::string::npos) << EventLog();
  for (Time t = 4; t < 8; ++t) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, &r).ok()) << EventLog();
    EXPECT_EQ(r.preempted, 0) << t;
    EXPECT_EQ(ctl->JobStatusOf("low")->phase, JobStatus::Phase::kRunning) << t;
    EXPECT_EQ(ctl->JobStatusOf("high")->phase, JobStatus::Phase::kPending) << t;
  }
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->violations_, 0);
  EXPECT_EQ(EventLog().find("adopt-failed"), std::string::npos) << EventLog();
}

// The victim's requeue first fails for a while (slurmctld did not answer) -- its preemptor is
// released meanwhile, onto GPUs the victim still holds, and waits for them in the resource
// manager -- and is then refused. The preemptor is held again and decided afresh: never started
// twice, never booked where the victim runs on.
TEST_F(ControllerPreemptionTest, APreemptorReleasedBeforeItsVictimsRequeueIsRefusedIsHeldAgain) {
  UseProfile(0);
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  rm_->unavailable_requeue_["low"] = 1;  // its first requeue, at 3
  rm_->disable_requeue_.insert("low");   // its second
  CycleReport r = LowRunsThenHighArrives(*ctl);
  EXPECT_EQ(r.preempted, 1);
  EXPECT_EQ(r.started, 1);  // released; it waits for low's GPUs
  ASSERT_EQ(rm_->jobs_["high"].job.state, ObservedState::kReleased);
  EXPECT_EQ(PhaseOf("high"), JobPhase::kStarting);
  EXPECT_NE(EventLog().find("low requeue-retry"), std::string::npos) << EventLog();
  for (Time t = 4; t < 9; ++t) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, &r).ok()) << EventLog();
    EXPECT_EQ(rm_->violations_, 0) << t << "\n" << EventLog();
    EXPECT_EQ(r.preempted, 0) << t;
    EXPECT_EQ(r.started, 0) << t;
    EXPECT_NE(rm_->jobs_["high"].job.state, ObservedState::kRunning) << t;
  }
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kHeld);
  EXPECT_EQ(PhaseOf("low"), JobPhase::kRunning);
  EXPECT_EQ(PhaseOf("high"), JobPhase::kPending);
  EXPECT_EQ(ctl->JobStatusOf("low")->phase, JobStatus::Phase::kRunning);
  EXPECT_EQ(ctl->JobStatusOf("high")->phase, JobStatus::Phase::kPending);
  EXPECT_EQ(rm_->jobs_["high"].starts, 0);
  EXPECT_NE(EventLog().find("low requeue-refused"), std::string::npos) << EventLog();
  EXPECT_NE(EventLog().find("high preemption-withdrawn"), std::string::npos) << EventLog();
  EXPECT_EQ(EventLog().find("adopt-failed"), std::string::npos) << EventLog();
}

// Slurm holds a requeued job at once but keeps it COMPLETING, on its nodes, until its processes
// are gone -- and a process told to stop may still write a save. The victim is neither taken
// for a start behind Gantry's back nor queued again until then, and the nodes it ran on are
// asked to drain only once it has stopped, so that the drain sees that last save.
TEST_F(ControllerPreemptionTest, AVictimIsQueuedAgainAndDrainedOnlyOnceItsRunHasStopped) {
  UseProfile(0);
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  FakeAgents agents;
  Stager stager(&agents, {.retry_after_s = 1000});
  ctl->set_stager(&stager, 600);
  rm_->stop_time_ = 5;
  rm_->Submit("low", "nlp", 32, 8, 1000, 0);
  rm_->jobs_["low"].job.request.checkpoint = "s3://ck/ckpt/low";
  for (Time t : {1, 2}) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok()) << EventLog();
  }
  ASSERT_EQ(PhaseOf("low"), JobPhase::kRunning);
  SubmitQos("high", 8, 2, 100, 3);
  CycleReport r;
  for (Time t = 3; t < 8; ++t) {  // low is being stopped from t=3 to t=8
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, &r).ok()) << EventLog();
    if (t == 3) {
      EXPECT_EQ(r.preempted, 1);
    }
    ASSERT_TRUE(rm_->jobs_["low"].job.stopping) << t;
    EXPECT_EQ(PhaseOf("low"), JobPhase::kPending) << t << "\n" << EventLog();
    EXPECT_EQ(EventLog().find("low checkpoint-drain"), std::string::npos) << t;
    EXPECT_TRUE(stager.PendingDrains().empty()) << t;
    EXPECT_FALSE(ctl->JobStatusOf("low").ok()) << t;  // not queued again yet
    const JobView* v = ctl->Snapshot()->Find("low");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->reason, "Requeued");
  }
  rm_->Advance(8);
  ASSERT_TRUE(ctl->Cycle(8, &r).ok()) << EventLog();
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning);
  EXPECT_EQ(ctl->JobStatusOf("low")->phase, JobStatus::Phase::kPending);
  EXPECT_NE(EventLog().find("low checkpoint-drain"), std::string::npos) << EventLog();
  EXPECT_EQ(stager.PendingDrains().size(), 4u);  // every node low ran on
  EXPECT_TRUE(stager.DrainPending("low"));
  EXPECT_EQ(EventLog().find("released-outside"), std::string::npos) << EventLog();
  EXPECT_EQ(store_->Get("low")->requeues, 1);
  EXPECT_EQ(rm_->requeues_["low"], 1);
  EXPECT_EQ(rm_->violations_, 0);
}

// With a grace time the victim is signalled and runs on; the preemptor waits, its GPUs booked;
// when the grace time is over the victim is held again and the preemptor starts.
TEST_F(ControllerPreemptionTest, WithAGraceTimeTheVictimIsSignalledThenRequeued) {
  UseProfile(30);
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  ctl->set_preempt_signal("USR1");
  CycleReport r = LowRunsThenHighArrives(*ctl);
  EXPECT_EQ(r.preempted, 1);
  EXPECT_EQ(r.started, 0);  // signalled, not started
  EXPECT_EQ(rm_->signals_, (std::vector<std::string>{"low:USR1"}));
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kHeld);
  EXPECT_EQ(PhaseOf("high"), JobPhase::kPending);  // no decision recorded for a signal
  for (Time t = 4; t < 33; t += 7) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, &r).ok());
    EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kRunning) << t;
    EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kHeld) << t;
  }
  rm_->Advance(33);  // grace over (signalled at 3, 30 s)
  ASSERT_TRUE(ctl->Cycle(33, &r).ok());
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->requeues_["low"], 1);
  rm_->Advance(34);
  ASSERT_TRUE(ctl->Cycle(34, &r).ok());
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  EXPECT_EQ(rm_->signals_.size(), 1u);
  EXPECT_EQ(rm_->violations_, 0);
  EXPECT_NE(EventLog().find("low preempt-signal SIGUSR1 for high, held again at t=33"),
            std::string::npos)
      << EventLog();
}

// A signalled victim whose requeue flag turned off during its grace time is refused at the
// end of it and runs on: its preemptor stops waiting for it (queued again, decided afresh)
// rather than waiting, its GPUs booked, until the victim ends on its own.
TEST_F(ControllerPreemptionTest, AGraceVictimRefusedAtTheEndOfItsGraceStopsItsPreemptorWaiting) {
  UseProfile(30);
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  CycleReport r = LowRunsThenHighArrives(*ctl);
  ASSERT_EQ(r.preempted, 1);
  ASSERT_EQ(ctl->JobStatusOf("high")->reason, Reason::kPreempting);
  rm_->disable_requeue_.insert("low");
  rm_->Advance(33);  // grace over (signalled at 3, 30 s)
  ASSERT_TRUE(ctl->Cycle(33, &r).ok()) << EventLog();
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->requeues_["low"], 0);
  EXPECT_NE(EventLog().find("low requeue-refused"), std::string::npos) << EventLog();
  EXPECT_NE(EventLog().find("high preemption-withdrawn"), std::string::npos) << EventLog();
  for (Time t = 34; t < 40; ++t) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, &r).ok()) << EventLog();
    EXPECT_EQ(r.preempted, 0) << t;
    EXPECT_EQ(ctl->JobStatusOf("low")->phase, JobStatus::Phase::kRunning) << t;
    Result<JobStatus> high = ctl->JobStatusOf("high");
    ASSERT_TRUE(high.ok());
    EXPECT_EQ(high->phase, JobStatus::Phase::kPending) << t;
    EXPECT_NE(high->reason, Reason::kPreempting) << t;  // waits for nothing that will not end
  }
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->signals_.size(), 1u);  // signalled once, never again
  EXPECT_EQ(rm_->violations_, 0);
}

// A victim that saves its checkpoint and exits within its grace time is requeued to go on, not
// finished; one its user cancels stays cancelled.
TEST_F(ControllerPreemptionTest, AVictimThatExitsEarlyIsRequeuedACancelledOneIsNot) {
  UseProfile(30);
  rm_->requeue_finished_ = true;
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  SubmitQos("a", 16, 0, 1000, 0);
  SubmitQos("b", 16, 0, 1000, 0);
  rm_->Advance(1);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
  rm_->Advance(2);
  ASSERT_TRUE(ctl->Cycle(2, nullptr).ok());
  SubmitQos("high", 32, 2, 100, 3);  // needs both
  rm_->Advance(3);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(3, &r).ok());
  ASSERT_EQ(r.preempted, 2);
  rm_->Exit("a", "completed");  // checkpointed and exited on the signal
  rm_->Exit("b", "cancelled");  // its user gave up
  rm_->Advance(5);
  ASSERT_TRUE(ctl->Cycle(5, &r).ok());
  EXPECT_EQ(rm_->requeues_["a"], 1);
  EXPECT_EQ(rm_->jobs_["a"].job.state, ObservedState::kHeld);
  EXPECT_EQ(PhaseOf("a"), JobPhase::kPending);
  EXPECT_EQ(rm_->requeues_.count("b"), 0u);
  EXPECT_EQ(PhaseOf("b"), JobPhase::kDone);
  rm_->Advance(6);
  ASSERT_TRUE(ctl->Cycle(6, &r).ok());
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  EXPECT_EQ(rm_->violations_, 0);
}

// Jobs that name their Slurm QOS get the cluster spec's level of it: a "high" job preempts a
// running "normal" one under QOS preemption (mode qos, the spec's preempt list), and a QOS the
// spec does not list is level 0, reported once however many jobs and cycles name it.
TEST_F(ControllerPreemptionTest, SlurmQosNamesMapToTheSpecsLevels) {
  UseQosSpec();
  UseProfile(0, "qos");
  auto ctl = Open(0);
  ASSERT_NE(ctl, nullptr);
  SubmitNamedQos("low", 32, "normal", 1000, 0);
  rm_->Advance(1);
  ASSERT_TRUE(ctl->Cycle(1, nullptr).ok());
  rm_->Advance(2);
  ASSERT_TRUE(ctl->Cycle(2, nullptr).ok());
  EXPECT_EQ(PhaseOf("low"), JobPhase::kRunning);
  SubmitNamedQos("high", 8, "HIGH", 100, 3);  // Slurm's names are case-insensitive
  SubmitNamedQos("odd1", 8, "mystery", 100, 3);
  SubmitNamedQos("odd2", 8, "mystery", 100, 3);
  rm_->Advance(3);
  CycleReport r;
  ASSERT_TRUE(ctl->Cycle(3, &r).ok());
  EXPECT_EQ(r.preempted, 1);
  EXPECT_EQ(rm_->jobs_["low"].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->requeues_["low"], 1);
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  for (Time t = 4; t < 8; ++t) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
  }
  Result<JobRecord> high = store_->Get("high");
  ASSERT_TRUE(high.ok());
  EXPECT_EQ(high->qos, 2);
  EXPECT_EQ(high->qos_name, "HIGH");
  EXPECT_EQ(store_->Get("low")->qos, 0);
  EXPECT_EQ(store_->Get("odd1")->qos, 0);
  EXPECT_EQ(store_->Get("odd2")->qos, 0);
  const JobView* view = ctl->Snapshot()->Find("high");
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->record.qos_name, "HIGH");
  EXPECT_EQ(view->record.qos, 2);
  Result<std::vector<StoreEvent>> events = store_->Events(0, 100000);
  ASSERT_TRUE(events.ok());
  int unknown = 0;
  for (const StoreEvent& e : *events) {
    if (e.kind != "qos-unknown") continue;
    ++unknown;
    EXPECT_EQ(e.detail, "QOS 'mystery' is not in the cluster spec: its jobs get QoS level 0");
  }
  EXPECT_EQ(unknown, 1) << EventLog();
  EXPECT_EQ(rm_->violations_, 0);
}

// --- Grace times across a gantryd restart ---

class ControllerGraceRestartTest : public ControllerPreemptionTest {
 protected:
  // "a" and "b" (QoS 0, 16 GPUs each) fill the cluster from t=1; "high" (QoS 2, 8 GPUs)
  // arrives at 3, and that cycle signals one of them (30 s of grace: held again at t=33).
  // Returns the victim.
  std::string SignalOneVictim(Controller& ctl) {
    SubmitQos("a", 16, 0, 1000, 0);
    SubmitQos("b", 16, 0, 1000, 0);
    rm_->Advance(1);
    EXPECT_TRUE(ctl.Cycle(1, nullptr).ok());
    rm_->Advance(2);
    EXPECT_TRUE(ctl.Cycle(2, nullptr).ok());
    SubmitQos("high", 8, 2, 100, 3);
    rm_->Advance(3);
    CycleReport r;
    EXPECT_TRUE(ctl.Cycle(3, &r).ok());
    EXPECT_EQ(r.preempted, 1);
    if (rm_->signals_.size() != 1) return "";
    return rm_->signals_[0].substr(0, rm_->signals_[0].find(':'));
  }
  // gantryd killed -9: the controller is dropped mid-flight and the store closed without any
  // goodbye, then both come back on the same database.
  std::unique_ptr<Controller> KillAndRestart(std::unique_ptr<Controller> ctl, Time now) {
    ctl.reset();
    store_.reset();
    auto s = StateStore::Open(dir_.sub("state.db"));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    rm_->Advance(now);
    return Open(now);
  }
  // Opens gantryd with 30 s of grace and runs SignalOneVictim; `victim` is set (empty on failure).
  std::unique_ptr<Controller> OpenAndSignalOneVictim(std::string* victim) {
    UseProfile(30);
    auto ctl = Open(0);
    if (ctl == nullptr) return nullptr;
    *victim = SignalOneVictim(*ctl);
    return ctl;
  }
  // Drains the node the one recorded preemption's preemptor is to start on (false: none).
  bool DrainThePreemptorsNode() {
    Result<std::vector<GracePreemption>> recorded = store_->Preemptions();
    if (!recorded.ok() || recorded->size() != 1 || (*recorded)[0].placement.size() != 1) {
      return false;
    }
    rm_->node_state_[(*recorded)[0].placement[0].node] = NodeState::kDrained;
    return true;
  }
  // The same across a restart: the preemptor was cancelled within the grace time (and, when
  // `seen`, gantryd saw it before it was killed). The restarted one still knows the victim was
  // signalled -- the engine offers it to no other preemptor -- and holds it again at the original
  // grace end.
  void CancelThePreemptorThenRestart(bool seen) {
    std::string victim;
    auto ctl = OpenAndSignalOneVictim(&victim);
    ASSERT_NE(ctl, nullptr);
    ASSERT_FALSE(victim.empty());
    ASSERT_TRUE(rm_->Cancel("high").ok());
    if (seen) {
      rm_->Advance(5);
      ASSERT_TRUE(ctl->Cycle(5, nullptr).ok());
      ASSERT_EQ(PhaseOf("high"), JobPhase::kDone);
    }
    ctl = KillAndRestart(std::move(ctl), 10);
    ASSERT_NE(ctl, nullptr);
    EXPECT_EQ(PhaseOf("high"), JobPhase::kDone);
    EXPECT_EQ(ctl->JobStatusOf(victim)->grace_end, 33);
    EXPECT_EQ(PreemptionsRecorded(), 1u);
    EXPECT_NE(EventLog().find("high preempt-orphaned no longer pending; its 1 signalled "
                              "victim(s), held again at t=33"),
              std::string::npos)
        << EventLog();
    // Another high job arrives within the grace time: it must not signal the victim again.
    SubmitQos("high2", 8, 2, 100, 11);
    for (Time t = 11; t < 33; t += 5) {
      rm_->Advance(t);
      ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
    }
    EXPECT_EQ(std::count(rm_->signals_.begin(), rm_->signals_.end(), victim + ":TERM"), 1)
        << EventLog();
    EXPECT_EQ(ctl->JobStatusOf(victim)->grace_end, 33);
    rm_->Advance(33);
    ASSERT_TRUE(ctl->Cycle(33, nullptr).ok());
    EXPECT_EQ(rm_->requeues_[victim], 1) << EventLog();
    EXPECT_EQ(store_->Get(victim)->requeues, 1);
    EXPECT_EQ(rm_->violations_, 0);
  }
  size_t PreemptionsRecorded() {
    Result<std::vector<GracePreemption>> p = store_->Preemptions();
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? p->size() : 99;
  }
};

// Killed between the signal and the grace end: the restarted gantryd signals nobody again (the
// other running job is a candidate too), keeps the preemptor waiting, requeues the victim at
// the original grace end and then starts the preemptor.
TEST_F(ControllerGraceRestartTest, KilledWithinTheGraceTimeCarriesThePreemptionOn) {
  std::string victim;
  auto ctl = OpenAndSignalOneVictim(&victim);
  ASSERT_NE(ctl, nullptr);
  ASSERT_FALSE(victim.empty());
  const std::string other = victim == "a" ? "b" : "a";
  ASSERT_EQ(PreemptionsRecorded(), 1u);
  ctl = KillAndRestart(std::move(ctl), 10);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(ctl->JobStatusOf("high")->reason, Reason::kPreempting);
  EXPECT_EQ(ctl->JobStatusOf(victim)->grace_end, 33);
  for (Time t = 10; t < 33; t += 5) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
    EXPECT_EQ(rm_->jobs_[victim].job.state, ObservedState::kRunning) << t;
    EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kHeld) << t;
  }
  EXPECT_EQ(rm_->signals_.size(), 1u) << EventLog();  // nobody signalled twice
  rm_->Advance(33);
  ASSERT_TRUE(ctl->Cycle(33, nullptr).ok());
  EXPECT_EQ(rm_->jobs_[victim].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->requeues_[victim], 1);
  EXPECT_EQ(PhaseOf(victim), JobPhase::kPending);
  rm_->Advance(34);
  ASSERT_TRUE(ctl->Cycle(34, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  EXPECT_EQ(rm_->jobs_[other].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->requeues_.count(other), 0u);
  EXPECT_EQ(rm_->signals_.size(), 1u);
  EXPECT_EQ(PreemptionsRecorded(), 0u);
  EXPECT_EQ(rm_->violations_, 0);
  EXPECT_NE(EventLog().find("high preempt-restored waits for 1 signalled victim(s), held again "
                            "at t=33"),
            std::string::npos)
      << EventLog();
}

// Restarted after the grace end passed: the victim is requeued at once (on Open), and the
// preemptor starts in the first cycle.
TEST_F(ControllerGraceRestartTest, RestartAfterTheGraceEndRequeuesTheVictimAtOnce) {
  std::string victim;
  auto ctl = OpenAndSignalOneVictim(&victim);
  ASSERT_NE(ctl, nullptr);
  ASSERT_FALSE(victim.empty());
  ctl = KillAndRestart(std::move(ctl), 50);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(rm_->jobs_[victim].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->requeues_[victim], 1);
  EXPECT_EQ(PhaseOf(victim), JobPhase::kPending);
  ASSERT_TRUE(ctl->Cycle(50, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  EXPECT_EQ(rm_->signals_.size(), 1u);
  EXPECT_EQ(PreemptionsRecorded(), 0u);
  EXPECT_EQ(rm_->violations_, 0);
}

// The victim saved its checkpoint and exited while gantryd was away: the restart requeues it to
// go on (not finished as completed), and the preemptor starts.
TEST_F(ControllerGraceRestartTest, AVictimThatExitedWhileGantrydWasAwayIsRequeued) {
  rm_->requeue_finished_ = true;
  std::string victim;
  auto ctl = OpenAndSignalOneVictim(&victim);
  ASSERT_NE(ctl, nullptr);
  ASSERT_FALSE(victim.empty());
  ctl.reset();
  rm_->Exit(victim, "completed");
  ctl = KillAndRestart(std::move(ctl), 8);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(rm_->jobs_[victim].job.state, ObservedState::kHeld);
  EXPECT_EQ(rm_->requeues_[victim], 1);
  EXPECT_EQ(PhaseOf(victim), JobPhase::kPending);
  ASSERT_TRUE(ctl->Cycle(8, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  EXPECT_EQ(rm_->signals_.size(), 1u);
  EXPECT_EQ(PreemptionsRecorded(), 0u);
  EXPECT_EQ(rm_->violations_, 0);
}

// The preemptor is cancelled within the grace time: its victim was told to checkpoint and stop,
// so it is still held again at its grace end (nobody waits for its GPUs, but a job that got its
// signal cannot be told "never mind"), and requeued exactly once.
TEST_F(ControllerGraceRestartTest, APreemptorCancelledWithinTheGraceTimeStillRequeuesItsVictim) {
  std::string victim;
  auto ctl = OpenAndSignalOneVictim(&victim);
  ASSERT_NE(ctl, nullptr);
  ASSERT_FALSE(victim.empty());
  ASSERT_TRUE(rm_->Cancel("high").ok());
  for (Time t = 5; t < 33; t += 5) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
    EXPECT_EQ(rm_->jobs_[victim].job.state, ObservedState::kRunning) << t;
  }
  EXPECT_EQ(PhaseOf("high"), JobPhase::kDone);
  EXPECT_EQ(ctl->JobStatusOf(victim)->grace_end, 33);
  rm_->Advance(33);
  ASSERT_TRUE(ctl->Cycle(33, nullptr).ok());
  EXPECT_EQ(rm_->requeues_[victim], 1) << EventLog();
  EXPECT_EQ(store_->Get(victim)->requeues, 1);
  rm_->Advance(34);
  ASSERT_TRUE(ctl->Cycle(34, nullptr).ok());
  // Decided anew, with its GPUs free again: it goes on (from its checkpoint).
  EXPECT_EQ(rm_->jobs_[victim].job.state, ObservedState::kRunning);
  EXPECT_EQ(rm_->jobs_[victim].starts, 2);
  EXPECT_EQ(rm_->signals_.size(), 1u);
  EXPECT_EQ(PreemptionsRecorded(), 0u);
  EXPECT_EQ(rm_->violations_, 0);
}

TEST_F(ControllerGraceRestartTest, APreemptorCancelledBeforeARestartStillRequeuesItsVictim) {
  CancelThePreemptorThenRestart(/*seen=*/true);
}

TEST_F(ControllerGraceRestartTest, APreemptorCancelledWhileGantrydWasAwayStillRequeuesItsVictim) {
  CancelThePreemptorThenRestart(/*seen=*/false);
}

// The engine refuses to take the preemption back (the node the preemptor was to start on was
// drained while gantryd was away): the victim, still running there, is known to be signalled
// all the same, so the preemptor, decided anew, never signals it again nor moves its grace end,
// and it is held again at the original grace end, once.
TEST_F(ControllerGraceRestartTest, ARefusedRestoreSignalsNoVictimTwice) {
  std::string victim;
  auto ctl = OpenAndSignalOneVictim(&victim);
  ASSERT_NE(ctl, nullptr);
  ASSERT_FALSE(victim.empty());
  ASSERT_TRUE(DrainThePreemptorsNode());
  ctl = KillAndRestart(std::move(ctl), 10);
  ASSERT_NE(ctl, nullptr);
  EXPECT_NE(EventLog().find("high preempt-restore-failed"), std::string::npos) << EventLog();
  EXPECT_EQ(ctl->JobStatusOf(victim)->grace_end, 33);
  for (Time t = 10; t < 33; t += 5) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
    EXPECT_EQ(rm_->jobs_[victim].job.state, ObservedState::kRunning) << t;
    EXPECT_EQ(ctl->JobStatusOf(victim)->grace_end, 33) << t;
  }
  EXPECT_EQ(std::count(rm_->signals_.begin(), rm_->signals_.end(), victim + ":TERM"), 1)
      << EventLog();
  rm_->Advance(33);
  ASSERT_TRUE(ctl->Cycle(33, nullptr).ok());
  EXPECT_EQ(rm_->requeues_[victim], 1) << EventLog();
  EXPECT_EQ(store_->Get(victim)->requeues, 1);
  for (Time t = 34; t < 80; t += 5) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
  }
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  EXPECT_EQ(rm_->requeues_[victim], 1) << EventLog();
  EXPECT_EQ(rm_->violations_, 0);
}

// After a refused restore the preemptor, decided anew, preempts another job, and its record is
// replaced by the new preemption's: the first victim goes on in it with its own grace end, so a
// second restart still holds it again then (and the new victim at its own).
TEST_F(ControllerGraceRestartTest, ASecondRestartAfterARefusedRestoreForgetsNoSignal) {
  std::string victim;
  auto ctl = OpenAndSignalOneVictim(&victim);
  ASSERT_NE(ctl, nullptr);
  ASSERT_FALSE(victim.empty());
  const std::string other = victim == "a" ? "b" : "a";
  ASSERT_TRUE(DrainThePreemptorsNode());
  ctl = KillAndRestart(std::move(ctl), 10);
  ASSERT_NE(ctl, nullptr);
  ASSERT_TRUE(ctl->Cycle(10, nullptr).ok());
  // Decided anew, the preemptor signalled the other job (held again at t=40).
  ASSERT_EQ(rm_->signals_, (std::vector<std::string>{victim + ":TERM", other + ":TERM"}))
      << EventLog();
  ctl = KillAndRestart(std::move(ctl), 20);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(ctl->JobStatusOf(victim)->grace_end, 33) << EventLog();
  EXPECT_EQ(ctl->JobStatusOf(other)->grace_end, 40);
  for (Time t = 20; t <= 40; t += 1) {
    rm_->Advance(t);
    ASSERT_TRUE(ctl->Cycle(t, nullptr).ok());
    EXPECT_EQ(rm_->requeues_[victim], t >= 33 ? 1 : 0) << t << EventLog();
    EXPECT_EQ(rm_->requeues_[other], t >= 40 ? 1 : 0) << t;
  }
  EXPECT_EQ(rm_->signals_.size(), 2u) << EventLog();
  rm_->Advance(41);
  ASSERT_TRUE(ctl->Cycle(41, nullptr).ok());
  EXPECT_EQ(rm_->jobs_["high"].job.state, ObservedState::kRunning) << EventLog();
  EXPECT_EQ(PreemptionsRecorded(), 0u);
  EXPECT_EQ(rm_->violations_, 0);
}

}  // namespace
}  // namespace gantry::control
