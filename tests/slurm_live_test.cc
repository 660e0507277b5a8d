// Against a real Slurm cluster (scripts/slurm start; scripts/test starts one for the default
// preset): `gantry cluster import --from-slurm` round-trips the cluster; a job submitted with
// plain sbatch is held by Gantry's job_submit.lua, started by the library on a node Gantry chose
// and runs there (seen by the library and by sacct); a refused placement, cancel, requeue and
// a drained node are observed with the right codes and states.
//
// The cluster comes from GANTRY_SLURM_DIR and SLURM_CONF (the env file of scripts/slurm start).
// Without it the tests skip, unless GANTRY_SLURM_REQUIRED is set (scripts/test sets it when it
// started Slurm), where they fail so that a broken start cannot hide them. Each test uses its
// own nodes (ctest runs tests in parallel): import reads all, the start test n4, requeue n3,
// drain n1 and n2; refusal and cancel never start a job.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_support.h"
#include "common/test_support.h"
#include "gantry/cluster/cluster.h"
#include "gantry/control/slurm_rm.h"
#include "gantry/slurm/import.h"
#include "gantry/slurm/mapping.h"
#include "gantry/slurm/slurm.h"

namespace gantry::slurm {
namespace {

using ::testing::ElementsAre;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

class SlurmLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = Env("GANTRY_SLURM_DIR");
    if (dir_.empty() || Env("SLURM_CONF").empty()) {
      if (!Env("GANTRY_SLURM_REQUIRED").empty()) {
        FAIL() << "GANTRY_SLURM_REQUIRED is set but GANTRY_SLURM_DIR/SLURM_CONF are not: "
                  "scripts/slurm start did not run or failed";
      }
      GTEST_SKIP() << "no Slurm cluster (source \"$(scripts/slurm start)\" to run these)";
    }
    partition_ = Env("GANTRY_SLURM_PARTITION");
    if (partition_.empty()) partition_ = "gantry";
    SlurmOptions options;
    options.slurm_conf = Env("SLURM_CONF");
    client_ = std::make_unique<SlurmClient>(options);
  }

  // Submits like a user would: plain sbatch into the Gantry-managed partition.
  int64_t Submit(const std::string& account, const std::string& gres, const std::string& script) {
    auto out = client_->Run({"sbatch", "--parsable", "-p", partition_, "-A", account,
                             "--gres=" + gres, "-o", dir_ + "/jobs/%j.out", "--wrap", script});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return -1;
    return std::stoll(*out);
  }

  // Generous: the CI machine is a loaded 2-core box, and each wait is a poll, not a sleep.
  static constexpr int kPatience = 60;

  // Polls the job until `done` holds (or kPatience seconds pass); its last observation.
  SlurmJob WaitJob(int64_t id, const std::function<bool(const SlurmJob&)>& done) {
    SlurmJob last;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kPatience);
    while (std::chrono::steady_clock::now() < deadline) {
      auto j = client_->Job(id);
      if (j.ok()) {
        last = *j;
        if (done(last)) return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " still " << last.slurm_state << " (" << last.state_reason
                  << ") after " << kPatience << " s";
    return last;
  }

  SlurmNode WaitNode(const std::string& name, NodeState state) {
    SlurmNode last;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kPatience);
    while (std::chrono::steady_clock::now() < deadline) {
      auto nodes = client_->Nodes();
      if (nodes.ok()) {
        for (const SlurmNode& n : *nodes) {
          if (n.name == name) last = n;
        }
        if (last.state == state) return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "node " << name << " is " << last.slurm_state << ", expected "
                  << NodeStateName(state);
    return last;
  }

  std::string dir_;
  std::string partition_;
  std::unique_ptr<SlurmClient> client_;
};

TEST_F(SlurmLiveTest, ImportRoundTripsTheCluster) {
  test_support::TempDir tmp("gantry-slurm-import");
  const std::string spec = tmp.sub("site.yaml");
  cli_test::CliRun run = cli_test::RunShell(
      std::string(GANTRY_CLI) + " cluster import --from-slurm -o " + cli_test::Quote(spec),
      tmp.sub("err1"));
  ASSERT_EQ(run.code, 0) << run.err;
  run = cli_test::RunShell(
      std::string(GANTRY_CLI) + " cluster show --json --nodes " + cli_test::Quote(spec),
      tmp.sub("err2"));
  ASSERT_EQ(run.code, 0) << run.err << "\n" << cli_test::ReadFile(spec);
  const nlohmann::json c = nlohmann::json::parse(run.out);
  EXPECT_EQ(c["name"], Env("GANTRY_SLURM_CLUSTER"));
  EXPECT_EQ(c["levels"], nlohmann::json({"leaf", "spine"}));
  EXPECT_EQ(c["totals"]["gpus_by_type"], nlohmann::json({{"h100", 16}, {"a100", 8}}));
  ASSERT_EQ(c["nodes"].size(), 4u);
  // Every node as Slurm reports it, in its topology.conf switch.
  auto nodes = client_->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 4u);
  for (const SlurmNode& n : *nodes) {
    nlohmann::json found;
    for (const auto& x : c["nodes"]) {
      if (x["name"] == n.name) found = x;
    }
    ASSERT_FALSE(found.is_null()) << n.name;
    EXPECT_EQ(found["gpus"], n.gpus);
    EXPECT_EQ(found["gpu_type"], n.gpu_type);
    EXPECT_EQ(found["cpus"], n.cpus);
    EXPECT_EQ(found["domain"], n.gpu_type == "h100" ? "leaf0" : "leaf1");
  }
  std::vector<std::string> domains;
  for (const auto& d : c["domains"]) domains.push_back(d["name"]);
  EXPECT_THAT(domains, ElementsAre("spine0", "leaf0", "leaf1"));
  // Teams from the sacctmgr associations, quotas from GrpTRES gres/gpu.
  std::map<std::string, int> quotas;
  for (const auto& t : c["teams"]) quotas[t["name"]] = t["quota_gpus"];
  EXPECT_EQ(quotas,
            (std::map<std::string, int>{{"biology", 8}, {"chemistry", 8}, {"physics", 16}}));
}

TEST_F(SlurmLiveTest, HeldJobStartsOnTheChosenNode) {
  const int64_t id = Submit("biology", "gpu:a100:1", "echo ran on $SLURMD_NODENAME; sleep 1");
  ASSERT_GT(id, 0);
  SlurmJob j = WaitJob(id, [](const SlurmJob&) { return true; });
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_TRUE(j.held) << j.state_reason;
  EXPECT_EQ(j.partition, partition_);
  EXPECT_EQ(j.account, "biology");
  EXPECT_EQ(j.gpu_type, "a100");
  EXPECT_EQ(j.gpus_per_node, 1);
  // Held means Slurm does not start it by itself, although a100 nodes are free.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  j = *client_->Job(id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_TRUE(j.held);

  // What the engine would see: the request in the imported cluster's terms.
  auto snapshot = ReadSnapshot(*client_, {});
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  auto cluster = ParseClusterSpec(*WriteClusterSpec(*snapshot, {}), "import");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto request = ToJobRequest(j, *cluster, 0);
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->team, cluster->FindTeam("biology"));
  // The QOS scripts/slurm creates, leveled by priority: normal (0) below high (100).
  EXPECT_EQ(cluster->QosLevel("normal"), 0);
  EXPECT_EQ(cluster->QosLevel("high"), 1);
  ASSERT_NE(cluster->FindQos(1), nullptr);
  EXPECT_THAT(cluster->FindQos(1)->preempt, ElementsAre("normal"));
  EXPECT_EQ(cluster->FindQos(1)->usage_factor, 2.0);
  EXPECT_EQ(request->gpus, 1);
  EXPECT_EQ(request->gpu_type_mask, 1u << cluster->FindGpuType("a100"));
  // The choice: n4 (index 3), not the first a100 node that Slurm's own scheduler would pick.
  const std::vector<std::string> chosen = NodeNames(*cluster, {3});
  ASSERT_THAT(chosen, ElementsAre("n4"));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->StartOnNodes(id, chosen).ok());
  j = WaitJob(id, [](const SlurmJob& x) { return x.state != JobState::kPending; });
  const double start_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_THAT(j.nodes, ElementsAre("n4"));
  EXPECT_THAT(j.required_nodes, ElementsAre("n4"));
  RecordProperty("release_to_start_ms", static_cast<int>(start_s * 1000));
  j = WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kCompleted; });
  EXPECT_THAT(j.nodes, ElementsAre("n4"));
  EXPECT_EQ(cli_test::ReadFile(dir_ + "/jobs/" + std::to_string(id) + ".out"), "ran on n4\n");

  // Slurm's accounting agrees (slurmdbd receives the record within moments).
  std::string sacct;
  for (int i = 0; i < 600; ++i) {
    auto out = client_->Run({"sacct", "-X", "-n", "-P", "-j", std::to_string(id),
                             "--format=JobID,NodeList,State,Account,AllocTRES"});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    sacct = *out;
    if (sacct.find("COMPLETED") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(sacct.substr(0, sacct.find("|billing")), std::to_string(id) + "|n4|COMPLETED|biology");
  EXPECT_NE(sacct.find("gres/gpu=1"), std::string::npos) << sacct;
}

TEST_F(SlurmLiveTest, RefusedPlacementsHaveDistinctCodes) {
  const int64_t id = Submit("physics", "gpu:1", "true");
  ASSERT_GT(id, 0);
  WaitJob(id, [](const SlurmJob& x) { return x.held; });
  // A node Slurm does not have: refused, and the job stays held for Gantry to decide again.
  Status s = client_->StartOnNodes(id, {"no-such-node"});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  auto j = client_->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(j->held);
  EXPECT_TRUE(j->required_nodes.empty());
  // A job Slurm does not know.
  EXPECT_EQ(client_->StartOnNodes(987654321, {"n1"}).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Cancel(987654321).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Job(987654321).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->Cancel(id).ok());
}

TEST_F(SlurmLiveTest, CancelIsObserved) {
  const int64_t id = Submit("physics", "gpu:h100:1", "sleep 30");
  ASSERT_GT(id, 0);
  WaitJob(id, [](const SlurmJob& x) { return x.held; });
  ASSERT_TRUE(client_->Cancel(id).ok());
  SlurmJob j = WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kCancelled; });
  EXPECT_FALSE(j.held);
  // Cancelling a finished job is refused: it is no longer in a state that allows it.
  EXPECT_EQ(client_->Cancel(id).code(), StatusCode::kFailedPrecondition);
}

TEST_F(SlurmLiveTest, RequeueHeldPutsARunningJobBackUnderGantry) {
  const int64_t id = Submit("biology", "gpu:a100:2", "sleep 60");
  ASSERT_GT(id, 0);
  WaitJob(id, [](const SlurmJob& x) { return x.held; });
  ASSERT_TRUE(client_->StartOnNodes(id, {"n3"}).ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kRunning; });
  ASSERT_TRUE(client_->RequeueHeld(id).ok());
  SlurmJob j = WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kPending; });
  EXPECT_TRUE(j.held) << j.state_reason;
  EXPECT_EQ(j.restart_count, 1);
  ASSERT_TRUE(client_->Cancel(id).ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kCancelled; });
}

// A job submitted with --no-requeue says so, and Slurm refuses to requeue it while it runs: why
// gantryd never picks such a job as a preemption victim (RmJob::requeueable).
TEST_F(SlurmLiveTest, ANoRequeueJobSaysSoAndCannotBeRequeued) {
  auto out =
      client_->Run({"sbatch", "--parsable", "--no-requeue", "-p", partition_, "-A", "biology",
                    "--gres=gpu:a100:1", "-o", dir_ + "/jobs/%j.out", "--wrap", "sleep 60"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const int64_t id = std::stoll(*out);
  const int64_t other = Submit("biology", "gpu:a100:1", "sleep 60");
  ASSERT_GT(other, 0);
  SlurmJob j = WaitJob(id, [](const SlurmJob& x) { return x.held; });
  EXPECT_FALSE(j.requeue);
  EXPECT_TRUE(WaitJob(other, [](const SlurmJob& x) { return x.held; }).requeue);
  ASSERT_TRUE(client_->StartOnNodes(id, {"n3"}).ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kRunning; });
  EXPECT_EQ(client_->RequeueHeld(id).code(), StatusCode::kPermissionDenied);
  // The driver passes the refusal on and leaves the job alone: not held while it runs, which
  // would let gantryd book its GPUs as free (the controller withdraws the preemption).
  control::SlurmRmOptions rm_options;
  rm_options.slurm.slurm_conf = Env("SLURM_CONF");
  rm_options.partitions = {partition_};
  control::SlurmResourceManager rm(rm_options);
  EXPECT_EQ(rm.Requeue(std::to_string(id)).code(), StatusCode::kPermissionDenied);
  Result<SlurmJob> after = client_->Job(id);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->state, JobState::kRunning);
  EXPECT_FALSE(after->held);
  // Released onto n3 while `id` runs there, it waits for the node -- refused a requeue too,
  // but not running: the driver holds it, which is all a requeue would have done.
  out = client_->Run({"sbatch", "--parsable", "--no-requeue", "-p", partition_, "-A", "biology",
                      "--gres=gpu:a100:4", "-o", dir_ + "/jobs/%j.out", "--wrap", "sleep 60"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const int64_t waiting = std::stoll(*out);
  WaitJob(waiting, [](const SlurmJob& x) { return x.held; });
  ASSERT_TRUE(client_->StartOnNodes(waiting, {"n3"}).ok());
  WaitJob(waiting, [](const SlurmJob& x) { return !x.held; });
  EXPECT_EQ(client_->RequeueHeld(waiting).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(rm.Requeue(std::to_string(waiting)).ok());
  after = client_->Job(waiting);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->state, JobState::kPending);
  EXPECT_TRUE(after->held);
  ASSERT_TRUE(client_->Cancel(id).ok());
  ASSERT_TRUE(client_->Cancel(other).ok());
  ASSERT_TRUE(client_->Cancel(waiting).ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kCancelled; });
}

// A preempted job with a grace time gets a signal (Slurm's GraceTime sends SIGTERM; gantryd
// sends --preempt-signal), saves its work and exits; a batch job that finished that way can still
// be requeued held, so that Gantry decides again where it goes on.
TEST_F(SlurmLiveTest, SignalReachesTheJobAndAFinishedJobCanBeRequeuedHeld) {
  const int64_t id = Submit(
      "biology", "gpu:a100:1",
      "trap 'echo saved on USR1; exit 0' USR1; echo started; while true; do sleep 0.1; done");
  ASSERT_GT(id, 0);
  WaitJob(id, [](const SlurmJob& x) { return x.held; });
  ASSERT_TRUE(client_->StartOnNodes(id, {"n3"}).ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kRunning; });
  const std::string out = dir_ + "/jobs/" + std::to_string(id) + ".out";
  for (int i = 0;
       i < kPatience * 10 && cli_test::ReadFile(out).find("started") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the trap is set
  }
  EXPECT_EQ(client_->Signal(id, "USR 1").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(client_->Signal(id, "USR1").ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kCompleted; });
  // The trap ran (the shell's sleep got the signal too: --full signals every process).
  EXPECT_NE(cli_test::ReadFile(out).find("saved on USR1\n"), std::string::npos)
      << cli_test::ReadFile(out);
  EXPECT_EQ(client_->Signal(987654321, "USR1").code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->RequeueHeld(id).ok());
  SlurmJob j = WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kPending; });
  EXPECT_TRUE(j.held) << j.state_reason;
  ASSERT_TRUE(client_->Cancel(id).ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kCancelled; });
}

TEST_F(SlurmLiveTest, DrainedNodesAreObserved) {
  // An empty node drains at once; one with a job keeps it running and drains when it ends.
  ASSERT_TRUE(client_->DrainNode("n2", "gantry test").ok());
  SlurmNode n2 = WaitNode("n2", NodeState::kDrained);
  EXPECT_EQ(n2.reason, "gantry test");

  const int64_t id = Submit("physics", "gpu:h100:8", "sleep 60");
  ASSERT_GT(id, 0);
  WaitJob(id, [](const SlurmJob& x) { return x.held; });
  ASSERT_TRUE(client_->StartOnNodes(id, {"n1"}).ok());
  WaitJob(id, [](const SlurmJob& x) { return x.state == JobState::kRunning; });
  // All its GPUs but one of its 16 CPUs are taken: Slurm calls that mixed.
  SlurmNode n1 = WaitNode("n1", NodeState::kMixed);
  EXPECT_EQ(n1.gpus_used, 8);
  ASSERT_TRUE(client_->DrainNode("n1", "gantry test").ok());
  WaitNode("n1", NodeState::kDraining);
  ASSERT_TRUE(client_->Cancel(id).ok());
  WaitNode("n1", NodeState::kDrained);

  EXPECT_EQ(client_->DrainNode("no-such-node", "x").code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->ResumeNode("n1").ok());
  ASSERT_TRUE(client_->ResumeNode("n2").ok());
  WaitNode("n1", NodeState::kIdle);
  WaitNode("n2", NodeState::kIdle);
}

}  // namespace
}  // namespace gantry::slurm
