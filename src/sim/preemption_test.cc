// Scenario tests of preemption with exact outcomes on hand-checked small clusters: the victim
// order of the preemption plugins (Kueue's, checkpoint-aware) for admission's reclaim and for
// priority/QoS preemption, the minimum run time, and GraceTime (the preemptor waits for its
// signalled victims, which lose at most the work done in the grace period).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "gantry/common/rng.h"
#include "gantry/sched/engine.h"
#include "gantry/sim/simulator.h"
#include "gantry/workload/trace.h"

namespace gantry {
namespace {

// One flat cluster: one node "h" of `gpus` H100.
Cluster MakeCluster(int gpus, std::vector<Qos> qos = {}) {
  ClusterBuilder b("preempt", {});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddNode({.name = "h", .gpu_type = 0, .gpus = gpus}).ok());
  for (Qos& q : qos) EXPECT_TRUE(b.AddQos(std::move(q)).ok());
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

Team Cq(const std::string& name, int nominal, const std::string& cohort) {
  Team t;
  t.name = name;
  t.queue.quotas = {{"H100", nominal}};
  t.queue.cohort = cohort;
  t.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  return t;
}

// admission: "kueue" or "quota"; preemption: a flow-style plugin spec, e.g.
// "{plugin: checkpoint-aware, args: {mode: priority}}" ("" for the default, none).
Profile MakeProfile(const std::string& admission, const std::string& preemption) {
  std::string yaml =
      "profiles:\n"
      "  p:\n"
      "    priority:\n"
      "      - {plugin: qos, weight: 1000, args: {max_qos: 3}}\n"
      "      - {plugin: age, weight: 1, args: {max_age: inf}}\n"
      "    admission: [" +
      admission +
      "]\n"
      "    placement: first-fit\n"
      "    backfill: {mode: easy, max_jobs: 500}\n";
  if (!preemption.empty()) yaml += "    preemption: " + preemption + "\n";
  auto p = ParseProfiles(yaml, "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->front() : Profile{};
}

// Drives the engine as a live driver would; logs "+a" a start, "a>b" a preempted by b (at
// once, or at its end when it was signalled), "a~b@T" a signalled for b, to end by T.
class Harness {
 public:
  Harness(Cluster cluster, std::vector<Team> teams, const Profile& profile)
      : cluster_(std::move(cluster)), teams_(std::move(teams)) {
    auto e = Engine::Create(cluster_, teams_, profile);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) engine_ = std::move(e).value();
  }
  JobRequest& Submit(const std::string& id, const std::string& team, int gpus, int qos, Time now) {
    JobRequest& j = jobs_.emplace_back();
    j.index = static_cast<JobIndex>(jobs_.size() - 1);
    j.id = id;
    for (size_t t = 0; t < teams_.size(); ++t) {
      if (teams_[t].name == team) j.team = static_cast<int32_t>(t);
    }
    j.gpus = gpus;
    j.qos = qos;
    j.submit = now;
    j.time_limit = 100000;
    j.checkpoint_interval = 3600;
    index_[id] = j.index;
    EXPECT_TRUE(engine_->Submit(j, now).ok());
    return j;
  }
  std::string Schedule(Time now) {
    std::vector<StartDecision> starts;
    engine_->Schedule(now, &starts);
    std::string log;
    const auto add = [&](const std::string& s) { log += (log.empty() ? "" : " ") + s; };
    for (const StartDecision& d : starts) {
      if (d.reason == Reason::kPreempting) {
        for (JobIndex v : d.preempted) {
          add(jobs_[v].id + "~" + jobs_[d.job].id + "@" +
              std::to_string(engine_->status(v).grace_end));
        }
        continue;
      }
      for (JobIndex v : d.preempted) {
        add(jobs_[v].id + ">" + jobs_[d.job].id);
        EXPECT_TRUE(engine_->Requeue(v, now).ok());
      }
      add("+" + jobs_[d.job].id);
    }
    return log;
  }
  void Finish(const std::string& id, Time now) {
    EXPECT_TRUE(engine_->Finish(index_.at(id), now).ok());
  }
  const JobStatus& status(const std::string& id) const { return engine_->status(index_.at(id)); }
  std::string Explain(const std::string& id) const { return engine_->Explain(index_.at(id)); }
  Engine& engine() { return *engine_; }

 private:
  Cluster cluster_;
  std::vector<Team> teams_;
  std::deque<JobRequest> jobs_;
  std::map<std::string, JobIndex> index_;
  std::unique_ptr<Engine> engine_;
};

// Kueue reclaim on one node of 8: CQs a and b (nominal 4 each, one cohort). a runs a1 (4 GPUs,
// since t=0) and a2 (4 GPUs, since t=1000), borrowing b's 4. Both checkpoint hourly. At t=3700
// b1 (4 GPUs) reclaims: one of a's jobs must go.
//   Kueue's order (most recently started first) picks a2: it loses 2700 s of work on 4 GPUs.
//   checkpoint-aware picks a1, which checkpointed at t=3600: it loses 100 s on 4 GPUs.
std::string Reclaim(const std::string& preemption) {
  Harness h(MakeCluster(8), {Cq("a", 4, "ab"), Cq("b", 4, "ab")}, MakeProfile("kueue", preemption));
  h.Submit("a1", "a", 4, 0, 0);
  std::string log = h.Schedule(0);
  h.Submit("a2", "a", 4, 0, 1000);
  log += " " + h.Schedule(1000);
  h.Submit("b1", "b", 4, 0, 3700);
  log += " " + h.Schedule(3700);
  return log;
}

TEST(PreemptionTest, KueueOrderIsKueuesOwnOrder) {
  EXPECT_EQ(Reclaim(""), "+a1 +a2 a2>b1 +b1");
  EXPECT_EQ(Reclaim("kueue-order"), "+a1 +a2 a2>b1 +b1");
}

TEST(PreemptionTest, CheckpointAwareReclaimsTheCheaperVictim) {
  EXPECT_EQ(Reclaim("checkpoint-aware"), "+a1 +a2 a1>b1 +b1");
  // A job that declares a long restart is dearer: a1 restarting for 3000 s costs 4 x 3100,
  // more than a2's 4 x (2700 + 300).
  Harness h(MakeCluster(8), {Cq("a", 4, "ab"), Cq("b", 4, "ab")},
            MakeProfile("kueue", "checkpoint-aware"));
  h.Submit("a1", "a", 4, 0, 0).restart_cost = 3000;
  h.Schedule(0);
  h.Submit("a2", "a", 4, 0, 1000);
  h.Schedule(1000);
  h.Submit("b1", "b", 4, 0, 3700);
  EXPECT_EQ(h.Schedule(3700), "a2>b1 +b1");
}

// The minimum run time protects young runs from reclaim; the engine says when the first one
// comes of age (NextWakeup), and a cycle then preempts without any other event.
TEST(PreemptionTest, MinRunTimeProtectsAYoungJob) {
  Harness h(MakeCluster(8), {Cq("a", 4, "ab"), Cq("b", 4, "ab")},
            MakeProfile("kueue", "{plugin: kueue-order, args: {min_run_time: 5000}}"));
  h.Submit("a1", "a", 4, 0, 0);
  h.Schedule(0);
  h.Submit("a2", "a", 4, 0, 1000);
  h.Schedule(1000);
  h.Submit("b1", "b", 4, 0, 3700);
  EXPECT_EQ(h.Schedule(3700), "");  // a1 (3700 s) and a2 (2700 s) are both too young
  // Its own queue's quota would admit it; the cohort's other member uses it.
  EXPECT_EQ(h.status("b1").reason, Reason::kCohort);
  EXPECT_EQ(h.engine().NextWakeup(3700), 5000);  // a1 turns 5000 s old
  EXPECT_EQ(h.Schedule(4999), "");
  // Kueue's order would take a2 (newest), but only a1 may be preempted yet.
  EXPECT_EQ(h.Schedule(5000), "a1>b1 +b1");
  // a1 waits; a2 comes of age at 6000 (a wake-up that may start nothing: the engine does not
  // ask admission ahead of time).
  EXPECT_EQ(h.engine().NextWakeup(5000), 6000);
  EXPECT_EQ(h.Schedule(6000), "");
}

// A job the resource manager cannot requeue (Slurm's --no-requeue: JobRequest::preemptible false)
// is never a victim, whoever names victims: Kueue's reclaim with or without a preemption plugin,
// and fair-share preemption. Reclaim and fair share as above, with `fixed` not preemptible.
std::string WithFixed(const std::string& admission, const std::string& preemption,
                      const std::set<std::string>& fixed) {
  const bool kueue = admission == "kueue";
  Harness h(MakeCluster(8),
            kueue ? std::vector<Team>{Cq("a", 4, "ab"), Cq("b", 4, "ab")}
                  : std::vector<Team>{Team{"a", kNoQuota, 1.0}, Team{"b", kNoQuota, 1.0}},
            MakeProfile(admission, preemption));
  h.Submit("a1", "a", 4, 0, 0).preemptible = fixed.count("a1") == 0;
  std::string log = h.Schedule(0);
  h.Submit("a2", "a", 4, 0, 1000).preemptible = fixed.count("a2") == 0;
  log += " " + h.Schedule(1000);
  h.Submit("b1", "b", 4, 0, 3700);
  log += " " + h.Schedule(3700);
  return log;
}

TEST(PreemptionTest, AJobThatCannotBeRequeuedIsNeverAVictim) {
  // Kueue's own order (no preemption plugin) takes a2, checkpoint-aware a1: each takes the
  // other when its choice cannot be requeued, and none when neither can.
  EXPECT_EQ(WithFixed("kueue", "", {"a2"}), "+a1 +a2 a1>b1 +b1");
  EXPECT_EQ(WithFixed("kueue", "checkpoint-aware", {"a1"}), "+a1 +a2 a2>b1 +b1");
  EXPECT_EQ(WithFixed("kueue", "", {"a1", "a2"}), "+a1 +a2 ");
  EXPECT_EQ(WithFixed("kueue", "checkpoint-aware", {"a1", "a2"}), "+a1 +a2 ");
  const std::string fair = "{plugin: checkpoint-aware, args: {mode: fairshare}}";
  EXPECT_EQ(WithFixed("quota", fair, {}), "+a1 +a2 a1>b1 +b1");
  EXPECT_EQ(WithFixed("quota", fair, {"a1"}), "+a1 +a2 a2>b1 +b1");
  EXPECT_EQ(WithFixed("quota", fair, {"a1", "a2"}), "+a1 +a2 ");
  // QoS-style priority preemption too.
  Harness h(MakeCluster(8), {Team{"a", kNoQuota, 1.0}},
            MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: priority}}"));
  h.Submit("lo", "a", 8, 0, 0).preemptible = false;
  h.Schedule(0);
  h.Submit("hi", "a", 8, 2, 10);
  EXPECT_EQ(h.Schedule(10), "");
}

// Priority preemption on one node of 8, quota admission (no quotas). lo1 (4 GPUs, QoS 0) runs
// since t=0 and checkpointed at 3600; lo2 (4 GPUs, QoS 0) since t=1000; mid (QoS 1) runs
// nothing. At t=3700 hi (4 GPUs, QoS 2) does not fit: one low job must go.
std::string ByPriority(const std::string& preemption) {
  Harness h(MakeCluster(8), {Team{"a", kNoQuota, 1.0}}, MakeProfile("quota", preemption));
  h.Submit("lo1", "a", 4, 0, 0);
  std::string log = h.Schedule(0);
  h.Submit("lo2", "a", 4, 0, 1000);
  log += " " + h.Schedule(1000);
  h.Submit("hi", "a", 4, 2, 3700);
  log += " " + h.Schedule(3700);
  return log;
}

TEST(PreemptionTest, PriorityPreemptionTakesTheCheapestLowerPriorityJob) {
  // Without a preemption mode nothing is preempted: hi waits for GPUs.
  EXPECT_EQ(ByPriority("checkpoint-aware"), "+lo1 +lo2 ");
  EXPECT_EQ(ByPriority("{plugin: kueue-order, args: {mode: priority}}"), "+lo1 +lo2 lo2>hi +hi");
  EXPECT_EQ(ByPriority("{plugin: checkpoint-aware, args: {mode: priority}}"),
            "+lo1 +lo2 lo1>hi +hi");
  // A job of equal priority is never a victim.
  Harness h(MakeCluster(8), {Team{"a", kNoQuota, 1.0}},
            MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: priority}}"));
  h.Submit("x", "a", 8, 1, 0);
  h.Schedule(0);
  h.Submit("y", "a", 8, 1, 10);
  EXPECT_EQ(h.Schedule(10), "");
  EXPECT_EQ(h.status("y").reason, Reason::kResources);
}

// Fair-share preemption under Kueue's order on one node of 8: team a (`a_shares`) starts a1 and
// a2 (4 GPUs each) at t=0; at t=3700 team b (1 share) submits b1 (4 GPUs). Both cycles' logs.
std::string FairShareB1(double a_shares) {
  Harness h(MakeCluster(8), {Team{"a", kNoQuota, a_shares}, Team{"b", kNoQuota, 1.0}},
            MakeProfile("quota", "{plugin: kueue-order, args: {mode: fairshare}}"));
  h.Submit("a1", "a", 4, 0, 0);
  h.Submit("a2", "a", 4, 0, 0);
  std::string log = h.Schedule(0);
  h.Submit("b1", "b", 4, 0, 3700);
  return log + " | " + h.Schedule(3700);
}

// Fair-share preemption on one node of 8, a shared pool (no quotas). Team a runs a1 (4 GPUs,
// since t=0, checkpointed at 3600) and a2 (4 GPUs, since t=1000); at t=3700 team b's b1 (4 GPUs)
// does not fit. With b1, b would hold 4 GPUs per share, and a without one of its jobs still
// holds 4: one of a's jobs may go, the cheaper one under checkpoint-aware (a1: 100 s since its
// checkpoint, against a2's 2700 s). Afterwards the requeued a1 (the head) would bring a to 8
// against b's 4, so it cannot preempt back; b2 waits behind it (on a full cluster the cycle
// stops at the head, so b2 is not examined: Priority).
TEST(PreemptionTest, FairSharePreemptsOnlyTeamsThatStayAtOrAboveThePreemptors) {
  Harness h(MakeCluster(8), {Team{"a", kNoQuota, 1.0}, Team{"b", kNoQuota, 1.0}},
            MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: fairshare}}"));
  h.Submit("a1", "a", 4, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1");
  h.Submit("a2", "a", 4, 0, 1000);
  EXPECT_EQ(h.Schedule(1000), "+a2");
  h.Submit("b1", "b", 4, 0, 3700);
  EXPECT_EQ(h.Schedule(3700), "a1>b1 +b1");
  h.Submit("b2", "b", 4, 0, 3800);
  EXPECT_EQ(h.Schedule(3800), "");
  EXPECT_EQ(h.status("a1").reason, Reason::kResources);
  EXPECT_EQ(h.status("b2").reason, Reason::kPriority);
  // Kueue's order takes the most recently started job instead (a2: both started at once, and
  // the later index goes first).
  EXPECT_EQ(FairShareB1(1.0), "+a1 +a2 | a2>b1 +b1");
}

// Shares weigh the GPUs. a runs 8 GPUs (two jobs of 4); b1 (team b, 1 share, 4 GPUs) would hold
// 4 per share. a with 1 share holds 8 per share: a victim (a keeps 4, not below b's 4). With 2
// shares a holds 4 per share, not above b's 4: no victim; with 3, 2.7: none either.
TEST(PreemptionTest, FairSharePreemptionWeighsTeamsByShares) {
  EXPECT_EQ(FairShareB1(1.0), "+a1 +a2 | a2>b1 +b1");
  EXPECT_EQ(FairShareB1(2.0), "+a1 +a2 | ");
  EXPECT_EQ(FairShareB1(3.0), "+a1 +a2 | ");
}

// Every prefix of the victim list is valid: a holds 8 GPUs in a1 (2), a2 (2) and a3 (4), b3
// (team b, 2 GPUs) would hold 2. Kueue's order lists a3 (newest), then a2 (a keeps 2, not below
// b's 2), and not a1 (a would keep 0). The engine takes the shortest prefix with which b3 fits:
// a3 alone.
TEST(PreemptionTest, FairSharePreemptionTakesTheShortestValidPrefix) {
  Harness h(MakeCluster(8), {Team{"a", kNoQuota, 1.0}, Team{"b", kNoQuota, 1.0}},
            MakeProfile("quota", "{plugin: kueue-order, args: {mode: fairshare}}"));
  h.Submit("a1", "a", 2, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+a1");
  h.Submit("a2", "a", 2, 0, 10);
  EXPECT_EQ(h.Schedule(10), "+a2");
  h.Submit("a3", "a", 4, 0, 20);
  EXPECT_EQ(h.Schedule(20), "+a3");
  h.Submit("b3", "b", 2, 0, 100);
  EXPECT_EQ(h.Schedule(100), "a3>b3 +b3");
  // b holds 2 and a 4: the requeued a3 (the head) would bring a to 8, so b holds no victim for
  // it. It reserves the 2 free GPUs and a1's 2 (a1 ends first, at its limit), so b4 (2 GPUs,
  // running past that) may not take the free ones.
  h.Submit("b4", "b", 2, 0, 200);
  EXPECT_EQ(h.Schedule(200), "");
  EXPECT_EQ(h.status("a3").reason, Reason::kResources);
  EXPECT_EQ(h.status("b4").reason, Reason::kReservation);
}

// QoS preemption (Slurm's preempt/qos): only the QOS in the preemptor's preempt list are
// victims, whatever the levels. high (level 2) may preempt scavenger (level 0) but not normal
// (level 1); normal may preempt nobody.
TEST(PreemptionTest, QosPreemptListsSayWhoMayPreemptWhom) {
  std::vector<Qos> qos = {{"scavenger", 0, 0, 1.0, {}},
                          {"normal", 1, 10, 1.0, {}},
                          {"high", 2, 100, 1.0, {"scavenger"}}};
  Harness h(MakeCluster(8, qos), {Team{"a", kNoQuota, 1.0}},
            MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: qos}}"));
  h.Submit("n1", "a", 4, 1, 0);
  h.Submit("s1", "a", 4, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+n1 +s1");
  h.Submit("n2", "a", 4, 1, 10);
  EXPECT_EQ(h.Schedule(10), "");  // normal preempts nobody, not even scavenger
  h.Submit("h1", "a", 8, 2, 20);
  // h1 needs all 8 GPUs, but normal jobs are not in its list: nothing is preempted.
  EXPECT_EQ(h.Schedule(20), "");
  h.Submit("h2", "a", 4, 2, 30);
  EXPECT_EQ(h.Schedule(30), "");  // h1 (head, blocked) goes first: h2 is not the head
}

TEST(PreemptionTest, QosPreemptionOfTheHeadJob) {
  std::vector<Qos> qos = {{"scavenger", 0, 0, 1.0, {}},
                          {"normal", 1, 10, 1.0, {}},
                          {"high", 2, 100, 1.0, {"scavenger"}}};
  Harness h(MakeCluster(8, qos), {Team{"a", kNoQuota, 1.0}},
            MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: qos}}"));
  h.Submit("n1", "a", 4, 1, 0);
  h.Submit("s1", "a", 2, 0, 0);
  h.Submit("s2", "a", 2, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+n1 +s1 +s2");
  h.Submit("h1", "a", 2, 2, 100);
  // One scavenger job is enough; both started at 0 and lost alike: the higher index goes.
  EXPECT_EQ(h.Schedule(100), "s2>h1 +h1");
}

// GraceTime: the victim is signalled and keeps its GPUs; the preemptor waits (reason
// kPreempting, its placement booked) and starts when the victim ends.
TEST(PreemptionTest, GraceTimeDelaysThePreemptorUntilTheVictimEnds) {
  Harness h(
      MakeCluster(8), {Team{"a", kNoQuota, 1.0}},
      MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: priority, grace_time: 120}}"));
  h.Submit("lo", "a", 6, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+lo");
  h.Submit("hi", "a", 8, 1, 1000);
  EXPECT_EQ(h.Schedule(1000), "lo~hi@1120");
  EXPECT_EQ(h.status("lo").phase, JobStatus::Phase::kRunning);
  EXPECT_EQ(h.status("lo").grace_end, 1120);
  EXPECT_EQ(h.status("hi").reason, Reason::kPreempting);
  EXPECT_NE(h.Explain("lo").find("signalled for preemption so that job hi"), std::string::npos)
      << h.Explain("lo");
  EXPECT_NE(h.Explain("hi").find("by t=1120"), std::string::npos) << h.Explain("hi");
  // The 2 idle GPUs are booked for hi: a small job submitted meanwhile does not take them.
  EXPECT_EQ(h.engine().free_index().free(0), 0);
  h.Submit("small", "a", 2, 0, 1050);
  EXPECT_EQ(h.Schedule(1050), "");
  h.Finish("lo", 1120);
  EXPECT_EQ(h.status("lo").reason, Reason::kPreempted);
  EXPECT_EQ(h.Schedule(1120), "+hi");
  EXPECT_EQ(h.engine().placement(1), (Placement{{0, 8}}));
  EXPECT_EQ(h.status("hi").start, 1120);
}

// Regression: of two victims, the one that ends first (it completed within its grace) gives its
// GPUs to the waiting preemptor, not to whoever comes next; the preemptor then starts when the
// other victim ends. (Its GPUs used to go back to the free pool, a small job took them, and the
// preemptor's placement was gone when its last victim ended.)
TEST(PreemptionTest, GraceTimeAVictimEndingEarlyKeepsItsGpusForThePreemptor) {
  Harness h(
      MakeCluster(8), {Team{"a", kNoQuota, 1.0}},
      MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: priority, grace_time: 120}}"));
  h.Submit("v1", "a", 4, 0, 0);
  h.Submit("v2", "a", 4, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+v1 +v2");
  h.Submit("hi", "a", 8, 1, 1000);
  EXPECT_EQ(h.Schedule(1000), "v2~hi@1120 v1~hi@1120");
  h.Submit("small", "a", 4, 0, 1000);
  h.Finish("v1", 1050);
  EXPECT_EQ(h.Schedule(1050), "");
  EXPECT_EQ(h.engine().free_index().free(0), 0);
  h.Finish("v2", 1120);
  EXPECT_EQ(h.Schedule(1120), "+hi");
  EXPECT_EQ(h.status("small").phase, JobStatus::Phase::kPending);
}

// GraceTime per QOS (Slurm's QOS GraceTime, a property of the victim's QOS): the QOS that sets
// one overrides the plugin's grace_time for its jobs. On one node of 8: s (scavenger, GraceTime
// 0) and n (normal, none set: the plugin's 120 s) run 4 GPUs each; hi (8 GPUs) preempts both at
// t=1000. Both are signalled, s to end at once and n at 1120; hi waits for the later one.
TEST(PreemptionTest, GraceTimePerQosBelongsToTheVictimsQos) {
  Qos scavenger{"scavenger", 0, 0, 1.0, {}};
  scavenger.grace_time = 0;
  const Qos normal{"normal", 1, 10, 1.0, {}};
  Qos high{"high", 2, 100, 1.0, {}};
  high.grace_time = 900;  // hi is never a victim here: its own GraceTime plays no part
  Harness h(
      MakeCluster(8, {scavenger, normal, high}), {Team{"a", kNoQuota, 1.0}},
      MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: priority, grace_time: 120}}"));
  h.Submit("s", "a", 4, 0, 0);
  h.Submit("n", "a", 4, 1, 0);
  EXPECT_EQ(h.Schedule(0), "+n +s");  // the qos factor orders n first
  h.Submit("hi", "a", 8, 2, 1000);
  EXPECT_EQ(h.Schedule(1000), "s~hi@1000 n~hi@1120");
  EXPECT_EQ(h.status("hi").reserved_start, 1120);
  h.Finish("s", 1000);
  EXPECT_EQ(h.Schedule(1000), "");
  EXPECT_EQ(h.Schedule(1100), "");
  h.Finish("n", 1120);
  EXPECT_EQ(h.Schedule(1120), "+hi");
}

// When no victim gets any GraceTime (the QOS's 0 overrides the plugin's 120 s), the preemption is
// immediate; a QOS GraceTime signals its jobs even when the plugin has none.
TEST(PreemptionTest, GraceTimePerQosDecidesBetweenSignalAndImmediatePreemption) {
  const auto run = [](int64_t lo_grace, const std::string& plugin_grace) {
    Qos lo{"lo", 0, 0, 1.0, {}};
    lo.grace_time = lo_grace;
    Harness h(MakeCluster(8, {lo, Qos{"hi", 1, 10, 1.0, {}}}), {Team{"a", kNoQuota, 1.0}},
              MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: priority" +
                                       plugin_grace + "}}"));
    h.Submit("v", "a", 8, 0, 0);
    h.Schedule(0);
    h.Submit("p", "a", 8, 1, 500);
    return h.Schedule(500);
  };
  EXPECT_EQ(run(0, ", grace_time: 120"), "v>p +p");
  EXPECT_EQ(run(300, ""), "v~p@800");
  EXPECT_EQ(run(kQosGraceUnset, ", grace_time: 120"), "v~p@620");
  EXPECT_EQ(run(kQosGraceUnset, ""), "v>p +p");
}

// Regression: a preemptor waiting out its victims' GraceTime is in no queue; aging past the age
// factor's max_age used to put it back in one, where the next cycle examined it again and
// overwrote its reason (Preempting became Resources).
TEST(PreemptionTest, GraceTimeAWaitingPreemptorDoesNotAgeBackIntoItsQueue) {
  auto profiles = ParseProfiles(
      "profiles:\n"
      "  p:\n"
      "    priority:\n"
      "      - {plugin: qos, weight: 1000, args: {max_qos: 3}}\n"
      "      - {plugin: age, weight: 1, args: {max_age: 50}}\n"
      "    admission: [quota]\n"
      "    placement: first-fit\n"
      "    backfill: {mode: easy, max_jobs: 500}\n"
      "    preemption: {plugin: checkpoint-aware, args: {mode: priority, grace_time: 120}}\n",
      "test.yaml");
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  Harness h(MakeCluster(8), {Team{"a", kNoQuota, 1.0}}, profiles->front());
  h.Submit("lo", "a", 8, 0, 0);
  EXPECT_EQ(h.Schedule(0), "+lo");
  h.Submit("hi", "a", 8, 1, 1000);
  EXPECT_EQ(h.Schedule(1000), "lo~hi@1120");
  h.Submit("other", "a", 1, 0, 1060);  // hi is 60 s old now: past max_age
  EXPECT_EQ(h.Schedule(1060), "");
  EXPECT_EQ(h.status("hi").reason, Reason::kPreempting);
  h.Finish("lo", 1120);
  EXPECT_EQ(h.Schedule(1120), "+hi");
  EXPECT_EQ(h.engine().pending_count(), 1);  // other
}

// GraceTime when the planned placement is lost: the preemptor's node is drained while it waits;
// when its victim has ended it goes back to its queue (nothing else can be preempted), and
// starts there once the node is up again.
TEST(PreemptionTest, GraceTimeAPreemptorWhosePlacementIsGoneWaitsAgain) {
  ClusterBuilder b("two", {});
  ASSERT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  ASSERT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 4}).ok());
  ASSERT_TRUE(b.AddNode({.name = "n1", .gpu_type = 0, .gpus = 4}).ok());
  auto cluster = std::move(b).Build();
  ASSERT_TRUE(cluster.ok());
  Harness h(
      *cluster, {Team{"a", kNoQuota, 1.0}},
      MakeProfile("quota", "{plugin: checkpoint-aware, args: {mode: priority, grace_time: 120}}"));
  h.Submit("lo", "a", 4, 0, 0);
  h.Submit("top", "a", 4, 2, 0);
  EXPECT_EQ(h.Schedule(0), "+top +lo");
  EXPECT_EQ(h.engine().placement(0), (Placement{{1, 4}}));
  h.Submit("hi", "a", 4, 1, 100);
  EXPECT_EQ(h.Schedule(100), "lo~hi@220");
  ASSERT_TRUE(h.engine().Drain(1, 150).ok());
  h.Finish("lo", 220);
  EXPECT_EQ(h.Schedule(220), "");
  EXPECT_EQ(h.status("hi").reason, Reason::kResources);
  EXPECT_EQ(h.engine().free_index().free(1), 0);  // drained: what lo gave back is withheld
  ASSERT_TRUE(h.engine().Up(1, 300).ok());
  EXPECT_EQ(h.Schedule(300), "+hi");
  EXPECT_EQ(h.engine().placement(2), (Placement{{1, 4}}));
}

// Through the simulator, one node of 8 and hourly checkpoints with a 300 s restart: lo (8 GPUs,
// QoS 0, 5000 s of work) from t=0; hi (8 GPUs, QoS 1, 500 s) at t=1000.
SimResult SimulateGrace(const std::string& preemption, Duration lo_run = 5000,
                        std::vector<Qos> qos = {}) {
  Workload w;
  w.teams = {"a"};
  w.users = {"u"};
  w.queues = {"q"};
  const auto add = [&](const std::string& id, int qos, Time submit, Duration run) {
    Job j;
    j.index = static_cast<JobIndex>(w.jobs.size());
    j.id = id;
    j.gpus = 8;
    j.qos = qos;
    j.submit = submit;
    j.run_time = run;
    j.time_limit = 100000;
    w.jobs.push_back(j);
  };
  add("lo", 0, 0, lo_run);
  add("hi", 1, 1000, 500);
  SimOptions options;
  options.check_invariants = true;
  options.checkpoints = {3600, 300};
  auto r = Simulate(MakeCluster(8, std::move(qos)), {Team{"a", kNoQuota, 1.0}}, w,
                    MakeProfile("quota", preemption), options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : SimResult{};
}

TEST(PreemptionTest, SimulatorWithoutGraceLosesTheWorkSinceTheLastCheckpoint) {
  const SimResult r = SimulateGrace("{plugin: checkpoint-aware, args: {mode: priority}}");
  EXPECT_EQ(r.outcomes[1].start, 1000);
  EXPECT_EQ(r.outcomes[0].preemptions, 1);
  // lo ran 1000 s, no checkpoint yet: all of it is lost.
  EXPECT_DOUBLE_EQ(r.preemption_lost_gpu_seconds, 8.0 * 1000);
  EXPECT_DOUBLE_EQ(r.outcomes[0].preemption_lost_gpu_seconds, 8.0 * 1000);
  // lo restarts at 1500 from scratch after its 300 s restart.
  EXPECT_EQ(r.outcomes[0].start, 1500);
  EXPECT_EQ(r.outcomes[0].end, 1500 + 300 + 5000);
  EXPECT_DOUBLE_EQ(r.preemption_restart_gpu_seconds, 8.0 * 300);
  EXPECT_EQ(r.summary.preemption_plugin, "checkpoint-aware");
  EXPECT_DOUBLE_EQ(r.summary.preemption_lost_gpu_hours, 8000.0 / 3600);
}

TEST(PreemptionTest, SimulatorGraceTimeBoundsTheLostWork) {
  const SimResult r =
      SimulateGrace("{plugin: checkpoint-aware, args: {mode: priority, grace_time: 2m}}");
  // hi waits out lo's 120 s of grace; lo's final checkpoint at the signal (t=1000) saves its
  // 1000 s: it loses only the 120 s it ran in grace.
  EXPECT_EQ(r.outcomes[1].start, 1120);
  EXPECT_EQ(r.outcomes[1].end, 1620);
  EXPECT_EQ(r.outcomes[0].preemptions, 1);
  EXPECT_DOUBLE_EQ(r.preemption_lost_gpu_seconds, 8.0 * 120);
  EXPECT_DOUBLE_EQ(r.lost_gpu_seconds, 8.0 * 120);
  EXPECT_EQ(r.outcomes[0].start, 1620);
  EXPECT_EQ(r.outcomes[0].end, 1620 + 300 + 4000);
  EXPECT_EQ(r.summary.preemptions, 1);
}

// The simulator takes each victim's GraceTime from its QOS too: lo's QOS gives it 300 s where
// the plugin gives none, so hi starts at 1300 and lo loses the 300 s it ran after its final
// checkpoint at the signal.
TEST(PreemptionTest, SimulatorGraceTimeOfTheVictimsQos) {
  Qos lo{"lo", 0, 0, 1.0, {}};
  lo.grace_time = 300;
  const SimResult r = SimulateGrace("{plugin: checkpoint-aware, args: {mode: priority}}", 5000,
                                    {lo, Qos{"hi", 1, 10, 1.0, {}}});
  EXPECT_EQ(r.outcomes[1].start, 1300);
  EXPECT_EQ(r.outcomes[0].preemptions, 1);
  EXPECT_DOUBLE_EQ(r.preemption_lost_gpu_seconds, 8.0 * 300);
  EXPECT_EQ(r.outcomes[0].start, 1800);
}

TEST(PreemptionTest, SimulatorAVictimThatEndsWithinItsGraceIsNotPreempted) {
  const SimResult r = SimulateGrace(
      "{plugin: checkpoint-aware, args: {mode: priority, grace_time: 2m}}", /*lo_run=*/1050);
  EXPECT_EQ(r.outcomes[0].end, 1050);
  EXPECT_EQ(r.outcomes[0].preemptions, 0);
  EXPECT_EQ(r.outcomes[1].start, 1050);
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_DOUBLE_EQ(r.lost_gpu_seconds, 0);
}

TEST(PreemptionTest, SimulatorWakesUpWhenTheMinimumRunTimePasses) {
  const SimResult r =
      SimulateGrace("{plugin: checkpoint-aware, args: {mode: priority, min_run_time: 25m}}");
  // No event at t=1500, yet hi preempts lo then: lo has run its 1500 s.
  EXPECT_EQ(r.outcomes[1].start, 1500);
  EXPECT_DOUBLE_EQ(r.preemption_lost_gpu_seconds, 8.0 * 1500);
}

// Random workloads under priority and QoS preemption (QOS preempt lists drawn at random, cycles
// included), with and without GraceTime and a minimum run time. For every run:
//  - the simulator's invariant checker holds (no GPU double-booked, the engine's free GPUs are
//    the checker's, with a waiting preemptor's booked GPUs; quotas held);
//  - no preemption loop: if A preempted B, B never later preempts A;
//  - no job is preempted more than max_preemptions (5) times;
//  - every victim ran at least the minimum run time before it was preempted or signalled;
//  - a signalled victim ends by its grace end, and its preemptor starts when the last of its
//    victims ended.
TEST(PreemptionPropertyTest, NoLoopsMinRunTimeAndGraceHold) {
  int64_t preemptions = 0, signals = 0, fair_share_preemptions = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Rng rng(seed);
    std::vector<Qos> qos;
    for (int level = 0; level < 3; ++level) {
      Qos q{"q" + std::to_string(level), level, level * 10, 1.0, {}};
      for (int other = 0; other < 3; ++other) {
        if (other != level && rng.Below(2)) q.preempt.push_back("q" + std::to_string(other));
      }
      qos.push_back(std::move(q));
    }
    // Half the seeds give some QOS their own GraceTime (a separate stream: the draws below, and
    // so the workloads of the other seeds, stay as they were).
    Rng qos_rng(seed + 1000);
    if (qos_rng.Below(2)) {
      for (Qos& q : qos)
        q.grace_time = std::vector<int64_t>{kQosGraceUnset, 0, 30, 300}[qos_rng.Below(4)];
    }
    ClusterBuilder b("prop", {});
    ASSERT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
    ASSERT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 8}).ok());
    ASSERT_TRUE(b.AddNode({.name = "n1", .gpu_type = 0, .gpus = 8}).ok());
    for (Qos& q : qos) ASSERT_TRUE(b.AddQos(q).ok());
    auto cluster = std::move(b).Build();
    ASSERT_TRUE(cluster.ok());
    const Duration grace = std::vector<Duration>{0, 60, 600}[rng.Below(3)];
    const Duration min_run = std::vector<Duration>{0, 300}[rng.Below(2)];
    std::string mode = rng.Below(2) ? "qos" : "priority";
    // A third of the seeds preempt for fair share instead, as the default profile does (a
    // separate stream again).
    if (Rng(seed + 2000).Below(3) == 0) mode = "fairshare";
    const std::string plugin = rng.Below(2) ? "checkpoint-aware" : "kueue-order";
    // The GraceTime a job gets as a victim: its QOS's, else the plugin's.
    const auto grace_of = [&](const Job& j) {
      const int64_t own = qos[j.qos].grace_time;
      return own != kQosGraceUnset ? own : grace;
    };
    const Profile profile =
        MakeProfile("quota", "{plugin: " + plugin + ", args: {mode: " + mode +
                                 ", grace_time: " + std::to_string(grace) +
                                 ", min_run_time: " + std::to_string(min_run) + "}}");
    const std::vector<Team> teams = {Team{"a", kNoQuota, 1.0}, Team{"b", 10, 1.0}};
    Workload w;
    w.teams = {"a", "b"};
    w.users = {"u"};
    w.queues = {"q"};
    for (int i = 0; i < 100; ++i) {
      Job j;
      j.id = "j" + std::to_string(i);
      j.team = static_cast<int32_t>(rng.Below(2));
      j.gpus = 1 + static_cast<int32_t>(rng.Below(8));
      j.qos = static_cast<int32_t>(rng.Below(3));
      j.submit = static_cast<Time>(rng.Below(20000));
      j.run_time = 100 + static_cast<Duration>(rng.Below(4000));
      j.time_limit = 10000;
      j.checkpoint_interval = rng.Below(2) ? 600 : 0;
      w.jobs.push_back(j);
    }
    std::stable_sort(w.jobs.begin(), w.jobs.end(),
                     [](const Job& x, const Job& y) { return x.submit < y.submit; });
    for (size_t i = 0; i < w.jobs.size(); ++i) w.jobs[i].index = static_cast<JobIndex>(i);

    SimOptions options;
    options.check_invariants = true;
    auto sim = Simulate(*cluster, teams, w, profile, options);
    ASSERT_TRUE(sim.ok()) << "seed " << seed << ": " << sim.status().ToString();
    preemptions += sim->preemptions;
    if (mode == "fairshare") fair_share_preemptions += sim->preemptions;
    // With GraceTime, a victim's lost work is at most its grace on each of its GPUs.
    for (size_t j = 0; j < w.jobs.size(); ++j) {
      if (grace_of(w.jobs[j]) == 0) continue;  // preempted at once: loses since its checkpoint
      if (w.jobs[j].checkpoint_interval == 0) continue;  // no final checkpoint either
      EXPECT_LE(sim->outcomes[j].preemption_lost_gpu_seconds,
                static_cast<double>(sim->outcomes[j].preemptions) * w.jobs[j].gpus *
                    static_cast<double>(grace_of(w.jobs[j])))
          << "seed " << seed << " job " << w.jobs[j].id;
    }

    // The same workload through a small driver that records who preempted whom, and when.
    auto engine = Engine::Create(*cluster, teams, profile);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    Engine& e = **engine;
    std::vector<std::pair<JobIndex, JobIndex>> preempted;
    std::vector<int> count(w.jobs.size(), 0);
    std::vector<Time> end(w.jobs.size(), -1), natural_end(w.jobs.size(), -1);
    std::vector<Time> run_start(w.jobs.size(), -1), signalled(w.jobs.size(), -1);
    std::map<JobIndex, std::vector<JobIndex>> waiting;  // preemptor -> its signalled victims
    using Event = std::pair<Time, JobIndex>;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> finishes;
    size_t next = 0;
    std::vector<StartDecision> starts;
    Time now = 0;
    while (next < w.jobs.size() || !finishes.empty()) {
      const Time wakeup = e.NextWakeup(now);
      now = next < w.jobs.size() ? w.jobs[next].submit : kInfiniteTime;
      if (!finishes.empty()) now = std::min({now, finishes.top().first, wakeup});
      Time last_victim_end = -1;
      while (!finishes.empty() && finishes.top().first == now) {
        const JobIndex j = finishes.top().second;
        finishes.pop();
        if (end[j] != now || e.status(j).phase != JobStatus::Phase::kRunning) continue;
        ASSERT_TRUE(e.Finish(j, now).ok());
        if (signalled[j] >= 0) {
          EXPECT_LE(now, signalled[j] + grace_of(w.jobs[j]));
          last_victim_end = now;
          if (now < natural_end[j]) {
            ASSERT_TRUE(e.Requeue(j, now).ok());
          }
        }
        signalled[j] = -1;
      }
      while (next < w.jobs.size() && w.jobs[next].submit == now) {
        ASSERT_TRUE(e.Submit(w.jobs[next], now).ok());
        ++next;
      }
      starts.clear();
      e.Schedule(now, &starts);
      for (const StartDecision& d : starts) {
        for (JobIndex v : d.preempted) {
          EXPECT_GE(now - run_start[v], min_run) << "seed " << seed;
          preempted.emplace_back(v, d.job);
          ++count[v];
        }
        if (d.reason == Reason::kPreempting) {
          ++signals;
          Time last_end = now;
          waiting[d.job] = d.preempted;
          for (JobIndex v : d.preempted) {
            signalled[v] = now;
            EXPECT_EQ(e.status(v).grace_end, now + grace_of(w.jobs[v])) << "seed " << seed;
            last_end = std::max(last_end, e.status(v).grace_end);
            if (end[v] > e.status(v).grace_end) {
              end[v] = e.status(v).grace_end;
              finishes.push({end[v], v});
            }
          }
          EXPECT_EQ(d.victims_end_by, last_end) << "seed " << seed;
          continue;
        }
        // A victim with a GraceTime is only ever signalled.
        for (JobIndex v : d.preempted) {
          EXPECT_EQ(grace_of(w.jobs[v]), 0) << "seed " << seed;
        }
        for (JobIndex v : d.preempted) {
          end[v] = -1;
          ASSERT_TRUE(e.Requeue(v, now).ok());
        }
        auto it = waiting.find(d.job);
        if (it != waiting.end()) {
          // Started the moment its last victim ended (a victim may be running again already:
          // requeued, it may restart in the same cycle, after its preemptor).
          EXPECT_EQ(now, last_victim_end) << "seed " << seed;
          waiting.erase(it);
        }
        run_start[d.job] = now;
        end[d.job] = natural_end[d.job] = now + w.jobs[d.job].run_time;
        finishes.push({end[d.job], d.job});
      }
    }
    preemptions += static_cast<int64_t>(preempted.size());
    for (size_t i = 0; i < preempted.size(); ++i) {
      for (size_t k = i + 1; k < preempted.size(); ++k) {
        EXPECT_FALSE(preempted[k].first == preempted[i].second &&
                     preempted[k].second == preempted[i].first)
            << "seed " << seed << ": " << w.jobs[preempted[i].second].id << " preempted "
            << w.jobs[preempted[i].first].id << ", then the other way round";
      }
    }
    for (size_t j = 0; j < count.size(); ++j) {
      EXPECT_LE(count[j], 5) << "seed " << seed << " job " << w.jobs[j].id;
    }
  }
  EXPECT_GT(preemptions, 100);
  EXPECT_GT(signals, 20);
  EXPECT_GT(fair_share_preemptions, 10);
}

// The comparison of docs/preemption.md, as a guard: on the Philly sample under Kueue reclaim,
// checkpoint-aware victims lose at least 30% fewer GPU-hours of work than Kueue's order (the
// issue's goal; measured: 82%), and kueue-order is the built-in profile's choice exactly.
TEST(PreemptionTest, CheckpointAwareLosesLessOnThePhillySample) {
  auto cluster =
      LoadClusterSpecFile(std::string(GANTRY_SOURCE_DIR) + "/data/clusters/philly-256-kueue.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto w = ImportTrace(std::string(GANTRY_SOURCE_DIR) + "/data/philly-sample.csv",
                       TraceFormat::kPhilly, {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto teams = ResolveWorkload(*w, *cluster, {});
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  auto extra = LoadProfilesFile(std::string(GANTRY_SOURCE_DIR) + "/data/profiles/preemption.yaml");
  ASSERT_TRUE(extra.ok()) << extra.status().ToString();
  SimOptions options;
  options.check_invariants = true;
  const auto run = [&](const std::string& name) {
    auto profile = FindProfile(name, *extra);
    EXPECT_TRUE(profile.ok()) << profile.status().ToString();
    auto r = Simulate(*cluster, *teams, *w, *profile, options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : SimResult{};
  };
  const SimResult builtin = run("kueue");
  const SimResult blind = run("kueue-blind");
  const SimResult aware = run("kueue-ckpt");
  EXPECT_EQ(blind.preemptions, builtin.preemptions);
  EXPECT_DOUBLE_EQ(blind.preemption_lost_gpu_seconds, builtin.preemption_lost_gpu_seconds);
  EXPECT_GT(blind.preemptions, 100);
  EXPECT_GT(aware.preemptions, 100);
  EXPECT_LE(aware.preemption_lost_gpu_seconds, 0.7 * blind.preemption_lost_gpu_seconds);
  EXPECT_EQ(aware.summary.jobs_completed, 4488);
}

// Bad plugin arguments are errors naming the plugin and the argument.
TEST(PreemptionTest, ArgumentsAreChecked) {
  const Cluster c = MakeCluster(8);
  const auto error = [&](const std::string& preemption) {
    auto e = Engine::Create(c, {Team{"a", kNoQuota, 1.0}}, MakeProfile("quota", preemption));
    return e.ok() ? std::string("ok") : e.status().ToString();
  };
  EXPECT_EQ(error("{plugin: checkpoint-aware, args: {tier: local, grace_time: 2m}}"), "ok");
  EXPECT_NE(error("{plugin: checkpoint-aware, args: {tier: tape}}").find("'tier': 'tape'"),
            std::string::npos);
  EXPECT_NE(error("{plugin: kueue-order, args: {mode: always}}").find("'mode': 'always'"),
            std::string::npos);
  EXPECT_NE(error("{plugin: kueue-order, args: {tier: local}}").find("tier"), std::string::npos);
  EXPECT_NE(error("{plugin: kueue-order, args: {min_run_time: -5}}").find("min_run_time"),
            std::string::npos);
}

}  // namespace
}  // namespace gantry
