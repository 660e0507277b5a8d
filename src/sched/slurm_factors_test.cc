// The Slurm factors inside the engine, with exact outcomes: Fair Tree orders users within an
// account and re-sorts pending jobs as usage moves; a Slurm-shaped profile's sprio integers;
// QOS UsageFactor; PriorityUsageResetPeriod; the account tree from the cluster spec.
#include <gtest/gtest.h>

#include <sstream>

#include "gantry/sched/engine.h"
#include "gantry/sched/sprio.h"

namespace gantry {
namespace {

Cluster MakeCluster(int nodes, int gpus, int cpus, const std::vector<Team>& teams = {},
                    const std::vector<Account>& accounts = {}, const std::vector<Qos>& qos = {}) {
  ClusterBuilder b("test", {});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  for (int n = 0; n < nodes; ++n) {
    EXPECT_TRUE(
        b.AddNode({.name = "n" + std::to_string(n), .gpu_type = 0, .gpus = gpus, .cpus = cpus})
            .ok());
  }
  for (const Team& t : teams) EXPECT_TRUE(b.AddTeam(t).ok());
  for (const Account& a : accounts) EXPECT_TRUE(b.AddAccount(a).ok());
  for (const Qos& q : qos) EXPECT_TRUE(b.AddQos(q).ok());
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

Profile FromYaml(const std::string& yaml) {
  auto p = ParseProfiles(yaml, "test.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->front() : Profile{};
}

JobRequest MakeJob(JobIndex index, int user, Time submit, int gpus, Duration limit, int team = 0) {
  JobRequest j;
  j.index = index;
  j.id = "j" + std::to_string(index);
  j.user = user;
  j.team = team;
  j.submit = submit;
  j.gpus = gpus;
  j.time_limit = limit;
  return j;
}

double Term(const Engine& e, JobIndex j, Time now, const std::string& factor) {
  for (const PriorityTerm& t : e.PriorityTerms(j, now)) {
    if (t.factor == factor) return t.value;
  }
  ADD_FAILURE() << "no factor " << factor;
  return -1;
}

const std::vector<std::string> kUsers = {"alice", "bob"};

// alice ran for an hour; then her job Z (older) and bob's Y wait for the one GPU. At the next
// recalculation bob (no usage: LF inf, rank 2 of 2, factor 1) outranks alice (rank 1, 0.5), so
// Y starts first although Z was submitted first: the pending queue was re-sorted by user.
TEST(FairTreeFactorTest, OrdersUsersWithinAnAccountAndResortsPendingJobs) {
  const Cluster c = MakeCluster(1, 1, 0);
  const std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  const Profile p = FromYaml(R"(profiles:
  ft:
    priority:
      - {plugin: fairtree, weight: 10000, args: {half_life: 1d}}
      - {plugin: age, weight: 1, args: {max_age: 14d}}
    priority_recalc_interval: 60
)");
  EngineOptions o;
  o.users = &kUsers;
  auto e = Engine::Create(c, teams, p, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Engine& engine = **e;
  const JobRequest x = MakeJob(0, 0, 0, 1, 3600);
  const JobRequest z = MakeJob(1, 0, 10, 1, 3600);
  const JobRequest y = MakeJob(2, 1, 11, 1, 3600);
  std::vector<StartDecision> starts;
  ASSERT_TRUE(engine.Submit(x, 0).ok());
  engine.Schedule(0, &starts);
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_TRUE(engine.Submit(z, 10).ok());
  ASSERT_TRUE(engine.Submit(y, 11).ok());
  starts.clear();
  engine.Schedule(11, &starts);
  EXPECT_TRUE(starts.empty());
  // Before the recalculation nobody has usage yet: both users tie at the top.
  EXPECT_DOUBLE_EQ(Term(engine, z.index, 11, "fairtree"), 1.0);
  EXPECT_DOUBLE_EQ(Term(engine, y.index, 11, "fairtree"), 1.0);
  ASSERT_TRUE(engine.Finish(x.index, 3600).ok());
  starts.clear();
  engine.Schedule(3600, &starts);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].job, y.index);
  EXPECT_DOUBLE_EQ(Term(engine, z.index, 3600, "fairtree"), 0.5);
  EXPECT_DOUBLE_EQ(Term(engine, y.index, 3600, "fairtree"), 1.0);
}

// A Slurm-shaped profile (priority_multifactor.html's weights: age 1000 over 14 days, fair share
// 10000, job size 1000, partition 1000; QOS 1000 here) on 4 nodes of 8 GPUs and 64 CPUs (8 CPUs
// per GPU). alice's 32-GPU job fills the cluster from t = 0; at t = 7d + 1 two jobs submitted at
// t = 1 wait (age 7d / 14d = 0.5 -> 500):
//   P: bob, 16 GPUs as 2 x 8, partition debug (1 of max 2), QOS 0:
//      fair share 1.0 (no usage) -> 10000; size (2/4 + 128/256)/2 = 0.5 -> 500; partition 0.5
//      -> 500; QOS 0 -> 0; PRIORITY 11500
//   Q: alice, 8 GPUs on 1 node, partition gpu (2 of 2), QOS 3 of 3:
//      fair share rank 1 of 2 -> 0.5 -> 5000; size (1/4 + 64/256)/2 = 0.25 -> 250; partition
//      1000; QOS 1000; PRIORITY 500 + 5000 + 250 + 1000 + 1000 = 7750
TEST(SlurmMultifactorProfileTest, SprioIntegers) {
  const Cluster c = MakeCluster(4, 8, 64);
  const std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  const std::vector<std::string> queues = {"gpu", "debug"};
  const Profile p = FromYaml(R"(profiles:
  mf:
    priority:
      - {plugin: age, weight: 1000, args: {max_age: 14d}}
      - {plugin: fairtree, weight: 10000, args: {half_life: 7d}}
      - {plugin: slurm-job-size, weight: 1000}
      - {plugin: partition, weight: 1000, args: {priorities: "gpu:2, debug:1"}}
      - {plugin: qos, weight: 1000, args: {max_qos: 3}}
    priority_recalc_interval: 5m
)");
  EngineOptions o;
  o.users = &kUsers;
  o.queues = &queues;
  auto e = Engine::Create(c, teams, p, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Engine& engine = **e;
  const JobRequest big = MakeJob(0, 0, 0, 32, 30 * 86400);
  JobRequest pj = MakeJob(1, 1, 1, 16, 3600);
  pj.nodes = 2;
  pj.gpus_per_node = 8;
  pj.queue = 1;
  JobRequest qj = MakeJob(2, 0, 1, 8, 3600);
  qj.nodes = 1;
  qj.gpus_per_node = 8;
  qj.qos = 3;
  std::vector<StartDecision> starts;
  ASSERT_TRUE(engine.Submit(big, 0).ok());
  engine.Schedule(0, &starts);
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_TRUE(engine.Submit(pj, 1).ok());
  ASSERT_TRUE(engine.Submit(qj, 1).ok());
  const Time now = 7 * 86400 + 1;
  engine.Schedule(now, &starts);
  const SprioRow rp = MakeSprioRow(engine.PriorityTerms(pj.index, now), pj.id, "debug", "bob");
  EXPECT_EQ(rp.age, 500);
  EXPECT_EQ(rp.fairshare, 10000);
  EXPECT_EQ(rp.job_size, 500);
  EXPECT_EQ(rp.partition_factor, 500);
  EXPECT_EQ(rp.qos, 0);
  EXPECT_EQ(rp.priority, 11500u);
  const SprioRow rq = MakeSprioRow(engine.PriorityTerms(qj.index, now), qj.id, "gpu", "alice");
  EXPECT_EQ(rq.age, 500);
  EXPECT_EQ(rq.fairshare, 5000);
  EXPECT_EQ(rq.job_size, 250);
  EXPECT_EQ(rq.partition_factor, 1000);
  EXPECT_EQ(rq.qos, 1000);
  EXPECT_EQ(rq.priority, 7750u);
  std::ostringstream out;
  WriteSprio(out, {rp, rq});
  const std::string text = out.str();
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "          JOBID PARTITION     USER   PRIORITY       SITE        AGE      ASSOC  "
            "FAIRSHARE    JOBSIZE  PARTITION        QOS   NICE                 TRES");
  EXPECT_NE(text.find("             j1 debug          bob      11500          0        500"),
            std::string::npos)
      << text;
}

// QOS UsageFactor: alice's hour under a QOS with UsageFactor 0 is not charged, so she and bob
// still tie at the top; under UsageFactor 2 she is charged (and ranks below bob).
TEST(FairTreeFactorTest, QosUsageFactorScalesTheChargedUsage) {
  for (double factor : {0.0, 2.0}) {
    const Cluster c = MakeCluster(1, 1, 0, {}, {}, {{"free", 1, 0, factor, {}}});
    const std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
    const Profile p = FromYaml(R"(profiles:
  ft:
    priority: [{plugin: fairtree, weight: 1, args: {half_life: 1d}}]
    priority_recalc_interval: 60
)");
    EngineOptions o;
    o.users = &kUsers;
    auto e = Engine::Create(c, teams, p, o);
    ASSERT_TRUE(e.ok());
    JobRequest x = MakeJob(0, 0, 0, 1, 3600);
    x.qos = 1;
    const JobRequest z = MakeJob(1, 0, 10, 1, 3600);
    const JobRequest y = MakeJob(2, 1, 10, 1, 3600);
    std::vector<StartDecision> starts;
    ASSERT_TRUE((*e)->Submit(x, 0).ok());
    (*e)->Schedule(0, &starts);
    ASSERT_TRUE((*e)->Submit(z, 10).ok());
    ASSERT_TRUE((*e)->Submit(y, 10).ok());
    (*e)->Schedule(10, &starts);
    ASSERT_TRUE((*e)->Finish(x.index, 3600).ok());
    // A GPU is free again, but keep both waiting: inspect the factors at the recalculation.
    ASSERT_TRUE((*e)->Drain(0, 3600).ok());
    (*e)->Schedule(3600, &starts);
    EXPECT_DOUBLE_EQ(Term(**e, z.index, 3600, "fairtree"), factor == 0 ? 1.0 : 0.5) << factor;
    EXPECT_DOUBLE_EQ(Term(**e, y.index, 3600, "fairtree"), 1.0) << factor;
  }
}

// PriorityDecayHalfLife=0 with PriorityUsageResetPeriod=DAILY: usage never decays, and is
// cleared at each day boundary.
TEST(FairTreeFactorTest, UsageResetPeriodClearsUsage) {
  const Cluster c = MakeCluster(1, 1, 0);
  const std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  const Profile p = FromYaml(R"(profiles:
  ft:
    priority: [{plugin: fairtree, weight: 1, args: {half_life: 0, reset_period: daily}}]
    priority_recalc_interval: 60
)");
  EngineOptions o;
  o.users = &kUsers;
  auto e = Engine::Create(c, teams, p, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const JobRequest x = MakeJob(0, 0, 0, 1, 3600);
  const JobRequest z = MakeJob(1, 0, 10, 1, 3600);
  const JobRequest y = MakeJob(2, 1, 10, 1, 3600);
  std::vector<StartDecision> starts;
  ASSERT_TRUE((*e)->Submit(x, 0).ok());
  (*e)->Schedule(0, &starts);
  ASSERT_TRUE((*e)->Submit(z, 10).ok());
  ASSERT_TRUE((*e)->Submit(y, 10).ok());
  ASSERT_TRUE((*e)->Finish(x.index, 3600).ok());
  ASSERT_TRUE((*e)->Drain(0, 3600).ok());
  (*e)->Schedule(3600, &starts);
  EXPECT_DOUBLE_EQ(Term(**e, z.index, 3600, "fairtree"), 0.5);
  (*e)->Schedule(86400 + 60, &starts);
  EXPECT_DOUBLE_EQ(Term(**e, z.index, 86400 + 60, "fairtree"), 1.0);
}

// The account tree from the cluster spec: physics (a pure account, 1 share) holds theory; ml (1
// share) sits beside it. ml's carol used an hour, theory's dave nothing: all of physics outranks
// all of ml, and inside ml carol's listed 3 shares do not lift her above physics' users.
TEST(FairTreeFactorTest, AccountTreeFromTheClusterSpec) {
  const std::vector<Team> spec_teams = {
      {"physics", kNoQuota, 1.0}, {"theory", kNoQuota, 1.0}, {"ml", kNoQuota, 1.0}};
  const Cluster c =
      MakeCluster(1, 1, 0, spec_teams, {{"theory", "physics", {}}, {"ml", "", {{"carol", 3}}}});
  // The engine's teams are those jobs charge: theory and ml.
  const std::vector<Team> teams = {spec_teams[1], spec_teams[2]};
  const std::vector<std::string> users = {"carol", "dave", "erin"};
  const Profile p = FromYaml(R"(profiles:
  ft:
    priority: [{plugin: fairtree, weight: 1, args: {half_life: 1d}}]
    priority_recalc_interval: 60
)");
  EngineOptions o;
  o.users = &users;
  auto e = Engine::Create(c, teams, p, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const JobRequest x = MakeJob(0, 0, 0, 1, 3600, /*team=*/1);   // carol in ml
  const JobRequest d = MakeJob(1, 1, 10, 1, 3600, /*team=*/0);  // dave in theory
  const JobRequest m = MakeJob(2, 2, 10, 1, 3600, /*team=*/1);  // erin in ml (1 share)
  std::vector<StartDecision> starts;
  ASSERT_TRUE((*e)->Submit(x, 0).ok());
  (*e)->Schedule(0, &starts);
  ASSERT_TRUE((*e)->Submit(d, 10).ok());
  ASSERT_TRUE((*e)->Submit(m, 10).ok());
  ASSERT_TRUE((*e)->Finish(x.index, 3600).ok());
  ASSERT_TRUE((*e)->Drain(0, 3600).ok());
  (*e)->Schedule(3600, &starts);
  // Users: carol (ml), dave (theory), erin (ml): 3. physics (LF inf) first: dave rank 3 (1.0).
  // ml: erin unused (LF inf) rank 2, carol rank 1.
  EXPECT_DOUBLE_EQ(Term(**e, d.index, 3600, "fairtree"), 1.0);
  EXPECT_DOUBLE_EQ(Term(**e, m.index, 3600, "fairtree"), 2.0 / 3.0);
}

TEST(FairTreeFactorTest, ArgumentErrors) {
  const Cluster c = MakeCluster(1, 1, 0);
  const std::vector<Team> teams = {{"a", kNoQuota, 1.0}};
  for (const char* args : {"{half_life: 0}", "{reset_period: monthly}", "{nope: 1}"}) {
    const Profile p = FromYaml(std::string("profiles:\n  ft:\n    priority: [{plugin: fairtree, "
                                           "weight: 1, args: ") +
                               args + "}]\n");
    EXPECT_EQ(Engine::Create(c, teams, p).status().code(), StatusCode::kInvalidArgument) << args;
  }
  const Profile bad = FromYaml(R"(profiles:
  pf:
    priority: [{plugin: partition, weight: 1, args: {priorities: "gpu"}}]
)");
  EXPECT_EQ(Engine::Create(c, teams, bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gantry
