// The packing experiment (packing.h) on tiny request-only pod lists whose every number is worked
// out by hand in the comments; and the per-device capacity invariant.
#include "gantry/sim/packing.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "gantry/workload/trace.h"
#include "invariant_checker.h"

namespace gantry {
namespace {

// n0: 2 GPUs of type A, n1: 2 GPUs of type B (or one node of A only).
Cluster MakeCluster(bool two_nodes) {
  ClusterBuilder b("tiny", {});
  EXPECT_TRUE(b.AddGpuType({"A", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddGpuType({"B", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 2}).ok());
  if (two_nodes) {
    EXPECT_TRUE(b.AddNode({.name = "n1", .gpu_type = 1, .gpus = 2}).ok());
  }
  return std::move(b).Build().value();
}

Workload Pods(const std::string& rows, const Cluster& c) {
  auto w = ImportTraceText("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + rows,
                           "pods.csv", TraceFormat::kOpenb, {});
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE(ResolveWorkload(*w, c, {}).ok());
  return std::move(w).value();
}

void ExpectPoint(const PackingPoint& p, int64_t tasks, int64_t failed, double arrived,
                 double allocated, double fragmented) {
  EXPECT_EQ(p.tasks, tasks);
  EXPECT_EQ(p.failed, failed);
  EXPECT_NEAR(p.arrived, arrived, 1e-9);
  EXPECT_NEAR(p.allocated, allocated, 1e-9);
  EXPECT_NEAR(p.fragmented, fragmented, 1e-9) << "at task " << tasks;
}

// Mix: 1-GPU any type (2/3), 2-GPU A only (1/3). first-fit and best-fit put the first 1-GPU pod
// on n0 (A, tie on index), stranding n0's other GPU for the A-only pair (1/3 * 1 GPU of 4 =
// 0.0833); the pair then fails and the third pod fills n0: half the cluster allocated. FGD puts
// the first pod on n1 (growth 0 there, 1/3 GPU on n0), so the pair fits: all allocated.
TEST(PackingTest, FgdLeavesRoomForTheConstrainedPair) {
  const Cluster c = MakeCluster(true);
  const Workload w = Pods("p1,1,1,1,1000,\np2,1,1,2,1000,A\np3,1,1,1,1000,\n", c);
  PackingOptions o;
  o.check_invariants = true;
  auto r = RunPacking(c, w, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->curves.size(), 3u);
  EXPECT_EQ(r->cluster_gpus, 4);
  for (int i : {0, 1}) {
    const auto& pts = r->curves[i].points;
    ASSERT_EQ(pts.size(), 4u) << r->curves[i].policy;
    ExpectPoint(pts[0], 0, 0, 0, 0, 0);
    ExpectPoint(pts[1], 1, 0, 0.25, 0.25, 1.0 / 12);
    ExpectPoint(pts[2], 2, 1, 0.75, 0.25, 1.0 / 12);
    ExpectPoint(pts[3], 3, 1, 1.0, 0.5, 0);
  }
  EXPECT_EQ(r->curves[2].policy, "fgd");
  const auto& fgd = r->curves[2].points;
  ASSERT_EQ(fgd.size(), 4u);
  ExpectPoint(fgd[1], 1, 0, 0.25, 0.25, 0);
  ExpectPoint(fgd[2], 2, 0, 0.75, 0.75, 0);
  ExpectPoint(fgd[3], 3, 0, 1.0, 1.0, 0);

  const std::string csv = testing::TempDir() + "/packing.csv";
  ASSERT_TRUE(WritePackingCsv(*r, csv).ok());
  std::ifstream in(csv);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().substr(0, text.str().find('\n')),
            "policy,tasks,failed,arrived,allocated,fragmented");
  EXPECT_NE(text.str().find("fgd,3,0,1.000000,1.000000,0.000000\n"), std::string::npos);
  EXPECT_TRUE(WritePackingSvg(*r, testing::TempDir() + "/packing.svg").ok());
}

// One node of 2 GPUs; pods of 300, 300, 600, 500 milli and one whole GPU. Mix: 300 (2/5), 600,
// 500 and whole (1/5 each).
constexpr char kShares[] =
    "s1,1,1,1,300,\ns2,1,1,1,300,\ns3,1,1,1,600,\ns4,1,1,1,500,\nw,1,1,1,1000,\n";

TEST(PackingTest, SharesDevicesUpTo1000Milli) {
  const Cluster c = MakeCluster(false);
  const Workload w = Pods(kShares, c);
  PackingOptions o;
  o.policies = {"best-fit"};
  o.check_invariants = true;
  auto r = RunPacking(c, w, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fractional, 4);
  EXPECT_EQ(r->rounded, 0);
  // 300 -> d0 (700 left); 300 -> d0, the fullest that fits (400); 600 -> d1 (400); 500 and the
  // whole GPU fit nowhere. 1200 of 2000 milli allocated. Left [400, 400]: every kind but 300
  // cannot use either device: (1/5 * 3) * 800 milli = 480 of 2000.
  const PackingPoint& last = r->curves[0].points.back();
  ExpectPoint(last, 5, 2, 2.7 / 2, 0.6, 0.24);
}

TEST(PackingTest, RoundsSharesWhenAsked) {
  const Cluster c = MakeCluster(false);
  const Workload w = Pods(kShares, c);
  PackingOptions o;
  o.policies = {"best-fit"};
  o.round_fractional = true;
  auto r = RunPacking(c, w, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rounded, 4);
  // Each share takes a whole GPU: two pods fill the node and 2 GPUs have arrived: stop.
  ExpectPoint(r->curves[0].points.back(), 2, 0, 1.0, 1.0, 0);
}

TEST(PackingTest, MigLikeSlices) {
  const Cluster c = MakeCluster(false);
  const Workload w = Pods(kShares, c);
  PackingOptions o;
  o.policies = {"best-fit"};
  o.mig_slices = 4;
  o.check_invariants = true;
  auto r = RunPacking(c, w, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->capacity, 4);
  // Slices needed: 300 -> 2, 300 -> 2, 600 -> 3, 500 -> 2, whole -> 4. d0 takes both 300s
  // (full), d1 the 600 (1 slice left); the rest fail. 7 of 8 slices allocated; the one slice
  // left is of use to no kind: 1 slice = 1/4 GPU of 2.
  ExpectPoint(r->curves[0].points.back(), 5, 2, 2.7 / 2, 7.0 / 8, 0.125);
}

// A two-node gang on a one-node cluster: its first part fits, its second cannot (a node once),
// so the first is given back; the 1-GPU task after it then finds both GPUs free.
TEST(PackingTest, GangPartsAreAllOrNothing) {
  const Cluster c = MakeCluster(false);
  Workload w;
  for (int i = 0; i < 2; ++i) {
    Job j;
    j.index = i;
    j.id = "J" + std::to_string(i);
    j.gpus = i == 0 ? 2 : 1;
    j.nodes = i == 0 ? 2 : 1;
    j.gpus_per_node = 1;
    w.jobs.push_back(j);
  }
  for (const char* policy : {"first-fit", "best-fit", "fgd"}) {
    PackingOptions o;
    o.policies = {policy};
    o.max_load = 2;  // the gang alone is the cluster's 2 GPUs
    o.check_invariants = true;
    auto r = RunPacking(c, w, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectPoint(r->curves[0].points.back(), 2, 1, 1.5, 0.5, 0);
  }
}

// The same pods with the slices set by the cluster (GpuType::mig_slices = 4) instead of the
// flag: the same numbers as MigLikeSlices.
TEST(PackingTest, MigSlicesFromTheClusterSpec) {
  ClusterBuilder b("mig", {});
  ASSERT_TRUE(b.AddGpuType({.name = "A", .memory_gb = 80, .mig_slices = 4}).ok());
  ASSERT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 2}).ok());
  const Cluster c = std::move(b).Build().value();
  const Workload w = Pods(kShares, c);
  PackingOptions o;
  o.policies = {"best-fit"};
  o.check_invariants = true;
  auto r = RunPacking(c, w, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->sliced_by_type);
  ExpectPoint(r->curves[0].points.back(), 5, 2, 2.7 / 2, 7.0 / 8, 0.125);
  o.mig_slices = 1000;  // the flag overrides the type: 1000 slices are milli-GPUs
  r = RunPacking(c, w, o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->sliced_by_type);
  ExpectPoint(r->curves[0].points.back(), 5, 2, 2.7 / 2, 0.6, 0.24);
}

TEST(PackingTest, RejectsUnknownPolicy) {
  const Cluster c = MakeCluster(false);
  const Workload w = Pods(kShares, c);
  PackingOptions o;
  o.policies = {"random"};
  auto r = RunPacking(c, w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(DeviceCapacityCheckerTest, NoDeviceHoldsMoreThanItsCapacity) {
  const Cluster c = MakeCluster(false);
  DeviceCapacityChecker check(c, {1000});
  EXPECT_TRUE(check.OnTake("a", 0, 1, 600).ok());
  EXPECT_TRUE(check.OnTake("b", 0, 1, 400).ok());
  const Status over = check.OnTake("c", 0, 1, 1);
  EXPECT_EQ(over.code(), StatusCode::kInternal);
  EXPECT_EQ(check.OnTake("d", 0, 2, 1).code(), StatusCode::kInternal);  // no such device
  EXPECT_TRUE(check.Agrees(0, {1000, 0}).ok());
  EXPECT_FALSE(check.Agrees(0, {1000, 100}).ok());
}

}  // namespace
}  // namespace gantry
