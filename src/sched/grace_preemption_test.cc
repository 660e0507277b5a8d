// GraceTime preemption (engine.h: signalled victims run on, their preemptor waits) with the
// "kueue" admission plugin's reclaim and with a GPU share as the preemptor across a driver
// restart (RestorePreempting), on clusters small enough that each test's comment works the
// outcome out by hand. Logs read "b1!a3@62": b1 signalled a3, which runs until t=62; "+b1": b1
// started; "+s1/g0": share s1 started on shared GPU 0.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gantry/sched/engine.h"
#include "gantry/sched/profile.h"
#include "gantry/sched/registry.h"
#include "sched/test_builders.h"

namespace gantry {
namespace {

using test_builders::FlatCluster;
using test_builders::MakeRequest;

Profile ParseOne(const std::string& yaml) {
  auto p = ParseProfiles(yaml, "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->front() : Profile{};
}

// Drives one engine as gantryd does: a signalled victim runs until its grace end, then the
// driver reports it ended (Finish) and requeues it. Jobs are named by `names`.
class GraceDriver {
 public:
  GraceDriver(std::unique_ptr<Engine> engine, std::vector<std::string> names)
      : engine_(std::move(engine)), names_(std::move(names)) {}
  Engine& engine() { return *engine_; }

  // A victim signalled before this driver took over (a restarted gantryd).
  void Signalled(JobIndex victim, Time grace_end) { grace_ends_.insert({grace_end, victim}); }

  // Ends the victims whose grace ended by `now`, runs a cycle, and logs what it decided.
  std::string Step(Time now) {
    for (auto it = grace_ends_.begin(); it != grace_ends_.end() && it->first <= now;) {
      EXPECT_TRUE(engine_->Finish(it->second, it->first).ok());
      EXPECT_EQ(engine_->status(it->second).reason, Reason::kPreempted);
      EXPECT_TRUE(engine_->Requeue(it->second, it->first).ok());
      it = grace_ends_.erase(it);
    }
    std::vector<StartDecision> starts;
    engine_->Schedule(now, &starts);
    std::string out;
    for (const StartDecision& d : starts) {
      if (!out.empty()) out += ' ';
      if (d.reason == Reason::kPreempting) {
        for (JobIndex v : d.preempted) {
          const Time end = engine_->status(v).grace_end;
          if (v != d.preempted.front()) out += ' ';
          out += names_[d.job] + "!" + names_[v] + "@" + std::to_string(end);
          grace_ends_.insert({end, v});
          ++signals_[v];
        }
        continue;
      }
      EXPECT_TRUE(d.preempted.empty()) << names_[d.job];  // every victim here has a grace
      out += "+" + names_[d.job];
      if (d.shared_gpu >= 0) out += "/g" + std::to_string(d.shared_gpu);
      ++starts_[d.job];
    }
    return out;
  }
  int signals(JobIndex j) const { return signals_.count(j) ? signals_.at(j) : 0; }
  int starts(JobIndex j) const { return starts_.count(j) ? starts_.at(j) : 0; }

 private:
  std::unique_ptr<Engine> engine_;
  std::vector<std::string> names_;
  std::multimap<Time, JobIndex> grace_ends_;
  std::map<JobIndex, int> signals_, starts_;
};

Team Cq(const std::string& name, const std::string& cohort) {
  Team t;
  t.name = name;
  t.queue.quotas = {{"H100", 4}};
  t.queue.cohort = cohort;
  t.queue.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  return t;
}

// A preemption plugin with a GraceTime that keeps no books of running jobs: MayPreempt is the
// interface's default (always true), so it does not know who was signalled already.
class GraceOnly final : public PreemptionPlugin {
 public:
  std::string_view name() const override { return "grace-only"; }
  std::vector<JobIndex> SelectVictims(const JobRequest&, Time) override { return {}; }
  Duration grace_time() const override { return 60; }
};

// The built-in plugins and "grace-only".
PluginRegistry WithGraceOnly() {
  PluginRegistry registry;
  RegisterBuiltinPlugins(registry);
  EXPECT_TRUE(registry
                  .AddPreemption("grace-only",
                                 [](const PluginArgs&, const PluginContext&)
                                     -> Result<std::unique_ptr<PreemptionPlugin>> {
                                   return std::unique_ptr<PreemptionPlugin>(new GraceOnly());
                                 })
                  .ok());
  return registry;
}

// An engine over CQs a and b (Cq above) with the kueue admission plugin and `preemption`,
// resolved in `registry` (which must outlive it).
std::unique_ptr<Engine> CohortEngine(const Cluster& cluster, const std::string& preemption,
                                     const PluginRegistry& registry) {
  const Profile profile = ParseOne(R"(
profiles:
  k:
    priority: [{plugin: age, args: {max_age: inf}}]
    admission: [{plugin: kueue}]
    placement: first-fit
    backfill: easy
    preemption: )" + preemption + "\n");
  EngineOptions options;
  options.registry = &registry;
  auto e = Engine::Create(cluster, {Cq("a", "ab"), Cq("b", "ab")}, profile, options);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Kueue reclaim under GraceTime, two reclaims in a row, for every preemption plugin with a grace
// time: the built-in ones, and one that does not track runs (GraceOnly). One node of 8 GPUs; CQs
// a and b (nominal 4 each) in cohort ab, reclaim Any. a1 (4 GPUs, t=0), a2 and a3 (2 each, t=1):
// a borrows 4. b1 (2) at t=2 reclaims a3 (newest; checkpoint-aware costs all alike, the higher
// index first), signalled until 62. b2 (2) at t=3, during a3's grace, must not name a3 again
// (with GraceOnly it did: a3 signalled twice, its grace end moved to 63 and b1 robbed of it).
// a3 still counts in a's books until it ends, as b1 does in b's, so a uses 8 and the cohort 10
// of 8: b2 needs a down to 4 and takes a1 (a2 alone leaves 6; a2 is given back once a1 makes
// room), not a2 as it would without GraceTime (docs/preemption.md: the books stay
// conservative). b1 starts at 62 on a3's GPUs; at 63 a1 ends, b2 starts on two of its GPUs and
// a3, requeued, on the other two: a at 4 (a2, a3), b at 4. b3 (2) at t=4 finds nothing left to
// reclaim (b is at its nominal with b1 and b2 charged).
TEST(GracePreemption, KueueReclaimSignalsEachBorrowerOnce) {
  const PluginRegistry registry = WithGraceOnly();
  for (const char* plugin : {"{plugin: kueue-order, args: {grace_time: 60}}",
                             "{plugin: checkpoint-aware, args: {grace_time: 60}}", "grace-only"}) {
    SCOPED_TRACE(plugin);
    const Cluster cluster = FlatCluster(1, 8);
    const JobRequest a1 = MakeRequest(0, 0, 4, 1, 10000, 0);
    const JobRequest a2 = MakeRequest(1, 1, 2, 1, 10000, 0);
    const JobRequest a3 = MakeRequest(2, 1, 2, 1, 10000, 0);
    const JobRequest b1 = MakeRequest(3, 2, 2, 1, 10000, 1);
    const JobRequest b2 = MakeRequest(4, 3, 2, 1, 10000, 1);
    const JobRequest b3 = MakeRequest(5, 4, 2, 1, 10000, 1);
    std::unique_ptr<Engine> e = CohortEngine(cluster, plugin, registry);
    ASSERT_NE(e, nullptr);
    GraceDriver d(std::move(e), {"a1", "a2", "a3", "b1", "b2", "b3"});
    Engine& engine = d.engine();
    ASSERT_TRUE(engine.Submit(a1, 0).ok());
    EXPECT_EQ(d.Step(0), "+a1");
    ASSERT_TRUE(engine.Submit(a2, 1).ok());
    ASSERT_TRUE(engine.Submit(a3, 1).ok());
    EXPECT_EQ(d.Step(1), "+a2 +a3");
    ASSERT_TRUE(engine.Submit(b1, 2).ok());
    EXPECT_EQ(d.Step(2), "b1!a3@62");
    EXPECT_EQ(engine.status(3).reason, Reason::kPreempting);
    ASSERT_TRUE(engine.Submit(b2, 3).ok());
    EXPECT_EQ(d.Step(3), "b2!a1@63");
    EXPECT_EQ(engine.status(0).preempted_by, 4);
    EXPECT_EQ(engine.status(2).preempted_by, 3);  // still b1's
    EXPECT_EQ(engine.status(2).grace_end, 62);    // never moved
    EXPECT_EQ(engine.status(1).grace_end, -1);    // a2 runs on
    ASSERT_TRUE(engine.Submit(b3, 4).ok());
    EXPECT_EQ(d.Step(4), "");
    EXPECT_EQ(engine.status(5).phase, JobStatus::Phase::kPending);
    EXPECT_EQ(d.Step(61), "");  // nobody starts before its victims ended
    EXPECT_EQ(d.Step(62), "+b1");
    EXPECT_EQ(engine.placement(3), (Placement{{0, 2}}));
    EXPECT_EQ(d.Step(63), "+b2 +a3");
    EXPECT_EQ(d.Step(64), "");
    EXPECT_EQ(engine.status(1).phase, JobStatus::Phase::kRunning);
    EXPECT_EQ(engine.status(5).phase, JobStatus::Phase::kPending);
    EXPECT_EQ(d.signals(0), 1);
    EXPECT_EQ(d.signals(1), 0);
    EXPECT_EQ(d.signals(2), 1);
    EXPECT_EQ(d.starts(3), 1);
    EXPECT_EQ(d.starts(4), 1);
    EXPECT_EQ(engine.team_running_gpus(0), 4);
    EXPECT_EQ(engine.team_running_gpus(1), 4);
    EXPECT_EQ(engine.free_index().free(0), 0);
  }
}

// A restarted driver restores a signal whose preemptor is gone (RestoreSignalled): kueue never
// names that job again either, with a preemption plugin that does not track runs. One node of
// 8; CQs a and b as above. a1 (4, since 0), a2 and a3 (2 each, since 1) are adopted at t=10, a3
// signalled until 62. b1 (2) at t=10 reclaims a2, not a3 (newest and highest index, the first
// candidate otherwise): a3 still counts, so a (8) must drop to 6. a3 ends at 62 and waits (a 6
// with a2, b 2: the cohort is full); at 70 a2 ends, b1 starts on its GPUs, and of the two
// requeued a jobs (alike in age) a2, the lower index, starts again on a3's; a3 waits (full).
TEST(GracePreemption, KueueNeverReclaimsARestoredSignal) {
  const PluginRegistry registry = WithGraceOnly();
  const Cluster cluster = FlatCluster(1, 8);
  const JobRequest a1 = MakeRequest(0, 0, 4, 1, 10000, 0);
  const JobRequest a2 = MakeRequest(1, 1, 2, 1, 10000, 0);
  const JobRequest a3 = MakeRequest(2, 1, 2, 1, 10000, 0);
  const JobRequest b1 = MakeRequest(3, 10, 2, 1, 10000, 1);
  std::unique_ptr<Engine> e = CohortEngine(cluster, "grace-only", registry);
  ASSERT_NE(e, nullptr);
  GraceDriver d(std::move(e), {"a1", "a2", "a3", "b1"});
  Engine& engine = d.engine();
  ASSERT_TRUE(engine.Adopt(a1, {{0, 4}}, 0, 10).ok());
  ASSERT_TRUE(engine.Adopt(a2, {{0, 2}}, 1, 10).ok());
  ASSERT_TRUE(engine.Adopt(a3, {{0, 2}}, 1, 10).ok());
  ASSERT_TRUE(engine.RestoreSignalled({2}, 62, 10).ok());
  d.Signalled(2, 62);
  ASSERT_TRUE(engine.Submit(b1, 10).ok());
  EXPECT_EQ(d.Step(10), "b1!a2@70");
  EXPECT_EQ(engine.status(2).grace_end, 62);
  EXPECT_EQ(engine.status(2).preempted_by, -1);
  EXPECT_EQ(d.Step(62), "");
  EXPECT_EQ(engine.status(2).phase, JobStatus::Phase::kPending);
  EXPECT_EQ(d.Step(70), "+b1 +a2");
  EXPECT_EQ(engine.status(2).phase, JobStatus::Phase::kPending);
  EXPECT_EQ(engine.placement(3), (Placement{{0, 2}}));
  EXPECT_EQ(engine.status(0).phase, JobStatus::Phase::kRunning);
  EXPECT_EQ(d.signals(0), 0);
  EXPECT_EQ(d.signals(1), 1);
  EXPECT_EQ(d.signals(2), 0);
}

// A share (gpu_milli 500) preempts a whole-GPU job under GraceTime, and gantryd restarts
// mid-grace: a second engine restored as the control plane restores it (Adopt the running jobs,
// RestorePreempting the waiting share) decides exactly as the first one goes on to. Two nodes of
// 4: A (QoS 0, 4 GPUs) on n0, C (QoS 1, 4 GPUs) on n1. S1 (QoS 1, half a GPU) at t=1000 finds
// no GPU and no shared GPU: it signals A (the only lower-QoS job) until 1120 and is planned on
// one GPU of n0. The restart at 1060 changes nothing: nobody starts or is signalled before
// 1120. A ends then and is requeued; S1 starts on n0 exactly once, opening shared GPU 0 on one
// of A's GPUs (3 stay free; A, 4 GPUs, waits). S2 (QoS 1, half a GPU) at t=1130 joins S1 on
// that same GPU rather than taking a whole one.
TEST(GracePreemption, ShareWaitingForItsVictimSurvivesARestart) {
  const Profile profile = ParseOne(R"(
profiles:
  p:
    priority: [{plugin: qos, weight: 1000, args: {max_qos: 3}}, {plugin: age, args: {max_age: inf}}]
    placement: first-fit
    backfill: easy
    preemption: {plugin: checkpoint-aware, args: {mode: priority, grace_time: 120}}
)");
  const Cluster cluster = FlatCluster(2, 4);
  const JobRequest a = MakeRequest(0, 0, 4, 1, 5000);
  JobRequest c = MakeRequest(1, 1, 4, 1, 5000);
  c.qos = 1;
  JobRequest s1 = MakeRequest(2, 1000, 1, 1, 100);
  s1.qos = 1;
  s1.gpu_milli = 500;
  JobRequest s2 = MakeRequest(3, 1130, 1, 1, 100);
  s2.qos = 1;
  s2.gpu_milli = 500;
  const std::vector<Team> teams = {{"t", kNoQuota, 1.0}};
  const std::vector<std::string> names = {"A", "C", "S1", "S2"};

  auto first = Engine::Create(cluster, teams, profile);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  GraceDriver d1(std::move(first).value(), names);
  Engine& e1 = d1.engine();
  ASSERT_TRUE(e1.Submit(a, 0).ok());
  EXPECT_EQ(d1.Step(0), "+A");
  ASSERT_TRUE(e1.Submit(c, 1).ok());
  EXPECT_EQ(d1.Step(1), "+C");
  ASSERT_TRUE(e1.Submit(s1, 1000).ok());
  EXPECT_EQ(d1.Step(1000), "S1!A@1120");
  EXPECT_EQ(e1.planned_placement(2), (Placement{{0, 1}}));

  // gantryd restarts at t=1060 with what it recorded: A on n0 since 0, C on n1 since 1, S1
  // waiting for A (grace end 1120) to start on one GPU of n0.
  auto second = Engine::Create(cluster, teams, profile);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  GraceDriver d2(std::move(second).value(), names);
  Engine& e2 = d2.engine();
  ASSERT_TRUE(e2.Adopt(a, {{0, 4}}, 0, 1060).ok());
  ASSERT_TRUE(e2.Adopt(c, {{1, 4}}, 1, 1060).ok());
  ASSERT_TRUE(e2.Submit(s1, 1060).ok());
  ASSERT_TRUE(e2.RestorePreempting(2, {0}, {{0, 1}}, 1120, 1060).ok());
  d2.Signalled(0, 1120);
  EXPECT_EQ(e2.status(2).reason, Reason::kPreempting);
  EXPECT_EQ(e2.status(2).reserved_start, 1120);
  EXPECT_EQ(e2.planned_placement(2), (Placement{{0, 1}}));
  EXPECT_EQ(e2.status(0).grace_end, 1120);
  EXPECT_EQ(e2.status(0).preempted_by, 2);

  for (GraceDriver* d : {&d1, &d2}) {
    SCOPED_TRACE(d == &d1 ? "first engine" : "restored engine");
    Engine& e = d->engine();
    EXPECT_EQ(d->Step(1060), "");
    EXPECT_EQ(d->Step(1119), "");
    EXPECT_EQ(e.status(2).phase, JobStatus::Phase::kPending);
    EXPECT_EQ(e.shared_gpu(2), -1);
    EXPECT_EQ(d->Step(1120), "+S1/g0");
    EXPECT_EQ(e.placement(2), (Placement{{0, 1}}));
    EXPECT_EQ(e.shared_gpu(2), 0);
    EXPECT_EQ(e.status(2).reason, Reason::kStartedHead);
    EXPECT_EQ(e.free_index().free(0), 3);
    EXPECT_EQ(e.status(0).phase, JobStatus::Phase::kPending);  // A, requeued, needs all of n0
    EXPECT_EQ(d->Step(1121), "");
    ASSERT_TRUE(e.Submit(s2, 1130).ok());
    EXPECT_EQ(d->Step(1130), "+S2/g0");
    EXPECT_EQ(e.placement(3), (Placement{{0, 1}}));
    EXPECT_EQ(e.shared_gpu(3), e.shared_gpu(2));
    EXPECT_EQ(e.free_index().free(0), 3);
    EXPECT_EQ(e.team_running_milli(0), 4000 + 500 + 500);  // C and the two shares
    EXPECT_EQ(d->Step(1131), "");
    EXPECT_EQ(d->starts(2), 1);
    EXPECT_EQ(d->signals(0), d == &d1 ? 1 : 0);  // the restored engine never signals A itself
    EXPECT_EQ(d->signals(1), 0);
  }
}

}  // namespace
}  // namespace gantry
