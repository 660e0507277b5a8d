// Why pending, and when: exact reasons and start estimates of pending jobs on small clusters,
// checked by hand, and what the engine reports as changed after each cycle.
#include <gtest/gtest.h>

#include <algorithm>

#include "gantry/report/result.h"
#include "gantry/sched/engine.h"
#include "gantry/sched/profile.h"
#include "gantry/sim/simulator.h"
#include "invariant_checker.h"
#include "sched/test_builders.h"

namespace gantry {
namespace {

using test_builders::FlatCluster;
using test_builders::MakeRequest;

Profile FromYaml(const std::string& backfill, const std::string& admission = "[]") {
  auto p = ParseProfiles(R"(
profiles:
  p:
    priority: [{plugin: age, args: {max_age: inf}}]
    admission: )" + admission +
                             R"(
    placement: first-fit
    backfill: )" + backfill + "\n",
                         "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->front() : Profile{};
}

class Harness {
 public:
  // The engine keeps a reference to the cluster: the harness owns it.
  Harness(Cluster c, std::vector<Team> teams, const Profile& p) : cluster_(std::move(c)) {
    auto e = Engine::Create(cluster_, std::move(teams), p);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void Submit(const JobRequest& j) { ASSERT_TRUE(engine_->Submit(j, j.submit).ok()); }
  // The ids started, in order.
  std::string Schedule(Time now) {
    std::vector<StartDecision> starts;
    engine_->Schedule(now, &starts);
    std::string out;
    for (const StartDecision& d : starts) out += static_cast<char>('A' + d.job);
    return out;
  }
  // The ids of status_changes(), sorted, without repeats.
  std::string Changes() const {
    std::vector<JobIndex> c = engine_->status_changes();
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    std::string out;
    for (JobIndex j : c) out += static_cast<char>('A' + j);
    return out;
  }
  Reason reason(JobIndex j) const { return engine_->status(j).reason; }
  Time estimate(JobIndex j) const { return engine_->status(j).reserved_start; }
  Engine& engine() { return *engine_; }

 private:
  Cluster cluster_;
  std::unique_ptr<Engine> engine_;
};

// Two nodes of 4. A (3 GPUs, limit 100) and B (3 GPUs, limit 50) leave one GPU free on each
// node: C (2 GPUs on one node) finds 2 free GPUs in total, but no node with 2: Fragmentation.
// B ending at its limit frees n1, so C's estimate is t=50. D (2 nodes of 4) behind it is not
// covered by EASY's plan: no estimate.
TEST(WhyPending, FragmentationWithTheHeadsEstimate) {
  Harness h(FlatCluster(2, 4), {{"a", kNoQuota, 1.0}}, FromYaml("easy"));
  const JobRequest a = MakeRequest(0, 0, 3, 1, 100), b = MakeRequest(1, 0, 3, 1, 50),
                   c = MakeRequest(2, 1, 2, 1, 10), d = MakeRequest(3, 2, 8, 2, 10);
  h.Submit(a);
  h.Submit(b);
  EXPECT_EQ(h.Schedule(0), "AB");
  h.Submit(c);
  EXPECT_EQ(h.Schedule(1), "");
  EXPECT_EQ(h.reason(2), Reason::kFragmentation);
  EXPECT_EQ(h.estimate(2), 50);
  EXPECT_EQ(h.Changes(), "C");
  EXPECT_EQ(h.engine().Explain(2),
            "enough GPUs are free in total, but no 1 node(s) have room for its shape; expected to "
            "start by t=50 on node n1 (if running jobs end at their time limits)");
  h.Submit(d);
  EXPECT_EQ(h.Schedule(2), "");
  EXPECT_EQ(h.reason(3), Reason::kResources);
  EXPECT_EQ(h.estimate(3), kInfiniteTime);
  EXPECT_EQ(h.Changes(), "D");  // C is unchanged
  ASSERT_TRUE(h.engine().Finish(1, 50).ok());
  EXPECT_EQ(h.Schedule(50), "C");
}

// A job one cycle found blocked by the head's reservation is not examined once the cluster is
// full: its reason falls back to Priority, and the change is reported. C reaches the engine at
// t=10 but was submitted at t=0 (a driver's late report), so it comes before D.
TEST(WhyPending, UnexaminedJobsFallBackToPriority) {
  Harness h(FlatCluster(2, 4), {{"a", kNoQuota, 1.0}}, FromYaml("easy"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 100), b = MakeRequest(1, 0, 8, 2, 100),
                   c = MakeRequest(2, 0, 4, 1, 50), d = MakeRequest(3, 0, 4, 1, 200);
  h.Submit(a);
  h.Submit(b);
  h.Submit(d);
  EXPECT_EQ(h.Schedule(0), "A");
  EXPECT_EQ(h.reason(1), Reason::kResources);
  EXPECT_EQ(h.estimate(1), 100);
  // D fits on n1 now but would still run at t=100, when B needs n1.
  EXPECT_EQ(h.reason(3), Reason::kReservation);
  EXPECT_EQ(h.engine().status(3).blocked_by, 1);
  EXPECT_EQ(h.estimate(3), kInfiniteTime);
  EXPECT_EQ(h.Changes(), "BD");
  ASSERT_TRUE(h.engine().Submit(c, 10).ok());  // ends at 60, before B's reservation
  EXPECT_EQ(h.Schedule(10), "C");
  EXPECT_EQ(h.reason(3), Reason::kPriority);
  EXPECT_EQ(h.engine().status(3).blocked_by, -1);
  EXPECT_EQ(h.reason(1), Reason::kResources);
  EXPECT_EQ(h.Changes(), "D");
}

// Backfill none: the head waits for resources, the jobs behind it are not examined, and with
// no reservation plan nobody has an estimate.
TEST(WhyPending, StrictOrderHasNoPlan) {
  Harness h(FlatCluster(1, 4), {{"a", kNoQuota, 1.0}}, FromYaml("none"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 100), b = MakeRequest(1, 0, 2, 1, 30),
                   c = MakeRequest(2, 0, 1, 1, 30);
  h.Submit(a);
  h.Submit(b);
  h.Submit(c);
  EXPECT_EQ(h.Schedule(0), "A");
  EXPECT_EQ(h.reason(1), Reason::kResources);
  EXPECT_EQ(h.estimate(1), kInfiniteTime);
  EXPECT_EQ(h.reason(2), Reason::kPriority);
  EXPECT_EQ(h.estimate(2), kInfiniteTime);
}

// Conservative backfill plans every examined job, like squeue --start: B after A, C after B.
TEST(WhyPending, ConservativeEstimatesForEveryJob) {
  Harness h(FlatCluster(1, 4), {{"a", kNoQuota, 1.0}}, FromYaml("conservative"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 100), b = MakeRequest(1, 0, 4, 1, 50),
                   c = MakeRequest(2, 0, 2, 1, 10);
  h.Submit(a);
  h.Submit(b);
  h.Submit(c);
  EXPECT_EQ(h.Schedule(0), "A");
  EXPECT_EQ(h.reason(1), Reason::kResources);
  EXPECT_EQ(h.estimate(1), 100);
  EXPECT_EQ(h.reason(2), Reason::kResources);
  EXPECT_EQ(h.estimate(2), 150);
  // A ends early: the plan moves both estimates.
  ASSERT_TRUE(h.engine().Finish(0, 40).ok());
  EXPECT_EQ(h.Schedule(40), "B");
  EXPECT_EQ(h.estimate(2), 90);
  EXPECT_EQ(h.Changes(), "C");
}

// A team at its quota has its queue skipped, yet each of its jobs says Quota (a job submitted
// then too), and goes back to Priority when the team is below its quota again.
TEST(WhyPending, TeamAtQuotaMarksEveryJob) {
  Harness h(FlatCluster(2, 4), {{"a", 4, 1.0}, {"b", kNoQuota, 1.0}}, FromYaml("easy", "[quota]"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 100), b = MakeRequest(1, 0, 2, 1, 10),
                   c = MakeRequest(2, 5, 1, 1, 10), d = MakeRequest(3, 5, 4, 1, 10, 1);
  h.Submit(a);
  h.Submit(b);
  EXPECT_EQ(h.Schedule(0), "A");
  EXPECT_EQ(h.reason(1), Reason::kQuota);
  EXPECT_EQ(h.estimate(1), kInfiniteTime);
  EXPECT_EQ(h.Changes(), "B");
  h.Submit(c);
  EXPECT_EQ(h.reason(2), Reason::kQuota);
  h.Submit(d);
  EXPECT_EQ(h.Schedule(5), "D");
  EXPECT_EQ(h.reason(1), Reason::kQuota);
  EXPECT_EQ(h.reason(2), Reason::kQuota);
  ASSERT_TRUE(h.engine().Finish(3, 10).ok());
  ASSERT_TRUE(h.engine().Finish(0, 10).ok());
  EXPECT_EQ(h.Schedule(10), "BC");
}

// The simulator records reasons and estimates, and measures the estimates. One node of 4, EASY:
// A (run 60, limit 100) starts at 0; B waits with estimate 100 (A's limit) and starts at 60:
// off by 40. C, submitted at 10 to a full cluster, is not examined behind the head (Priority,
// no estimate); at 60 it is the head with estimate 160 (B's limit) and starts at 110 when B
// ends: off by 50. Two jobs with an estimate; median (nearest rank) 40, p90 50.
TEST(WhyPending, SimulatorRecordsHistoryAndEstimateAccuracy) {
  const Cluster c = FlatCluster(1, 4);
  Workload w;
  w.teams = {"a"};
  w.users = {"u"};
  w.queues = {"q"};
  const auto add = [&](Time submit, int gpus, Duration run, Duration limit) {
    JobRequest r = MakeRequest(static_cast<JobIndex>(w.jobs.size()), submit, gpus, 1, limit);
    Job j;
    static_cast<JobRequest&>(j) = r;
    j.run_time = run;
    w.jobs.push_back(j);
  };
  add(0, 4, 60, 100);
  add(0, 4, 50, 100);
  add(10, 2, 10, 200);
  SimOptions o;
  o.check_invariants = true;
  o.history_of = {2};
  auto r = Simulate(c, {{"a", kNoQuota, 1.0}}, w, FromYaml("easy"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<JobOutcome>& out = r->outcomes;
  EXPECT_EQ(out[0].start, 0);
  EXPECT_EQ(out[0].reason, "");  // started at its submit instant
  EXPECT_EQ(out[0].first_estimate, -1);
  EXPECT_EQ(out[1].start, 60);
  EXPECT_EQ(out[1].reason, "Resources");
  EXPECT_EQ(out[1].first_estimate, 100);
  EXPECT_EQ(out[2].start, 110);
  EXPECT_EQ(out[2].reason, "Resources");
  EXPECT_EQ(out[2].first_estimate, 160);
  EXPECT_EQ(r->summary.jobs_with_estimate, 2);
  EXPECT_EQ(r->summary.estimate_error_p50, 40);
  EXPECT_EQ(r->summary.estimate_error_p90, 50);
  std::string h;
  for (const ReasonChange& e : r->history) {
    EXPECT_EQ(e.job, 2);
    h +=
        std::to_string(e.t) + " " + std::string(e.reason) + " " + std::to_string(e.estimate) + "\n";
  }
  EXPECT_EQ(h,
            "10 Priority -1\n"
            "60 Resources 160\n"
            "110 StartedInOrder -1\n");
}

// Conservative backfill plans per node. The case that went wrong with a cluster-wide count: A
// and B leave one GPU free on each node, so H (2 GPUs on one node) fits by count but on no
// node. The count plan reserved those 2 GPUs for H from now on, so nothing could backfill
// while H waited: S (1 GPU, 10 s) waited until t=100. The per-node plan reserves a node for H
// when one has room (t=100, n0 by first-fit) and S starts now on n0, ending long before.
TEST(WhyPending, ConservativeReservesNodesNotCounts) {
  Harness h(FlatCluster(2, 4), {{"a", kNoQuota, 1.0}}, FromYaml("conservative"));
  const JobRequest a = MakeRequest(0, 0, 3, 1, 100), b = MakeRequest(1, 0, 3, 1, 100),
                   hd = MakeRequest(2, 0, 2, 1, 100), s = MakeRequest(3, 1, 1, 1, 10);
  h.Submit(a);
  h.Submit(b);
  h.Submit(hd);
  EXPECT_EQ(h.Schedule(0), "AB");
  EXPECT_EQ(h.engine().placement(0), (Placement{{0, 3}}));
  EXPECT_EQ(h.engine().placement(1), (Placement{{1, 3}}));
  EXPECT_EQ(h.reason(2), Reason::kFragmentation);
  EXPECT_EQ(h.estimate(2), 100);
  h.Submit(s);
  EXPECT_EQ(h.Schedule(1), "D");
  EXPECT_EQ(h.engine().placement(3), (Placement{{0, 1}}));
  EXPECT_EQ(h.engine().status(3).reason, Reason::kStartedBackfill);
  EXPECT_EQ(h.estimate(2), 100);
}

// A reservation holds its nodes over its window: H (2 nodes of 4) reserves n0 and n1 at t=300,
// when B ends. T (2 GPUs for 500 s) fits on n1's free GPUs now but would still run at 300: it
// waits (Reservation) and plans after H, at 400. U (2 GPUs for 50 s) ends before 300: it starts
// now on n1.
TEST(WhyPending, ConservativeReservationHoldsItsNodes) {
  Harness h(FlatCluster(2, 4), {{"a", kNoQuota, 1.0}}, FromYaml("conservative"));
  const JobRequest a = MakeRequest(0, 0, 4, 1, 100), b = MakeRequest(1, 0, 2, 1, 300),
                   hd = MakeRequest(2, 0, 8, 2, 100), t = MakeRequest(3, 0, 2, 1, 500),
                   u = MakeRequest(4, 0, 2, 1, 50);
  h.Submit(a);
  h.Submit(b);
  EXPECT_EQ(h.Schedule(0), "AB");
  h.Submit(hd);
  h.Submit(t);
  h.Submit(u);
  EXPECT_EQ(h.Schedule(1), "E");
  EXPECT_EQ(h.engine().placement(4), (Placement{{1, 2}}));
  EXPECT_EQ(h.reason(2), Reason::kResources);
  EXPECT_EQ(h.estimate(2), 300);
  EXPECT_EQ(h.reason(3), Reason::kReservation);
  EXPECT_EQ(h.estimate(3), 400);
}

// The checker's rule for pending jobs: a waiting reason, and no estimate in the past.
TEST(WhyPending, CheckerRejectsBadPendingStatus) {
  Job job;
  job.id = "j";
  job.submit = 10;
  JobStatus st;
  st.phase = JobStatus::Phase::kPending;
  st.reason = Reason::kResources;
  st.reserved_start = 50;
  EXPECT_TRUE(InvariantChecker::CheckPending(job, st, 20).ok());
  EXPECT_EQ(InvariantChecker::CheckPending(job, st, 60).code(), StatusCode::kInternal);
  st.reserved_start = kInfiniteTime;
  st.reason = Reason::kStartedHead;
  EXPECT_EQ(InvariantChecker::CheckPending(job, st, 20).code(), StatusCode::kInternal);
  st.reason = Reason::kNone;
  EXPECT_EQ(InvariantChecker::CheckPending(job, st, 20).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace gantry

namespace gantry {
namespace {

// Behind 600 queued jobs that cannot start, a one-GPU job that fits is not even looked at when
// every examined job counts toward max_jobs (Slurm's bf_max_job_test); with max_scan, the 599
// jobs whose shape already failed cost no placement attempt and do not count, so it backfills.
TEST(MaxScanTest, AJobThatFitsStartsBehindADeepQueue) {
  for (const bool scan : {false, true}) {
    Harness h(FlatCluster(2, 8), {Team{"t", kNoQuota, 1.0}},
              FromYaml(scan ? "{mode: easy, max_jobs: 500, max_scan: 100000}"
                            : "{mode: easy, max_jobs: 500}"));
    std::vector<JobRequest> jobs;
    jobs.reserve(602);
    jobs.push_back(MakeRequest(0, 0, 8, 1, 1000));  // takes n0
    for (int i = 1; i <= 600; ++i) jobs.push_back(MakeRequest(i, 1, 16, 2, 100));
    jobs.push_back(MakeRequest(601, 2, 1, 1, 100));
    for (JobRequest& j : jobs) j.id = "j" + std::to_string(j.index);
    h.Submit(jobs[0]);
    ASSERT_EQ(h.Schedule(0).size(), 1u);
    for (int i = 1; i <= 601; ++i) h.Submit(jobs[i]);
    std::vector<StartDecision> starts;
    h.engine().Schedule(3, &starts);
    if (scan) {
      ASSERT_EQ(starts.size(), 1u);
      EXPECT_EQ(starts[0].job, 601);
      EXPECT_EQ(starts[0].reason, Reason::kStartedBackfill);
    } else {
      EXPECT_TRUE(starts.empty());
      EXPECT_EQ(h.engine().status(601).reason, Reason::kPriority);
    }
    // Either way the head holds its reservation at the blocker's end.
    EXPECT_EQ(h.engine().status(1).reason, Reason::kResources);
    EXPECT_EQ(h.engine().status(1).reserved_start, 1000);
  }
}

}  // namespace
}  // namespace gantry
