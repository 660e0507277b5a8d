// Fractional GPUs in the timed engine: jobs asking for a share of one GPU (gpu_milli 1..999)
// share devices up to 1000 milli, or up to a GPU type's MIG-like slices. Hand-worked scenarios
// with exact start times (the arithmetic is in the comments), the accounting of a share as its
// fraction of a GPU, the invariant checker catching sabotaged share placements, and a property
// test over random openb-like workloads with the checker on.
#include <gtest/gtest.h>

#include <algorithm>

#include "gantry/common/rng.h"
#include "gantry/sched/engine.h"
#include "gantry/sim/simulator.h"
#include "invariant_checker.h"

namespace gantry {
namespace {

// One GPU type (idle 70 W, busy 700 W) with `mig_slices`; `nodes` nodes of `gpus` GPUs.
Cluster MakeCluster(int nodes, int gpus, int mig_slices = 0, std::vector<Team> teams = {}) {
  ClusterBuilder b("shares", {});
  GpuType t{"H100", 80, 70, 700};
  t.mig_slices = mig_slices;
  EXPECT_TRUE(b.AddGpuType(t).ok());
  for (int n = 0; n < nodes; ++n) {
    EXPECT_TRUE(b.AddNode({.name = "n" + std::to_string(n), .gpu_type = 0, .gpus = gpus}).ok());
  }
  for (auto& team : teams) EXPECT_TRUE(b.AddTeam(team).ok());
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

struct Spec {
  Time submit;
  int milli;  // < 1000: a share of one GPU; else 1000 * whole GPUs
  Duration run;
  Duration limit = 0;  // 0: the run time
};

Workload MakeWorkload(const std::vector<Spec>& specs) {
  Workload w;
  w.teams = {"a"};
  w.users = {"u"};
  w.queues = {"q"};
  for (size_t i = 0; i < specs.size(); ++i) {
    Job j;
    j.index = static_cast<JobIndex>(i);
    j.id = std::string(1, static_cast<char>('A' + i));
    j.submit = specs[i].submit;
    j.gpus = specs[i].milli < 1000 ? 1 : specs[i].milli / 1000;
    j.gpu_milli = specs[i].milli < 1000 ? specs[i].milli : 0;
    j.run_time = specs[i].run;
    j.time_limit = specs[i].limit > 0 ? specs[i].limit : specs[i].run;
    w.jobs.push_back(j);
  }
  return w;
}

Profile Builtin(const std::string& name) {
  auto p = FindProfile(name, {});
  EXPECT_TRUE(p.ok());
  return *p;
}

Result<SimResult> SimRun(const Cluster& c, const Workload& w, const std::string& profile,
                         std::vector<Team> teams = {}) {
  if (teams.empty()) teams.assign(w.teams.size(), Team{"a", kNoQuota, 1.0});
  SimOptions o;
  o.check_invariants = true;
  return Simulate(c, teams, w, Builtin(profile), o);
}

std::vector<Time> Starts(const Cluster& c, const Workload& w, const std::string& profile) {
  auto r = SimRun(c, w, profile);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<Time> starts;
  if (!r.ok()) return starts;
  for (const auto& out : r->outcomes) starts.push_back(out.start);
  return starts;
}

const char* const kProfiles[] = {"fifo", "fifo-easy", "slurm-like", "slurm-conservative", "gantry"};

// One node of one GPU. A-D ask 250 milli each for 100 s: 4 x 250 = 1000, all start at 0 on the
// one GPU. E (250 milli) finds no room until they end at 100.
TEST(Fractional, FourQuarterSharesFillOneGpuAndAFifthWaits) {
  Cluster c = MakeCluster(1, 1);
  Workload w =
      MakeWorkload({{0, 250, 100}, {0, 250, 100}, {0, 250, 100}, {0, 250, 100}, {0, 250, 100}});
  for (const char* p : kProfiles) {
    EXPECT_EQ(Starts(c, w, p), (std::vector<Time>{0, 0, 0, 0, 100})) << p;
  }
}

// 600 + 500 > 1000: on one GPU B waits for A (ends at 100); with two GPUs each takes one.
TEST(Fractional, SixHundredAndFiveHundredDoNotShare) {
  Workload w = MakeWorkload({{0, 600, 100}, {0, 500, 100}});
  for (const char* p : kProfiles) {
    EXPECT_EQ(Starts(MakeCluster(1, 1), w, p), (std::vector<Time>{0, 100})) << p;
    EXPECT_EQ(Starts(MakeCluster(1, 2), w, p), (std::vector<Time>{0, 0})) << p;
  }
}

// MIG-like 7 slices: 100 milli takes ceil(100 * 7 / 1000) = 1 slice, so 7 fit and the 8th waits
// for the first to end (at 100); 143 milli takes ceil(1.001) = 2 slices, so 3 fit (6 slices)
// and the 4th waits.
TEST(Fractional, MigSlicesRoundSharesUpToWholeSlices) {
  Cluster c = MakeCluster(1, 1, /*mig_slices=*/7);
  std::vector<Spec> sevenths(8, {0, 100, 100});
  for (const char* p : kProfiles) {
    EXPECT_EQ(Starts(c, MakeWorkload(sevenths), p), (std::vector<Time>{0, 0, 0, 0, 0, 0, 0, 100}))
        << p;
    EXPECT_EQ(
        Starts(c, MakeWorkload({{0, 143, 100}, {0, 143, 100}, {0, 143, 100}, {0, 143, 100}}), p),
        (std::vector<Time>{0, 0, 0, 100}))
        << p;
  }
  // Without slices the same eight 100-milli shares (800) all fit at once.
  EXPECT_EQ(Starts(MakeCluster(1, 1), MakeWorkload(sevenths), "fifo"), (std::vector<Time>(8, 0)));
}

// A whole-GPU job never lands on a shared GPU. One GPU: A (500 milli, 100 s) shares it from 0;
// B (1 whole GPU, 50 s) at t=1 waits until A ends at 100, then runs to 150. C (500 milli, 200 s)
// at t=2 would fit beside A, but under a reservation for B (the GPU is whole again at 100) a
// share ending at 202 may not extend A's GPU: C waits for B, starting at 150. Strict FIFO gives
// the same: nobody passes B.
TEST(Fractional, WholeGpuJobWaitsForTheSharesToEnd) {
  Cluster c = MakeCluster(1, 1);
  Workload w = MakeWorkload({{0, 500, 100}, {1, 1000, 50}, {2, 500, 200}});
  for (const char* p : {"fifo", "fifo-easy", "slurm-like"}) {
    EXPECT_EQ(Starts(c, w, p), (std::vector<Time>{0, 100, 150})) << p;
  }
  // A short share (ends at 52 <= 100) may join A's GPU without delaying B: EASY backfills it.
  Workload short_share = MakeWorkload({{0, 500, 100}, {1, 1000, 50}, {2, 500, 50}});
  EXPECT_EQ(Starts(c, short_share, "fifo-easy"), (std::vector<Time>{0, 100, 2}));
  EXPECT_EQ(Starts(c, short_share, "fifo"), (std::vector<Time>{0, 100, 150}));
}

// Best fit: two GPUs. A (500) opens GPU 0, B (700) finds no room there and opens GPU 1. C (300)
// at t=1 fits on both (room 500 and 300): best fit takes GPU 1 (room 300, left 0), so D (500)
// at t=2 still finds GPU 0's 500 and starts at once. First fit (C on GPU 0) would leave D
// waiting until 100.
TEST(Fractional, SharesPackOntoTheBestFittingSharedGpu) {
  Cluster c = MakeCluster(1, 2);
  Workload w = MakeWorkload({{0, 500, 100}, {0, 700, 100}, {1, 300, 100}, {2, 500, 100}});
  for (const char* p : kProfiles) {
    EXPECT_EQ(Starts(c, w, p), (std::vector<Time>{0, 0, 1, 2})) << p;
  }
  // Shares go onto a shared GPU with room before taking a whole one: A and B (300 each) share
  // GPU 0, so C (2 whole GPUs) cannot start until they end, while the whole GPU 1 stays free
  // for D (1 GPU), which starts at once.
  Workload packed = MakeWorkload({{0, 300, 100}, {0, 300, 100}, {1, 2000, 10}, {2, 1000, 10}});
  EXPECT_EQ(Starts(c, packed, "fifo-easy"), (std::vector<Time>{0, 0, 100, 2}));
}

// The engine's books directly: the shared GPU is out of the free index from the first share to
// the end of the last, and release gives back exactly what was taken.
TEST(Fractional, EngineTakesAWholeGpuForTheFirstShareAndReturnsItAfterTheLast) {
  Cluster c = MakeCluster(1, 2);
  Workload w = MakeWorkload({{0, 400, 10}, {0, 400, 10}, {0, 300, 10}});
  auto engine = Engine::Create(c, {Team{"a", kNoQuota, 1.0}}, Builtin("fifo"));
  ASSERT_TRUE(engine.ok());
  for (const Job& j : w.jobs) ASSERT_TRUE((*engine)->Submit(j, 0).ok());
  std::vector<StartDecision> starts;
  (*engine)->Schedule(0, &starts);
  ASSERT_EQ(starts.size(), 3u);
  const SharedGpus& shares = (*engine)->shared_gpus();
  // A opens GPU 0 (400); B joins it (800); C (300) does not fit there and opens another.
  EXPECT_EQ((*engine)->shared_gpu(0), (*engine)->shared_gpu(1));
  EXPECT_NE((*engine)->shared_gpu(0), (*engine)->shared_gpu(2));
  EXPECT_EQ(shares.used((*engine)->shared_gpu(0)), 800);
  EXPECT_EQ(shares.open_total(), 2);
  EXPECT_EQ((*engine)->free_index().total_free(), 0);
  ASSERT_TRUE((*engine)->Finish(0, 10).ok());
  EXPECT_EQ((*engine)->free_index().total_free(), 0);  // B still holds GPU 0
  EXPECT_EQ(shares.used((*engine)->shared_gpu(1)), 400);
  ASSERT_TRUE((*engine)->Finish(1, 10).ok());
  EXPECT_EQ((*engine)->free_index().total_free(), 1);
  ASSERT_TRUE((*engine)->Finish(2, 10).ok());
  EXPECT_EQ((*engine)->free_index().total_free(), 2);
  EXPECT_EQ(shares.open_total(), 0);
  EXPECT_EQ((*engine)->shared_gpu(2), -1);
}

// Accounting: four 250-milli shares for 100 s on one GPU are 100 GPU-seconds (one GPU busy),
// and the GPU draws its busy 700 W once, not four times: 70,000 J, each share charged a
// quarter (17,500 J).
TEST(Fractional, ASharedGpuCountsOnceAndEachShareItsFraction) {
  Cluster c = MakeCluster(1, 1);
  Workload w = MakeWorkload({{0, 250, 100}, {0, 250, 100}, {0, 250, 100}, {0, 250, 100}});
  auto r = SimRun(c, w, "fifo");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->busy_gpu_seconds, 100.0);
  EXPECT_DOUBLE_EQ(r->energy_joules, 70000.0);
  for (const auto& o : r->outcomes) EXPECT_DOUBLE_EQ(o.energy_kwh, 17500.0 / 3.6e6);
  // Rounded to whole GPUs (gpu_milli cleared, as --round-fractional does) they run one after
  // another: 400 GPU-seconds over 400 s.
  for (Job& j : w.jobs) j.gpu_milli = 0;
  auto rounded = SimRun(c, w, "fifo");
  ASSERT_TRUE(rounded.ok());
  EXPECT_DOUBLE_EQ(rounded->busy_gpu_seconds, 400.0);
  EXPECT_EQ(rounded->outcomes[3].start, 300);
}

// Quota counts milli-GPUs: a share charges its gpu_milli, so a 1-GPU quota holds four
// 250-milli shares at once (1000) and not a fifth. Two GPUs, so that GPUs never stand in the
// way: A (50 s) and B-D (100 s) start at 0 and share one GPU; E waits with reason Quota (the
// team holds 1000 of 1000) until A ends at 50, and starts then, on A's room.
TEST(Fractional, QuotaCountsSharesInMilli) {
  Cluster c = MakeCluster(1, 2);
  Workload w =
      MakeWorkload({{0, 250, 50}, {0, 250, 100}, {0, 250, 100}, {0, 250, 100}, {0, 250, 100}});
  for (const char* p : kProfiles) {
    SimOptions o;
    o.check_invariants = true;
    o.history_of = {4};
    auto r = Simulate(c, {Team{"a", 1, 1.0}}, w, Builtin(p), o);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    std::vector<Time> starts;
    for (const auto& out : r->outcomes) starts.push_back(out.start);
    EXPECT_EQ(starts, (std::vector<Time>{0, 0, 0, 0, 50})) << p;
    EXPECT_EQ(r->outcomes[4].reason, "Quota") << p;
    std::string h;
    for (const ReasonChange& e : r->history)
      h += std::to_string(e.t) + " " + std::string(e.reason) + "\n";
    // Submitted with reason Priority, found at the quota by the cycle at 0.
    EXPECT_EQ(h, "0 Priority\n0 Quota\n50 StartedInOrder\n") << p;
  }
}

// A whole GPU charges 1000, shares their gpu_milli, in one 2-GPU quota on a 4-GPU cluster. At
// 0, in submit order: A (1 GPU) 1000, B (500) 1500, C (250) 1750; D (1 GPU) would make 2750 and
// waits (Quota) while E (250), behind it, makes 2000 and starts. C ending at 50 leaves 1750: D
// still does not fit. A ending at 100 leaves 750 (B, E): D starts then.
TEST(Fractional, QuotaChargesWholeGpusAndSharesTogether) {
  Cluster c = MakeCluster(1, 4);
  Workload w =
      MakeWorkload({{0, 1000, 100}, {0, 500, 300}, {0, 250, 50}, {0, 1000, 100}, {0, 250, 300}});
  for (const char* p : {"fifo", "fifo-easy"}) {
    auto r = SimRun(c, w, p, {Team{"a", 2, 1.0}});
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    std::vector<Time> starts;
    for (const auto& out : r->outcomes) starts.push_back(out.start);
    EXPECT_EQ(starts, (std::vector<Time>{0, 0, 0, 100, 0})) << p;
    EXPECT_EQ(r->outcomes[3].reason, "Quota") << p;
  }
}

// The engine's own view: the team's running milli-GPUs, rounded up in team_running_gpus, and
// Explain's words for a share waiting for quota.
TEST(Fractional, EngineBooksAndExplainsQuotaInMilli) {
  Cluster c = MakeCluster(1, 2);
  Workload w = MakeWorkload({{0, 250, 10}, {0, 500, 10}, {0, 400, 10}});
  auto engine = Engine::Create(c, {Team{"a", 1, 1.0}}, Builtin("fifo"));
  ASSERT_TRUE(engine.ok());
  for (const Job& j : w.jobs) ASSERT_TRUE((*engine)->Submit(j, 0).ok());
  std::vector<StartDecision> starts;
  (*engine)->Schedule(0, &starts);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ((*engine)->team_running_milli(0), 750);
  EXPECT_EQ((*engine)->team_running_gpus(0), 1);
  EXPECT_EQ((*engine)->status(2).reason, Reason::kQuota);
  EXPECT_EQ((*engine)->Explain(2),
            "waiting for quota: team a uses 0.75 of its 1-GPU quota; this job needs 0.4");
  ASSERT_TRUE((*engine)->Finish(1, 10).ok());
  EXPECT_EQ((*engine)->team_running_milli(0), 250);
  (*engine)->Schedule(10, &starts);
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_EQ(starts.back().job, 2);
  EXPECT_EQ((*engine)->team_running_milli(0), 650);
}

// A node going down ends its shares; the GPU comes back whole when the node is up again.
TEST(Fractional, DownEndsTheSharesAndUpReturnsTheWholeGpu) {
  Cluster c = MakeCluster(1, 1);
  Workload w = MakeWorkload({{0, 500, 100}, {0, 500, 100}, {10, 1000, 10}});
  SimOptions o;
  o.check_invariants = true;
  o.events = {{.at = 5, .kind = ClusterEvent::Kind::kDown, .target = "n0", .line = 1, .index = 0},
              {.at = 20, .kind = ClusterEvent::Kind::kUp, .target = "n0", .line = 2, .index = 0}};
  auto r = Simulate(c, {Team{"a", kNoQuota, 1.0}}, w, Builtin("fifo"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Requeued A and B (submitted at 0) go before C again: they share from 20 to 120, C follows.
  EXPECT_EQ(r->outcomes[0].start, 20);
  EXPECT_EQ(r->outcomes[1].start, 20);
  EXPECT_EQ(r->outcomes[2].start, 120);
}

// Fair share charges a share its fraction: team a's four 250-milli shares and team b's one
// whole GPU, over the same 1000 s, are the same usage, so the two teams' fair-share values
// (the slurm-like profile's fairshare factor) come out equal.
TEST(Fractional, FairShareChargesAShareItsFraction) {
  Cluster c = MakeCluster(1, 2);
  Workload w = MakeWorkload({{0, 250, 1000},
                             {0, 250, 1000},
                             {0, 250, 1000},
                             {0, 250, 1000},
                             {0, 1000, 1000},
                             {0, 1000, 10},
                             {0, 1000, 10}});
  for (int i : {4, 6}) w.jobs[i].team = 1;
  w.teams = {"a", "b"};
  std::vector<Team> teams = {Team{"a", kNoQuota, 1.0}, Team{"b", kNoQuota, 1.0}};
  auto engine = Engine::Create(c, teams, Builtin("slurm-like"));
  ASSERT_TRUE(engine.ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*engine)->Submit(w.jobs[i], 0).ok());
  std::vector<StartDecision> starts;
  (*engine)->Schedule(0, &starts);
  ASSERT_EQ(starts.size(), 5u);
  // Pending probes of each team, after the usage of [0, 600) is counted.
  ASSERT_TRUE((*engine)->Submit(w.jobs[5], 600).ok());
  ASSERT_TRUE((*engine)->Submit(w.jobs[6], 600).ok());
  (*engine)->Schedule(600, &starts);
  const auto fairshare = [&](JobIndex j) {
    for (const PriorityTerm& t : (*engine)->PriorityTerms(j, 600)) {
      if (t.factor == "fairshare") return t.value;
    }
    return -1.0;
  };
  EXPECT_GT(fairshare(5), 0.0);
  EXPECT_LT(fairshare(5), 1.0);
  EXPECT_DOUBLE_EQ(fairshare(5), fairshare(6));
}

// The checker, sabotaged: placements the engine must never make are errors.
TEST(Fractional, CheckerCatchesSabotagedSharePlacements) {
  Cluster c = MakeCluster(1, 1);
  std::vector<Team> teams = {Team{"a", kNoQuota, 1.0}};
  Workload w = MakeWorkload({{0, 600, 10}, {0, 500, 10}, {0, 1000, 10}, {0, 300, 10}});
  const auto& j = w.jobs;
  {
    // 600 + 500 on one shared GPU: over 1000 milli.
    InvariantChecker checker(c, teams);
    ASSERT_TRUE(checker.OnStart(j[0], 0, {{0, 1}}, 0).ok());
    Status s = checker.OnStart(j[1], 0, {{0, 1}}, 0);
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("over capacity"), std::string::npos) << s.ToString();
  }
  {
    // A whole-GPU job on the node whose only GPU is shared.
    InvariantChecker checker(c, teams);
    ASSERT_TRUE(checker.OnStart(j[0], 0, {{0, 1}}, 0).ok());
    Status s = checker.OnStart(j[2], 0, {{0, 1}});
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("double-booked"), std::string::npos) << s.ToString();
    // Nor may a whole-GPU job be named on a shared GPU, or a share on none.
    InvariantChecker other(c, teams);
    EXPECT_EQ(other.OnStart(j[2], 0, {{0, 1}}, 0).code(), StatusCode::kInternal);
    EXPECT_EQ(other.OnStart(j[3], 0, {{0, 1}}, -1).code(), StatusCode::kInternal);
  }
  {
    // A second shared GPU on a node with one GPU.
    InvariantChecker checker(c, teams);
    ASSERT_TRUE(checker.OnStart(j[0], 0, {{0, 1}}, 0).ok());
    EXPECT_EQ(checker.OnStart(j[3], 0, {{0, 1}}, 1).code(), StatusCode::kInternal);
  }
  {
    // Slices: with 7, 300 milli takes 3 slices; three such shares are 9 > 7.
    Cluster mig = MakeCluster(1, 1, 7);
    InvariantChecker checker(mig, teams);
    ASSERT_TRUE(checker.OnStart(j[3], 0, {{0, 1}}, 0).ok());
    Job k = j[3];
    k.index = 1;
    ASSERT_TRUE(checker.OnStart(k, 0, {{0, 1}}, 0).ok());
    k.index = 2;
    EXPECT_EQ(checker.OnStart(k, 0, {{0, 1}}, 0).code(), StatusCode::kInternal);
    // Finishing gives the slices back exactly: then it fits.
    checker.OnFinish(j[3], {{0, 1}});
    EXPECT_TRUE(checker.OnStart(k, 0, {{0, 1}}, 0).ok());
  }
}

// The checker holds a team to its quota in milli-GPUs, counted by itself: four 250-milli shares
// fill a 1-GPU quota; a fifth share, or a whole GPU beside three, is over it. And it compares its
// count with the engine's.
TEST(Fractional, CheckerHoldsQuotaInMilli) {
  Cluster c = MakeCluster(1, 2);
  std::vector<Team> teams = {Team{"a", 1, 1.0}};
  Workload w = MakeWorkload(
      {{0, 250, 10}, {0, 250, 10}, {0, 250, 10}, {0, 250, 10}, {0, 250, 10}, {0, 1000, 10}});
  const auto& j = w.jobs;
  {
    InvariantChecker checker(c, teams);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(checker.OnStart(j[i], 0, {{0, 1}}, 0).ok()) << i;
    Status s = checker.OnStart(j[4], 0, {{0, 1}}, 1);
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("team a over quota: 1.25 > 1 GPUs"), std::string::npos)
        << s.ToString();
  }
  {
    InvariantChecker checker(c, teams);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(checker.OnStart(j[i], 0, {{0, 1}}, 0).ok()) << i;
    Status s = checker.OnStart(j[5], 0, {{0, 1}});
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("over quota: 1.75 > 1 GPUs"), std::string::npos) << s.ToString();
  }
  {
    // The engine runs nothing; the checker was told of a share: they disagree.
    auto engine = Engine::Create(c, teams, Builtin("fifo"));
    ASSERT_TRUE(engine.ok());
    InvariantChecker checker(c, teams);
    EXPECT_TRUE(checker.CheckTeamUsage(**engine).ok());
    ASSERT_TRUE(checker.OnStart(j[0], 0, {{0, 1}}, 0).ok());
    Status s = checker.CheckTeamUsage(**engine);
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("engine says team a runs 0 GPUs, not 0.25"), std::string::npos)
        << s.ToString();
  }
}

// Random openb-like workloads: shares of every size, whole GPUs and 8-GPU gangs, on nodes of
// 2 and 8 GPUs (one type sliced on odd seeds), under every kind of backfill, with the checker on
// after every event (and the same workload rounded to whole GPUs, and under a team quota). Every
// job completes, and shares did run side by side.
TEST(Fractional, RandomOpenbLikeWorkloadsKeepEveryInvariant) {
  for (int seed = 1; seed <= 6; ++seed) {
    ClusterBuilder b("mixed", {});
    GpuType t4{"T4", 16, 20, 70};
    GpuType a100{"A100", 80, 50, 400};
    a100.mig_slices = seed % 2 ? 7 : 0;
    const GpuTypeIndex t = *b.AddGpuType(t4);
    const GpuTypeIndex a = *b.AddGpuType(a100);
    for (int n = 0; n < 4; ++n) {
      ASSERT_TRUE(b.AddNode({.name = "t" + std::to_string(n), .gpu_type = t, .gpus = 2}).ok());
      ASSERT_TRUE(b.AddNode({.name = "a" + std::to_string(n), .gpu_type = a, .gpus = 8}).ok());
    }
    Cluster c = *std::move(b).Build();
    Rng rng(static_cast<uint64_t>(seed));
    std::vector<Spec> specs;
    Time now = 0;
    for (int i = 0; i < 300; ++i) {
      now += static_cast<Time>(rng.Below(30));
      const double u = rng.Uniform();
      const int milli = u < 0.6   ? 1 + static_cast<int>(rng.Below(999))
                        : u < 0.9 ? 1000 * (1 + static_cast<int>(rng.Below(2)))
                                  : 8000;
      const Duration run = 10 + static_cast<Duration>(rng.Below(600));
      specs.push_back({now, milli, run, run + static_cast<Duration>(rng.Below(100))});
    }
    const auto make = [&] {
      Workload w = MakeWorkload(specs);
      for (size_t i = 0; i < w.jobs.size(); ++i) {
        w.jobs[i].id = "j" + std::to_string(i);
        if (w.jobs[i].gpus == 8) {
          w.jobs[i].nodes = 1;
          w.jobs[i].gpus_per_node = 8;
        }
        // Every third small job only on the T4s, as openb's gpu_spec narrows some pods.
        w.jobs[i].gpu_type_mask = i % 3 == 0 && w.jobs[i].gpus <= 2 ? 1u << t : kAnyGpuType;
      }
      return w;
    };
    const Workload shared = make();
    // The most GPUs, each job's counted whole, running at any start.
    const auto most_whole_gpus = [&](const SimResult& r) {
      int most = 0;
      for (size_t i = 0; i < shared.jobs.size(); ++i) {
        int whole_gpus = 0;
        const Time at = r.outcomes[i].start;
        for (size_t k = 0; k < shared.jobs.size(); ++k) {
          if (r.outcomes[k].start <= at && at < r.outcomes[k].end) {
            whole_gpus += shared.jobs[k].gpus;
          }
        }
        most = std::max(most, whole_gpus);
      }
      return most;
    };
    Workload rounded = make();
    for (Job& j : rounded.jobs) j.gpu_milli = 0;
    for (const char* p : kProfiles) {
      auto r = SimRun(c, shared, p);
      ASSERT_TRUE(r.ok()) << "seed " << seed << " " << p << ": " << r.status().ToString();
      int64_t completed = 0;
      for (const auto& o : r->outcomes) completed += o.end >= 0;
      EXPECT_EQ(completed, static_cast<int64_t>(shared.jobs.size())) << seed << " " << p;
      // Shares ran side by side: at some start, the running jobs' GPUs counted whole exceed the
      // cluster's 40 (impossible with rounding, where the checker holds them to 40).
      EXPECT_GT(most_whole_gpus(*r), c.total_gpus()) << seed << " " << p;
      auto whole = SimRun(c, rounded, p);
      ASSERT_TRUE(whole.ok()) << whole.status().ToString();
      // Under a 6-GPU quota, with the checker holding the team to 6000 milli-GPUs at every
      // start (the 8-GPU gangs never start): counted whole, more than 6 GPUs ran at once.
      auto capped = SimRun(c, shared, p, {Team{"a", 6, 1.0}});
      ASSERT_TRUE(capped.ok()) << "seed " << seed << " " << p << ": " << capped.status().ToString();
      EXPECT_GT(most_whole_gpus(*capped), 6) << seed << " " << p;
    }
  }
}

}  // namespace
}  // namespace gantry
