#include "gantry/control/slurm_rm.h"

#include <gtest/gtest.h>

namespace gantry::control {
namespace {

slurm::SlurmNode Node(slurm::NodeState state, const std::string& words, bool not_responding) {
  slurm::SlurmNode n;
  n.name = "n1";
  n.state = state;
  n.slurm_state = words;
  n.not_responding = not_responding;
  n.reason = "r";
  return n;
}

TEST(SlurmRm, NodeStatesBecomeEngineNodeStates) {
  using S = slurm::NodeState;
  EXPECT_EQ(ToRmNode(Node(S::kIdle, "idle", false)).state, NodeState::kUp);
  EXPECT_EQ(ToRmNode(Node(S::kMixed, "mixed", false)).state, NodeState::kUp);
  EXPECT_EQ(ToRmNode(Node(S::kAllocated, "allocated", false)).state, NodeState::kUp);
  EXPECT_EQ(ToRmNode(Node(S::kDraining, "mixed+DRAIN", false)).state, NodeState::kDrained);
  EXPECT_EQ(ToRmNode(Node(S::kDrained, "idle+DRAIN", false)).state, NodeState::kDrained);
  EXPECT_EQ(ToRmNode(Node(S::kDown, "down", false)).state, NodeState::kDown);
  EXPECT_EQ(ToRmNode(Node(S::kDown, "down+NOT_RESPONDING", true)).state, NodeState::kDown);
  // Not responding but not (yet) down: Slurm keeps its jobs, so the engine only stops placing.
  EXPECT_EQ(ToRmNode(Node(S::kDown, "mixed+NOT_RESPONDING", true)).state, NodeState::kDrained);
  EXPECT_EQ(ToRmNode(Node(S::kUnknown, "future", false)).state, NodeState::kDrained);
  const RmNode n = ToRmNode(Node(S::kDraining, "mixed+DRAIN", false));
  EXPECT_EQ(n.name, "n1");
  EXPECT_EQ(n.rm_state, "mixed+DRAIN");
  EXPECT_EQ(n.reason, "r");
}

TEST(SlurmRm, JobsAndIds) {
  slurm::SlurmJob j;
  j.id = 42;
  j.account = "physics";
  j.partition = "gantry";
  j.qos = "high";
  j.gpus = 4;
  j.gpus_per_node = 2;
  j.node_count = 2;
  j.state = slurm::JobState::kPending;
  j.held = false;
  j.required_nodes = {"n1", "n2"};
  j.admin_comment = "gantry-data dataset=s3://b/a dataset=file:///d checkpoint=s3://b/ck";
  Result<RmJob> o = ToRmJob(j);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->request.datasets, (std::vector<std::string>{"s3://b/a", "file:///d"}));
  EXPECT_EQ(o->request.checkpoint, "s3://b/ck");
  EXPECT_EQ(o->request.qos_name, "high");  // the level is the cluster spec's (Controller)
  EXPECT_EQ(o->state, ObservedState::kReleased);
  EXPECT_EQ(o->placement, (std::vector<NodeGpus>{{"n1", 2}, {"n2", 2}}));
  j.held = true;
  EXPECT_EQ(ToRmJob(j)->state, ObservedState::kHeld);
  j.nodes = {"n1", "n2"};
  j.state = slurm::JobState::kRunning;
  EXPECT_EQ(ToRmJob(j)->state, ObservedState::kRunning);
  EXPECT_FALSE(ToRmJob(j)->stopping);
  j.state = slurm::JobState::kCompleting;  // a run ending, or requeued and being stopped
  EXPECT_EQ(ToRmJob(j)->state, ObservedState::kRunning);
  EXPECT_TRUE(ToRmJob(j)->stopping);
  EXPECT_EQ(ToRmJob(j)->placement, (std::vector<NodeGpus>{{"n1", 2}, {"n2", 2}}));
  j.state = slurm::JobState::kNodeFail;
  EXPECT_EQ(ToRmJob(j)->state, ObservedState::kFinished);
  // Where an ended job ran: Slurm names its nodes for MinJobAge.
  EXPECT_EQ(ToRmJob(j)->placement, (std::vector<NodeGpus>{{"n1", 2}, {"n2", 2}}));
  EXPECT_EQ(ToRmJob(j)->end_state, "node_fail");
  j.admin_comment = "gantry-data dataset";  // not job_submit.lua's: the job still counts
  EXPECT_TRUE(ToRmJob(j)->request.datasets.empty());
  j.gpus = 0;
  EXPECT_EQ(ToRmJob(j).status().code(), StatusCode::kNotFound);  // not Gantry's
  EXPECT_EQ(*SlurmJobId("42"), 42);
  for (const char* bad : {"", "4x", "-1", "0", "x"}) {
    EXPECT_EQ(SlurmJobId(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace gantry::control
