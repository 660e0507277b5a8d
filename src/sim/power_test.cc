// Power caps, the power model and energy accounting, on tiny clusters whose watts are worked
// out by hand in the comments, plus the cap held under random workloads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "gantry/common/rng.h"
#include "gantry/report/result.h"
#include "gantry/sched/engine.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/registry.h"
#include "gantry/sim/simulator.h"
#include "invariant_checker.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

Cluster Parse(const std::string& yaml) {
  auto c = ParseClusterSpec(yaml, "test.yaml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// Two nodes of 4 H100 (70 W idle, 700 W busy: +630 W each busy GPU), 100 W per node besides.
// Idle draw: 2 x 100 + 8 x 70 = 760 W. A cap of 3910 W = 760 + 5 x 630: five busy GPUs, exactly.
constexpr char kTwoNodes[] = R"(name: two
gpu_types: [{name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}]
nodes: [{count: 2, gpu_type: H100, gpus: 4}]
)";
constexpr char kCap5Gpus[] = "power: {cap_watts: 3910, node_watts: 100}\n";

struct JobSpec {
  Time submit;
  int gpus;
  Duration run;
  Duration limit;
};

Workload MakeWorkload(const std::vector<JobSpec>& specs) {
  Workload w;
  w.teams = {"a"};
  w.users = {"u"};
  w.queues = {"q"};
  for (size_t i = 0; i < specs.size(); ++i) {
    Job j;
    j.index = static_cast<JobIndex>(i);
    j.id = std::string(1, static_cast<char>('A' + i));
    j.submit = specs[i].submit;
    j.gpus = specs[i].gpus;
    j.nodes = 1;
    j.gpus_per_node = specs[i].gpus;
    j.run_time = specs[i].run;
    j.time_limit = specs[i].limit;
    w.jobs.push_back(j);
  }
  return w;
}

Profile Builtin(const std::string& name) {
  auto p = FindProfile(name, {});
  EXPECT_TRUE(p.ok());
  return *p;
}

SimResult Simulated(const Cluster& c, const Workload& w, const std::string& profile = "fifo") {
  SimOptions o;
  o.check_invariants = true;
  auto r = Simulate(c, {Team{"a", kNoQuota, 1.0}}, w, Builtin(profile), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::vector<Time> Starts(const SimResult& r) {
  std::vector<Time> out;
  for (const JobOutcome& o : r.outcomes) out.push_back(o.start);
  return out;
}

// A t=0 4 GPUs 100 s: n0, 4 busy (3280 W).
// B t=0 2 GPUs  50 s: fits n1, but 6 busy would draw 760 + 6 x 630 = 4540 W > 3910: waits.
// C t=0 1 GPU   10 s: 5 busy = 3910 W, exactly the cap: with EASY backfill it starts at 0 (B
//                     holds no reservation: power is reserved only with `reserve: true`).
// At 10 C ends; B still needs 6 busy. At 100 A ends: B starts, ends at 150.
// Energy (busy watts x GPUs x seconds): A 700 x 4 x 100 = 280000 J, B 700 x 2 x 50 = 70000 J,
// C 700 x 10 = 7000 J; jobs 357000 J. The cluster draws 3910 W over [0, 10), 3280 W over
// [10, 100), 760 + 2 x 630 = 2020 W over [100, 150): 39100 + 295200 + 101000 = 435300 J. The
// rest, 78300 J, is idle GPUs (690 idle GPU-seconds x 70 W = 48300 J) and 200 W x 150 s of nodes.
TEST(PowerScenario, ClusterCapHoldsJobsBackAndEnergyAddsUp) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  const Workload w = MakeWorkload({{0, 4, 100, 100}, {0, 2, 50, 50}, {0, 1, 10, 10}});
  const SimResult r = Simulated(c, w, "fifo-easy");
  EXPECT_EQ(Starts(r), (std::vector<Time>{0, 100, 0}));
  EXPECT_DOUBLE_EQ(r.outcomes[0].energy_kwh, 280000 / 3.6e6);
  EXPECT_DOUBLE_EQ(r.outcomes[1].energy_kwh, 70000 / 3.6e6);
  EXPECT_DOUBLE_EQ(r.outcomes[2].energy_kwh, 7000 / 3.6e6);
  EXPECT_DOUBLE_EQ(r.energy_joules, 435300);
  EXPECT_DOUBLE_EQ(r.peak_watts, 3910);
  const SimSummary& s = r.summary;
  EXPECT_DOUBLE_EQ(s.energy_kwh, 435300 / 3.6e6);
  EXPECT_NEAR(s.job_energy_kwh, 357000 / 3.6e6, 1e-12);
  EXPECT_NEAR(s.idle_energy_kwh, 78300 / 3.6e6, 1e-12);
  ASSERT_EQ(s.teams.size(), 1u);
  EXPECT_NEAR(s.teams[0].energy_kwh, 357000 / 3.6e6, 1e-12);
  EXPECT_EQ(s.cap_watts, 3910);
  // B waited 100 s with 3 or 4 GPUs idle, but with power for 0, then 1 more GPU: not a
  // fragmentation wait.
  EXPECT_EQ(r.frag_wait_job_seconds, 0);
  EXPECT_EQ(r.total_wait_job_seconds, 100);

  const nlohmann::ordered_json j = SummaryToJson(r);
  EXPECT_EQ(j["power"]["peak_watts"], 3910);
  EXPECT_EQ(j["power"]["cap_watts"], 3910);
  EXPECT_EQ(j["power"]["energy_kwh"], 0.120917);  // 435300 / 3.6e6, to 6 significant digits
  EXPECT_EQ(j["power"]["capped_clock"], false);
  EXPECT_EQ(j["teams"][0]["energy_kwh"], 0.0991667);

  // Without the cap B starts at once, and the peak is 6 busy GPUs... then 7 with C.
  const Cluster uncapped = Parse(std::string(kTwoNodes) + "power: {node_watts: 100}\n");
  const SimResult u = Simulated(uncapped, w, "fifo-easy");
  EXPECT_EQ(Starts(u), (std::vector<Time>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(u.peak_watts, 760 + 7 * 630);
}

// `power` with `reserve: true` reserves power as EASY reserves GPUs. Under a cap of 5 busy
// GPUs, 1-GPU jobs D0..D29 arrive every 10 s and run 40 s (4 run at once). B (3 GPUs, 100 s)
// arrives at 35, with D0..D3 running (4 busy, ending 40, 50, 60, 70): it needs 2 of them gone.
// B gets power reserved from 50 with nothing spare, so D4 (t=40, ending at 80) may not take the
// watts D0 leaves: B starts at 50, and D4 at 60 when D2 ends. Without the reservation (the
// default) each D takes the watts as they free and B waits for the stream to dry up: 310.
TEST(PowerScenario, ReservedPowerKeepsAJobFromWaitingForEver) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  std::vector<JobSpec> specs;
  for (int i = 0; i < 30; ++i) specs.push_back({i * 10, 1, 40, 40});
  specs.push_back({35, 3, 100, 100});
  const Workload w = MakeWorkload(specs);
  for (const char* name : {"fifo-easy", "slurm-conservative"}) {
    Profile profile = Builtin(name);
    SimOptions o;
    o.check_invariants = true;
    auto plain = Simulate(c, {Team{"a", kNoQuota, 1.0}}, w, profile, o);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_EQ(plain->outcomes[30].start, 310) << name;
    EXPECT_EQ(plain->outcomes[4].start, 40) << name;

    profile.admission.push_back({"power", 1.0, PluginArgs("power", {{"reserve", "true"}})});
    auto reserved = Simulate(c, {Team{"a", kNoQuota, 1.0}}, w, profile, o);
    ASSERT_TRUE(reserved.ok()) << reserved.status().ToString();
    const SimResult& r = *reserved;
    EXPECT_EQ(r.outcomes[30].start, 50) << name;
    EXPECT_EQ(r.outcomes[30].reason, "Power") << name;
    EXPECT_EQ(r.outcomes[30].first_estimate, 50) << name;  // the reservation's time
    EXPECT_EQ(r.outcomes[4].start, 60) << name;
    EXPECT_DOUBLE_EQ(r.peak_watts, 3910) << name;
  }
}

// Strict FIFO: power is shared like GPUs, so nobody passes B while it waits for power: C starts
// with B when A ends at 100 (2 + 1 busy GPUs).
TEST(PowerScenario, StrictFifoLetsNobodyPassAJobWaitingForPower) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  const Workload w = MakeWorkload({{0, 4, 100, 100}, {0, 2, 50, 50}, {0, 1, 10, 10}});
  EXPECT_EQ(Starts(Simulated(c, w, "fifo")), (std::vector<Time>{0, 100, 100}));
}

// A runs 4 GPUs for 100 s from t=0; `n` shares of 250 milli run 50 s from t=0; then `more`.
Workload ShareLoad(int n, const std::vector<JobSpec>& more = {}) {
  std::vector<JobSpec> specs(1 + n, JobSpec{0, 1, 50, 50});
  specs[0] = {0, 4, 100, 100};
  specs.insert(specs.end(), more.begin(), more.end());
  Workload w = MakeWorkload(specs);
  for (int i = 1; i <= n; ++i) w.jobs[i].gpu_milli = 250;
  return w;
}

// A shared GPU draws once, however many shares it holds. With A on 4 GPUs of n0 the cap leaves
// power for one more busy GPU. Four shares all start at 0 on one shared GPU of n1: 5 busy GPUs,
// 3910 W, exactly the cap. Each share is charged its quarter of that GPU's 700 W: 175 W x 50 s =
// 8750 J. Counting each share as a busy GPU (as admission once did) held three of them back.
TEST(PowerScenario, SharesOfOneGpuDrawItsWattsOnce) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  for (const char* profile : {"fifo", "fifo-easy", "slurm-conservative"}) {
    const SimResult r = Simulated(c, ShareLoad(4), profile);
    EXPECT_EQ(Starts(r), (std::vector<Time>{0, 0, 0, 0, 0})) << profile;
    EXPECT_DOUBLE_EQ(r.peak_watts, 3910) << profile;
    for (size_t i = 1; i < r.outcomes.size(); ++i) {
      EXPECT_DOUBLE_EQ(r.outcomes[i].energy_kwh, 8750 / 3.6e6) << profile << " job " << i;
    }
  }
  // A fifth share does not fit on that GPU (5 x 250 > 1000): it would open a sixth busy GPU,
  // over the cap, so it waits until the four end at 50 (their GPU goes idle; it opens another).
  SimResult r = Simulated(c, ShareLoad(5), "fifo-easy");
  EXPECT_EQ(Starts(r), (std::vector<Time>{0, 0, 0, 0, 0, 50}));
  EXPECT_DOUBLE_EQ(r.peak_watts, 3910);

  // With power for six busy GPUs (4540 W), B (1 GPU at t=1) starts beside A and the four shares
  // on their one GPU: 6 busy. Charging each share as a GPU would have seen 9 and held B back.
  const Cluster six = Parse(std::string(kTwoNodes) + "power: {cap_watts: 4540, node_watts: 100}\n");
  r = Simulated(six, ShareLoad(4, {{1, 1, 10, 10}}), "fifo");
  EXPECT_EQ(Starts(r), (std::vector<Time>{0, 0, 0, 0, 0, 1}));
  EXPECT_DOUBLE_EQ(r.peak_watts, 4540);
}

// The power plugin on its own, fed as the engine feeds it, for a share that preempts under
// GraceTime: while it waits for its victims it holds a whole GPU booked (charged as busy); once
// the engine starts it on a shared GPU of its own, that GPU is charged instead, once. Cap: 5
// busy GPUs. A runs 4 GPUs on n0; the share P books a GPU of n1: 5 busy.
TEST(PowerScenario, AWaitingSharePreemptorIsChargedOneGpuUntilItShares) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  const std::vector<Team> teams = {Team{"a", kNoQuota, 1.0}};
  SharedGpus shares(c);
  std::map<JobIndex, int32_t> gpu_of;
  PluginContext ctx{&c, &teams};
  ctx.registry = &PluginRegistry::Builtin();
  ctx.shared_gpus = &shares;
  ctx.shared_gpu_of = [&](JobIndex j) { return gpu_of.count(j) ? gpu_of.at(j) : -1; };
  auto created = PluginRegistry::Builtin().CreateAdmission("power", PluginArgs(), ctx);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  AdmissionPlugin& power = **created;
  const auto job = [](JobIndex index, int gpus, int milli) {
    JobRequest j;
    j.index = index;
    j.gpus = gpus;
    j.gpu_milli = milli;
    return j;
  };
  const JobRequest a = job(0, 4, 0), p = job(1, 1, 500), b = job(2, 1, 0), q = job(3, 1, 250);
  const Placement one_on_n1 = {{1, 1}};
  power.OnJobStarted(a, {{0, 4}}, 0);
  power.OnJobStarted(p, one_on_n1, 0);  // signalled its victims: not on a shared GPU yet
  EXPECT_FALSE(power.AdmitPlacement(b, one_on_n1, 100, nullptr));  // 6 busy
  // The victims ended; the engine starts P on a new shared GPU, telling no plugin (admission
  // booked it at the signal). Still 5 busy: Q joins P's GPU, B still may not start.
  const int32_t g = shares.Open(1);
  shares.Add(g, p.index, shares.Units(0, 500));
  gpu_of[p.index] = g;
  EXPECT_TRUE(power.AdmitPlacement(q, {}, 100, nullptr));
  shares.Add(g, q.index, shares.Units(0, 250));
  gpu_of[q.index] = g;
  power.OnJobStarted(q, one_on_n1, 1);
  EXPECT_FALSE(power.AdmitPlacement(b, one_on_n1, 100, nullptr));
  // Still exactly 5 (not P's booked GPU and its shared GPU, not one GPU per share): another
  // share may join.
  EXPECT_TRUE(power.AdmitPlacement(job(5, 1, 250), {}, 100, nullptr));
  // P ends; Q keeps the GPU busy. Then Q ends: the GPU is idle, B fits.
  EXPECT_FALSE(shares.Remove(g, p.index, shares.Units(0, 500)));
  gpu_of.erase(p.index);
  power.OnJobEnded(p, 2);
  EXPECT_FALSE(power.AdmitPlacement(b, one_on_n1, 100, nullptr));
  EXPECT_TRUE(shares.Remove(g, q.index, shares.Units(0, 250)));
  gpu_of.erase(q.index);
  power.OnJobEnded(q, 3);
  EXPECT_TRUE(power.AdmitPlacement(b, one_on_n1, 100, nullptr));
  // A share preemptor whose placement is gone before it starts gives its booked GPU back.
  const JobRequest r = job(4, 1, 500);
  power.OnJobStarted(r, one_on_n1, 4);
  EXPECT_FALSE(power.AdmitPlacement(b, one_on_n1, 100, nullptr));
  power.OnJobEnded(r, 5);
  EXPECT_TRUE(power.AdmitPlacement(b, one_on_n1, 100, nullptr));
}

// Every built-in profile gets the power plugin when the cluster has a cap, named or not. The
// order differs (the oracles start C and B, the shortest, first, then A must wait; strict FIFO
// holds C behind B), but in each some job waits: 4 + 2 + 1 GPUs busy would draw 5170 W.
TEST(PowerScenario, EveryBuiltinProfileHoldsTheCap) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  const Workload w = MakeWorkload({{0, 4, 100, 100}, {0, 2, 50, 50}, {0, 1, 10, 10}});
  for (const Profile& p : BuiltinProfiles()) {
    if (p.name == "kueue") continue;  // needs ClusterQueue settings on the teams
    SimOptions o;
    o.check_invariants = true;
    auto r = Simulate(c, {Team{"a", kNoQuota, 1.0}}, w, p, o);
    ASSERT_TRUE(r.ok()) << p.name << ": " << r.status().ToString();
    EXPECT_LE(r->peak_watts, 3910) << p.name;
    int waited = 0;
    for (const JobOutcome& out : r->outcomes) waited += out.start > 0;
    EXPECT_GE(waited, 1) << p.name;
  }
}

TEST(PowerScenario, EngineGivesReasonPowerAndExplainsIt) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  const Workload w = MakeWorkload({{0, 4, 100, 100}, {0, 2, 50, 50}});
  auto engine = Engine::Create(c, {Team{"a", kNoQuota, 1.0}}, Builtin("fifo-easy"));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  for (const Job& j : w.jobs) ASSERT_TRUE((*engine)->Submit(j, 0).ok());
  std::vector<StartDecision> starts;
  (*engine)->Schedule(0, &starts);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].job, 0);
  const JobStatus& b = (*engine)->status(1);
  EXPECT_EQ(b.phase, JobStatus::Phase::kPending);
  EXPECT_EQ(b.reason, Reason::kPower);
  EXPECT_STREQ(ReasonName(b.reason), "Power");
  const std::string why = (*engine)->Explain(1);
  EXPECT_THAT(why, HasSubstr("waiting for power"));
  EXPECT_THAT(why, HasSubstr("the cluster would draw 4.54 kW, over its 3.91 kW cap"));
  EXPECT_THAT(why, HasSubstr("it adds at least 1.26 kW"));
  // A ends: B starts.
  ASSERT_TRUE((*engine)->Finish(0, 100).ok());
  starts.clear();
  (*engine)->Schedule(100, &starts);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].job, 1);
}

// Two racks of one 4-GPU node; 100 W per node. A rack draws 100 + 4 x 70 = 380 W idle; its cap
// 1640 W = 380 + 2 x 630: two busy GPUs per rack.
// A t=0 2 GPUs 100 s: first-fit, n0 (rack-0 at its cap).
// B t=0 2 GPUs 100 s: first-fit tries n0 again (2 free), but rack-0 would draw 2900 W; tried
//                     again off rack-0: n1, rack-1 at 1640 W: starts at 0.
// C t=0 2 GPUs  50 s: both racks at their caps: waits until A ends at 100, then n0.
TEST(PowerScenario, DomainCapSendsTheJobToAnotherRack) {
  const Cluster c = Parse(R"(name: racks
levels: [rack]
gpu_types: [{name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}]
topology:
  - {name: rack, level: rack, repeat: 2, nodes: [{gpu_type: H100, gpus: 4}]}
power:
  node_watts: 100
  domains: [{level: rack, cap_watts: 1640}]
)");
  const Workload w = MakeWorkload({{0, 2, 100, 100}, {0, 2, 100, 100}, {0, 2, 50, 50}});
  const SimResult r = Simulated(c, w, "fifo-easy");
  EXPECT_EQ(Starts(r), (std::vector<Time>{0, 0, 100}));
  ASSERT_EQ(r.domain_power.size(), 2u);
  EXPECT_EQ(r.domain_power[0].domain, "rack-0");
  EXPECT_DOUBLE_EQ(r.domain_power[0].cap_watts, 1640);
  EXPECT_DOUBLE_EQ(r.domain_power[0].peak_watts, 1640);
  EXPECT_DOUBLE_EQ(r.domain_power[1].peak_watts, 1640);
  EXPECT_DOUBLE_EQ(r.peak_watts, 760 + 4 * 630);
}

// Capped clock: busy watts x 0.5 (350 W), run times x 1.5, limits too.
// A: 2 GPUs, runs 100 s, limit 120 s -> runs 150 s under a 180 s limit, not killed.
// Energy: 2 x 350 W x 150 s = 105000 J.
TEST(PowerScenario, CappedClockStretchesRunsAndLowersWatts) {
  const Cluster c =
      Parse(std::string(kTwoNodes) + "power: {capped_clock: {watts_factor: 0.5, slowdown: 1.5}}\n");
  const Workload w = MakeWorkload({{0, 2, 100, 120}});
  const SimResult r = Simulated(c, w);
  EXPECT_EQ(r.outcomes[0].start, 0);
  EXPECT_EQ(r.outcomes[0].end, 150);
  EXPECT_FALSE(r.outcomes[0].killed_at_limit);
  EXPECT_DOUBLE_EQ(r.outcomes[0].energy_kwh, 105000 / 3.6e6);
  EXPECT_DOUBLE_EQ(r.peak_watts, 6 * 70 + 2 * 350);
  EXPECT_EQ(r.summary.capped_slowdown, 1.5);
  const nlohmann::ordered_json j = SummaryToJson(r);
  EXPECT_EQ(j["power"]["capped_clock"], true);
  EXPECT_EQ(j["power"]["capped_slowdown"], 1.5);
  EXPECT_EQ(j["power"]["cap_watts"], nullptr);
}

// The checker is independent of the engine: a start over a cap is an error it reports.
TEST(PowerScenario, InvariantCheckerCatchesAStartOverTheCap) {
  const Cluster c = Parse(std::string(kTwoNodes) + kCap5Gpus);
  const std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  InvariantChecker checker(c, teams);
  Job a;
  a.id = "A";
  a.index = 0;
  a.gpus = 4;
  EXPECT_TRUE(checker.OnStart(a, 0, {{0, 4}}).ok());
  Job b = a;
  b.id = "B";
  b.index = 1;
  b.gpus = 1;
  EXPECT_TRUE(checker.OnStart(b, 0, {{1, 1}}).ok());  // 5 busy: 3910 W, the cap itself
  Job d = b;
  d.id = "D";
  d.index = 2;
  const Status st = checker.OnStart(d, 0, {{1, 1}});  // 6 busy: 4540 W
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_THAT(st.message(), HasSubstr("the cluster draws 4540000 mW, over its cap of 3910000 mW"));
  // Once A ends, the draw is back under the cap and D may start.
  checker.OnFinish(a, {{0, 4}});
  Job e = d;
  e.id = "E";
  e.index = 3;
  EXPECT_TRUE(checker.OnStart(e, 0, {{0, 1}}).ok());
}

// Random clusters (racks in rows, caps on the cluster, rows and racks) and random workloads
// under every built-in profile but kueue: the invariant checker holds every cap at every start,
// every job ends, and the caps do bind (some run draws within one GPU's watts of a cap).
TEST(PowerProperty, CapsHoldUnderRandomWorkloads) {
  int bound = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Rng rng(seed);
    const int rows = 1 + static_cast<int>(rng.Below(2));
    const int racks = 2 + static_cast<int>(rng.Below(2));
    const int nodes = 1 + static_cast<int>(rng.Below(3));
    // Per rack idle: nodes x (50 + 8 x 70); busy adds 630 W per GPU. Rack caps leave room for
    // 8 to 8 x nodes busy GPUs, so every job (at most 8 GPUs) can start somewhere.
    const double rack_idle = nodes * (50 + 8 * 70);
    const int rack_busy = 8 + static_cast<int>(rng.Below(8 * nodes - 7));
    const double total_idle = rows * racks * rack_idle;
    const int cluster_busy = 8 + static_cast<int>(rng.Below(8 * rows * racks * nodes - 7));
    std::string spec =
        "name: r\nlevels: [rack, row]\n"
        "gpu_types: [{name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700},"
        " {name: A100, memory_gb: 80, idle_watts: 50, busy_watts: 400}]\n"
        "topology:\n"
        "  - name: row\n    level: row\n    repeat: " +
        std::to_string(rows) +
        "\n    children:\n"
        "      - {name: rack, level: rack, repeat: " +
        std::to_string(racks) + ", nodes: [{count: " + std::to_string(nodes) +
        ", gpu_type: H100, gpus: 8}]}\n"
        "power:\n  node_watts: 50\n  cap_watts: " +
        std::to_string(total_idle + cluster_busy * 630) +
        "\n  domains:\n    - {level: rack, cap_watts: " +
        std::to_string(rack_idle + rack_busy * 630) + "}\n";
    if (rng.Below(2)) spec += "  capped_clock: {watts_factor: 0.8, slowdown: 1.1}\n";
    const Cluster c = Parse(spec);
    Workload w;
    w.teams = {"a", "b"};
    w.users = {"u"};
    w.queues = {"q"};
    for (int i = 0; i < 150; ++i) {
      Job j;
      j.index = i;
      j.id = "j" + std::to_string(i);
      j.team = static_cast<int32_t>(rng.Below(2));
      j.submit = static_cast<Time>(i * 20 + rng.Below(20));
      j.gpus = 1 + static_cast<int32_t>(rng.Below(8));
      if (rng.Below(2)) {
        j.nodes = 1;
        j.gpus_per_node = j.gpus;
      }
      if (rng.Below(4) == 0) {  // a share: several on one GPU, which draws once
        j.gpus = j.nodes = j.gpus_per_node = 1;
        j.gpu_milli = 100 + static_cast<int32_t>(rng.Below(800));
      }
      j.run_time = 50 + static_cast<Duration>(rng.Below(2000));
      j.time_limit = j.run_time + static_cast<Duration>(rng.Below(500));
      w.jobs.push_back(j);
    }
    const std::vector<Team> teams = {{"a", kNoQuota, 1.0}, {"b", kNoQuota, 1.0}};
    for (const Profile& p : BuiltinProfiles()) {
      if (p.name == "kueue") continue;
      SimOptions o;
      o.check_invariants = true;
      auto r = Simulate(c, teams, w, p, o);
      ASSERT_TRUE(r.ok()) << "seed " << seed << " " << p.name << ": " << r.status().ToString();
      EXPECT_EQ(r->summary.jobs_completed, 150) << "seed " << seed << " " << p.name;
      EXPECT_LE(r->peak_watts, c.power().cap_watts);
      for (const DomainPower& d : r->domain_power) EXPECT_LE(d.peak_watts, d.cap_watts);
      bool binds = r->peak_watts > c.power().cap_watts - 630;
      for (const DomainPower& d : r->domain_power)
        binds = binds || d.peak_watts > d.cap_watts - 630;
      bound += binds;
    }
  }
  EXPECT_GT(bound, 20);
}

}  // namespace
}  // namespace gantry
