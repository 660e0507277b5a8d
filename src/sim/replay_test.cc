// The as-recorded replay and the replay error, on traces small enough to work out by hand.
#include "gantry/sim/replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gantry/sched/profile.h"
#include "gantry/workload/trace.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

// One node of 8 GPUs.
Cluster OneNode() {
  ClusterBuilder b("one", {});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n0", .gpu_type = 0, .gpus = 8}).ok());
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

constexpr char kSacctHeader[] =
    "JobID|User|Account|Partition|Submit|Start|Elapsed|Timelimit|AllocTRES|NNodes\n";

// Three jobs on the 8-GPU node. The site's scheduler started j3 half an hour after j2 although
// both fit together at 01:00 (a reservation, a drained GPU: the trace does not say why).
//   job  gpus  submit  recorded start  run   recorded wait  recorded end
//   j1   8     0       0               1h    0              3600
//   j2   4     600     3600            30m   3000           5400
//   j3   4     1200    5400            30m   4200           7200
constexpr char kSacctRows[] =
    "j1|alice|vision|gpu|2026-03-01T00:00:00|2026-03-01T00:00:00|01:00:00|02:00:00|gres/gpu=8|1\n"
    "j2|bob|nlp|gpu|2026-03-01T00:10:00|2026-03-01T01:00:00|00:30:00|02:00:00|gres/gpu=4|1\n"
    "j3|bob|nlp|gpu|2026-03-01T00:20:00|2026-03-01T01:30:00|00:30:00|02:00:00|gres/gpu=4|1\n";

struct Loaded {
  Cluster cluster = OneNode();
  Workload workload;
  std::vector<Team> teams;

  Loaded(const std::string& text, TraceFormat format) {
    auto w = ImportTraceText(text, "t.txt", format, {});
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    workload = std::move(w).value();
    auto t = ResolveWorkload(workload, cluster, {});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    teams = std::move(t).value();
  }
};

SimOptions Options() {
  SimOptions so;
  so.check_invariants = true;
  return so;
}

TEST(ReplayRecordedTest, ReproducesTheRecordedStartsExactly) {
  Loaded run(std::string(kSacctHeader) + kSacctRows, TraceFormat::kSacct);
  auto r = ReplayRecorded(run.cluster, run.teams, run.workload, Options());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->profile, "as-recorded");
  EXPECT_TRUE(r->as_recorded);
  EXPECT_TRUE(r->summary.as_recorded);
  ASSERT_EQ(r->outcomes.size(), 3u);
  const Time starts[] = {0, 3600, 5400};
  const Time ends[] = {3600, 5400, 7200};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(run.workload.jobs[i].recorded_start, starts[i]) << i;
    EXPECT_EQ(r->outcomes[i].start, starts[i]) << i;
    EXPECT_EQ(r->outcomes[i].end, ends[i]) << i;
  }
  const SimSummary& s = r->summary;
  EXPECT_EQ(s.jobs_completed, 3);
  EXPECT_DOUBLE_EQ(s.wait_mean, (0 + 3000 + 4200) / 3.0);
  EXPECT_EQ(s.makespan, 7200);
  // Busy GPU-seconds: 8 x 3600 + 4 x 1800 + 4 x 1800 = 43200 of 8 x 7200.
  EXPECT_DOUBLE_EQ(r->busy_gpu_seconds, 43200);
  EXPECT_DOUBLE_EQ(s.gpu_utilization, 0.75);
  EXPECT_EQ(r->recorded.peak_busy_gpus, 8);
  EXPECT_EQ(r->recorded.jobs_without_start, 0);
  // Pending job-seconds: j2 waits 3000 s, j3 4200 s.
  EXPECT_DOUBLE_EQ(r->total_wait_job_seconds, 7200);
  // The last sample is the end state: nothing running.
  ASSERT_FALSE(r->samples.empty());
  EXPECT_EQ(r->samples.back().t, 7200);
  EXPECT_EQ(r->samples.back().busy_gpus, 0);
  EXPECT_EQ(r->samples.front().busy_gpus, 8);
}

TEST(ReplayRecordedTest, ReplayErrorOfFifoMatchesHandComputation) {
  Loaded run(std::string(kSacctHeader) + kSacctRows, TraceFormat::kSacct);
  auto recorded = ReplayRecorded(run.cluster, run.teams, run.workload, Options());
  ASSERT_TRUE(recorded.ok()) << recorded.status().ToString();
  auto fifo_profile = FindProfile("fifo", {});
  ASSERT_TRUE(fifo_profile.ok());
  auto fifo = Simulate(run.cluster, run.teams, run.workload, *fifo_profile, Options());
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  // FIFO: j1 runs 0-3600; at 3600 j2 and j3 both fit (4 + 4 GPUs) and start together.
  EXPECT_EQ(fifo->outcomes[0].start, 0);
  EXPECT_EQ(fifo->outcomes[1].start, 3600);
  EXPECT_EQ(fifo->outcomes[2].start, 3600);
  EXPECT_FALSE(fifo->oracle);
  SetReplayError(*fifo, *recorded);
  ASSERT_TRUE(fifo->summary.replay_error.has_value());
  const ReplayError& e = *fifo->summary.replay_error;
  // Per job, run - recorded: j1 0, j2 0, j3 3600 - 5400 = -1800 (wait and JCT alike).
  // |diff| sorted: 0, 0, 1800. Mean 600; nearest rank p50 = 2nd = 0, p90 = 3rd = 1800.
  EXPECT_EQ(e.against, "as-recorded");
  EXPECT_EQ(e.jobs_compared, 3);
  EXPECT_EQ(e.jobs_not_compared, 0);
  EXPECT_DOUBLE_EQ(e.wait_abs_mean, 600);
  EXPECT_DOUBLE_EQ(e.wait_abs_p50, 0);
  EXPECT_DOUBLE_EQ(e.wait_abs_p90, 1800);
  EXPECT_DOUBLE_EQ(e.wait_bias, -600);
  EXPECT_DOUBLE_EQ(e.jct_abs_mean, 600);
  EXPECT_DOUBLE_EQ(e.jct_abs_p50, 0);
  EXPECT_DOUBLE_EQ(e.jct_abs_p90, 1800);
  EXPECT_DOUBLE_EQ(e.jct_bias, -600);

  // summary.json carries it; the recorded run's own summary has none, but its findings.
  const nlohmann::ordered_json j = SummaryToJson(*fifo);
  EXPECT_EQ(j["replay_error"]["jobs_compared"], 3);
  EXPECT_EQ(j["replay_error"]["wait_abs_mean_s"], 600.0);
  EXPECT_EQ(j["replay_error"]["jct_abs_p90_s"], 1800.0);
  EXPECT_EQ(j["oracle"], false);
  const nlohmann::ordered_json rj = SummaryToJson(*recorded);
  EXPECT_TRUE(rj["replay_error"].is_null());
  EXPECT_EQ(rj["as_recorded"], true);
  EXPECT_EQ(rj["recorded"]["jobs_without_start"], 0);
  EXPECT_EQ(rj["recorded"]["over_capacity"], false);

  // Against itself the error is exactly 0.
  SimResult again = *recorded;
  SetReplayError(again, *recorded);
  EXPECT_EQ(again.summary.replay_error->jobs_compared, 3);
  EXPECT_EQ(again.summary.replay_error->wait_abs_p90, 0);
  EXPECT_EQ(again.summary.replay_error->jct_abs_mean, 0);
}

TEST(ReplayRecordedTest, OracleProfilesAreFlagged) {
  Loaded run(std::string(kSacctHeader) + kSacctRows, TraceFormat::kSacct);
  auto sjf = FindProfile("sjf-oracle", {});
  ASSERT_TRUE(sjf.ok()) << sjf.status().ToString();
  auto r = Simulate(run.cluster, run.teams, run.workload, *sjf, Options());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->oracle);
  EXPECT_TRUE(r->summary.oracle);
  EXPECT_EQ(SummaryToJson(*r)["oracle"], true);
}

TEST(ReplayRecordedTest, TraceWithoutStartsIsAnErrorNamingItsFormat) {
  Loaded run(
      "timestamp,duration,num_gpus,gpu_time,cluster\n"
      "2017-10-03 00:00:00,3600,1,3600,vc1\n",
      TraceFormat::kPhilly);
  ASSERT_EQ(run.workload.jobs.size(), 1u);
  EXPECT_EQ(run.workload.jobs[0].recorded_start, -1);
  auto r = ReplayRecorded(run.cluster, run.teams, run.workload, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("this philly trace (t.txt) records none"));
  EXPECT_THAT(r.status().message(), HasSubstr("as-recorded replays the start times"));
  EXPECT_EQ(CheckRecordedStarts(run.workload).code(), StatusCode::kInvalidArgument);
  // An empty trace has nothing to replay, and nothing wrong with it.
  EXPECT_TRUE(CheckRecordedStarts(Workload{}).ok());
}

// SWF's wait time gives the start; a job whose wait is -1 (unknown) is reported, not replayed.
TEST(ReplayRecordedTest, SwfWaitTimesAndJobsWithoutAStart) {
  Loaded run(
      "; UnixStartTime: 1700000000\n"
      "1 0 100 600 4 -1 -1 4 1200 -1 1 1 1 -1 1 -1 -1 -1\n"
      "2 50 -1 300 2 -1 -1 2 600 -1 1 1 1 -1 1 -1 -1 -1\n"
      "3 60 40 300 2 -1 -1 2 600 -1 1 1 1 -1 1 -1 -1 -1\n",
      TraceFormat::kSwf);
  ASSERT_EQ(run.workload.jobs.size(), 3u);
  EXPECT_EQ(run.workload.jobs[0].recorded_start, 100);
  EXPECT_EQ(run.workload.jobs[1].recorded_start, -1);
  EXPECT_EQ(run.workload.jobs[2].recorded_start, 100);
  auto r = ReplayRecorded(run.cluster, run.teams, run.workload, Options());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->recorded.jobs_without_start, 1);
  EXPECT_EQ(r->recorded.example_jobs, std::vector<std::string>{"2"});
  EXPECT_EQ(r->outcomes[1].start, -1);
  EXPECT_EQ(r->summary.jobs_never_started, 1);
  EXPECT_EQ(r->summary.jobs_completed, 2);
  // Both replayed jobs start at 100 and share the node: 4 + 2 GPUs at once.
  EXPECT_EQ(r->recorded.peak_busy_gpus, 6);
  EXPECT_EQ(SummaryToJson(*r)["recorded"]["jobs_without_start"], 1);
}

TEST(ReplayRecordedTest, HeliosAndOpenbRecordTheirStarts) {
  Loaded helios(
      "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration\n"
      "h1,u,vc1,2,8,1,COMPLETED,1000,1500,2100,600\n",
      TraceFormat::kHelios);
  ASSERT_EQ(helios.workload.jobs.size(), 1u);
  EXPECT_EQ(helios.workload.jobs[0].submit, 0);
  EXPECT_EQ(helios.workload.jobs[0].recorded_start, 500);
  Loaded openb(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p1,1000,1024,1,1000,,LS,Running,100,900,300\n",
      TraceFormat::kOpenb);
  ASSERT_EQ(openb.workload.jobs.size(), 1u);
  EXPECT_EQ(openb.workload.jobs[0].recorded_start, 200);
  EXPECT_EQ(openb.workload.jobs[0].run_time, 600);
}

}  // namespace
}  // namespace gantry
