// The failure model: its spec parser, the statistics of its draws, and simulations with it on,
// checked by the invariant checker and by exact GPU-time accounting.
#include "gantry/sim/failures.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gantry/sim/simulator.h"

namespace gantry {
namespace {

TEST(FailureModelParse, ReadsEveryKeyWithUnits) {
  auto m =
      ParseFailureModel("mtbf=30d,repair=2h,dist=weibull,shape=0.8,health=0.25,spares=2,seed=9");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->enabled);
  EXPECT_EQ(m->mtbf, 30 * 86400);
  EXPECT_EQ(m->repair, 7200);
  EXPECT_EQ(m->distribution, FailureModel::Distribution::kWeibull);
  EXPECT_DOUBLE_EQ(m->weibull_shape, 0.8);
  EXPECT_DOUBLE_EQ(m->health_fraction, 0.25);
  EXPECT_EQ(m->spares, 2);
  EXPECT_EQ(m->seed, 9u);
  auto d = ParseFailureModel("mtbf=1000");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->distribution, FailureModel::Distribution::kExponential);
  EXPECT_EQ(d->repair, 4 * 3600);
}

TEST(FailureModelParse, RejectsWithTheKeyNamed) {
  for (const auto& [spec, expect] : std::vector<std::pair<std::string, std::string>>{
           {"", "mtbf is required"},
           {"repair=1h", "mtbf is required"},
           {"mtbf=0", "mtbf must be positive"},
           {"mtbf=soon", "mtbf"},
           {"mtbf=1d,dist=normal", "dist: 'normal'"},
           {"mtbf=1d,health=1.5", "health"},
           {"mtbf=1d,shape=0", "shape"},
           {"mtbf=1d,spares=1.5", "spares"},
           {"mtbf=1d,mtbf=2d", "'mtbf' given twice"},
           {"mtbf=1d,colour=red", "unknown key 'colour'"},
           {"mtbf", "is not key=value"},
       }) {
    auto m = ParseFailureModel(spec);
    ASSERT_FALSE(m.ok()) << spec;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(m.status().message().find(expect), std::string::npos) << m.status().ToString();
  }
  auto c = ParseCheckpointModel("interval=30m,restart=2m");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->interval, 1800);
  EXPECT_EQ(c->restart_cost, 120);
  auto none = ParseCheckpointModel("none");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->interval, 0);
  EXPECT_EQ(none->restart_cost, 0);
  EXPECT_FALSE(ParseCheckpointModel("every=1h").ok());
}

// Means of many draws match the model (the Weibull scale is derived from the MTBF through the
// Gamma function: a wrong scale misses by far more than the tolerance), the health share
// matches, and a node's stream depends only on the seed and the node.
TEST(NodeFailureStream, DrawsHaveTheModelsMeansAndArePerNodeDeterministic) {
  for (auto dist :
       {FailureModel::Distribution::kExponential, FailureModel::Distribution::kWeibull}) {
    FailureModel m;
    m.enabled = true;
    m.mtbf = 100000;
    m.distribution = dist;
    m.weibull_shape = 0.7;
    m.repair = 3600;
    m.health_fraction = 0.3;
    NodeFailureStream s(m, 5);
    constexpr int kDraws = 200000;
    double up = 0, repair = 0;
    int health = 0;
    for (int i = 0; i < kDraws; ++i) {
      up += static_cast<double>(s.NextUptime());
      repair += static_cast<double>(s.NextRepair());
      health += s.NextIsHealthEvent() ? 1 : 0;
    }
    EXPECT_NEAR(up / kDraws, 100000, 3000) << static_cast<int>(dist);
    EXPECT_NEAR(repair / kDraws, 3600, 60);
    EXPECT_NEAR(static_cast<double>(health) / kDraws, 0.3, 0.01);
  }
  FailureModel m;
  m.mtbf = 1000;
  NodeFailureStream a(m, 3), b(m, 3), other(m, 4);
  EXPECT_EQ(a.NextUptime(), b.NextUptime());
  EXPECT_NE(a.NextUptime(), other.NextUptime());
}

Cluster Nodes(int n, int gpus) {
  ClusterBuilder b("c", {});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(b.AddNode({.name = "n" + std::to_string(i), .gpu_type = 0, .gpus = gpus}).ok());
  }
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// Jobs of 1 to 8 GPUs, arriving over two days, with limits far above their run times.
Workload Mixed(int count) {
  Workload w;
  w.teams = {"t"};
  w.users = {"u"};
  w.queues = {"q"};
  Rng rng(42);
  for (int i = 0; i < count; ++i) {
    Job j;
    j.index = i;
    j.id = "j" + std::to_string(i);
    j.submit = static_cast<Time>(rng.Below(2 * 86400));
    j.gpus = 1 + static_cast<int>(rng.Below(8));
    j.run_time = 600 + static_cast<Duration>(rng.Below(12 * 3600));
    j.time_limit = 10 * 86400;
    w.jobs.push_back(j);
  }
  std::stable_sort(w.jobs.begin(), w.jobs.end(),
                   [](const Job& a, const Job& b) { return a.submit < b.submit; });
  for (int i = 0; i < count; ++i) w.jobs[i].index = i;
  return w;
}

// `count` jobs of `gpus` GPUs each, all submitted at 0, running 100 s (limit 200 s).
Workload SubmittedAtZero(int count, int gpus) {
  Workload w;
  w.teams = {"t"};
  w.users = {"u"};
  w.queues = {"q"};
  for (int i = 0; i < count; ++i) {
    Job j;
    j.index = i;
    j.id = std::to_string(i);
    j.gpus = gpus;
    j.run_time = 100;
    j.time_limit = 200;
    w.jobs.push_back(j);
  }
  return w;
}

Profile Fifo() {
  auto p = ParseProfiles(
      "profiles:\n  fifo:\n    priority: [{plugin: age, args: {max_age: inf}}]\n"
      "    placement: first-fit\n",
      "t.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p->front();
}

// With failures, health drains and spares on, under the invariant checker: every job completes,
// and the allocated GPU time splits exactly into the jobs' work, the work lost since last
// checkpoints and the restart time (no job reaches its limit here, so each job's useful work is
// exactly gpus x run time). The same seed gives the same run; another seed another one.
TEST(SimulatorFailures, GpuTimeIsWorkPlusLostPlusRestartAndRunsAreReproducible) {
  const Cluster c = Nodes(8, 8);
  const Workload w = Mixed(400);
  SimOptions o;
  o.check_invariants = true;
  auto model = ParseFailureModel("mtbf=2d,repair=3h,health=0.3,spares=1,seed=3");
  ASSERT_TRUE(model.ok());
  o.failures = *model;
  o.checkpoints = CheckpointModel{.interval = 1800, .restart_cost = 240};
  o.max_requeues = 1000;  // every job runs to its end, so its work is exactly gpus x run time
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SimSummary& s = r->summary;
  EXPECT_EQ(s.jobs_completed, 400);
  EXPECT_GT(s.node_failures, 0);
  EXPECT_GT(s.health_events, 0);
  EXPECT_GT(s.spare_swaps, 0);
  EXPECT_GT(s.requeues, 0);
  EXPECT_GT(s.lost_gpu_hours, 0);
  EXPECT_GT(s.restart_gpu_hours, 0);
  double work = 0;
  for (const Job& j : w.jobs) work += static_cast<double>(j.gpus) * static_cast<double>(j.run_time);
  EXPECT_NEAR(r->busy_gpu_seconds, work + r->lost_gpu_seconds + r->restart_gpu_seconds, 1e-6);
  EXPECT_NEAR(s.goodput, work / r->busy_gpu_seconds, 1e-12);
  EXPECT_LT(s.goodput, 1.0);

  auto again = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->summary.node_failures, s.node_failures);
  EXPECT_DOUBLE_EQ(again->lost_gpu_seconds, r->lost_gpu_seconds);
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    ASSERT_EQ(again->outcomes[i].start, r->outcomes[i].start) << i;
  }
  o.failures.seed = 4;
  auto other = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->lost_gpu_seconds, r->lost_gpu_seconds);
}

// Spares are held out of scheduling until a node fails: with failures too rare to happen, four
// whole-node jobs on four nodes with one spare run three at a time.
TEST(SimulatorFailures, SparesAreHeldOutUntilANodeFails) {
  const Cluster c = Nodes(4, 8);
  const Workload w = SubmittedAtZero(4, 8);
  SimOptions o;
  o.check_invariants = true;
  o.failures = *ParseFailureModel("mtbf=100000d,spares=1");
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcomes[0].start, 0);
  EXPECT_EQ(r->outcomes[2].start, 0);
  EXPECT_EQ(r->outcomes[3].start, 100);
  EXPECT_EQ(r->summary.node_failures + r->summary.health_events, 0);
  // Every node a spare: nothing could ever run.
  o.failures.spares = 4;
  EXPECT_EQ(Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o).status().code(),
            StatusCode::kInvalidArgument);
}

// Failures faster than jobs can finish: each job is requeued at most max_requeues times, then
// held, so the run ends (before the limit existed it never did).
TEST(SimulatorFailures, FailuresFasterThanJobsEndHoldJobsAfterMaxRequeues) {
  const Cluster c = Nodes(2, 8);
  Workload w = SubmittedAtZero(2, 8);
  for (Job& j : w.jobs) j.run_time = j.time_limit = 100 * 86400;
  SimOptions o;
  o.check_invariants = true;
  o.failures = *ParseFailureModel("mtbf=1h,repair=1m");
  o.max_requeues = 3;
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const JobOutcome& out : r->outcomes) {
    EXPECT_TRUE(out.held);
    EXPECT_EQ(out.requeues, 3);
  }
  EXPECT_EQ(r->summary.jobs_held, 2);
  EXPECT_EQ(r->summary.requeues, 6);
  EXPECT_EQ(r->summary.jobs_unfinished, 2);
  EXPECT_EQ(r->summary.jobs_never_started, 0);
}

// A job too big for the cluster without its spare never starts; the run still ends (the model
// stops once nothing runs, nothing is left to submit and no node is out for repair).
TEST(SimulatorFailures, ARunWithAJobThatCanNeverStartStillEnds) {
  const Cluster c = Nodes(2, 8);
  const Workload w = SubmittedAtZero(1, 16);
  SimOptions o;
  o.failures = *ParseFailureModel("mtbf=1h,repair=10m,spares=1");
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcomes[0].start, -1);
  EXPECT_EQ(r->summary.jobs_never_started, 1);
}

}  // namespace
}  // namespace gantry
