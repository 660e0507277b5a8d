// Parsers of Slurm's output and the spec writer, on output captured from Slurm 22.05.8 (trimmed
// to the fields Gantry reads). The live cluster tests are in tests/slurm_live_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_support.h"
#include "gantry/cluster/cluster.h"
#include "gantry/slurm/import.h"
#include "gantry/slurm/mapping.h"
#include "gantry/slurm/slurm.h"

namespace gantry::slurm {
namespace {

using ::testing::ElementsAre;

SlurmOptions Opts(const std::string& slurm_conf, const std::string& bin_dir,
                  int timeout_ms = 30000) {
  SlurmOptions o;
  o.slurm_conf = slurm_conf;
  o.bin_dir = bin_dir;
  o.timeout_ms = timeout_ms;
  return o;
}

TEST(SlurmHostlist, ExpandsRangesListsPaddingAndSuffixes) {
  auto h = ExpandHostlist("n[1-3,7],gpu[08-10],login");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_THAT(*h, ElementsAre("n1", "n2", "n3", "n7", "gpu08", "gpu09", "gpu10", "login"));
  auto s = ExpandHostlist("r[1-2]n[1-2]");
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
  EXPECT_TRUE(ExpandHostlist("")->empty());
}

TEST(SlurmHostlist, RejectsMalformedAndHugeLists) {
  EXPECT_EQ(ExpandHostlist("n[1-").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpandHostlist("n[3-1]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpandHostlist("n[a-b]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpandHostlist("n[1-100000000]").status().code(), StatusCode::kInvalidArgument);
}

TEST(SlurmGres, ReadsTypedUntypedAndIndexedEntries) {
  auto g = ParseGresGpus("gpu:h100:8(S:0-1),gpu:a100:2,shard:4,gpu:3");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->size(), 3u);
  EXPECT_EQ((*g)[0].type, "h100");
  EXPECT_EQ((*g)[0].count, 8);
  EXPECT_EQ((*g)[1].type, "a100");
  EXPECT_EQ((*g)[1].count, 2);
  EXPECT_EQ((*g)[2].type, "");
  EXPECT_EQ((*g)[2].count, 3);
  auto used = ParseGresGpus("gpu:h100:0(IDX:N/A)");
  ASSERT_TRUE(used.ok());
  EXPECT_EQ((*used)[0].count, 0);
  EXPECT_EQ(ParseGresGpus("gpu:h100:x").status().code(), StatusCode::kInvalidArgument);
}

constexpr const char* kSinfo = R"js({
  "meta": {"plugin": {"type": "openapi/v0.0.38"}},
  "errors": [],
  "nodes": [
    {"name": "n1", "state": "idle", "state_flags": [], "gres": "gpu:h100:8",
     "gres_used": "gpu:h100:0(IDX:N/A)", "cpus": 16, "alloc_cpus": 0, "real_memory": 64000,
     "alloc_memory": 0, "reason": "", "partitions": ["gpu", "gantry"]},
    {"name": "n2", "state": "mixed", "state_flags": ["DRAIN"], "gres": "gpu:h100:8",
     "gres_used": "gpu:h100:2(IDX:0-1)", "cpus": 16, "alloc_cpus": 1, "real_memory": 64000,
     "alloc_memory": 1000, "reason": "maintenance", "partitions": ["gpu"]},
    {"name": "n3", "state": "idle", "state_flags": ["DRAIN"], "gres": "gpu:a100:4",
     "gres_used": "gpu:a100:0(IDX:N/A)", "cpus": 8, "alloc_cpus": 0, "real_memory": 32000,
     "alloc_memory": 0, "reason": "x", "partitions": ["gpu"]},
    {"name": "n4", "state": "down", "state_flags": ["NOT_RESPONDING"], "gres": "gpu:a100:4",
     "gres_used": "", "cpus": 8, "real_memory": 32000, "partitions": []}
  ]})js";

TEST(SlurmSinfo, MapsStatesGpusAndCapacity) {
  auto nodes = ParseSinfoJson(kSinfo);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 4u);
  const SlurmNode& n1 = (*nodes)[0];
  EXPECT_EQ(n1.name, "n1");
  EXPECT_EQ(n1.state, NodeState::kIdle);
  EXPECT_EQ(n1.gpu_type, "h100");
  EXPECT_EQ(n1.gpus, 8);
  EXPECT_EQ(n1.gpus_used, 0);
  EXPECT_EQ(n1.cpus, 16);
  EXPECT_EQ(n1.memory_mb, 64000);
  EXPECT_THAT(n1.partitions, ElementsAre("gpu", "gantry"));
  EXPECT_EQ((*nodes)[1].state, NodeState::kDraining);  // drain with a job still on it
  EXPECT_EQ((*nodes)[1].gpus_used, 2);
  EXPECT_EQ((*nodes)[1].reason, "maintenance");
  EXPECT_EQ((*nodes)[1].slurm_state, "mixed+DRAIN");
  EXPECT_EQ((*nodes)[2].state, NodeState::kDrained);
  EXPECT_EQ((*nodes)[3].state, NodeState::kDown);
  EXPECT_TRUE((*nodes)[3].not_responding);
  EXPECT_FALSE((*nodes)[1].not_responding);
}

TEST(SlurmSinfo, ErrorsAreIoErrors) {
  EXPECT_EQ(ParseSinfoJson("not json").status().code(), StatusCode::kIoError);
  EXPECT_EQ(ParseSinfoJson(R"({"errors":[{"error":"x"}],"nodes":[]})").status().code(),
            StatusCode::kIoError);
  EXPECT_EQ(ParseSinfoJson(R"({"errors":[]})").status().code(), StatusCode::kIoError);
}

constexpr const char* kSqueue = R"js({
  "errors": [],
  "jobs": [
    {"job_id": 2, "name": "wrap", "user_name": "root", "account": "physics",
     "partition": "gantry", "qos": "high", "job_state": "PENDING", "state_reason": "JobHeldUser",
     "priority": 0,
     "node_count": 2, "tres_per_node": "gres:gpu:h100:8",
     "tres_req_str": "cpu=2,mem=2000M,node=2,billing=2,gres/gpu=16", "tres_alloc_str": "",
     "nodes": "", "required_nodes": "", "submit_time": 1796073897, "start_time": 0,
     "end_time": 0, "restart_cnt": 0, "requeue": false,
     "admin_comment": "gantry-data dataset=s3://b/imagenet checkpoint=file:///ck/run"},
    {"job_id": 1, "name": "wrap", "user_name": "root", "account": "biology",
     "partition": "gantry", "qos": "normal", "job_state": "RUNNING", "state_reason": "None",
     "priority": 4294901759, "node_count": 1, "tres_per_node": "gres:gpu:2",
     "tres_req_str": "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=2",
     "tres_alloc_str": "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=2",
     "nodes": "n3", "required_nodes": "n3", "submit_time": 1796073892,
     "start_time": 1796073893, "end_time": 1827609893, "restart_cnt": 1, "time_limit": 525600},
    {"job_id": 3, "job_state": "PENDING", "state_reason": "Resources", "priority": 100,
     "nodes": "", "node_count": 1}
  ]})js";

TEST(SlurmSqueue, MapsHeldRunningAndPendingJobs) {
  auto jobs = ParseSqueueJson(kSqueue);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  const SlurmJob& held = (*jobs)[0];
  EXPECT_EQ(held.id, 2);
  EXPECT_EQ(held.state, JobState::kPending);
  EXPECT_TRUE(held.held);
  EXPECT_EQ(held.account, "physics");
  EXPECT_EQ(held.qos, "high");
  EXPECT_EQ(held.node_count, 2);
  EXPECT_EQ(held.gpus_per_node, 8);
  EXPECT_EQ(held.gpu_type, "h100");
  EXPECT_EQ(held.gpus, 16);
  EXPECT_TRUE(held.nodes.empty());
  EXPECT_EQ(held.admin_comment, "gantry-data dataset=s3://b/imagenet checkpoint=file:///ck/run");
  EXPECT_FALSE(held.requeue);       // sbatch --no-requeue
  EXPECT_TRUE((*jobs)[1].requeue);  // "requeue": true is absent here: Slurm's default
  const SlurmJob& running = (*jobs)[1];
  EXPECT_EQ(running.state, JobState::kRunning);
  EXPECT_FALSE(running.held);
  EXPECT_THAT(running.nodes, ElementsAre("n3"));
  EXPECT_THAT(running.required_nodes, ElementsAre("n3"));
  EXPECT_EQ(running.gpu_type, "");
  EXPECT_EQ(running.qos, "normal");
  EXPECT_EQ((*jobs)[2].qos, "");  // none given
  EXPECT_EQ(running.gpus_per_node, 2);
  EXPECT_EQ(running.start_time, 1796073893);
  EXPECT_EQ(running.restart_count, 1);
  EXPECT_EQ((*jobs)[2].state_reason, "Resources");
  EXPECT_FALSE((*jobs)[2].held);  // pending, but Slurm may start it: not held
}

// A job caught while Slurm requeues it is pending again, not ended: reading REQUEUED as "other"
// made the control loop finish jobs that came back.
TEST(SlurmSqueue, RequeueInProgressIsPending) {
  auto jobs = ParseSqueueJson(R"({"errors": [], "jobs": [
    {"job_id": 7, "job_state": "REQUEUED", "priority": 12, "node_count": 1, "nodes": "n1"},
    {"job_id": 8, "job_state": "REQUEUE_HOLD", "priority": 0, "node_count": 1, "nodes": ""}]})");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].state, JobState::kPending);
  EXPECT_FALSE((*jobs)[0].held);
  EXPECT_EQ((*jobs)[1].state, JobState::kPending);
  EXPECT_TRUE((*jobs)[1].held);
}

TEST(SlurmErrors, SlurmMessagesMapToCodes) {
  EXPECT_EQ(StatusFromSlurmError("Invalid job id specified for job 4242", "x").code(),
            StatusCode::kNotFound);
  EXPECT_EQ(StatusFromSlurmError("Invalid node name specified for job 2", "x").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusFromSlurmError("Requested node configuration is not available", "x").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusFromSlurmError("Access/permission denied for job 3", "x").code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(
      StatusFromSlurmError("Unable to contact slurm controller (connect failure)", "x").code(),
      StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromSlurmError("Socket timed out on send/recv operation", "x").code(),
            StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusFromSlurmError("something new", "x").code(), StatusCode::kIoError);
}

TEST(SlurmClientRun, MissingCommandIsNotFoundAndHangIsDeadlineExceeded) {
  SlurmClient missing(Opts("", "/nonexistent-dir"));
  EXPECT_EQ(missing.Nodes().status().code(), StatusCode::kNotFound);
  // /bin/sleep stands in for a Slurm command that does not answer.
  SlurmClient slow(Opts("", "/bin", 200));
  EXPECT_EQ(slow.Run({"sleep", "5"}).status().code(), StatusCode::kDeadlineExceeded);
  // A failing command's stderr decides the code.
  SlurmClient sh(Opts("", "/bin"));
  EXPECT_EQ(sh.Run({"sh", "-c", "echo 'Invalid job id specified' >&2; exit 1"}).status().code(),
            StatusCode::kNotFound);
  // scancel reports an unknown job on stderr with exit status 0.
  EXPECT_EQ(sh.Run({"sh", "-c", "echo 'Invalid job id specified' >&2; exit 0"}).status().code(),
            StatusCode::kNotFound);
  auto out = sh.Run({"sh", "-c", "echo \"$SLURM_CONF\""});
  ASSERT_TRUE(out.ok());
  SlurmClient conf(Opts("/x/slurm.conf", "/bin"));
  auto with_conf = conf.Run({"sh", "-c", "echo \"$SLURM_CONF\""});
  ASSERT_TRUE(with_conf.ok());
  EXPECT_EQ(*with_conf, "/x/slurm.conf\n");
}

// What `gantryd --check` asks of Slurm's side before a start: the commands it runs are there
// and executable, and the slurm.conf it names can be read; slurmctld is not asked.
TEST(SlurmClientCheckCommands, NamesTheFirstCommandOrConfigThatIsNotThere) {
  test_support::TempDir bin("gantry-slurm-bin");
  for (const char* name : {"sinfo", "squeue", "scontrol", "scancel"}) {
    std::ofstream(bin.sub(name)) << "#!/bin/sh\nexit 1\n";  // never run: a check runs nothing
    ASSERT_EQ(::chmod(bin.sub(name).c_str(), 0755), 0);
  }
  std::ofstream(bin.sub("slurm.conf")) << "ClusterName=x\n";
  EXPECT_TRUE(SlurmClient(Opts("", bin.path())).CheckCommands().ok());
  EXPECT_TRUE(SlurmClient(Opts(bin.sub("slurm.conf"), bin.path())).CheckCommands().ok());

  const Status conf = SlurmClient(Opts(bin.sub("none.conf"), bin.path())).CheckCommands();
  EXPECT_EQ(conf.code(), StatusCode::kNotFound) << conf.ToString();
  EXPECT_NE(conf.message().find(bin.sub("none.conf")), std::string::npos) << conf.message();
  ASSERT_EQ(::chmod(bin.sub("scontrol").c_str(), 0644), 0);  // no execute bit, even for root
  const Status plain = SlurmClient(Opts("", bin.path())).CheckCommands();
  EXPECT_EQ(plain.code(), StatusCode::kPermissionDenied) << plain.ToString();
  EXPECT_NE(plain.message().find(bin.sub("scontrol")), std::string::npos) << plain.message();
  std::filesystem::remove(bin.sub("squeue"));
  const Status gone = SlurmClient(Opts("", bin.path())).CheckCommands();
  EXPECT_EQ(gone.code(), StatusCode::kNotFound) << gone.ToString();
  EXPECT_NE(gone.message().find("squeue"), std::string::npos) << gone.message();
}

// Regression: scancel exits 0 without a word when Slurm refuses, so Cancel of an unknown or
// finished job once returned OK. A stand-in scancel behaves like 22.05's with -v.
TEST(SlurmClientRun, CancelReadsScancelsVerboseErrors) {
  test_support::TempDir bin("gantry-slurm-bin");
  const std::string script = bin.sub("scancel");
  {
    std::ofstream f(script);
    f << "#!/bin/sh\n"
         "[ \"$1\" = -v ] || exit 0  # without -v: silent, exit 0, whatever happened\n"
         "echo \"scancel: Terminating job $2\" >&2\n"
         "case $2 in\n"
         "  1) ;;\n"
         "  2) echo 'scancel: error: Kill job error on job id 2: Invalid job id specified' >&2 ;;\n"
         "  3) echo 'scancel: error: Kill job error on job id 3: Job/step already completing or "
         "completed' >&2 ;;\n"
         "esac\n"
         "exit 0\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  SlurmClient client(Opts("", bin.path()));
  EXPECT_TRUE(client.Cancel(1).ok());
  EXPECT_EQ(client.Cancel(2).code(), StatusCode::kNotFound);
  EXPECT_EQ(client.Cancel(3).code(), StatusCode::kFailedPrecondition);
}

TEST(SlurmTopology, ParsesConfAndScontrolOutput) {
  auto conf = ParseTopology(
      "# comment\nSwitchName=leaf0 Nodes=n[1-2]\nSwitchName=leaf1 Nodes=n[3-4]  # two\n\n"
      "SwitchName=spine0 Switches=leaf[0-1] LinkSpeed=100\n");
  ASSERT_TRUE(conf.ok()) << conf.status().ToString();
  ASSERT_EQ(conf->size(), 3u);
  EXPECT_THAT((*conf)[0].nodes, ElementsAre("n1", "n2"));
  EXPECT_THAT((*conf)[2].switches, ElementsAre("leaf0", "leaf1"));
  // scontrol show topology lists an inner switch's nodes too; only its switches count.
  auto live =
      ParseTopology("SwitchName=spine0 Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[0-1]\n");
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE((*live)[0].nodes.empty());
  EXPECT_EQ(ParseTopology("Nodes=n1\n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTopology("SwitchName=a junk\n").status().code(), StatusCode::kInvalidArgument);
}

TEST(SlurmAssociations, AccountRowsWithGpuLimits) {
  auto a = ParseAssociations(
      "root|||1\nroot|root||1\nbiology||gres/gpu=8|1\nbiology|root||1\n"
      "physics||cpu=100,gres/gpu=16|5\nchem|||parent\n");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 3u);
  EXPECT_EQ((*a)[0].name, "biology");
  EXPECT_EQ((*a)[0].gpu_limit, 8);
  EXPECT_EQ((*a)[1].gpu_limit, 16);
  EXPECT_EQ((*a)[1].fairshare, 5);
  EXPECT_EQ((*a)[2].gpu_limit, -1);
  EXPECT_EQ((*a)[2].fairshare, 1);
  EXPECT_EQ(ParseAssociations("a|b\n").status().code(), StatusCode::kIoError);
}

SlurmSnapshot TestSnapshot() {
  SlurmSnapshot s;
  s.cluster_name = "lab";
  s.nodes = *ParseSinfoJson(kSinfo);
  s.switches = *ParseTopology(
      "SwitchName=leaf0 Nodes=n[1-2]\nSwitchName=leaf1 Nodes=n3\nSwitchName=spine0 "
      "Switches=leaf[0-1]\n");
  s.accounts = *ParseAssociations("biology||gres/gpu=8|1\nphysics||gres/gpu=16|3\nfree|||1\n");
  return s;
}

TEST(SlurmImport, SpecLoadsWithNodesTypesTopologyAndTeams) {
  auto yaml = WriteClusterSpec(TestSnapshot(), {});
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  auto c = ParseClusterSpec(*yaml, "import");
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << *yaml;
  EXPECT_EQ(c->name(), "lab");
  ASSERT_EQ(c->nodes().size(), 4u);
  EXPECT_EQ(c->total_gpus(), 24);
  ASSERT_EQ(c->gpu_types().size(), 2u);
  EXPECT_EQ(c->gpu_types()[0].name, "h100");
  EXPECT_EQ(c->gpu_types()[0].memory_gb, 80);  // from Gantry's catalog
  EXPECT_THAT(c->levels(), ElementsAre("leaf", "spine"));
  EXPECT_EQ(c->nodes()[0].name, "n1");
  EXPECT_EQ(c->nodes()[2].name, "n3");
  EXPECT_EQ(c->nodes()[2].cpus, 8);
  EXPECT_EQ(c->nodes()[2].memory_mb, 31 * 1024);  // 32000 MB rounds down to 31 GB
  EXPECT_EQ(c->domains()[c->nodes()[0].domain].name, "leaf0");
  EXPECT_EQ(c->domains()[c->nodes()[2].domain].name, "leaf1");
  // n4 is on no switch: it lands in a leaf domain of its own.
  EXPECT_EQ(c->domains()[c->nodes()[3].domain].name, "no-switch");
  ASSERT_EQ(c->teams().size(), 3u);
  EXPECT_EQ(c->teams()[0].name, "biology");
  EXPECT_EQ(c->teams()[0].quota_gpus, 8);
  EXPECT_EQ(c->teams()[1].shares, 3);
  EXPECT_EQ(c->teams()[2].quota_gpus, kNoQuota);
}

// `sacctmgr -nP show qos format=name,priority,preempt,usagefactor,gracetime` as the test cluster
// of scripts/slurm prints it, plus a QOS that preempts two and one tied on priority.
constexpr const char* kSacctmgrQos =
    "normal|0||1.000000|00:00:00\n"
    "high|100|normal|2.000000|00:02:00\n"
    "urgent|1000|high,normal|0.500000|00:00:00\n"
    "low|0||1.000000|1-00:00:00\n";

TEST(SlurmImport, QosListWithLevelsByPriority) {
  auto qos = ParseQosList(kSacctmgrQos);
  ASSERT_TRUE(qos.ok()) << qos.status().ToString();
  ASSERT_EQ(qos->size(), 4u);
  EXPECT_EQ((*qos)[1].name, "high");
  EXPECT_EQ((*qos)[1].priority, 100);
  EXPECT_THAT((*qos)[1].preempt, ElementsAre("normal"));
  EXPECT_EQ((*qos)[1].usage_factor, 2.0);
  EXPECT_EQ((*qos)[1].grace_time, 120);
  EXPECT_EQ((*qos)[3].grace_time, 86400);
  EXPECT_THAT((*qos)[2].preempt, ElementsAre("high", "normal"));
  EXPECT_TRUE((*qos)[0].preempt.empty());
  // By priority from 0; low and normal tie at 0 and go by name.
  EXPECT_THAT(QosLevels(*qos), ElementsAre(1, 2, 3, 0));
  SlurmSnapshot s = TestSnapshot();
  s.qos = *qos;
  auto yaml = WriteClusterSpec(s, {});
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  auto c = ParseClusterSpec(*yaml, "import");
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << *yaml;
  ASSERT_EQ(c->qos().size(), 4u);
  const Qos* urgent = c->FindQos(3);
  ASSERT_NE(urgent, nullptr);
  EXPECT_EQ(urgent->name, "urgent");
  EXPECT_EQ(urgent->priority, 1000);
  EXPECT_EQ(urgent->usage_factor, 0.5);
  EXPECT_THAT(urgent->preempt, ElementsAre("high", "normal"));
  EXPECT_EQ(c->QosLevel("high"), 2);
  EXPECT_EQ(c->QosLevel("normal"), 1);
  EXPECT_EQ(c->FindQos(2)->usage_factor, 2.0);
  EXPECT_EQ(c->FindQos(2)->grace_time, 120);
  EXPECT_EQ(urgent->grace_time, kQosGraceUnset);  // Slurm's 0: the profile's grace_time applies
  EXPECT_EQ(ParseQosList("high|x||1|0\n").status().code(), StatusCode::kIoError);
  EXPECT_EQ(ParseQosList("high|1||1\n").status().code(), StatusCode::kIoError);
  EXPECT_EQ(ParseQosList("high|1||-2|0\n").status().code(), StatusCode::kIoError);
  EXPECT_EQ(ParseQosList("high|1||1|soon\n").status().code(), StatusCode::kIoError);
}

TEST(SlurmImport, FlatClusterAndUnknownGpuType) {
  SlurmSnapshot s = TestSnapshot();
  s.switches.clear();
  s.nodes[0].gpu_type = "mi300x";
  s.nodes[0].gres_gpus = {{"mi300x", 8}};
  auto yaml = WriteClusterSpec(s, {.name = "site", .teams = true});
  ASSERT_TRUE(yaml.ok());
  auto c = ParseClusterSpec(*yaml, "import");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name(), "site");
  EXPECT_TRUE(c->levels().empty());
  EXPECT_EQ(c->gpu_types()[0].name, "mi300x");
  EXPECT_EQ(c->gpu_types()[0].memory_gb, 0);
  EXPECT_NE(yaml->find("fill in"), std::string::npos);
}

TEST(SlurmImport, RejectsWhatTheSpecCannotSay) {
  SlurmSnapshot mixed = TestSnapshot();
  mixed.nodes[0].gres_gpus = {{"h100", 4}, {"a100", 4}};
  EXPECT_EQ(WriteClusterSpec(mixed, {}).status().code(), StatusCode::kInvalidArgument);
  SlurmSnapshot twice = TestSnapshot();
  twice.switches[1].nodes = {"n1"};
  EXPECT_EQ(WriteClusterSpec(twice, {}).status().code(), StatusCode::kInvalidArgument);
  SlurmSnapshot cycle = TestSnapshot();
  cycle.switches[0].nodes.clear();
  cycle.switches[0].switches = {"spine0"};
  EXPECT_EQ(WriteClusterSpec(cycle, {}).status().code(), StatusCode::kInvalidArgument);
  SlurmSnapshot empty;
  EXPECT_EQ(WriteClusterSpec(empty, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gantry::slurm

namespace gantry::slurm {
namespace {

Cluster ImportedTestCluster() {
  SlurmSnapshot s;
  s.cluster_name = "lab";
  s.nodes = *ParseSinfoJson(kSinfo);
  s.accounts = *ParseAssociations("biology||gres/gpu=8|1\nphysics||gres/gpu=16|1\n");
  return *ParseClusterSpec(*WriteClusterSpec(s, {}), "import");
}

TEST(SlurmMapping, JobsBecomeEngineRequests) {
  const Cluster c = ImportedTestCluster();
  auto jobs = *ParseSqueueJson(kSqueue);
  auto held = ToJobRequest(jobs[0], c, 1796073800);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->id, "2");
  EXPECT_EQ(held->team, c.FindTeam("physics"));
  EXPECT_EQ(held->submit, 97);
  EXPECT_EQ(held->nodes, 2);
  EXPECT_EQ(held->gpus_per_node, 8);
  EXPECT_EQ(held->gpus, 16);
  EXPECT_EQ(held->gpu_type_mask, 1u << c.FindGpuType("h100"));
  EXPECT_EQ(held->time_limit, 0);  // null: unlimited
  auto any_type = ToJobRequest(jobs[1], c, 0);
  ASSERT_TRUE(any_type.ok());
  EXPECT_EQ(any_type->gpu_type_mask, kAnyGpuType);
  EXPECT_EQ(any_type->gpus, 2);
  EXPECT_EQ(any_type->time_limit, 525600 * 60);

  SlurmJob anywhere = jobs[0];
  anywhere.gpus_per_node = 0;
  anywhere.gpus = 5;  // --gpus=5
  auto spread = ToJobRequest(anywhere, c, 0);
  ASSERT_TRUE(spread.ok());
  EXPECT_EQ(spread->gpus, 5);
  EXPECT_EQ(spread->nodes, 0);
  EXPECT_EQ(spread->gpus_per_node, 0);

  SlurmJob stranger = jobs[0];
  stranger.account = "chemistry";
  EXPECT_EQ(ToJobRequest(stranger, c, 0).status().code(), StatusCode::kNotFound);
  SlurmJob odd_type = jobs[0];
  odd_type.gpu_type = "v100";
  EXPECT_EQ(ToJobRequest(odd_type, c, 0).status().code(), StatusCode::kNotFound);
  SlurmJob cpu_only = jobs[0];
  cpu_only.gpus_per_node = 0;
  cpu_only.gpus = 0;
  EXPECT_EQ(ToJobRequest(cpu_only, c, 0).status().code(), StatusCode::kInvalidArgument);
}

// job_submit.lua's line: datasets in order and once each, the checkpoint; an administrator's own
// AdminComment declares nothing; a Gantry line Gantry cannot read is an error.
TEST(SlurmMapping, DataDeclarationsFromTheAdminComment) {
  auto d = ParseDataDeclarations(
      "gantry-data dataset=s3://b/a checkpoint=file:///ck dataset=file:///d/b dataset=s3://b/a");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_THAT(d->datasets, ElementsAre("s3://b/a", "file:///d/b"));
  EXPECT_EQ(d->checkpoint, "file:///ck");
  for (const char* none : {"", "reboot after this job", "gantry-database", "gantry-data"}) {
    auto n = ParseDataDeclarations(none);
    ASSERT_TRUE(n.ok()) << none;
    EXPECT_TRUE(n->datasets.empty()) << none;
    EXPECT_TRUE(n->checkpoint.empty()) << none;
  }
  for (const char* bad : {"gantry-data dataset=", "gantry-data s3://b/a", "gantry-data x=s3://b"}) {
    EXPECT_EQ(ParseDataDeclarations(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// Only a bare signal name reaches scancel: nothing that could add an option or a word.
TEST(SlurmSignal, NamesOnly) {
  for (const char* ok : {"TERM", "USR1", "9"}) EXPECT_TRUE(CheckSignalName(ok).ok()) << ok;
  for (const char* bad : {"", "term", "USR 1", "TERM --full", "-9", "TERM;id"}) {
    EXPECT_EQ(CheckSignalName(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SlurmMapping, NodeNamesAndIndicesRoundTrip) {
  const Cluster c = ImportedTestCluster();
  auto idx = NodeIndices(c, {"n3", "n1"});
  ASSERT_TRUE(idx.ok());
  EXPECT_THAT(*idx, ElementsAre(2, 0));
  EXPECT_THAT(NodeNames(c, *idx), ElementsAre("n3", "n1"));
  EXPECT_EQ(NodeIndices(c, {"n9"}).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gantry::slurm
