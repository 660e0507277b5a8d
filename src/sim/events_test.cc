// Cluster events in the simulator: the file format, name resolution, and a hand-worked replay of
// drain, down (with requeue), up and cancel through the engine's live-driver calls.
#include "gantry/sim/events.h"

#include <gtest/gtest.h>

#include <array>

#include "gantry/sim/simulator.h"

namespace gantry {
namespace {

// Two nodes, n0 and n1, of 4 GPUs each; no topology.
Cluster TwoNodes() {
  ClusterBuilder b("pair", {});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 4}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n1", .gpu_type = 0, .gpus = 4}).ok());
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// Whole-node jobs A, B, ... of 4 GPUs each: {submit, run time, time limit}.
Workload FourGpuJobs(const std::vector<std::array<Time, 3>>& rows) {
  Workload w;
  w.teams = {"t"};
  w.users = {"u"};
  w.queues = {"q"};
  for (size_t i = 0; i < rows.size(); ++i) {
    Job j;
    j.index = static_cast<JobIndex>(i);
    j.id = std::string(1, static_cast<char>('A' + i));
    j.submit = rows[i][0];
    j.run_time = rows[i][1];
    j.time_limit = rows[i][2];
    j.gpus = 4;
    w.jobs.push_back(j);
  }
  return w;
}

Profile Fifo() {
  auto p = ParseProfiles(R"(
profiles:
  fifo:
    priority: [{plugin: age, args: {max_age: inf}}]
    placement: first-fit
)",
                         "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p->front();
}

std::vector<ClusterEvent> Events(const std::string& text, const Cluster& c, const Workload& w) {
  auto e = ParseClusterEvents(text, "events.csv");
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return {};
  Status s = ResolveClusterEvents(c, w, &*e);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return *e;
}

TEST(ClusterEventsParse, ReadsUnitsCommentsBomAndSortsStably) {
  auto e = ParseClusterEvents(
      "\xEF\xBB\xBFtime,event,target\n"
      "# maintenance window\n"
      "1h30m, drain ,node-7\r\n"
      "\n"
      "60,cancel,job 42\n"
      "5400,down,node-7\n",
      "ev.csv");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->size(), 3u);
  EXPECT_EQ((*e)[0].at, 60);
  EXPECT_EQ((*e)[0].kind, ClusterEvent::Kind::kCancel);
  EXPECT_EQ((*e)[0].target, "job 42");
  EXPECT_EQ((*e)[0].line, 5);
  // Equal times keep file order: the drain (line 3) before the down (line 6).
  EXPECT_EQ((*e)[1].at, 5400);
  EXPECT_EQ((*e)[1].kind, ClusterEvent::Kind::kDrain);
  EXPECT_EQ((*e)[1].target, "node-7");
  EXPECT_EQ((*e)[2].kind, ClusterEvent::Kind::kDown);
}

TEST(ClusterEventsParse, ErrorsNameTheLineAndField) {
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"", "events.csv: empty"},
      {"when,what,who\n", "events.csv:1: the header must be 'time,event,target'"},
      {"time,event,target\n10,reboot,n0\n", "events.csv:2: field 'event': unknown event 'reboot'"},
      {"time,event,target\n-5,down,n0\n", "events.csv:2: field 'time'"},
      {"time,event,target\nsoon,down,n0\n", "events.csv:2: field 'time'"},
      {"time,event,target\n10,down\n", "events.csv:2: expected 3 fields"},
      {"time,event,target\n10,down,n0,extra\n", "events.csv:2: expected 3 fields"},
      {"time,event,target\n10,down,\n", "events.csv:2: field 'target': empty"},
      {std::string("time,event,target\n10,down,n\0x\n", 29), "events.csv:2: a NUL byte"},
  };
  for (const Case& c : cases) {
    auto e = ParseClusterEvents(c.text, "events.csv");
    ASSERT_FALSE(e.ok()) << c.text;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(e.status().message().find(c.expect), std::string::npos) << e.status().message();
  }
}

TEST(ClusterEventsParse, ResolveRejectsUnknownNodesAndJobsAndEarlyCancels) {
  const Cluster c = TwoNodes();
  const Workload w = FourGpuJobs({{100, 10, 10}});
  const auto resolve = [&](const std::string& text) {
    auto e = ParseClusterEvents(text, "ev.csv");
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return ResolveClusterEvents(c, w, &*e);
  };
  EXPECT_TRUE(resolve("time,event,target\n5,down,n1\n200,cancel,A\n").ok());
  Status s = resolve("time,event,target\n5,down,n9\n");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("line 2: cluster pair has no node 'n9'"), std::string::npos)
      << s.ToString();
  s = resolve("time,event,target\n5,cancel,Z\n");
  EXPECT_NE(s.message().find("the workload has no job 'Z'"), std::string::npos) << s.ToString();
  s = resolve("time,event,target\n50,cancel,A\n");
  EXPECT_NE(s.message().find("before its submit time 100"), std::string::npos) << s.ToString();
  // A node name is not a job id and the other way round.
  EXPECT_FALSE(resolve("time,event,target\n5,cancel,n0\n").ok());
  EXPECT_FALSE(resolve("time,event,target\n5,drain,A\n").ok());
}

// FIFO, first-fit, n0 and n1 of 4 GPUs, every job takes a whole node, no checkpoints:
//   t=0    A and B start (A on n0, B on n1); their runs would end at 100.
//   t=10   C submitted, t=20 D submitted: both wait.
//   t=30   n0 goes down: A ends after 30 s on 4 GPUs (120 GPU-seconds lost) and is requeued
//          with its submit time 0, so it stays ahead of C and D. Nothing can start.
//   t=40   D is cancelled while pending.
//   t=60   n0 comes up: A (oldest) starts on n0, to end at 160. A's stale finish at 100 is
//          ignored.
//   t=100  B ends; C starts on n1 (to end at 150).
//   t=120  C is cancelled while running: it ends at 120.
//   t=130  n1 is drained; E is submitted. n1 is empty but takes nothing new, n0 runs A.
//   t=160  A ends; E starts on n0 and ends at 170.
TEST(SimulatorEvents, DownRequeuesUpRestartsCancelAndDrainWorkThroughTheEngine) {
  const Cluster c = TwoNodes();
  const Workload w =
      FourGpuJobs({{0, 100, 200}, {0, 100, 200}, {10, 50, 100}, {20, 50, 100}, {130, 10, 20}});
  const std::vector<Team> teams = {{"t", kNoQuota, 1.0}};
  for (bool check : {true, false}) {
    SimOptions o;
    o.check_invariants = check;
    o.checkpoints = CheckpointModel{.interval = 0, .restart_cost = 0};  // all work lost
    o.events = Events(
        "time,event,target\n30,down,n0\n40,cancel,D\n60,up,n0\n120,cancel,C\n130,drain,n1\n", c, w);
    auto r = Simulate(c, teams, w, Fifo(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto& out = r->outcomes;
    EXPECT_EQ(out[0].start, 60);
    EXPECT_EQ(out[0].end, 160);
    EXPECT_EQ(out[0].requeues, 1);
    EXPECT_FALSE(out[0].cancelled);
    EXPECT_EQ(out[1].start, 0);
    EXPECT_EQ(out[1].end, 100);
    EXPECT_EQ(out[2].start, 100);
    EXPECT_EQ(out[2].end, 120);
    EXPECT_TRUE(out[2].cancelled);
    EXPECT_EQ(out[3].start, -1);
    EXPECT_TRUE(out[3].cancelled);
    EXPECT_EQ(out[4].start, 160);
    EXPECT_EQ(out[4].end, 170);
    const SimSummary& s = r->summary;
    EXPECT_EQ(s.cluster_events, 5);
    EXPECT_EQ(s.requeues, 1);
    EXPECT_DOUBLE_EQ(s.lost_gpu_hours, 120.0 / 3600.0);
    EXPECT_EQ(s.jobs_cancelled, 2);
    EXPECT_EQ(s.jobs_completed, 3);
    EXPECT_EQ(s.jobs_unfinished, 0);
    // Busy GPU-seconds: A 4x30 + 4x100, B 4x100, C 4x20, E 4x10.
    EXPECT_DOUBLE_EQ(r->busy_gpu_seconds, 4.0 * (30 + 100 + 100 + 20 + 10));
    EXPECT_DOUBLE_EQ(s.restart_gpu_hours, 0);
    EXPECT_DOUBLE_EQ(s.goodput, 1.0 - 120.0 / r->busy_gpu_seconds);
  }
}

// A requeued job resumes from its last checkpoint after its restart cost. A (4 GPUs, 10000 s of
// work, limit 20000 s) checkpoints every 1000 s and pays 100 s per restart:
//   t=0     A starts on n0.
//   t=3500  n0 down: 3500 s useful, 3000 s checkpointed, 500 s x 4 GPUs lost. A restarts at
//           once on n1, to run 100 + (10000 - 3000) = 7100 s.
//   t=3600  n0 up.
//   t=5000  n1 down: 1500 s elapsed = 100 s restart + 1400 s useful, 1000 s checkpointed (4000
//           saved in all), 400 s x 4 lost. A restarts on n0 to run 100 + 6000: ends at 11100.
// Busy 4 x (3500 + 1500 + 6100) = 44400 GPU-s = 40000 useful (4 x 10000) + 3600 lost + 800
// restarting (two restarts of 100 s).
TEST(SimulatorEvents, RequeuedJobsResumeFromTheirLastCheckpoint) {
  const Cluster c = TwoNodes();
  const Workload w = FourGpuJobs({{0, 10000, 20000}});
  SimOptions o;
  o.check_invariants = true;
  o.checkpoints = CheckpointModel{.interval = 1000, .restart_cost = 100};
  o.events = Events("time,event,target\n3500,down,n0\n3600,up,n0\n5000,down,n1\n", c, w);
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcomes[0].start, 5000);
  EXPECT_EQ(r->outcomes[0].end, 11100);
  EXPECT_EQ(r->outcomes[0].requeues, 2);
  EXPECT_EQ(r->interrupted_runs, (std::vector<InterruptedRun>{{0, 0, 3500}, {0, 3500, 5000}}));
  EXPECT_FALSE(r->outcomes[0].killed_at_limit);
  EXPECT_DOUBLE_EQ(r->busy_gpu_seconds, 44400);
  EXPECT_DOUBLE_EQ(r->lost_gpu_seconds, 3600);
  EXPECT_DOUBLE_EQ(r->restart_gpu_seconds, 800);
  EXPECT_DOUBLE_EQ(r->summary.goodput, 40000.0 / 44400.0);
  // The job's own interval and restart cost win over the model's.
  Workload own = w;
  own.jobs[0].checkpoint_interval = 500;
  own.jobs[0].restart_cost = 50;
  r = Simulate(c, {{"t", kNoQuota, 1.0}}, own, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // t=3500: 3500 saved, nothing lost; t=5000: 50 restart + 1450 useful, 1000 saved (4500 in
  // all), 450 lost; last run 50 + 5500 from 5000.
  EXPECT_EQ(r->outcomes[0].end, 10550);
  EXPECT_DOUBLE_EQ(r->lost_gpu_seconds, 4.0 * 450);
  EXPECT_DOUBLE_EQ(r->restart_gpu_seconds, 4.0 * 100);
}

// A run interrupted while it is still restarting: only the restart time it had is counted.
//   t=3500  n0 down (500 s x 4 lost); A restarts on n1, 100 s of restart first.
//   t=3520  n0 up.  t=3550  n1 down after 50 s of restarting; A restarts on n0 at once and
//           runs 100 + 7000 s: ends at 10650.
// Busy 4 x (3500 + 50 + 7100) = 42600 = 40000 work + 2000 lost + 600 restarting (50 + 100 s).
TEST(SimulatorEvents, ARestartCutShortCountsOnlyTheRestartTimeItHad) {
  const Cluster c = TwoNodes();
  const Workload w = FourGpuJobs({{0, 10000, 20000}});
  SimOptions o;
  o.check_invariants = true;
  o.checkpoints = CheckpointModel{.interval = 1000, .restart_cost = 100};
  o.events = Events("time,event,target\n3500,down,n0\n3520,up,n0\n3550,down,n1\n", c, w);
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcomes[0].end, 10650);
  EXPECT_DOUBLE_EQ(r->busy_gpu_seconds, 42600);
  EXPECT_DOUBLE_EQ(r->lost_gpu_seconds, 2000);
  EXPECT_DOUBLE_EQ(r->restart_gpu_seconds, 600);
}

// A cancel of a job that already ended does nothing, as scancel of a finished job; a cancel at
// the very instant of a job's submission finds it pending (submissions come first).
TEST(SimulatorEvents, CancelAfterTheEndIsANoOpAndAtSubmitCancelsThePendingJob) {
  const Cluster c = TwoNodes();
  const Workload w = FourGpuJobs({{0, 10, 20}, {5, 10, 20}});
  SimOptions o;
  o.check_invariants = true;
  o.events = Events("time,event,target\n50,cancel,A\n5,cancel,B\n", c, w);
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcomes[0].end, 10);
  EXPECT_FALSE(r->outcomes[0].cancelled);
  EXPECT_EQ(r->outcomes[1].start, -1);
  EXPECT_TRUE(r->outcomes[1].cancelled);
  EXPECT_EQ(r->summary.jobs_completed, 1);
  EXPECT_EQ(r->summary.jobs_cancelled, 1);
}

// Draining a node that is down is refused by the engine: the error names the event's line.
TEST(SimulatorEvents, AnEventTheEngineRefusesEndsTheRunNamingTheLine) {
  const Cluster c = TwoNodes();
  const Workload w = FourGpuJobs({{0, 10, 20}});
  SimOptions o;
  o.events = Events("time,event,target\n1,down,n1\n2,drain,n1\n", c, w);
  auto r = Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("events line 3 (drain n1)"), std::string::npos)
      << r.status().ToString();
  // Unresolved events are refused before anything runs.
  auto e = ParseClusterEvents("time,event,target\n1,down,n1\n", "ev.csv");
  ASSERT_TRUE(e.ok());
  o.events = *e;
  EXPECT_EQ(Simulate(c, {{"t", kNoQuota, 1.0}}, w, Fifo(), o).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gantry
