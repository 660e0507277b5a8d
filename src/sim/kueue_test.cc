// Scenario tests of the "kueue" admission plugin with exact outcomes (who starts, who is
// preempted by whom, in which order), ported from the behaviour Kueue's documentation gives
// for ClusterQueues, cohorts, borrowing and lending limits, preemption policies, flavor
// fungibility and fair sharing; and a property test over random workloads: no preemption loops,
// bounded preemptions, quotas (with borrowing) never exceeded.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <queue>

#include "gantry/common/rng.h"
#include "gantry/sched/engine.h"
#include "gantry/sim/simulator.h"
#include "gantry/workload/trace.h"
#include "invariant_checker.h"

namespace gantry {
namespace {

// One flat cluster: per GPU type, one node with that many GPUs (types H100, A100).
Cluster MakeCluster(int h100, int a100 = 0, std::vector<Cohort> cohorts = {}) {
  ClusterBuilder b("kueue", {});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddGpuType({"A100", 80, 50, 400}).ok());
  if (h100 > 0) {
    EXPECT_TRUE(b.AddNode({.name = "h", .gpu_type = 0, .gpus = h100}).ok());
  }
  if (a100 > 0) {
    EXPECT_TRUE(b.AddNode({.name = "a", .gpu_type = 1, .gpus = a100}).ok());
  }
  for (Cohort& c : cohorts) b.AddCohort(std::move(c));
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

Team Cq(const std::string& name, std::vector<FlavorQuota> quotas, const std::string& cohort = "") {
  Team t;
  t.name = name;
  t.queue.quotas = std::move(quotas);
  t.queue.cohort = cohort;
  return t;
}

Profile KueueProfile(const std::string& admission_args = "", const std::string& preemption = "") {
  const std::string yaml =
      "profiles:\n"
      "  k:\n"
      "    priority:\n"
      "      - {plugin: qos, weight: 1000, args: {max_qos: 3}}\n"
      "      - {plugin: age, weight: 1, args: {max_age: inf}}\n"
      "    admission: [{plugin: kueue" +
      (admission_args.empty() ? std::string() : ", args: {" + admission_args + "}") +
      "}]\n"
      "    placement: best-fit\n"
      "    backfill: {mode: easy, max_jobs: 500}\n" +
      (preemption.empty() ? std::string() : "    preemption: " + preemption + "\n");
  auto p = ParseProfiles(yaml, "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->front() : Profile{};
}

// Drives the engine as a live driver would, requeueing every preempted job at once, and logs
// what happens: "+a1" a start, "a1>b1" a1 preempted by b1.
class Harness {
 public:
  Harness(Cluster cluster, std::vector<Team> teams, const Profile& profile)
      : cluster_(std::move(cluster)), teams_(std::move(teams)) {
    auto e = Engine::Create(cluster_, teams_, profile);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) engine_ = std::move(e).value();
  }

  // Submits `id` for `team` (by name) at `now` (submitted at `submit`, default now).
  JobIndex Submit(const std::string& id, const std::string& team, int gpus, int qos, Time now,
                  uint32_t mask = kAnyGpuType, Time submit = -1, int nodes = 0) {
    JobRequest& j = NewJob(id, team, gpus, qos, submit < 0 ? now : submit, mask);
    if (nodes > 0) {
      j.nodes = nodes;
      j.gpus_per_node = gpus / nodes;
    }
    EXPECT_TRUE(engine_->Submit(j, now).ok());
    return j.index;
  }
  // A share of one GPU of any type: `milli` thousandths (1..999).
  JobIndex SubmitShare(const std::string& id, const std::string& team, int milli, int qos,
                       Time now) {
    JobRequest& j = NewJob(id, team, 1, qos, now, kAnyGpuType);
    j.gpu_milli = milli;
    EXPECT_TRUE(engine_->Submit(j, now).ok());
    return j.index;
  }
  // A job the driver finds running since `start` on the first node's GPUs.
  void Adopt(const std::string& id, const std::string& team, int gpus, int qos, Time submit,
             Time start, Time now) {
    JobRequest& j = NewJob(id, team, gpus, qos, submit, kAnyGpuType);
    EXPECT_TRUE(engine_->Adopt(j, {{0, gpus}}, start, now).ok());
  }
  JobRequest& NewJob(const std::string& id, const std::string& team, int gpus, int qos, Time submit,
                     uint32_t mask) {
    JobRequest& j = jobs_.emplace_back();
    j.index = static_cast<JobIndex>(jobs_.size() - 1);
    j.id = id;
    for (size_t t = 0; t < teams_.size(); ++t) {
      if (teams_[t].name == team) j.team = static_cast<int32_t>(t);
    }
    j.gpus = gpus;
    j.qos = qos;
    j.submit = submit;
    j.time_limit = 100000;
    j.gpu_type_mask = mask;
    index_[id] = j.index;
    return j;
  }

  // One cycle; returns its log (starts and preemptions in order, space-separated).
  std::string Schedule(Time now) {
    std::vector<StartDecision> starts;
    engine_->Schedule(now, &starts);
    std::string log;
    for (const StartDecision& d : starts) {
      for (JobIndex v : d.preempted) {
        log += (log.empty() ? "" : " ") + jobs_[v].id + ">" + jobs_[d.job].id;
        EXPECT_EQ(engine_->status(v).reason, Reason::kPreempted);
        EXPECT_EQ(engine_->status(v).preempted_by, d.job);
        EXPECT_NE(engine_->Explain(v).find("preempted so that job " + jobs_[d.job].id),
                  std::string::npos)
            << engine_->Explain(v);
        EXPECT_TRUE(engine_->Requeue(v, now).ok());
      }
      log += (log.empty() ? "+" : " +") + jobs_[d.job].id;
    }
    return log;
  }

  void Finish(const std::string& id, Time now) {
    EXPECT_TRUE(engine_->Finish(index_.at(id), now).ok());
  }
  const JobStatus& status(const std::string& id) const { return engine_->status(index_.at(id)); }
  std::string Explain(const std::string& id) const { return engine_->Explain(index_.at(id)); }
  // The GPU type the job runs on.
  std::string Type(const std::string& id) const {
    const Placement& p = engine_->placement(index_.at(id));
    if (p.empty()) return "";
    return cluster_.gpu_types()[cluster_.nodes()[p.front().node].gpu_type].name;
  }
  Engine& engine() { return *engine_; }

 private:
  Cluster cluster_;
  std::vector<Team> teams_;
  std::deque<JobRequest> jobs_;  // stable addresses: the engine keeps pointers
  std::map<std::string, JobIndex> index_;
  std::unique_ptr<Engine> engine_;
};

bool Pending(const JobStatus& s) { return s.phase == JobStatus::Phase::kPending; }

// A ClusterQueue without a cohort: its nominal quota is a hard cap, as a Gantry quota team.
TEST(KueueTest, NoCohortIsAHardCap) {
  Harness h(MakeCluster(8), {Cq("a", {{"*", 4}})}, KueueProfile());
  h.Submit("a1", "a", 4, 0, 0);
  h.Submit("a2", "a", 2, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1");
  EXPECT_EQ(h.status("a2").reason, Reason::kQuota);
  EXPECT_NE(h.Explain("a2").find("ClusterQueue a"), std::string::npos) << h.Explain("a2");
  h.Finish("a1", 10);
  EXPECT_EQ(h.Schedule(10), "+a2");
}

// Kueue's cohort example: a CQ borrows what its cohort's other CQs leave unused; without
// reclaim, the lender waits until the borrower's job ends.
TEST(KueueTest, CohortLendsUnusedQuotaAndTheLenderWaitsWithoutReclaim) {
  Harness h(MakeCluster(8), {Cq("a", {{"H100", 4}}, "ab"), Cq("b", {{"H100", 4}}, "ab")},
            KueueProfile());
  h.Submit("a1", "a", 6, 0, 0);  // 4 own + 2 borrowed from b
  EXPECT_EQ(h.Schedule(0), "+a1");
  h.Submit("b1", "b", 4, 0, 1);  // b's nominal is 4, but 2 of them are lent out
  EXPECT_EQ(h.Schedule(1), "");
  EXPECT_EQ(h.status("b1").reason, Reason::kCohort);  // its own quota would admit it
  EXPECT_NE(h.Explain("b1").find("waiting for its cohort"), std::string::npos) << h.Explain("b1");
  h.Submit("b2", "b", 2, 0, 2);  // what b still has
  EXPECT_EQ(h.Schedule(2), "+b2");
  h.Finish("a1", 5);
  EXPECT_EQ(h.Schedule(5), "+b1");
}

// reclaimWithinCohort: Any. The lender takes back only what is borrowed: the borrower's job
// started last (the one above its nominal) goes, the one inside its nominal stays.
TEST(KueueTest, ReclaimTakesBackOnlyBorrowedQuotaNewestFirst) {
  Team b = Cq("b", {{"H100", 4}}, "ab");
  b.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  Harness h(MakeCluster(8), {Cq("a", {{"H100", 4}}, "ab"), b}, KueueProfile());
  h.Submit("a1", "a", 4, 3, 0);
  EXPECT_EQ(h.Schedule(0), "+a1");
  h.Submit("a2", "a", 2, 3, 1);
  h.Submit("a3", "a", 2, 3, 1);
  EXPECT_EQ(h.Schedule(1), "+a2 +a3");  // a uses 8: borrows 4
  h.Submit("b1", "b", 2, 0, 2);         // Any: even from higher-priority jobs
  EXPECT_EQ(h.Schedule(2), "a3>b1 +b1");
  h.Submit("b2", "b", 2, 0, 3);
  EXPECT_EQ(h.Schedule(3), "a2>b2 +b2");
  h.Submit("b3", "b", 2, 0, 4);  // a is back at its nominal: nothing left to reclaim
  EXPECT_EQ(h.Schedule(4), "");
  EXPECT_TRUE(Pending(h.status("b3")));
  EXPECT_TRUE(Pending(h.status("a2")));  // requeued
}

// reclaimWithinCohort: LowerPriority reclaims only from lower-priority borrowers.
TEST(KueueTest, ReclaimLowerPrioritySparesHigherPriorityBorrowers) {
  Team b = Cq("b", {{"H100", 4}}, "ab");
  b.queue.reclaim_within_cohort = ReclaimWithinCohort::kLowerPriority;
  Harness h(MakeCluster(8), {Cq("a", {{"H100", 4}}, "ab"), b}, KueueProfile());
  h.Submit("a1", "a", 6, 2, 0);
  h.Submit("a2", "a", 2, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1 +a2");  // a borrows 4
  h.Submit("b1", "b", 2, 1, 1);         // a2 (priority 0) is below b1, a1 (2) is not
  EXPECT_EQ(h.Schedule(1), "a2>b1 +b1");
  h.Submit("b2", "b", 2, 1, 2);
  EXPECT_EQ(h.Schedule(2), "");
  EXPECT_EQ(h.status("b2").reason, Reason::kCohort);
}

// lendingLimit: a CQ lends at most that much of its unused nominal quota. A job larger than
// anything its CQ could ever get stays pending, and Explain says so.
TEST(KueueTest, LendingLimitCapsWhatOthersBorrow) {
  std::vector<Team> teams = {Cq("a", {{"H100", 4, kNoQuota, 1}}, "ab"),
                             Cq("b", {{"H100", 4}}, "ab")};
  Harness h(MakeCluster(8), teams, KueueProfile());
  h.Submit("b1", "b", 6, 0, 0);  // b may get its 4 plus a's lendable 1
  h.Submit("b2", "b", 5, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+b2");
  EXPECT_EQ(h.status("b1").reason, Reason::kQuota);
  EXPECT_NE(h.Explain("b1").find("can never start"), std::string::npos) << h.Explain("b1");
  h.Submit("a1", "a", 3, 0, 1);  // a kept 3 for itself
  EXPECT_EQ(h.Schedule(1), "+a1");
}

// borrowingLimit: a CQ borrows at most that much, however idle the cohort is.
TEST(KueueTest, BorrowingLimitCapsWhatACqBorrows) {
  std::vector<Team> teams = {Cq("a", {{"H100", 4, 1}}, "ab"), Cq("b", {{"H100", 4}}, "ab")};
  Harness h(MakeCluster(8), teams, KueueProfile());
  h.Submit("a1", "a", 5, 0, 0);
  h.Submit("a2", "a", 1, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1");
  EXPECT_EQ(h.status("a2").reason, Reason::kQuota);
}

// withinClusterQueue: LowerPriority preempts only lower priorities of the same CQ;
// LowerOrNewerEqualPriority also equal priorities that are newer than the preemptor.
TEST(KueueTest, WithinClusterQueuePolicies) {
  Team a = Cq("a", {{"*", 4}});
  a.queue.within_cluster_queue = WithinClusterQueue::kLowerPriority;
  {
    Harness h(MakeCluster(8), {a}, KueueProfile());
    h.Submit("low", "a", 4, 0, 0);
    EXPECT_EQ(h.Schedule(0), "+low");
    h.Submit("high", "a", 4, 1, 1);
    EXPECT_EQ(h.Schedule(1), "low>high +high");
    h.Submit("same", "a", 4, 1, 2);  // equal priority: no
    EXPECT_EQ(h.Schedule(2), "");
  }
  // `old` was submitted first yet waits; `young`, submitted later, was found running (a
  // restarted driver adopts it). LowerOrNewerEqualPriority lets the older job preempt it.
  for (WithinClusterQueue policy :
       {WithinClusterQueue::kLowerPriority, WithinClusterQueue::kLowerOrNewerEqualPriority}) {
    a.queue.within_cluster_queue = policy;
    Harness h(MakeCluster(8), {a}, KueueProfile());
    h.Adopt("young", "a", 4, 1, /*submit=*/5, /*start=*/5, /*now=*/6);
    h.Submit("old", "a", 4, 1, 6, kAnyGpuType, /*submit=*/2);
    EXPECT_EQ(h.Schedule(6), policy == WithinClusterQueue::kLowerPriority ? "" : "young>old +old");
  }
}

// The engine preempts only for a start that happens: when the victims' GPUs would not give
// the job a place (here a whole 4-GPU node), nothing is preempted; once they would, the victim
// goes (the harness checks that Explain names who took its place).
TEST(KueueTest, PreemptsOnlyWhenTheJobThenFitsOnNodes) {
  Team a = Cq("a", {{"*", 4}});
  a.queue.within_cluster_queue = WithinClusterQueue::kLowerPriority;
  Team b;  // no quota: not limited, never a victim
  b.name = "b";
  Harness h(MakeCluster(4, 4), {a, b}, KueueProfile());
  h.Submit("b2", "b", 4, 0, 0, /*mask=*/1u << 1);   // the A100 node
  h.Submit("low", "a", 2, 0, 0, /*mask=*/1u << 0);  // half the H100 node
  h.Submit("b1", "b", 2, 0, 0, /*mask=*/1u << 0);   // the other half
  EXPECT_EQ(h.Schedule(0), "+b2 +low +b1");
  h.Submit("high", "a", 4, 1, 1, kAnyGpuType, -1, /*nodes=*/1);
  EXPECT_EQ(h.Schedule(1), "");  // its quota needs low gone, but no node would hold it
  EXPECT_EQ(h.status("low").phase, JobStatus::Phase::kRunning);
  EXPECT_EQ(h.status("high").reason, Reason::kQuota);
  h.Finish("b1", 2);
  EXPECT_EQ(h.Schedule(2), "low>high +high");
  EXPECT_EQ(h.Type("high"), "H100");
  // The harness checked that Explain named its preemptor, then requeued it.
  EXPECT_EQ(h.status("low").phase, JobStatus::Phase::kPending);
}

// Flavor fungibility, whenCanBorrow: Borrow takes the first flavor that fits even by
// borrowing; TryNextFlavor looks on for a flavor that fits without.
TEST(KueueTest, WhenCanBorrow) {
  for (FlavorFungibility when : {FlavorFungibility::kBorrow, FlavorFungibility::kTryNextFlavor}) {
    Team a = Cq("a", {{"H100", 2}, {"A100", 4}}, "ab");
    a.queue.when_can_borrow = when;
    Harness h(MakeCluster(4, 4), {a, Cq("b", {{"H100", 2}}, "ab")}, KueueProfile());
    h.Submit("a1", "a", 3, 0, 0);
    EXPECT_EQ(h.Schedule(0), "+a1");
    EXPECT_EQ(h.Type("a1"), when == FlavorFungibility::kBorrow ? "H100" : "A100");
  }
}

// whenCanPreempt: TryNextFlavor (the default) prefers a later flavor that fits to preempting
// on an earlier one; Preempt preempts on the first flavor where preemption works.
TEST(KueueTest, WhenCanPreempt) {
  for (FlavorFungibility when : {FlavorFungibility::kTryNextFlavor, FlavorFungibility::kPreempt}) {
    Team a = Cq("a", {{"H100", 2}, {"A100", 2}});
    a.queue.within_cluster_queue = WithinClusterQueue::kLowerPriority;
    a.queue.when_can_preempt = when;
    Harness h(MakeCluster(4, 4), {a}, KueueProfile());
    h.Submit("low", "a", 2, 0, 0, /*mask=*/1u << 0);  // H100 only
    EXPECT_EQ(h.Schedule(0), "+low");
    h.Submit("high", "a", 2, 1, 1);
    if (when == FlavorFungibility::kPreempt) {
      EXPECT_EQ(h.Schedule(1), "low>high +high");
      EXPECT_EQ(h.Type("high"), "H100");
    } else {
      EXPECT_EQ(h.Schedule(1), "+high");
      EXPECT_EQ(h.Type("high"), "A100");
    }
  }
}

// borrowWithinCohort: a CQ under its nominal quota reclaims without borrowing only; with
// LowerPriority it may reclaim and borrow at once, from jobs below its priority and at most
// maxPriorityThreshold.
TEST(KueueTest, BorrowWithinCohort) {
  struct Case {
    BorrowWithinCohort policy;
    int threshold;
    const char* want;
  };
  for (const Case& c : {Case{BorrowWithinCohort::kNever, INT32_MAX, ""},
                        Case{BorrowWithinCohort::kLowerPriority, INT32_MAX, "a1>b1 +b1"},
                        Case{BorrowWithinCohort::kLowerPriority, 0, "a1>b1 +b1"},
                        Case{BorrowWithinCohort::kLowerPriority, -1, ""}}) {
    Team b = Cq("b", {{"H100", 4}}, "ab");
    b.queue.reclaim_within_cohort = ReclaimWithinCohort::kLowerPriority;
    b.queue.borrow_within_cohort = c.policy;
    b.queue.borrow_max_priority = c.threshold;
    Harness h(MakeCluster(8), {Cq("a", {{"H100", 4}}, "ab"), b}, KueueProfile());
    h.Submit("a1", "a", 6, 0, 0);  // borrows 2
    h.Submit("b0", "b", 2, 3, 0);
    EXPECT_EQ(h.Schedule(0), "+b0 +a1");
    h.Submit("b1", "b", 4, 3, 1);  // would use 6 of its nominal 4: reclaims and borrows
    EXPECT_EQ(h.Schedule(1), c.want) << "threshold " << c.threshold;
  }
}

// Hierarchical cohorts: quota lent to the root reaches every CQ below it, less lending limits.
TEST(KueueTest, HierarchicalCohortsLendAcrossSubtrees) {
  Cluster cluster = MakeCluster(6, 0, {{"x", "org"}, {"y", "org"}});
  std::vector<Team> teams = {Cq("a", {{"H100", 2}}, "x"), Cq("b", {{"H100", 2}}, "x"),
                             Cq("c", {{"H100", 2, kNoQuota, 1}}, "y")};
  Harness h(cluster, teams, KueueProfile());
  h.Submit("big", "a", 6, 0, 0);  // c keeps 1 for itself: 5 at most, ever
  h.Submit("a1", "a", 5, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1");
  EXPECT_NE(h.Explain("big").find("can never start"), std::string::npos) << h.Explain("big");
  h.Submit("c1", "c", 1, 0, 1);
  h.Submit("b1", "b", 1, 0, 1);
  EXPECT_EQ(h.Schedule(1), "+c1");
  EXPECT_EQ(h.status("b1").reason, Reason::kCohort);
}

// Fair sharing (Kueue's example shape: three CQs of nominal 3 in one cohort). `a` fills the
// cluster; `b` reclaims while its share with the new job stays at most `a`'s share without the
// victim (LessThanOrEqualToFinalShare), then LessThanInitialShare allows no more. Shares: GPUs
// borrowed per 1000 of the 9 lendable, over the weight.
TEST(KueueTest, FairSharingPreemptsTowardsEqualShares) {
  for (double weight_b : {1.0, 2.0}) {
    std::vector<Team> teams = {Cq("a", {{"H100", 3}}, "abc"), Cq("b", {{"H100", 3}}, "abc"),
                               Cq("c", {{"H100", 3}}, "abc")};
    for (Team& t : teams) t.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
    teams[1].queue.fair_weight = weight_b;
    Harness h(MakeCluster(9), teams, KueueProfile("fair_sharing: true"));
    for (int i = 1; i <= 9; ++i) h.Submit("a" + std::to_string(i), "a", 1, 0, 0);
    EXPECT_EQ(h.Schedule(0), "+a1 +a2 +a3 +a4 +a5 +a6 +a7 +a8 +a9");
    for (int i = 1; i <= 9; ++i) h.Submit("b" + std::to_string(i), "b", 1, 0, 1);
    // Weight 1: b4 makes b borrow 1 (111) against a's 2 after (222): yes; b5 would be 222
    // against 111: no. Weight 2: b5 is 222/2 = 111 against 111: yes; b6 167 against 0: no.
    // Victims: a's most recently started first (all at t=0: highest index first).
    EXPECT_EQ(h.Schedule(1), weight_b == 1.0 ? "a9>b1 +b1 a8>b2 +b2 a7>b3 +b3 a6>b4 +b4"
                                             : "a9>b1 +b1 a8>b2 +b2 a7>b3 +b3 a6>b4 +b4 a5>b5 +b5");
  }
}

// Hierarchical fair sharing: b (cohort x) needs a GPU. Alone, a borrows as much as d (2 each,
// 182 per 1000 of 11) and more than c (1); but y (c and d) borrows 3 as a whole (273) while x
// borrows nothing. Compared through the children of the root, y loses: c's newest job goes,
// not a's.
TEST(KueueTest, HierarchicalFairSharingComparesSubtrees) {
  Cluster cluster = MakeCluster(11, 0, {{"x", "org"}, {"y", "org"}});
  std::vector<Team> teams = {Cq("a", {{"H100", 2}}, "x"), Cq("b", {{"H100", 5}}, "x"),
                             Cq("c", {{"H100", 2}}, "y"), Cq("d", {{"H100", 2}}, "y")};
  for (Team& t : teams) t.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  Harness h(cluster, teams, KueueProfile("fair_sharing: true"));
  for (int i = 1; i <= 4; ++i) h.Submit("a" + std::to_string(i), "a", 1, 0, 0);
  for (int i = 1; i <= 3; ++i) h.Submit("c" + std::to_string(i), "c", 1, 0, 0);
  for (int i = 1; i <= 4; ++i) h.Submit("d" + std::to_string(i), "d", 1, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1 +a2 +a3 +a4 +c1 +c2 +c3 +d1 +d2 +d3 +d4");
  h.Submit("b1", "b", 1, 0, 1);
  EXPECT_EQ(h.Schedule(1), "c3>b1 +b1");
}

// Plugin arguments are checked: an unknown strategy is an error naming it.
TEST(KueueTest, FairSharingStrategiesArgument) {
  auto bad = Engine::Create(MakeCluster(8), {Cq("a", {{"H100", 4}})},
                            KueueProfile("fair_sharing: true, strategies: Nope"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown strategy 'Nope'"), std::string::npos);
}

// A fixed cluster spec round trip: the YAML of docs/formats/cluster.md parses to the settings.
TEST(KueueTest, ClusterSpecClusterQueues) {
  const std::string yaml = R"(
name: kq
gpu_types:
  - {name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}
  - {name: A100, memory_gb: 80, idle_watts: 50, busy_watts: 400}
nodes:
  - {count: 2, gpu_type: H100, gpus: 8}
  - {count: 2, gpu_type: A100, gpus: 8}
cohorts:
  - {name: research, parent: org}
teams:
  - name: vision
    cohort: research
    quotas:
      - {flavor: h100, nominal: 8, borrowing_limit: 4}
      - {flavor: A100, nominal: 8, lending_limit: 2}
    preemption:
      within_cluster_queue: LowerOrNewerEqualPriority
      reclaim_within_cohort: Any
      borrow_within_cohort: {policy: LowerPriority, max_priority_threshold: 1}
    flavor_fungibility: {when_can_borrow: TryNextFlavor, when_can_preempt: Preempt}
    fair_weight: 2
  - {name: legacy, quota_gpus: 4}
)";
  auto c = ParseClusterSpec(yaml, "kq.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->teams().size(), 2u);
  const QueueSettings& q = c->teams()[0].queue;
  EXPECT_EQ(q.cohort, "research");
  ASSERT_EQ(q.quotas.size(), 2u);
  EXPECT_EQ(q.quotas[0].flavor, "H100");
  EXPECT_EQ(q.quotas[0].borrowing_limit, 4);
  EXPECT_EQ(q.quotas[1].lending_limit, 2);
  EXPECT_EQ(q.quotas[1].borrowing_limit, kNoQuota);
  EXPECT_EQ(q.within_cluster_queue, WithinClusterQueue::kLowerOrNewerEqualPriority);
  EXPECT_EQ(q.reclaim_within_cohort, ReclaimWithinCohort::kAny);
  EXPECT_EQ(q.borrow_within_cohort, BorrowWithinCohort::kLowerPriority);
  EXPECT_EQ(q.borrow_max_priority, 1);
  EXPECT_EQ(q.when_can_borrow, FlavorFungibility::kTryNextFlavor);
  EXPECT_EQ(q.when_can_preempt, FlavorFungibility::kPreempt);
  EXPECT_EQ(q.fair_weight, 2);
  ASSERT_EQ(c->cohorts().size(), 1u);
  EXPECT_EQ(c->cohorts()[0].parent, "org");
  EXPECT_TRUE(c->teams()[1].queue.quotas.empty());
  EXPECT_EQ(c->teams()[1].queue.cohort, "");

  const auto error = [&](const std::string& from, const std::string& to) {
    std::string bad = yaml;
    const size_t at = bad.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    auto r = ParseClusterSpec(bad, "kq.yaml");
    EXPECT_FALSE(r.ok()) << to;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(error("flavor: h100", "flavor: V100").find("unknown flavor \"V100\""),
            std::string::npos);
  EXPECT_NE(error("reclaim_within_cohort: Any", "reclaim_within_cohort: Sometimes")
                .find("unknown value \"Sometimes\""),
            std::string::npos);
  EXPECT_NE(error("flavor: A100", "flavor: H100").find("listed twice"), std::string::npos);
  EXPECT_NE(error("flavor: A100", "flavor: \"*\"").find("cannot be combined"), std::string::npos);
  EXPECT_NE(error("{name: research, parent: org}",
                  "{name: research, parent: org}\n  - {name: org, parent: research}")
                .find("its own ancestor"),
            std::string::npos);
  EXPECT_NE(error("{name: legacy, quota_gpus: 4}", "{name: legacy, cohort: research}")
                .find("needs quota_gpus or quotas"),
            std::string::npos);
}

// Through the simulator: a reclaimed job loses the work since its last checkpoint, is requeued
// and runs again; preemptions are counted per job and in the summary. A job larger than
// anything its team could get stays pending (never started) without failing the run.
TEST(KueueTest, SimulatorRequeuesPreemptedJobs) {
  Team b = Cq("b", {{"H100", 4}}, "ab");
  b.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  std::vector<Team> teams = {Cq("a", {{"H100", 4}}, "ab"), b};
  Workload w;
  w.teams = {"a", "b"};
  w.users = {"u"};
  w.queues = {"q"};
  const auto add = [&](const std::string& id, int team, int gpus, Time submit, Duration run) {
    Job j;
    j.index = static_cast<JobIndex>(w.jobs.size());
    j.id = id;
    j.team = team;
    j.gpus = gpus;
    j.submit = submit;
    j.run_time = run;
    j.time_limit = 100000;
    w.jobs.push_back(j);
  };
  add("a1", 0, 8, 0, 10000);   // borrows all of b's 4
  add("b1", 1, 4, 5000, 100);  // reclaims: a1 ran 5000 s, checkpointed at 3600
  add("huge", 1, 9, 5000, 1);  // more than the cohort has: pending for ever
  SimOptions options;
  options.check_invariants = true;
  options.checkpoints = {3600, 300};
  auto r = Simulate(MakeCluster(8), teams, w, KueueProfile(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->preemptions, 1);
  EXPECT_EQ(r->outcomes[0].preemptions, 1);
  EXPECT_EQ(r->outcomes[0].requeues, 0);
  EXPECT_EQ(r->outcomes[1].start, 5000);
  // a1 restarts when b1 ends (5100): 300 s restart + 10000 - 3600 s left.
  EXPECT_EQ(r->outcomes[0].start, 5100);
  EXPECT_EQ(r->outcomes[0].end, 5100 + 300 + 6400);
  EXPECT_DOUBLE_EQ(r->lost_gpu_seconds, 8.0 * (5000 - 3600));
  EXPECT_EQ(r->outcomes[2].start, -1);
  EXPECT_EQ(r->summary.preemptions, 1);
  EXPECT_EQ(r->summary.jobs_preempted, 1);
  EXPECT_EQ(r->summary.max_preemptions_per_job, 1);
  EXPECT_EQ(r->summary.jobs_never_started, 1);
}

// The invariant checker's Kueue rule catches a CQ above nominal plus borrowing limit, and a
// cohort lending more than its CQs lend.
TEST(KueueTest, InvariantCheckerCatchesOverBorrowing) {
  Cluster c = MakeCluster(8);
  std::vector<Team> teams = {Cq("a", {{"H100", 2, 1}}, "ab"),
                             Cq("b", {{"H100", 4, kNoQuota, 1}}, "ab")};
  Job j;
  j.id = "j";
  j.team = 0;
  j.gpus = 3;
  {
    InvariantChecker checker(c, teams, /*kueue_quotas=*/true);
    EXPECT_TRUE(checker.OnStart(j, 0, {{0, 3}}).ok());  // 2 + 1 borrowed
    Job k = j;
    k.index = 1;
    k.gpus = 1;
    EXPECT_EQ(checker.OnStart(k, 0, {{0, 1}}).code(), StatusCode::kInternal);  // limit is 1
  }
  {
    // b lends only 1: a (no cohort-level room beyond it) may not use 2 + 2.
    teams[0].queue.quotas[0].borrowing_limit = kNoQuota;
    InvariantChecker checker(c, teams, true);
    j.gpus = 3;
    EXPECT_TRUE(checker.OnStart(j, 0, {{0, 3}}).ok());
    Job k = j;
    k.index = 1;
    k.gpus = 1;
    auto st = checker.OnStart(k, 0, {{0, 1}});
    EXPECT_EQ(st.code(), StatusCode::kInternal);
    EXPECT_NE(st.message().find("cohort ab lends 3"), std::string::npos) << st.message();
  }
}

// The shipped kueue cluster on the Philly sample: quotas with borrowing hold at every start
// (invariant checker), reclaim preempts, and no job is preempted more than max_preemptions.
TEST(KueueTest, ShippedPhillySpecRunsUnderTheBuiltinProfile) {
  auto cluster =
      LoadClusterSpecFile(std::string(GANTRY_SOURCE_DIR) + "/data/clusters/philly-256-kueue.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto w = ImportTrace(std::string(GANTRY_SOURCE_DIR) + "/data/philly-sample.csv",
                       TraceFormat::kPhilly, {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto teams = ResolveWorkload(*w, *cluster, {});
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  auto profile = FindProfile("kueue", {});
  ASSERT_TRUE(profile.ok());
  SimOptions options;
  options.check_invariants = true;
  auto r = Simulate(*cluster, *teams, *w, *profile, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->summary.jobs_completed, 4488);
  EXPECT_GT(r->summary.preemptions, 100);
  EXPECT_LE(r->summary.max_preemptions_per_job, 5);
}

// Shares count in milli-GPUs against a ClusterQueue's nominal quota: a 1-GPU nominal quota
// without a cohort holds four 250-milli jobs at once, and the fifth waits (Quota) until one ends.
TEST(KueueTest, NoCohortHardCapCountsSharesInMilli) {
  Harness h(MakeCluster(8), {Cq("a", {{"*", 1}})}, KueueProfile());
  for (int i = 1; i <= 5; ++i) h.SubmitShare("s" + std::to_string(i), "a", 250, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+s1 +s2 +s3 +s4");
  EXPECT_EQ(h.status("s5").reason, Reason::kQuota);
  EXPECT_EQ(h.Explain("s5"),
            "waiting for quota: ClusterQueue a, job needs 0.25 GPUs: flavor *: uses 1 of nominal "
            "1, 0 available with borrowing, at most 1 ever");
  EXPECT_EQ(h.engine().team_running_milli(0), 1000);
  h.Finish("s2", 10);
  EXPECT_EQ(h.Schedule(10), "+s5");
}

// Borrowing and reclaim in milli-GPUs. a's six 250-milli shares use 1.5 GPUs: its nominal 1 and
// 0.5 borrowed from b. b's whole GPU needs that 0.5 back: reclaim takes a's newest shares until
// a no longer borrows (a6, a5). Then a 250-milli share of b would have to borrow from a, which
// uses all of its own: it waits for its cohort, as the requeued a5 and a6 do.
TEST(KueueTest, CohortBorrowsAndReclaimsSharesInMilli) {
  Team b = Cq("b", {{"H100", 1}}, "ab");
  b.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  Harness h(MakeCluster(8), {Cq("a", {{"H100", 1}}, "ab"), b}, KueueProfile());
  for (int i = 1; i <= 6; ++i) h.SubmitShare("a" + std::to_string(i), "a", 250, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1 +a2 +a3 +a4 +a5 +a6");
  h.Submit("b1", "b", 1, 0, 1);
  EXPECT_EQ(h.Schedule(1), "a6>b1 a5>b1 +b1");
  h.SubmitShare("b2", "b", 250, 0, 2);
  EXPECT_EQ(h.Schedule(2), "");
  EXPECT_EQ(h.status("b2").reason, Reason::kCohort);
  EXPECT_EQ(h.status("a5").reason, Reason::kCohort);
  EXPECT_EQ(h.engine().team_running_milli(0), 1000);
  EXPECT_EQ(h.engine().team_running_milli(1), 1000);
}

// A borrowing limit of 1 GPU lets a CQ of nominal 1 use 2 GPUs' worth: eight 250-milli shares,
// not a ninth, however much the cohort could lend.
TEST(KueueTest, BorrowingLimitCountsSharesInMilli) {
  std::vector<Team> teams = {Cq("a", {{"H100", 1, 1}}, "ab"), Cq("b", {{"H100", 4}}, "ab")};
  Harness h(MakeCluster(8), teams, KueueProfile());
  for (int i = 1; i <= 9; ++i) h.SubmitShare("a" + std::to_string(i), "a", 250, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1 +a2 +a3 +a4 +a5 +a6 +a7 +a8");
  EXPECT_EQ(h.status("a9").reason, Reason::kQuota);
}

// Through the simulator: shares that start and are reclaimed in the same cycle. At 0 a's six
// 250-milli shares (QoS 1, first in the cycle) start, borrowing 0.5 GPU of b's; b1 (QoS 0, a
// whole GPU) comes next in that cycle and reclaims a6 and a5, which had just started. The
// simulator books each start on the shared GPU the engine named at that start (a share
// reclaimed since has none). a5 and a6 start again when b1 ends at 50 and b lends again.
TEST(KueueTest, SimulatorBooksSharesReclaimedInTheCycleTheyStarted) {
  Team b = Cq("b", {{"H100", 1}}, "ab");
  b.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  std::vector<Team> teams = {Cq("a", {{"H100", 1}}, "ab"), b};
  Workload w;
  w.teams = {"a", "b"};
  w.users = {"u"};
  w.queues = {"q"};
  for (int i = 0; i < 7; ++i) {
    Job j;
    j.index = i;
    j.id = i < 6 ? "a" + std::to_string(i + 1) : "b1";
    j.team = i < 6 ? 0 : 1;
    j.gpus = 1;
    j.gpu_milli = i < 6 ? 250 : 0;
    j.qos = i < 6 ? 1 : 0;
    j.run_time = i < 6 ? 100 : 50;
    j.time_limit = 1000;
    w.jobs.push_back(j);
  }
  SimOptions options;
  options.check_invariants = true;
  auto r = Simulate(MakeCluster(8), teams, w, KueueProfile(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<Time> starts;
  std::vector<int> preempted;
  for (const JobOutcome& o : r->outcomes) {
    starts.push_back(o.start);
    preempted.push_back(o.preemptions);
  }
  EXPECT_EQ(starts, (std::vector<Time>{0, 0, 0, 0, 50, 50, 0}));
  EXPECT_EQ(preempted, (std::vector<int>{0, 0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(r->preemptions, 2);
}

// The checker's Kueue rule in milli-GPUs: four 250-milli shares fill a nominal 1; a fifth is
// over it.
TEST(KueueTest, InvariantCheckerCountsSharesInMilli) {
  Cluster c = MakeCluster(8);
  std::vector<Team> teams = {Cq("a", {{"H100", 1}})};
  InvariantChecker checker(c, teams, /*kueue_quotas=*/true);
  Job j;
  j.team = 0;
  j.gpus = 1;
  j.gpu_milli = 250;
  for (int i = 0; i < 4; ++i) {
    j.index = i;
    j.id = "s" + std::to_string(i);
    ASSERT_TRUE(checker.OnStart(j, 0, {{0, 1}}, /*shared_gpu=*/0).ok()) << i;
  }
  j.index = 4;
  j.id = "s4";
  auto st = checker.OnStart(j, 0, {{0, 1}}, /*shared_gpu=*/1);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("ClusterQueue a uses 1.25 GPUs of flavor H100"), std::string::npos)
      << st.message();
}

// Four ClusterQueues with random quotas and policies in the cohorts left and right (under root)
// or in root itself.
std::vector<Team> RandomClusterQueues(Rng& rng) {
  std::vector<Team> teams;
  const char* cohorts[] = {"left", "right", "root"};
  for (int t = 0; t < 4; ++t) {
    Team team = Cq("t" + std::to_string(t), {}, cohorts[rng.Below(3)]);
    team.queue.quotas.push_back({"H100", static_cast<int>(rng.Below(7)),
                                 rng.Below(2) ? kNoQuota : static_cast<int>(rng.Below(6)),
                                 rng.Below(2) ? kNoQuota : static_cast<int>(rng.Below(4))});
    if (rng.Below(2)) team.queue.quotas.push_back({"A100", static_cast<int>(rng.Below(5))});
    team.queue.within_cluster_queue = static_cast<WithinClusterQueue>(rng.Below(3));
    team.queue.reclaim_within_cohort = static_cast<ReclaimWithinCohort>(rng.Below(3));
    team.queue.borrow_within_cohort = static_cast<BorrowWithinCohort>(rng.Below(2));
    team.queue.when_can_borrow =
        rng.Below(2) ? FlavorFungibility::kBorrow : FlavorFungibility::kTryNextFlavor;
    team.queue.when_can_preempt =
        rng.Below(2) ? FlavorFungibility::kPreempt : FlavorFungibility::kTryNextFlavor;
    team.queue.fair_weight = static_cast<double>(rng.Below(3));
    teams.push_back(std::move(team));
  }
  return teams;
}

// `n` random jobs of random teams and priorities, in submit order: 1 to `max_gpus` whole GPUs,
// or, with `shares`, half of them a share of one GPU (gpu_milli 1..999).
Workload RandomWorkload(Rng& rng, const std::vector<Team>& teams, int n, int max_gpus,
                        bool shares) {
  Workload w;
  for (const Team& t : teams) w.teams.push_back(t.name);
  w.users = {"u"};
  w.queues = {"q"};
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = "j" + std::to_string(i);
    j.team = static_cast<int32_t>(rng.Below(teams.size()));
    j.gpus = 1 + static_cast<int32_t>(rng.Below(max_gpus));
    if (shares && rng.Below(2) == 0) {
      j.gpus = 1;
      j.gpu_milli = 1 + static_cast<int32_t>(rng.Below(999));
    }
    j.qos = static_cast<int32_t>(rng.Below(4));
    j.submit = static_cast<Time>(rng.Below(20000));
    j.run_time = 100 + static_cast<Duration>(rng.Below(5000));
    j.time_limit = 10000;
    j.gpu_type_mask = rng.Below(3) == 0 ? (1u << rng.Below(2)) : kAnyGpuType;
    w.jobs.push_back(j);
  }
  std::stable_sort(w.jobs.begin(), w.jobs.end(),
                   [](const Job& a, const Job& b) { return a.submit < b.submit; });
  for (size_t i = 0; i < w.jobs.size(); ++i) w.jobs[i].index = static_cast<JobIndex>(i);
  return w;
}

// Random workloads on random cohorts and policies. Checks, for every run:
//  - quotas with borrowing and lending are never exceeded (the simulator's invariant checker);
//  - no preemption loop: if A preempted B, B never later preempts A;
//  - each job is preempted a bounded number of times (see kMaxPreemptions).
TEST(KueuePropertyTest, NoPreemptionLoopsAndQuotasHold) {
  // The plugin's max_preemptions (default 5): a job preempted that often is no victim any
  // more. Without that rule these workloads preempt some jobs 40 times and more (a CQ living on
  // borrowed quota is reclaimed each time it restarts), and without the no-loop rule pairs of
  // jobs preempt each other in turn.
  constexpr int kMaxPreemptions = 5;
  int64_t total_preemptions = 0, signals = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Rng rng(seed);
    Cluster cluster = MakeCluster(16, 8, {{"left", "root"}, {"right", "root"}});
    std::vector<Team> teams = RandomClusterQueues(rng);
    const bool fair = seed % 2 == 0;
    // Every victim order, with and without a minimum run time and GraceTime.
    const char* preemptions[] = {
        "",
        "checkpoint-aware",
        "{plugin: checkpoint-aware, args: {min_run_time: 500, grace_time: 60}}",
        "{plugin: kueue-order, args: {grace_time: 300}}",
        "{plugin: checkpoint-aware, args: {min_run_time: 1000, per_gpu: true}}",
    };
    const std::string preemption = preemptions[(seed / 2) % 5];
    const Duration grace = preemption.find("grace_time: 60") != std::string::npos    ? 60
                           : preemption.find("grace_time: 300") != std::string::npos ? 300
                                                                                     : 0;
    const Profile profile = KueueProfile(fair ? "fair_sharing: true" : "", preemption);
    const Workload w = RandomWorkload(rng, teams, 120, 6, /*shares=*/false);

    // The simulator, with its invariant checker on (Kueue quotas included).
    SimOptions options;
    options.check_invariants = true;
    auto sim = Simulate(cluster, teams, w, profile, options);
    ASSERT_TRUE(sim.ok()) << "seed " << seed << ": " << sim.status().ToString();
    total_preemptions += sim->preemptions;

    // The same workload through a small driver that records who preempted whom.
    auto engine = Engine::Create(cluster, teams, profile);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<std::pair<JobIndex, JobIndex>> preempted;  // (victim, preemptor), in order
    std::vector<int> count(w.jobs.size(), 0);
    std::vector<Time> end(w.jobs.size(), -1);
    using Event = std::pair<Time, JobIndex>;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> finishes;
    size_t next = 0;
    std::vector<StartDecision> starts;
    std::vector<Time> natural_end(w.jobs.size(), -1), run_start(w.jobs.size(), -1);
    std::vector<Time> signalled(w.jobs.size(), -1);
    Time now = 0;
    while (next < w.jobs.size() || !finishes.empty()) {
      const Time wakeup = (*engine)->NextWakeup(now);
      now = next < w.jobs.size() ? w.jobs[next].submit : kInfiniteTime;
      if (!finishes.empty()) now = std::min({now, finishes.top().first, wakeup});
      while (!finishes.empty() && finishes.top().first == now) {
        const JobIndex j = finishes.top().second;
        finishes.pop();
        if (end[j] == now && (*engine)->status(j).phase == JobStatus::Phase::kRunning) {
          ASSERT_TRUE((*engine)->Finish(j, now).ok());
          if (signalled[j] >= 0 && now < natural_end[j]) {
            // The end of its GraceTime: preempted.
            EXPECT_EQ(now, signalled[j] + grace);
            ASSERT_TRUE((*engine)->Requeue(j, now).ok());
          }
          signalled[j] = -1;
        }
      }
      while (next < w.jobs.size() && w.jobs[next].submit == now) {
        ASSERT_TRUE((*engine)->Submit(w.jobs[next], now).ok());
        ++next;
      }
      starts.clear();
      (*engine)->Schedule(now, &starts);
      for (const StartDecision& d : starts) {
        if (d.reason == Reason::kPreempting) {
          ++signals;
          EXPECT_GT(grace, 0) << "seed " << seed;
          EXPECT_EQ(d.victims_end_by, now + grace);
          for (JobIndex v : d.preempted) {
            preempted.emplace_back(v, d.job);
            ++count[v];
            signalled[v] = now;
            if (end[v] > d.victims_end_by) {
              end[v] = d.victims_end_by;
              finishes.push({end[v], v});
            }
          }
          continue;
        }
        for (JobIndex v : d.preempted) {
          preempted.emplace_back(v, d.job);
          ++count[v];
          end[v] = -1;
          ASSERT_TRUE((*engine)->Requeue(v, now).ok());
        }
        for (JobIndex v : d.preempted) {
          // The minimum run time held: the victim ran at least that long.
          const Duration min_run = preemption.find("min_run_time: 500") != std::string::npos ? 500
                                   : preemption.find("min_run_time: 1000") != std::string::npos
                                       ? 1000
                                       : 0;
          EXPECT_GE(now - run_start[v], min_run) << "seed " << seed;
        }
        run_start[d.job] = now;
        end[d.job] = natural_end[d.job] = now + w.jobs[d.job].run_time;
        finishes.push({end[d.job], d.job});
      }
    }
    // (The simulator's reruns resume from checkpoints, this driver's start over: their
    // schedules differ after the first preemption, so only each one's own log is checked.)
    total_preemptions += static_cast<int64_t>(preempted.size());
    for (size_t i = 0; i < preempted.size(); ++i) {
      for (size_t k = i + 1; k < preempted.size(); ++k) {
        EXPECT_FALSE(preempted[k].first == preempted[i].second &&
                     preempted[k].second == preempted[i].first)
            << "seed " << seed << ": " << w.jobs[preempted[i].second].id << " preempted "
            << w.jobs[preempted[i].first].id << ", then the other way round";
      }
    }
    for (size_t j = 0; j < count.size(); ++j) {
      EXPECT_LE(count[j], kMaxPreemptions) << "seed " << seed << " job " << w.jobs[j].id;
    }
  }
  // The workloads do preempt, with GraceTime too: the property is not vacuous.
  EXPECT_GT(total_preemptions, 40);
  EXPECT_GT(signals, 10);
}

// Random workloads of shares (gpu_milli 1..999) and whole GPUs on random cohorts and policies,
// through the simulator with its invariant checker on: no ClusterQueue or cohort is ever over
// its quota counted in milli-GPUs, and the engine's per-team milli-GPUs agree with the checker's
// after every cycle. Reclaim and fair sharing do preempt shares (not vacuous).
TEST(KueuePropertyTest, SharesKeepQuotasInMilli) {
  int64_t share_preemptions = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    Cluster cluster = MakeCluster(16, 8, {{"left", "root"}, {"right", "root"}});
    std::vector<Team> teams = RandomClusterQueues(rng);
    const Profile profile = KueueProfile(seed % 2 == 0 ? "fair_sharing: true" : "");
    const Workload w = RandomWorkload(rng, teams, 150, 4, /*shares=*/true);
    SimOptions options;
    options.check_invariants = true;
    auto sim = Simulate(cluster, teams, w, profile, options);
    ASSERT_TRUE(sim.ok()) << "seed " << seed << ": " << sim.status().ToString();
    for (size_t i = 0; i < w.jobs.size(); ++i) {
      if (IsShare(w.jobs[i])) share_preemptions += sim->outcomes[i].preemptions;
    }
  }
  EXPECT_GT(share_preemptions, 20);
}

}  // namespace
}  // namespace gantry
