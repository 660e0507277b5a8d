// Fragmentation (fragmentation.h) and the "fgd" score on small clusters whose outcomes are
// worked out by hand in the comments.
#include "gantry/sched/fragmentation.h"

#include <gtest/gtest.h>

#include <vector>

#include "gantry/sched/free_index.h"
#include "gantry/sched/plugin.h"
#include "gantry/sched/registry.h"

namespace gantry {
namespace {

JobRequest Gang(JobIndex index, int gpus, uint32_t mask = kAnyGpuType) {
  JobRequest j;
  j.index = index;
  j.gpus = gpus;
  j.nodes = 1;
  j.gpus_per_node = gpus;
  j.gpu_type_mask = mask;
  return j;
}

JobRequest Fraction(JobIndex index, int milli) {
  JobRequest j = Gang(index, 1);
  j.gpu_milli = milli;
  return j;
}

TEST(TaskMixTest, ClassesAndShares) {
  TaskMix mix;
  mix.Add(Gang(0, 2));
  mix.Add(Gang(1, 2));
  mix.Add(Fraction(2, 500));
  mix.Add(Gang(3, 1, 0b10));
  ASSERT_EQ(mix.classes().size(), 3u);
  EXPECT_EQ(mix.tasks(), 4);
  EXPECT_DOUBLE_EQ(mix.classes()[0].share, 0.5);
  EXPECT_EQ(mix.classes()[1].milli, 500);
  EXPECT_DOUBLE_EQ(mix.classes()[1].share, 0.25);
  EXPECT_EQ(mix.classes()[2].types, 0b10u);
  EXPECT_EQ(mix.Find(Gang(9, 2)), 0);
  EXPECT_EQ(mix.Find(Gang(9, 3)), -1);
  JobRequest any;  // no shape: any GPU it may use counts as usable
  any.gpus = 16;
  EXPECT_EQ(TaskMix::ClassOf(any).gpus, 1);
}

TEST(FragmentationTest, PerTaskFragments) {
  // Devices with 1000, 1000, 300 and 0 milli free, type 0.
  const std::vector<int> dev{1000, 1000, 300, 0};
  TaskClass two{.gpus = 2};
  EXPECT_EQ(TaskFragment(dev, 1000, 0, two), 300);  // two whole GPUs fit; 300 is stranded
  TaskClass three{.gpus = 3};
  EXPECT_EQ(TaskFragment(dev, 1000, 0, three), 2300);  // cannot run here: all of it
  TaskClass half{.gpus = 1, .milli = 500};
  EXPECT_EQ(TaskFragment(dev, 1000, 0, half), 300);  // only the device with 300 is too small
  TaskClass fifth{.gpus = 1, .milli = 200};
  EXPECT_EQ(TaskFragment(dev, 1000, 0, fifth), 0);
  TaskClass other_type{.gpus = 1, .types = 0b10};
  EXPECT_EQ(TaskFragment(dev, 1000, 0, other_type), 0);  // not GPUs it could use

  // Mix: 2-GPU x2, 500 milli, type-1-only: 0.5*300 + 0.25*300 + 0.25*0.
  TaskMix mix;
  mix.Add(Gang(0, 2));
  mix.Add(Gang(1, 2));
  mix.Add(Fraction(2, 500));
  mix.Add(Gang(3, 1, 0b10));
  EXPECT_DOUBLE_EQ(NodeFragmentation(dev, 1000, 0, mix), 225);

  // MIG-like: 7 slices per GPU. 500 milli needs ceil(3.5) = 4 slices, 100 milli needs 1.
  const std::vector<int> mig{7, 7, 2, 0};
  EXPECT_EQ(DeviceNeed(half, 7), 4);
  EXPECT_EQ(TaskFragment(mig, 7, 0, half), 2);
  EXPECT_EQ(TaskFragment(mig, 7, 0, TaskClass{.gpus = 1, .milli = 100}), 0);

  // Whole GPUs (the engine's view): an 8-GPU kind strands all 5 free; a 1-GPU kind nothing.
  TaskMix whole;
  whole.Add(Gang(0, 8));
  whole.Add(Gang(1, 1));
  EXPECT_DOUBLE_EQ(WholeGpuFragmentation(5, 0, whole), 2.5);
  EXPECT_DOUBLE_EQ(WholeGpuFragmentation(8, 0, whole), 0);
}

// Two 8-GPU nodes: n0 of the scarce type A (index 0), n1 of type B.
Cluster TwoTypes() {
  ClusterBuilder b("two", {});
  EXPECT_TRUE(b.AddGpuType({"A", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddGpuType({"B", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 8}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n1", .gpu_type = 1, .gpus = 8}).ok());
  return std::move(b).Build().value();
}

Placement Place(const char* placement, const char* scores, const JobRequest& job,
                const FreeIndex& free, const PluginContext& ctx) {
  std::map<std::string, std::string> args;
  if (scores != nullptr) args["scores"] = scores;
  auto p = PluginRegistry::Builtin().CreatePlacement(placement, PluginArgs(placement, args), ctx);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  Placement out;
  EXPECT_TRUE((*p)->Place(job, free, nullptr, &out));
  return out;
}

TEST(FgdScoreTest, LeavesTheScarceTypeToJobsThatNeedIt) {
  const Cluster c = TwoTypes();
  FreeIndex free(c);
  // Mix: an A-only 8-GPU gang and an any-type 1-GPU job, half each. The 1-GPU job on n0 leaves
  // 7 A GPUs the A-only kind cannot use: growth 0.5 * 7 = 3.5. On n1 the A-only kind does not
  // count (type B) and the 1-GPU kind can use all 7: growth 0.
  TaskMix mix;
  mix.Add(Gang(0, 8, 0b01));
  mix.Add(Gang(1, 1));
  PluginContext ctx{.cluster = &c};
  ctx.task_mix = &mix;
  auto fgd = PluginRegistry::Builtin().CreateScore("fgd", PluginArgs("fgd", {}), ctx);
  ASSERT_TRUE(fgd.ok());
  const JobRequest one = Gang(1, 1);
  EXPECT_DOUBLE_EQ((*fgd)->Score(one, 0, 8, free), 0.5 - 3.5 / 16);
  EXPECT_DOUBLE_EQ((*fgd)->Score(one, 1, 8, free), 0.5);
  EXPECT_EQ(Place("scored", "fgd", one, free, ctx), (Placement{{1, 1}}));
  // best-fit and first-fit take the lower index, the scarce node.
  EXPECT_EQ(Place("best-fit", nullptr, one, free, ctx), (Placement{{0, 1}}));
  EXPECT_EQ(Place("first-fit", nullptr, one, free, ctx), (Placement{{0, 1}}));
  // On top of best-fit (the type-aware default's form), fgd:10 outweighs least-free.
  EXPECT_EQ(Place("best-fit", "fgd:10", one, free, ctx), (Placement{{1, 1}}));
}

TEST(ScarcityScoreTest, KeepsJobsThatCanGoElsewhereOffTheTypesOthersNeed) {
  const Cluster c = TwoTypes();
  FreeIndex free(c);
  // GPU demand of the mix: A-only 8-GPU gang 0.5 * 8 = 4, any-type 1 GPU 0.5 * 1; of 4.5 in
  // all. The any-type job on n0 (A) competes with the A-only 4: score 1 - 4/4.5; on n1: 1.
  TaskMix mix;
  mix.Add(Gang(0, 8, 0b01));
  mix.Add(Gang(1, 1));
  EXPECT_DOUBLE_EQ(TypeContention(mix, 0, kAnyGpuType, 0b11), 4 / 4.5);
  EXPECT_DOUBLE_EQ(TypeContention(mix, 0, 0b11, 0b11), 4 / 4.5);  // "any" = every type listed
  EXPECT_DOUBLE_EQ(TypeContention(mix, 1, kAnyGpuType, 0b11), 0);
  EXPECT_DOUBLE_EQ(TypeContention(mix, 0, 0b01, 0b11), 0);  // nothing narrower than A-only
  PluginContext ctx{.cluster = &c};
  ctx.task_mix = &mix;
  auto scarcity =
      PluginRegistry::Builtin().CreateScore("scarcity", PluginArgs("scarcity", {}), ctx);
  ASSERT_TRUE(scarcity.ok());
  const JobRequest one = Gang(1, 1);
  EXPECT_DOUBLE_EQ((*scarcity)->Score(one, 0, 8, free), 1 - 4 / 4.5);
  EXPECT_DOUBLE_EQ((*scarcity)->Score(one, 1, 8, free), 1);
  // n0 has 4 free, n1 8: best-fit alone takes n0; scarcity:10 on top moves the job to n1.
  free.Allocate(0, 4);
  EXPECT_EQ(Place("best-fit", nullptr, one, free, ctx), (Placement{{0, 1}}));
  EXPECT_EQ(Place("best-fit", "scarcity:10", one, free, ctx), (Placement{{1, 1}}));
  EXPECT_EQ(Place("topology", "scarcity:10", one, free, ctx), (Placement{{1, 1}}));
}

TEST(FgdScoreTest, PacksWhereFragmentationFalls) {
  // Both nodes type B; n1 has 3 free. Mix: 8-GPU gang and 1-GPU job, half each.
  // n0: 8 -> 7 free strands 7 for the gang kind: growth 3.5. n1: 3 -> 2, already stranded for
  // the gang kind: 1.5 -> 1.0, growth -0.5. Scores 0.5 - 3.5/16 and 0.5 + 0.5/16.
  ClusterBuilder b("b", {});
  ASSERT_TRUE(b.AddGpuType({"B", 80, 70, 700}).ok());
  ASSERT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 8}).ok());
  ASSERT_TRUE(b.AddNode({.name = "n1", .gpu_type = 0, .gpus = 8}).ok());
  const Cluster c = std::move(b).Build().value();
  FreeIndex free(c);
  free.Allocate(1, 5);
  // No given mix: the score learns it from the jobs it is asked about, each once.
  const PluginContext ctx{.cluster = &c};
  auto fgd = PluginRegistry::Builtin().CreateScore("fgd", PluginArgs("fgd", {}), ctx);
  ASSERT_TRUE(fgd.ok());
  const JobRequest big = Gang(0, 8), one = Gang(1, 1);
  EXPECT_DOUBLE_EQ((*fgd)->Score(big, 0, 8, free), 0.5);  // mix {8: 1}; 8 -> 0 free
  EXPECT_DOUBLE_EQ((*fgd)->Score(one, 0, 8, free), 0.5 - 3.5 / 16);
  EXPECT_DOUBLE_EQ((*fgd)->Score(one, 1, 3, free), 0.5 + 0.5 / 16);
  EXPECT_DOUBLE_EQ((*fgd)->Score(one, 1, 3, free), 0.5 + 0.5 / 16);  // not counted twice
}

}  // namespace
}  // namespace gantry
