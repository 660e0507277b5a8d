// Scenario tests of the "kueue" admission plugin with exact outcomes (who starts, who is
// preempted by whom, in which order), ported from the behaviour Kueue's documentation gives
// for ClusterQueues, cohorts, borrowing and lending limits, preemption policies, flavor
// fungibility and fair sharing; and a property test over random workloads: no preemption loops,
// bounded preemptions, quotas (with borrowing) never exceeded.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <queue>

#include "gantry/common/rng.h"
#include "gantry/sched/engine.h"
#include "gantry/sim/simulator.h"
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

Profile KueueProfile(const std::string& admission_args = "") {
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
      "    backfill: {mode: easy, max_jobs: 500}\n";
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
                  uint32_t mask = kAnyGpuType, Time submit = -1) {
    JobRequest& j = NewJob(id, team, gpus, qos, submit < 0 ? now : submit, mask);
    EXPECT_TRUE(engine_->Submit(j, now).ok());
    return j.index;
  }
  // A job the driver finds running since `start` on the first node's GPUs.
  void Adopt(const std::string& id, const std::string& team, int gpus, int qos, Time submit,
             Time start, Time now) {
    JobRequest& j = NewJob(id, team, gpus, qos, submit, kAnyGpuType);
    EXPECT_TRUE(engine_->Adopt(j, {{0, gpus}}, start, now).ok());
  }
  JobRequest& NewJob(const std::string& id, const std::string& team, int gpus, int qos,
                     Time submit, uint32_t mask) {
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
  EXPECT_EQ(h.status("b1").reason, Reason::kQuota);
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
  EXPECT_EQ(h.status("b2").reason, Reason::kQuota);
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

}  // namespace
}  // namespace gantry
