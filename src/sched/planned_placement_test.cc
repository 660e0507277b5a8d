// Engine::planned_placement: where the reservation plan expects a pending job to start, on small
// clusters whose outcomes are worked out by hand in the comments, and a property over random
// workloads: the plan is always consistent with the estimate, and when running jobs end at
// their limits a job starts exactly where and when its last plan said.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "gantry/sched/engine.h"
#include "gantry/sched/profile.h"
#include "sched/test_builders.h"

namespace gantry {
namespace {

using test_builders::FlatCluster;
using test_builders::MakeRequest;

Profile MakeProfile(const std::string& placement, const std::string& backfill,
                    const std::string& admission = "[]") {
  auto p = ParseProfiles(R"(
profiles:
  p:
    priority: [{plugin: age, args: {max_age: inf}}]
    admission: )" + admission +
                             R"(
    placement: )" + placement +
                             R"(
    backfill: )" + backfill + "\n",
                         "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->front() : Profile{};
}

// Drives an engine through time: each job runs exactly its time limit. After every cycle it
// checks that every job's planned placement agrees with its estimate and shape, and keeps each
// pending job's latest plan and estimate.
class Driver {
 public:
  Driver(Cluster c, std::vector<Team> teams, const Profile& p, const EngineOptions& options = {})
      : cluster_(std::move(c)) {
    auto e = Engine::Create(cluster_, std::move(teams), p, options);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  Engine& engine() { return *engine_; }

  void Submit(const JobRequest& j) {
    ASSERT_TRUE(engine_->Submit(j, j.submit).ok());
    jobs_[j.index] = &j;
  }
  // Finishes the jobs due by `now`, runs a cycle, and returns the ids started.
  std::string Step(Time now) {
    for (auto it = ends_.begin(); it != ends_.end() && it->first <= now;) {
      EXPECT_TRUE(engine_->Finish(it->second, it->first).ok());
      it = ends_.erase(it);
    }
    std::vector<StartDecision> starts;
    engine_->Schedule(now, &starts);
    std::string out;
    for (const StartDecision& d : starts) {
      if (d.reason == Reason::kPreempting) continue;  // not a start: its victims were signalled
      out += static_cast<char>('A' + d.job);
      ends_.insert({now + jobs_[d.job]->time_limit, d.job});
      started_[d.job] = {now, d.placement};
    }
    CheckPlans();
    return out;
  }
  // Runs cycles at every job end until nothing runs.
  void RunToEnd(Time from) {
    Step(from);
    while (!ends_.empty()) Step(ends_.begin()->first);
  }

  void CheckPlans() {
    for (const auto& [j, job] : jobs_) {
      const JobStatus& st = engine_->status(j);
      const Placement& p = engine_->planned_placement(j);
      if (p.empty()) continue;
      EXPECT_EQ(st.phase, JobStatus::Phase::kPending) << job->id;
      EXPECT_LT(st.reserved_start, kInfiniteTime) << job->id;
      int gpus = 0;
      for (const Slot& s : p) {
        gpus += s.gpus;
        if (job->nodes > 0) {
          EXPECT_EQ(s.gpus, job->gpus_per_node) << job->id;
        }
      }
      EXPECT_EQ(gpus, job->gpus) << job->id;
      if (job->nodes > 0) {
        EXPECT_EQ(static_cast<int>(p.size()), job->nodes) << job->id;
      }
      last_plan_[j] = {st.reserved_start, p};
    }
  }

  struct Run {
    Time time;
    Placement placement;
  };
  // Where and when a job started; its last plan while pending.
  const std::map<JobIndex, Run>& started() const { return started_; }
  const std::map<JobIndex, Run>& last_plan() const { return last_plan_; }

 private:
  Cluster cluster_;
  std::unique_ptr<Engine> engine_;
  std::map<JobIndex, const JobRequest*> jobs_;
  std::multimap<Time, JobIndex> ends_;
  std::map<JobIndex, Run> started_, last_plan_;
};

// Three nodes of 4, best-fit, EASY. A (4, ends 50) takes n0; B (2, ends 50) n1; E (1, ends
// 300) the fullest node with room, n1; C (2, ends 200) n2. Free: n0 0, n1 1, n2 2. D (3 GPUs on
// one node) is the blocked head: A ending at 50 makes room (the shadow time), and B ends then
// too, so at t=50 n0 has 4 free, n1 3, n2 2, and best-fit puts D on n1, the tightest. (EASY's
// caps keep n0's GPUs, the first node the walk freed: the plan is the placement plugin's.)
TEST(PlannedPlacement, EasyHeadAtTheShadowTime) {
  Driver d(FlatCluster(3, 4), {{"a", kNoQuota, 1.0}}, MakeProfile("best-fit", "easy"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 50), b = MakeRequest(1, 0, 2, 1, 50),
                   e = MakeRequest(2, 0, 1, 1, 300), c = MakeRequest(3, 0, 2, 1, 200),
                   dj = MakeRequest(4, 1, 3, 1, 10);
  for (const JobRequest* j : {&a, &b, &e, &c}) d.Submit(*j);
  EXPECT_EQ(d.Step(0), "ABCD");
  EXPECT_EQ(d.engine().placement(2), (Placement{{1, 1}}));
  d.Submit(dj);
  EXPECT_EQ(d.Step(1), "");
  EXPECT_EQ(d.engine().status(4).reserved_start, 50);
  EXPECT_EQ(d.engine().planned_placement(4), (Placement{{1, 3}}));
  EXPECT_NE(d.engine().Explain(4).find("expected to start by t=50 on node n1 ("), std::string::npos)
      << d.engine().Explain(4);
  d.RunToEnd(1);
  EXPECT_EQ(d.started().at(4).time, 50);
  EXPECT_EQ(d.started().at(4).placement, (Placement{{1, 3}}));
  // Started: no plan any more.
  EXPECT_TRUE(d.engine().planned_placement(4).empty());
}

// As above, then F (1 GPU, limit 1000) arrives at t=2: too long to end before the shadow time,
// it backfills under EASY's caps onto the fullest node with room, n1, taking the GPU the plan
// counted. At t=50 n1 would then have only 2 free: the plan moves to n0 (4 free), and D starts
// there.
TEST(PlannedPlacement, EasyPlanFollowsALongBackfill) {
  Driver d(FlatCluster(3, 4), {{"a", kNoQuota, 1.0}}, MakeProfile("best-fit", "easy"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 50), b = MakeRequest(1, 0, 2, 1, 50),
                   e = MakeRequest(2, 0, 1, 1, 300), c = MakeRequest(3, 0, 2, 1, 200),
                   dj = MakeRequest(4, 1, 3, 1, 10), f = MakeRequest(5, 2, 1, 1, 1000);
  for (const JobRequest* j : {&a, &b, &e, &c}) d.Submit(*j);
  EXPECT_EQ(d.Step(0), "ABCD");
  d.Submit(dj);
  EXPECT_EQ(d.Step(1), "");
  EXPECT_EQ(d.engine().planned_placement(4), (Placement{{1, 3}}));
  d.Submit(f);
  EXPECT_EQ(d.Step(2), "F");
  EXPECT_EQ(d.engine().placement(5), (Placement{{1, 1}}));
  EXPECT_EQ(d.engine().status(4).reserved_start, 50);
  EXPECT_EQ(d.engine().planned_placement(4), (Placement{{0, 3}}));
  d.RunToEnd(2);
  EXPECT_EQ(d.started().at(4).time, 50);
  EXPECT_EQ(d.started().at(4).placement, (Placement{{0, 3}}));
}

// Two nodes of 4, best-fit, conservative. A (4, ends 100) takes n0, B (2, ends 50) n1. C (4 on
// one node, limit 10) can start when B ends: n1 at t=50. D (same shape) behind it: n1 again
// once C's reservation ends at t=60, before A frees n0 at t=100.
TEST(PlannedPlacement, ConservativePlansEveryJob) {
  Driver d(FlatCluster(2, 4), {{"a", kNoQuota, 1.0}}, MakeProfile("best-fit", "conservative"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 100), b = MakeRequest(1, 0, 2, 1, 50),
                   c = MakeRequest(2, 1, 4, 1, 10), dj = MakeRequest(3, 2, 4, 1, 10);
  d.Submit(a);
  d.Submit(b);
  EXPECT_EQ(d.Step(0), "AB");
  d.Submit(c);
  d.Submit(dj);
  EXPECT_EQ(d.Step(2), "");
  EXPECT_EQ(d.engine().status(2).reserved_start, 50);
  EXPECT_EQ(d.engine().planned_placement(2), (Placement{{1, 4}}));
  EXPECT_EQ(d.engine().status(3).reserved_start, 60);
  EXPECT_EQ(d.engine().planned_placement(3), (Placement{{1, 4}}));
  d.RunToEnd(2);
  EXPECT_EQ(d.started().at(2).time, 50);
  EXPECT_EQ(d.started().at(2).placement, (Placement{{1, 4}}));
  EXPECT_EQ(d.started().at(3).time, 60);
  EXPECT_EQ(d.started().at(3).placement, (Placement{{1, 4}}));
}

// Backfill none has no plan: the blocked head has neither an estimate nor planned nodes.
TEST(PlannedPlacement, NoneWithoutBackfill) {
  Driver d(FlatCluster(2, 4), {{"a", kNoQuota, 1.0}}, MakeProfile("first-fit", "none"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 100), b = MakeRequest(1, 1, 8, 2, 10);
  d.Submit(a);
  d.Submit(b);
  EXPECT_EQ(d.Step(1), "A");
  EXPECT_EQ(d.engine().status(1).reason, Reason::kResources);
  EXPECT_EQ(d.engine().status(1).reserved_start, kInfiniteTime);
  EXPECT_TRUE(d.engine().planned_placement(1).empty());
}

// A job waiting for its team's quota has no plan, under EASY and conservative alike; the other
// team's blocked head has one.
TEST(PlannedPlacement, NoneWhileWaitingForQuota) {
  for (const char* backfill : {"easy", "conservative"}) {
    SCOPED_TRACE(backfill);
    Driver d(FlatCluster(2, 4), {{"a", 4, 1.0}, {"b", kNoQuota, 1.0}},
             MakeProfile("first-fit", backfill, "[quota]"));
    const JobRequest a = MakeRequest(0, 0, 4, 1, 100, 0), b = MakeRequest(1, 0, 2, 1, 100, 1),
                     a2 = MakeRequest(2, 1, 4, 1, 10, 0), b2 = MakeRequest(3, 1, 4, 1, 10, 1);
    d.Submit(a);
    d.Submit(b);
    EXPECT_EQ(d.Step(0), "AB");
    d.Submit(a2);
    d.Submit(b2);
    EXPECT_EQ(d.Step(1), "");
    EXPECT_EQ(d.engine().status(2).reason, Reason::kQuota);
    EXPECT_TRUE(d.engine().planned_placement(2).empty());
    EXPECT_EQ(d.engine().status(3).reserved_start, 100);
    EXPECT_EQ(d.engine().planned_placement(3), (Placement{{0, 4}}));
  }
}

// A cancelled job loses its plan; so does one that another job now precedes.
TEST(PlannedPlacement, ClearedOnCancel) {
  Driver d(FlatCluster(2, 4), {{"a", kNoQuota, 1.0}}, MakeProfile("first-fit", "easy"));
  const JobRequest a = MakeRequest(0, 0, 8, 2, 100), b = MakeRequest(1, 1, 4, 1, 10);
  d.Submit(a);
  EXPECT_EQ(d.Step(0), "A");
  d.Submit(b);
  EXPECT_EQ(d.Step(1), "");
  EXPECT_EQ(d.engine().planned_placement(1), (Placement{{0, 4}}));
  ASSERT_TRUE(d.engine().Cancel(1, 2).ok());
  EXPECT_TRUE(d.engine().planned_placement(1).empty());
  EXPECT_EQ(d.engine().status(1).reserved_start, kInfiniteTime);
}

// With the data-locality score the plan follows the data: three nodes of 4, first-fit with
// data-locality:2 (first-fit's own score, 1 - node / 3, is 1, 0.67, 0.33). A holds the whole
// cluster until t=100; B (4 GPUs on one node) declares a dataset that n2 holds, so at the
// shadow time n2 scores 0.33 + 2 against n0's 1: the plan, and then the start, are on n2. C
// (no data) behind it has no plan (EASY plans the head only) and at t=100 takes first-fit's n0.
TEST(PlannedPlacement, FollowsTheData) {
  DataLocalityMap held;
  held.Set("s3://corpus", 2, 1.0);
  EngineOptions options;
  options.data_locality = &held;
  Driver d(FlatCluster(3, 4), {{"a", kNoQuota, 1.0}},
           MakeProfile("{plugin: first-fit, args: {scores: \"data-locality:2\"}}", "easy"),
           options);
  const JobRequest a = MakeRequest(0, 0, 12, 3, 100);
  JobRequest b = MakeRequest(1, 1, 4, 1, 10);
  b.datasets = {"s3://corpus"};
  const JobRequest c = MakeRequest(2, 2, 4, 1, 10);
  d.Submit(a);
  EXPECT_EQ(d.Step(0), "A");
  d.Submit(b);
  EXPECT_EQ(d.Step(1), "");
  EXPECT_EQ(d.engine().planned_placement(1), (Placement{{2, 4}}));
  d.Submit(c);
  EXPECT_EQ(d.Step(2), "");
  EXPECT_TRUE(d.engine().planned_placement(2).empty());  // EASY plans the head only
  EXPECT_EQ(d.Step(100), "BC");
  EXPECT_EQ(d.started().at(1).placement, (Placement{{2, 4}}));
  EXPECT_EQ(d.started().at(2).placement, (Placement{{0, 4}}));
}

// QoS priority first, first-fit, EASY; preemption by priority with 120 s of grace.
Result<Profile> GraceProfile() {
  GANTRY_ASSIGN_OR_RETURN(std::vector<Profile> p, ParseProfiles(R"(
profiles:
  p:
    priority: [{plugin: qos, weight: 1000, args: {max_qos: 3}}, {plugin: age, args: {max_age: inf}}]
    placement: first-fit
    backfill: easy
    preemption: {plugin: checkpoint-aware, args: {mode: priority, grace_time: 120}}
)",
                                                                "test.yaml"));
  return p.front();
}

// GraceTime: a preemptor waiting for its signalled victim has the placement it will start on
// as its plan. One node of 8: A (6 GPUs, QoS 0) runs; B (8 GPUs, QoS 1) preempts it at t=1000
// with 120 s of grace, so it is planned on n0 at t=1120, and starts there when A ends then.
TEST(PlannedPlacement, WaitingPreemptorKeepsItsPlacement) {
  Result<Profile> p = GraceProfile();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Driver d(FlatCluster(1, 8), {{"a", kNoQuota, 1.0}}, *p);
  const JobRequest a = MakeRequest(0, 0, 6, 1, 1120);
  JobRequest b = MakeRequest(1, 1000, 8, 1, 10);
  b.qos = 1;
  d.Submit(a);
  EXPECT_EQ(d.Step(0), "A");
  d.Submit(b);
  EXPECT_EQ(d.Step(1000), "");
  EXPECT_EQ(d.engine().status(1).reason, Reason::kPreempting);
  EXPECT_EQ(d.engine().status(1).reserved_start, 1120);
  EXPECT_EQ(d.engine().planned_placement(1), (Placement{{0, 8}}));
  d.RunToEnd(1000);
  EXPECT_EQ(d.started().at(1).time, 1120);
  EXPECT_EQ(d.started().at(1).placement, (Placement{{0, 8}}));
  EXPECT_TRUE(d.engine().planned_placement(1).empty());
}

// A restarted driver restores a preemption in flight (RestorePreempting): the engine stands as
// if it had signalled the victim itself. Two nodes of 8: A (6 GPUs, QoS 0) is adopted on n0, C
// (8 GPUs) on n1; B (8 GPUs, QoS 1) waits for A until t=1120. No cycle preempts anyone again
// (C is a candidate too), and B starts on n0 in the cycle after A ended. A placement whose other
// GPUs are not free is refused and changes nothing.
TEST(PlannedPlacement, RestoredPreemptorWaitsForItsVictim) {
  Result<Profile> p = GraceProfile();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Driver d(FlatCluster(2, 8), {{"a", kNoQuota, 1.0}}, *p);
  const JobRequest a = MakeRequest(0, 0, 6, 1, 5000);
  JobRequest b = MakeRequest(1, 900, 8, 1, 10);
  b.qos = 1;
  const JobRequest c = MakeRequest(2, 0, 8, 1, 5000);
  Engine& e = d.engine();
  ASSERT_TRUE(e.Adopt(a, {{0, 6}}, 0, 1000).ok());
  ASSERT_TRUE(e.Adopt(c, {{1, 8}}, 0, 1000).ok());
  d.Submit(b);
  // n1 has no free GPU beside the victim's: refused, nothing changed.
  EXPECT_EQ(e.RestorePreempting(1, {0}, {{1, 8}}, 1120, 1000).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.status(0).grace_end, -1);
  EXPECT_EQ(e.free_index().free(0), 2);
  EXPECT_EQ(e.RestorePreempting(1, {2}, {{0, 8}}, 1120, 1000).code(),
            StatusCode::kFailedPrecondition);  // n0's other 6 GPUs are A's, not free
  ASSERT_TRUE(e.RestorePreempting(1, {0}, {{0, 8}}, 1120, 1000).ok());
  EXPECT_EQ(e.status(1).reason, Reason::kPreempting);
  EXPECT_EQ(e.status(1).reserved_start, 1120);
  EXPECT_EQ(e.status(0).grace_end, 1120);
  EXPECT_EQ(e.status(0).preempted_by, 1);
  EXPECT_EQ(e.free_index().free(0), 0);  // A's spare 2 GPUs booked for B
  EXPECT_EQ(e.pending_count(), 1);
  std::vector<StartDecision> starts;
  e.Schedule(1001, &starts);
  EXPECT_TRUE(starts.empty());  // C is not signalled in A's stead, B does not start yet
  EXPECT_EQ(e.status(2).grace_end, -1);
  ASSERT_TRUE(e.Finish(0, 1050).ok());  // A saved its checkpoint and exited early
  EXPECT_EQ(e.status(0).reason, Reason::kPreempted);
  e.Schedule(1051, &starts);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].job, 1);
  EXPECT_EQ(starts[0].placement, (Placement{{0, 8}}));
  EXPECT_TRUE(starts[0].preempted.empty());
}

// A restarted driver whose preemption cannot be restored still tells the engine its victims
// were signalled (RestoreSignalled): A ends by t=1120 and is never offered again, so B (QoS 1)
// preempts C instead of signalling A a second time; nobody waits for A.
TEST(PlannedPlacement, RestoredSignalIsNeverGivenTwice) {
  Result<Profile> p = GraceProfile();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Driver d(FlatCluster(2, 8), {{"a", kNoQuota, 1.0}}, *p);
  const JobRequest a = MakeRequest(0, 0, 8, 1, 5000);
  JobRequest b = MakeRequest(1, 900, 8, 1, 10);
  b.qos = 1;
  const JobRequest c = MakeRequest(2, 0, 8, 1, 5000);
  Engine& e = d.engine();
  ASSERT_TRUE(e.Adopt(a, {{0, 8}}, 0, 1000).ok());
  ASSERT_TRUE(e.Adopt(c, {{1, 8}}, 0, 1000).ok());
  ASSERT_TRUE(e.RestoreSignalled({0}, 1120, 1000).ok());
  EXPECT_EQ(e.status(0).grace_end, 1120);
  EXPECT_EQ(e.status(0).preempted_by, -1);
  EXPECT_EQ(e.Explain(0),
            "signalled for preemption; runs on (GraceTime) until t=1120 at the latest");
  EXPECT_EQ(e.RestoreSignalled({0}, 1200, 1000).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.status(0).grace_end, 1120);
  d.Submit(b);
  std::vector<StartDecision> starts;
  e.Schedule(1001, &starts);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].reason, Reason::kPreempting);
  EXPECT_EQ(starts[0].preempted, (std::vector<JobIndex>{2}));
  EXPECT_EQ(e.status(0).grace_end, 1120);
  EXPECT_EQ(e.status(2).preempted_by, 1);
  ASSERT_TRUE(e.Finish(0, 1120).ok());
  EXPECT_EQ(e.status(0).reason, Reason::kPreempted);
  starts.clear();
  e.Schedule(1121, &starts);
  EXPECT_TRUE(starts.empty());  // B waits for C, its own victim, not for A
}

// Random workloads on a flat cluster, all submitted at t=0 (FIFO order never changes), each
// job running exactly its limit: every plan agrees with its estimate (Driver::CheckPlans), and
// a job whose last plan before it started said "start at T" and that started at T started on
// exactly the planned nodes. Under EASY that is the head, with any placement. Conservative
// plans every job, but a lower-priority job it starts in the same cycle changes which nodes a
// best-fit or topology placement prefers at the planned time (not whether the job fits on its
// planned nodes), so only first-fit's plans are exact there (docs/architecture.md).
TEST(PlannedPlacement, PropertyPlansComeTrue) {
  const std::pair<const char*, const char*> kCases[] = {{"first-fit", "easy"},
                                                        {"best-fit", "easy"},
                                                        {"topology", "easy"},
                                                        {"first-fit", "conservative"}};
  for (const auto& [placement, backfill] : kCases) {
    {
      for (int seed = 0; seed < 20; ++seed) {
        SCOPED_TRACE(std::string(placement) + " " + backfill + " seed " + std::to_string(seed));
        std::mt19937 rng(seed);
        Driver d(FlatCluster(6, 8), {{"a", kNoQuota, 1.0}}, MakeProfile(placement, backfill));
        std::vector<JobRequest> jobs;
        jobs.reserve(40);
        for (int i = 0; i < 40; ++i) {
          // One node of 1..8, a gang of 1..3 whole nodes, one node of 1..4, or "any" 1..12.
          const int shape = static_cast<int>(rng() % 4);
          const int gpus = shape == 0   ? 1 + static_cast<int>(rng() % 8)
                           : shape == 1 ? 8 * (1 + static_cast<int>(rng() % 3))
                           : shape == 2 ? 1 + static_cast<int>(rng() % 4)
                                        : 1 + static_cast<int>(rng() % 12);
          const int nodes = shape == 1 ? gpus / 8 : shape == 3 ? 0 : 1;
          jobs.push_back(MakeRequest(i, 0, gpus, nodes, 10 * (1 + static_cast<int>(rng() % 20))));
        }
        for (const JobRequest& j : jobs) d.Submit(j);
        d.RunToEnd(0);
        int checked = 0;
        for (const auto& [j, plan] : d.last_plan()) {
          ASSERT_TRUE(d.started().count(j)) << jobs[j].id;
          const Driver::Run& run = d.started().at(j);
          if (run.time != plan.time) continue;
          EXPECT_EQ(run.placement, plan.placement) << "job " << j << " at " << run.time;
          ++checked;
        }
        EXPECT_GT(checked, 0);
      }
    }
  }
}

}  // namespace
}  // namespace gantry
