// The summary's fragmentation measures count only GPUs a job could use: the fragmentation wait
// only idle GPUs of a waiting job's allowed types, the fragmented GPU share (FGD's measure) only
// idle GPUs a kind of job cannot use where they are. Hand-worked on one- and two-node clusters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gantry/sched/profile.h"
#include "gantry/sim/simulator.h"

namespace gantry {
namespace {

// n0: one A GPU, n1: one B GPU. Jobs (fifo-easy, first-fit), each 1 GPU for 100 s at t=0:
//   J0 A only: starts at 0 on n0.   J1 A only: waits 0..100 for n0, while n1 (B) idles.
//   J2 any type: backfills at 0 on n1 (it cannot delay J1, whose only node is n0).
// J2 ends at 100, so for all of J1's wait the idle GPUs it could use are none (n0 busy) and
// the one B GPU is free only after 100. Then: J1 waits 100 s; fragmentation wait 0. Counting
// every idle GPU regardless of type (the old rule) would also give 0 here, so a second run
// gives J2 a shorter run: 50 s. From 50 to 100 the B GPU idles while J1 waits: the old rule
// counted those 50 s as fragmentation; J1 could never use that GPU, so it is not.
SimResult RunTwoTypes(Duration j2_run) {
  ClusterBuilder b("ab", {});
  EXPECT_TRUE(b.AddGpuType({"A", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddGpuType({"B", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 1}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n1", .gpu_type = 1, .gpus = 1}).ok());
  const Cluster c = std::move(b).Build().value();
  Workload w;
  w.teams = {"t"};
  w.users = {"u"};
  w.queues = {"q"};
  const uint32_t masks[] = {0b01, 0b01, kAnyGpuType};
  const Duration runs[] = {100, 100, j2_run};
  for (int i = 0; i < 3; ++i) {
    Job j;
    j.index = i;
    j.id = "J" + std::to_string(i);
    j.gpus = 1;
    j.nodes = 1;
    j.gpus_per_node = 1;
    j.gpu_type_mask = masks[i];
    j.run_time = runs[i];
    j.time_limit = runs[i];
    w.jobs.push_back(j);
  }
  SimOptions o;
  o.check_invariants = true;
  auto r = Simulate(c, {Team{"t", kNoQuota, 1.0}}, w, FindProfile("fifo-easy", {}).value(), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

TEST(FragmentationWaitTest, CountsOnlyGpusOfTheJobsTypes) {
  for (Duration j2 : {100, 50}) {
    const SimResult r = RunTwoTypes(j2);
    EXPECT_EQ(r.outcomes[1].start, 100) << j2;
    EXPECT_DOUBLE_EQ(r.total_wait_job_seconds, 100) << j2;
    EXPECT_DOUBLE_EQ(r.frag_wait_job_seconds, 0) << j2;
  }
}

// One node of 2 GPUs (fifo): J0 (1 GPU, 100 s) starts at 0; J1 (2 GPUs, 100 s) waits until 100.
// Kinds: 1 GPU and 2 GPUs, half each. During [0, 100) the node has 1 idle GPU, which the 2-GPU
// kind cannot use: 0.5 expected fragmented GPUs for 100 s = 50 GPU-seconds; none after. Makespan
// 200 s on 2 GPUs: share 50 / 400. J1's wait is not fragmentation wait (1 idle < 2 asked).
TEST(FragmentationWaitTest, ExpectedFragmentedShareInTheSummary) {
  ClusterBuilder b("one", {});
  ASSERT_TRUE(b.AddGpuType({"A", 80, 70, 700}).ok());
  ASSERT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 2}).ok());
  const Cluster c = std::move(b).Build().value();
  Workload w;
  w.teams = {"t"};
  w.users = {"u"};
  w.queues = {"q"};
  for (int i = 0; i < 2; ++i) {
    Job j;
    j.index = i;
    j.id = "J" + std::to_string(i);
    j.gpus = i + 1;
    j.nodes = 1;
    j.gpus_per_node = i + 1;
    j.run_time = j.time_limit = 100;
    w.jobs.push_back(j);
  }
  SimOptions o;
  o.check_invariants = true;
  auto r = Simulate(c, {Team{"t", kNoQuota, 1.0}}, w, FindProfile("fifo", {}).value(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcomes[1].start, 100);
  EXPECT_DOUBLE_EQ(r->fragmented_gpu_seconds, 50);
  EXPECT_DOUBLE_EQ(r->summary.fragmented_gpu_share, 50.0 / 400);
  EXPECT_DOUBLE_EQ(r->frag_wait_job_seconds, 0);
  EXPECT_EQ(SummaryToJson(*r)["fragmented_gpu_share"].get<double>(), 0.125);
}

}  // namespace
}  // namespace gantry
