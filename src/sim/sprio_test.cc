// gantry sim --sprio-at: the simulator captures the pending jobs at the instant, after
// everything at or before it happened, with sprio's integers.
#include <gtest/gtest.h>

#include "gantry/sched/profile.h"
#include "gantry/sim/simulator.h"

namespace gantry {
namespace {

// One node of 4 GPUs; whole-node jobs A (t=0, runs 100), B (t=10), C (t=50, runs 10). FIFO by
// age with weight 1000 over 1000 s: at t=100 A ends and B starts, so only C waits, aged
// 50 s -> 50. At t=99 (A still running) B (aged 89) and C (49) wait.
TEST(SimulatorSprio, CapturesThePendingJobsAtTheInstant) {
  ClusterBuilder b("one", {});
  ASSERT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  ASSERT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 4}).ok());
  auto c = std::move(b).Build();
  ASSERT_TRUE(c.ok());
  Workload w;
  w.teams = {"t"};
  w.users = {"alice"};
  w.queues = {"gpu"};
  for (auto [submit, run] : std::vector<std::pair<Time, Duration>>{{0, 100}, {10, 50}, {50, 10}}) {
    Job j;
    j.index = static_cast<JobIndex>(w.jobs.size());
    j.id = std::string(1, static_cast<char>('A' + j.index));
    j.submit = submit;
    j.run_time = run;
    j.time_limit = run;
    j.gpus = 4;
    w.jobs.push_back(j);
  }
  auto profiles = ParseProfiles(R"(profiles:
  aged:
    priority: [{plugin: age, weight: 1000, args: {max_age: 1000}}]
)",
                                "test.yaml");
  ASSERT_TRUE(profiles.ok());
  const std::vector<Team> teams = {{"t", kNoQuota, 1.0}};
  for (auto [at, expected] :
       std::vector<std::pair<Time, std::vector<std::pair<std::string, int64_t>>>>{
           {99, {{"B", 89}, {"C", 49}}}, {100, {{"C", 50}}}, {5000, {}}}) {
    std::vector<SprioRow> rows;
    SimOptions o;
    o.sprio_at = at;
    o.sprio = &rows;
    auto r = Simulate(*c, teams, w, profiles->front(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(rows.size(), expected.size()) << "at " << at;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].job_id, expected[i].first);
      EXPECT_EQ(rows[i].age, expected[i].second);
      EXPECT_EQ(rows[i].priority, static_cast<uint32_t>(expected[i].second));
      EXPECT_EQ(rows[i].user, "alice");
      EXPECT_EQ(rows[i].partition, "gpu");
    }
  }
}

}  // namespace
}  // namespace gantry
