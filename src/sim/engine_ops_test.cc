// The engine's seams for a live driver, each with exact outcomes and the invariant checker
// following along: Cancel, node Drain/Down/Up with Requeue, Adopt, the runtime oracle, and the
// plugin registry with a score plugin added from outside sched/.
#include <gtest/gtest.h>

#include "gantry/sched/engine.h"
#include "gantry/sched/registry.h"
#include "gantry/sim/simulator.h"
#include "invariant_checker.h"
#include "sched/test_builders.h"

namespace gantry {
namespace {

using test_builders::FlatCluster;

// test_builders.h's request, with its true run time equal to its limit (for the oracle).
Job MakeJob(JobIndex index, Time submit, int gpus, int nodes, Duration limit, int team = 0) {
  Job j;
  static_cast<JobRequest&>(j) = test_builders::MakeRequest(index, submit, gpus, nodes, limit, team);
  j.run_time = limit;
  return j;
}

Profile FromYaml(const std::string& yaml) {
  auto p = ParseProfiles(yaml, "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->front() : Profile{};
}

Profile Builtin(const std::string& name) {
  auto p = FindProfile(name, {});
  EXPECT_TRUE(p.ok());
  return *p;
}

// Drives an engine and the invariant checker side by side, as the simulator does.
class Driver {
 public:
  Driver(const Cluster& c, std::vector<Team> teams, const Profile& p,
         const EngineOptions& options = {})
      : teams_(std::move(teams)), checker_(c, teams_) {
    auto e = Engine::Create(c, teams_, p, options);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  Engine& engine() { return *engine_; }
  InvariantChecker& checker() { return checker_; }

  // Runs a cycle; returns the indices of the jobs started, and checks every node's books.
  std::vector<JobIndex> Schedule(Time now, const std::vector<Job>& jobs) {
    std::vector<StartDecision> starts;
    engine_->Schedule(now, &starts);
    std::vector<JobIndex> out;
    for (const StartDecision& d : starts) {
      EXPECT_TRUE(checker_.OnStart(jobs[d.job], now, d.placement).ok());
      out.push_back(d.job);
    }
    Check();
    return out;
  }
  void Check() {
    Status s = checker_.CheckAllFree(engine_->free_index());
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

 private:
  std::vector<Team> teams_;
  InvariantChecker checker_;
  std::unique_ptr<Engine> engine_;
};

const char kFirstFit[] = R"(
profiles:
  ff:
    priority: [{plugin: age, args: {max_age: inf}}]
    placement: first-fit
    backfill: easy
)";

// Two nodes of 4. A and B take a node each; C (8 GPUs) waits. Cancelling C (pending) leaves D
// the head; cancelling A (running) frees n0 and D starts there at t=20.
TEST(EngineOps, CancelPendingAndRunning) {
  Cluster c = FlatCluster(2, 4);
  std::vector<Job> jobs = {MakeJob(0, 0, 4, 1, 100), MakeJob(1, 0, 4, 1, 100),
                           MakeJob(2, 0, 8, 2, 100), MakeJob(3, 10, 4, 1, 100)};
  Driver d(c, {{"a", kNoQuota, 1.0}}, FromYaml(kFirstFit));
  Engine& e = d.engine();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e.Submit(jobs[i], 0).ok());
  EXPECT_EQ(d.Schedule(0, jobs), (std::vector<JobIndex>{0, 1}));
  EXPECT_EQ(e.placement(0), (Placement{{0, 4}}));
  // No GPU left, but the cycle still examines the head: it waits for resources, and A and B
  // ending at their limits (t=100) make room for it.
  EXPECT_EQ(e.status(2).reason, Reason::kResources);
  EXPECT_EQ(e.status(2).reserved_start, 100);

  ASSERT_TRUE(e.Cancel(2, 10).ok());
  EXPECT_EQ(e.status(2).phase, JobStatus::Phase::kDone);
  EXPECT_EQ(e.status(2).reason, Reason::kCancelled);
  EXPECT_EQ(e.Explain(2), "cancelled");
  EXPECT_EQ(e.pending_count(), 0);
  ASSERT_TRUE(e.Submit(jobs[3], 10).ok());
  EXPECT_TRUE(d.Schedule(10, jobs).empty());

  ASSERT_TRUE(d.checker().OnCancelRunning(jobs[0], e.placement(0)).ok());
  ASSERT_TRUE(e.Cancel(0, 20).ok());
  EXPECT_EQ(e.status(0).reason, Reason::kCancelled);
  EXPECT_EQ(e.running_count(), 1);
  EXPECT_EQ(d.Schedule(20, jobs), (std::vector<JobIndex>{3}));
  EXPECT_EQ(e.placement(3), (Placement{{0, 4}}));
  EXPECT_EQ(e.status(3).start, 20);

  // Neither pending nor running any more: a clear error, nothing changes.
  EXPECT_EQ(e.Cancel(0, 30).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.Cancel(2, 30).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.Cancel(99, 30).code(), StatusCode::kFailedPrecondition);
  d.Check();
}

// Two nodes of 4.
//   t=0   A (4 GPUs) on n0, B (2 GPUs) on n1.
//   t=5   Drain n1: its 2 free GPUs are withheld; C (2 GPUs) waits although 2 are idle there.
//   t=10  Down n0: A ends (reported), is requeued; nothing can start (n0 down, n1 drained).
//   t=20  Up n0: A (submitted at 0, so first) starts on n0; C still waits.
//   t=30  B finishes: its GPUs stay withheld on the drained n1.
//   t=40  Up n1: C starts on n1.
TEST(EngineOps, DrainDownUpAndRequeue) {
  Cluster c = FlatCluster(2, 4);
  std::vector<Job> jobs = {MakeJob(0, 0, 4, 1, 100), MakeJob(1, 0, 2, 1, 100),
                           MakeJob(2, 5, 2, 1, 100)};
  Driver d(c, {{"a", kNoQuota, 1.0}}, FromYaml(kFirstFit));
  Engine& e = d.engine();
  ASSERT_TRUE(e.Submit(jobs[0], 0).ok());
  ASSERT_TRUE(e.Submit(jobs[1], 0).ok());
  EXPECT_EQ(d.Schedule(0, jobs), (std::vector<JobIndex>{0, 1}));
  EXPECT_EQ(e.placement(1), (Placement{{1, 2}}));

  ASSERT_TRUE(e.Drain(1, 5).ok());
  d.checker().OnDrain(1);
  EXPECT_EQ(e.node_state(1), NodeState::kDrained);
  EXPECT_EQ(e.free_index().free(1), 0);
  ASSERT_TRUE(e.Submit(jobs[2], 5).ok());
  EXPECT_TRUE(d.Schedule(5, jobs).empty());
  EXPECT_EQ(e.status(1).phase, JobStatus::Phase::kRunning);  // drained, not stopped

  std::vector<JobIndex> interrupted;
  const Placement a_placement = e.placement(0);
  ASSERT_TRUE(e.Down(0, 10, &interrupted).ok());
  EXPECT_EQ(interrupted, (std::vector<JobIndex>{0}));
  Status s = d.checker().OnDown(0, {&jobs[0]}, std::vector<Placement>{a_placement});
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(e.status(0).phase, JobStatus::Phase::kDone);
  EXPECT_EQ(e.status(0).reason, Reason::kNodeDown);
  EXPECT_EQ(e.running_count(), 1);
  EXPECT_EQ(e.Drain(0, 10).code(), StatusCode::kFailedPrecondition);  // down: Up first
  ASSERT_TRUE(e.Requeue(0, 10).ok());
  EXPECT_EQ(e.status(0).phase, JobStatus::Phase::kPending);
  EXPECT_EQ(e.Requeue(0, 10).code(), StatusCode::kFailedPrecondition);  // not ended by Down
  EXPECT_TRUE(d.Schedule(10, jobs).empty());

  ASSERT_TRUE(e.Up(0, 20).ok());
  d.checker().OnUp(0);
  EXPECT_EQ(d.Schedule(20, jobs), (std::vector<JobIndex>{0}));
  EXPECT_EQ(e.placement(0), (Placement{{0, 4}}));
  EXPECT_EQ(e.status(0).start, 20);
  EXPECT_EQ(e.status(2).phase, JobStatus::Phase::kPending);

  d.checker().OnFinish(jobs[1], e.placement(1));
  ASSERT_TRUE(e.Finish(1, 30).ok());
  EXPECT_EQ(e.free_index().free(1), 0);
  EXPECT_TRUE(d.Schedule(30, jobs).empty());

  ASSERT_TRUE(e.Up(1, 40).ok());
  d.checker().OnUp(1);
  EXPECT_EQ(e.free_index().free(1), 4);
  EXPECT_EQ(d.Schedule(40, jobs), (std::vector<JobIndex>{2}));
  EXPECT_EQ(e.placement(2), (Placement{{1, 2}}));

  EXPECT_EQ(e.Down(7, 50, &interrupted).code(), StatusCode::kInvalidArgument);  // no such node
}

// Three nodes of 4. A restarted driver adopts A, running on n1 since t=0 with a 500 s limit.
// The books agree: n1 is full and team a uses 4. Bad adoptions (a full node, a wrong shape, a
// start after now, a known job, a down node) fail and change nothing. Then C (4 GPUs, limit
// 50) starts on n0 at t=100, and D (2 nodes x 4) waits with n2 alone free: under EASY it is
// promised t=150, when C ends and n0 and n2 hold it. Team a's quota (16) leaves D room, so D
// waits for GPUs, not quota.
TEST(EngineOps, AdoptBooksRunningJobs) {
  Cluster c = FlatCluster(3, 4);
  std::vector<Job> jobs = {MakeJob(0, 0, 4, 1, 500), MakeJob(1, 0, 4, 1, 500),
                           MakeJob(2, 100, 4, 1, 50), MakeJob(3, 100, 8, 2, 50),
                           MakeJob(4, 0, 4, 1, 500)};
  Driver d(c, {{"a", 16, 1.0}}, FromYaml(kFirstFit));
  Engine& e = d.engine();
  ASSERT_TRUE(e.Adopt(jobs[0], {{1, 4}}, 0, 100).ok());
  ASSERT_TRUE(d.checker().OnAdopt(jobs[0], 0, {{1, 4}}).ok());
  EXPECT_EQ(e.status(0).phase, JobStatus::Phase::kRunning);
  EXPECT_EQ(e.status(0).reason, Reason::kAdopted);
  EXPECT_EQ(e.status(0).start, 0);
  EXPECT_EQ(e.status(0).expected_end, 500);
  EXPECT_EQ(e.running_count(), 1);
  EXPECT_EQ(e.team_running_gpus(0), 4);
  EXPECT_EQ(e.Explain(0), "adopted: running since t=0 on 1 node(s)");
  d.Check();

  EXPECT_EQ(e.Adopt(jobs[1], {{1, 4}}, 0, 100).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.Adopt(jobs[1], {{0, 2}, {1, 2}}, 0, 100).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.Adopt(jobs[1], {{0, 4}}, 200, 100).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.Adopt(jobs[0], {{0, 4}}, 0, 100).code(), StatusCode::kInvalidArgument);  // known
  std::vector<JobIndex> none;
  ASSERT_TRUE(e.Down(0, 100, &none).ok());
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(e.Adopt(jobs[1], {{0, 4}}, 0, 100).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(e.Up(0, 100).ok());
  EXPECT_EQ(e.running_count(), 1);
  EXPECT_EQ(e.status(1).phase, JobStatus::Phase::kUnknown);
  d.Check();

  ASSERT_TRUE(e.Submit(jobs[2], 100).ok());
  ASSERT_TRUE(e.Submit(jobs[3], 100).ok());
  EXPECT_EQ(d.Schedule(100, jobs), (std::vector<JobIndex>{2}));
  EXPECT_EQ(e.placement(2), (Placement{{0, 4}}));
  EXPECT_EQ(e.status(3).reason, Reason::kResources);
  EXPECT_EQ(e.status(3).reserved_start, 150);

  // A job on a drained node can be adopted (drains wait for running jobs).
  ASSERT_TRUE(e.Drain(1, 100).ok());
  d.checker().OnDrain(1);
  d.checker().OnFinish(jobs[0], e.placement(0));
  ASSERT_TRUE(e.Finish(0, 120).ok());
  ASSERT_TRUE(e.Adopt(jobs[4], {{1, 4}}, 0, 120).ok());
  ASSERT_TRUE(d.checker().OnAdopt(jobs[4], 0, {{1, 4}}).ok());
  d.Check();
}

// The checker catches an engine that ends the wrong jobs on Down, or starts on a drained node.
TEST(EngineOps, CheckerCatchesDownAndDrainMistakes) {
  Cluster c = FlatCluster(2, 4);
  std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  std::vector<Job> jobs = {MakeJob(0, 0, 4, 1, 100), MakeJob(1, 0, 4, 1, 100)};
  InvariantChecker checker(c, teams);
  ASSERT_TRUE(checker.OnStart(jobs[0], 0, {{0, 4}}).ok());
  ASSERT_TRUE(checker.OnStart(jobs[1], 0, {{1, 4}}).ok());
  EXPECT_FALSE(checker.OnDown(0, {&jobs[1]}, std::vector<Placement>{Placement{{1, 4}}})
                   .ok());  // B did not run on n0
  InvariantChecker c2(c, teams);
  c2.OnDrain(1);
  EXPECT_FALSE(c2.OnStart(jobs[1], 0, {{1, 4}}).ok());
  EXPECT_TRUE(c2.OnAdopt(jobs[1], 0, {{1, 4}}).ok());
}

class FixedOracle final : public RuntimeOracle {
 public:
  Duration TrueRunTime(const JobRequest& job) const override { return 1000 - job.index; }
};

// Oracle profiles need a RuntimeOracle: a live driver has none and gets a clear error; with one
// the factor orders by what the oracle says, not by the trace record's Job::run_time.
TEST(EngineOps, OracleProfilesNeedARuntimeOracle) {
  Cluster c = FlatCluster(1, 4);
  std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  auto no = Engine::Create(c, teams, Builtin("sjf-oracle"));
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no.status().message().find("oracle-runtime' is an oracle"), std::string::npos)
      << no.status().ToString();
  EXPECT_EQ(Engine::Create(c, teams, Builtin("srsf-oracle")).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Engine::Create(c, teams, Builtin("slurm-like")).ok());

  // Run times in the jobs say A is shortest; the oracle says C is (1000 - index).
  FixedOracle oracle;
  EngineOptions options;
  options.oracle = &oracle;
  std::vector<Job> jobs = {MakeJob(0, 0, 4, 1, 10), MakeJob(1, 1, 4, 1, 20),
                           MakeJob(2, 1, 4, 1, 30), MakeJob(3, 2, 4, 1, 40)};
  Driver d(c, teams, Builtin("sjf-oracle"), options);
  ASSERT_TRUE(d.engine().Submit(jobs[0], 0).ok());
  EXPECT_EQ(d.Schedule(0, jobs), (std::vector<JobIndex>{0}));
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(d.engine().Submit(jobs[i], 2).ok());
  d.Schedule(2, jobs);
  d.checker().OnFinish(jobs[0], d.engine().placement(0));
  ASSERT_TRUE(d.engine().Finish(0, 10).ok());
  EXPECT_EQ(d.Schedule(10, jobs), (std::vector<JobIndex>{3}));
}

// A score plugin written outside sched/ (here: prefer the highest node index), registered in a
// registry of its own, ranks the nodes of the "scored" placement; nothing in placement.cc knows it.
class LastNodeScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "last-node"; }
  double Score(const JobRequest&, NodeIndex node, int, const FreeIndex&) const override {
    return node;
  }
};

TEST(EngineOps, RegistryResolvesNamesAndTakesNewScores) {
  Cluster c = FlatCluster(4, 4);
  std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  PluginRegistry registry;
  RegisterBuiltinPlugins(registry);
  ASSERT_TRUE(registry
                  .AddScore("last-node",
                            [](const PluginArgs&,
                               const PluginContext&) -> Result<std::unique_ptr<ScorePlugin>> {
                              return std::unique_ptr<ScorePlugin>(new LastNodeScore());
                            })
                  .ok());
  EXPECT_EQ(registry.AddScore("pack", nullptr).code(), StatusCode::kAlreadyExists);

  const Profile last = FromYaml(R"(
profiles:
  last:
    placement: {plugin: scored, args: {scores: "last-node"}}
)");
  // The built-in registry does not know it, and says what it knows.
  auto e = Engine::Create(c, teams, last);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_NE(e.status().message().find(
                "unknown score plugin 'last-node' (known: pack, spread, "
                "lowest-index, least-free, most-free, fgd, scarcity, data-locality)"),
            std::string::npos)
      << e.status().ToString();

  EngineOptions options;
  options.registry = &registry;
  std::vector<Job> jobs = {MakeJob(0, 0, 4, 1, 100), MakeJob(1, 0, 8, 2, 100),
                           MakeJob(2, 0, 2, 0, 100)};
  Driver d(c, teams, last, options);
  for (const Job& j : jobs) ASSERT_TRUE(d.engine().Submit(j, 0).ok());
  EXPECT_EQ(d.Schedule(0, jobs), (std::vector<JobIndex>{0, 1, 2}));
  EXPECT_EQ(d.engine().placement(0), (Placement{{3, 4}}));
  EXPECT_EQ(d.engine().placement(1), (Placement{{2, 4}, {1, 4}}));
  EXPECT_EQ(d.engine().placement(2), (Placement{{0, 2}}));  // the only node left with room

  // Built-in scores: pack fills the partly used node, spread the emptiest.
  const Profile pack = FromYaml(R"(
profiles:
  p:
    placement: {plugin: scored, args: {scores: "pack:2, spread:0.5"}}
)");
  Driver p(c, teams, pack);
  std::vector<Job> small = {MakeJob(0, 0, 3, 1, 100), MakeJob(1, 1, 1, 1, 100)};
  ASSERT_TRUE(p.engine().Submit(small[0], 0).ok());
  EXPECT_EQ(p.Schedule(0, small), (std::vector<JobIndex>{0}));
  EXPECT_EQ(p.engine().placement(0), (Placement{{0, 3}}));
  ASSERT_TRUE(p.engine().Submit(small[1], 1).ok());
  EXPECT_EQ(p.Schedule(1, small), (std::vector<JobIndex>{1}));
  EXPECT_EQ(p.engine().placement(1), (Placement{{0, 1}}));

  EXPECT_EQ(Engine::Create(c, teams, FromYaml(R"(
profiles:
  bad:
    placement: nope
)"))
                .status()
                .message(),
            "profile 'bad': unknown placement plugin 'nope' (known: first-fit, best-fit, "
            "topology, scored)");
}

const char kConservative[] = R"(
profiles:
  cons:
    priority: [{plugin: age, args: {max_age: inf}}]
    placement: first-fit
    backfill: {mode: conservative}
)";

// Conservative backfill must not plan on GPUs of a drained node: a job ending there gives its
// GPUs back to the node, not to new jobs. Three nodes of 4.
//   t=0  A (4 GPUs, limit 100) on n0, B (4 GPUs, limit 1000) on n1; n2 stays free.
//   t=1  Drain n0.
//   t=3  C (2 x 4 GPUs, submitted at 2) is the head: blocked, it can start only when B ends
//        (1000), since A's GPUs stay on the drained n0. D (4 GPUs for 500 s) then fits on n2
//        before C's reservation and starts. Planning on n0 (the bug) reserved C at 100 and kept D
//        waiting behind a reservation that could never be honoured.
TEST(EngineOps, ConservativeBackfillDoesNotPlanOnDrainedNodes) {
  Cluster c = FlatCluster(3, 4);
  std::vector<Job> jobs = {MakeJob(0, 0, 4, 1, 100), MakeJob(1, 0, 4, 1, 1000),
                           MakeJob(2, 2, 8, 2, 100), MakeJob(3, 3, 4, 1, 500)};
  Driver d(c, {{"a", kNoQuota, 1.0}}, FromYaml(kConservative));
  Engine& e = d.engine();
  ASSERT_TRUE(e.Submit(jobs[0], 0).ok());
  ASSERT_TRUE(e.Submit(jobs[1], 0).ok());
  EXPECT_EQ(d.Schedule(0, jobs), (std::vector<JobIndex>{0, 1}));
  EXPECT_EQ(e.placement(0), (Placement{{0, 4}}));
  ASSERT_TRUE(e.Drain(0, 1).ok());
  d.checker().OnDrain(0);
  ASSERT_TRUE(e.Submit(jobs[2], 2).ok());
  ASSERT_TRUE(e.Submit(jobs[3], 3).ok());
  EXPECT_EQ(d.Schedule(3, jobs), (std::vector<JobIndex>{3}));
  EXPECT_EQ(e.status(3).reason, Reason::kStartedBackfill);
  EXPECT_EQ(e.placement(3), (Placement{{2, 4}}));
  EXPECT_EQ(e.status(2).reason, Reason::kResources);
  EXPECT_EQ(e.status(2).reserved_start, 1000);
}

}  // namespace
}  // namespace gantry
