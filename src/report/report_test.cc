#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gantry/report/result.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "report/report_internal.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string MakeTempDir() {
  std::string tmpl = testing::TempDir() + "gantry_report_XXXXXX";
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

Cluster TinyCluster() {
  ClusterBuilder b("tiny", {"leaf"});
  auto h100 = b.AddGpuType({"H100", 80, 70, 700});
  EXPECT_TRUE(h100.ok());
  EXPECT_TRUE(b.OpenDomain("leaf0", 0).ok());
  EXPECT_TRUE(b.AddNode({.name = "n1", .gpu_type = *h100, .gpus = 8}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n2", .gpu_type = *h100, .gpus = 8}).ok());
  EXPECT_TRUE(b.CloseDomain().ok());
  Result<Cluster> c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

Job MakeJob(int32_t index, std::string id, int32_t team, int32_t user, Time submit, int32_t gpus) {
  Job j;
  j.index = index;
  j.id = std::move(id);
  j.team = team;
  j.user = user;
  j.submit = submit;
  j.gpus = gpus;
  return j;
}

JobOutcome Ran(Time start, Time end) {
  JobOutcome o;
  o.start = start;
  o.end = end;
  o.nodes_spanned = 1;
  o.span_level = -1;
  return o;
}

// Five jobs on 16 GPUs, two teams; numbers worked out by hand in the comments.
struct Fixture {
  Cluster cluster = TinyCluster();
  Workload workload;
  SimResult result;

  Fixture() {
    workload.source = "hand.csv";
    workload.format = "test";
    workload.users = {"alice", "bob"};
    workload.teams = {"a", "b"};
    workload.jobs = {MakeJob(0, "j0", 0, 0, 0, 8), MakeJob(1, "j1", 0, 0, 10, 4),
                     MakeJob(2, "j2", 1, 1, 20, 8), MakeJob(3, "j3", 1, 1, 30, 2),
                     MakeJob(4, "j4", 1, 1, 40, 16)};
    workload.stats.rows_skipped = 3;
    workload.stats.skipped_by_reason = {{"zero_gpus", 2}, {"bad_time", 1}};
    result.profile = "fifo";
    result.workload = &workload;
    result.cluster = &cluster;
    result.teams = {{"a", 8, 8.0}, {"b", kNoQuota, 1.0}};
    result.outcomes = {Ran(0, 100),    // wait 0,   jct 100, run 100, bsld 1
                       Ran(110, 130),  // wait 100, jct 120, run 20,  bsld 6
                       Ran(100, 400),  // wait 80,  jct 380, run 300, bsld 380/300
                       Ran(400, 405),  // wait 370, jct 375, run 5 -> 10, bsld 37.5
                       JobOutcome{}};  // never started
    result.outcomes[1].backfilled = true;
    result.outcomes[3].killed_at_limit = true;
    result.busy_gpu_seconds = 8 * 100 + 4 * 20 + 8 * 300 + 2 * 5;  // 3290
    result.frag_wait_job_seconds = 900;
    result.total_wait_job_seconds = 3600;
    for (Time t = 0; t <= 400; t += 50) {
      TimeSample s;
      s.t = t;
      s.team_busy_gpus = {t < 100 ? 8 : 0, t >= 100 && t < 400 ? 8 : 0};
      s.busy_gpus = s.team_busy_gpus[0] + s.team_busy_gpus[1];
      s.pending_jobs = t < 100 ? 3 : 1;
      s.running_jobs = s.busy_gpus > 0 ? 1 : 0;
      result.samples.push_back(s);
    }
    result.perf = {1.5, 10, 7, 6.6667, 1234};
    Summarize(result);
  }
};

TEST(NearestRankTest, MatchesDefinition) {
  const std::vector<double> v = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  EXPECT_EQ(report_internal::NearestRank(v, 0.0), 10);
  EXPECT_EQ(report_internal::NearestRank(v, 0.10), 10);
  EXPECT_EQ(report_internal::NearestRank(v, 0.11), 20);
  EXPECT_EQ(report_internal::NearestRank(v, 0.50), 50);
  EXPECT_EQ(report_internal::NearestRank(v, 0.95), 100);
  EXPECT_EQ(report_internal::NearestRank(v, 1.0), 100);
  EXPECT_EQ(report_internal::NearestRank({}, 0.5), 0);
  // 0.95 * 100 is 95.00000000000001 in floating point; the rank must still be 95.
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_EQ(report_internal::NearestRank(hundred, 0.95), 95);
  EXPECT_EQ(report_internal::NearestRank(hundred, 0.99), 99);
}

TEST(SummarizeTest, ComputesExactStatistics) {
  Fixture f;
  const SimSummary& s = f.result.summary;
  EXPECT_EQ(s.profile, "fifo");
  EXPECT_EQ(s.jobs, 5);
  EXPECT_EQ(s.jobs_completed, 4);
  EXPECT_EQ(s.jobs_unfinished, 1);
  EXPECT_EQ(s.jobs_never_started, 1);
  EXPECT_EQ(s.jobs_backfilled, 1);
  EXPECT_EQ(s.jobs_killed_at_limit, 1);
  EXPECT_EQ(s.jobs_skipped, 3);
  ASSERT_EQ(s.skipped_by_reason.size(), 2u);
  EXPECT_EQ(s.skipped_by_reason[0].first, "bad_time");  // key order, deterministic
  EXPECT_EQ(s.skipped_by_reason[1].second, 2);
  EXPECT_EQ(s.makespan, 405);
  // Waits sorted: 0 80 100 370; JCTs sorted: 100 120 375 380.
  EXPECT_DOUBLE_EQ(s.wait_mean, 137.5);
  EXPECT_EQ(s.wait_p50, 80);
  EXPECT_EQ(s.wait_p95, 370);
  EXPECT_EQ(s.wait_p99, 370);
  EXPECT_DOUBLE_EQ(s.jct_mean, 243.75);
  EXPECT_EQ(s.jct_p50, 120);
  EXPECT_EQ(s.jct_p95, 380);
  EXPECT_EQ(s.jct_p99, 380);
  EXPECT_NEAR(s.bounded_slowdown_mean, (1 + 6 + 380.0 / 300 + 37.5) / 4, 1e-12);
  EXPECT_EQ(s.bounded_slowdown_p95, 37.5);
  EXPECT_NEAR(s.gpu_utilization, 3290.0 / (16 * 405), 1e-12);
  EXPECT_DOUBLE_EQ(s.frag_wait_job_hours, 0.25);
  EXPECT_DOUBLE_EQ(s.total_wait_job_hours, 1.0);
  EXPECT_DOUBLE_EQ(s.frag_wait_fraction, 0.25);

  ASSERT_EQ(s.teams.size(), 2u);
  const TeamSummary& a = s.teams[0];
  const TeamSummary& b = s.teams[1];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.quota_gpus, 8);
  EXPECT_EQ(a.jobs, 2);
  EXPECT_EQ(a.jobs_completed, 2);
  EXPECT_NEAR(a.gpu_hours, 880.0 / 3600, 1e-12);
  EXPECT_NEAR(a.share_of_usage, 880.0 / 3290, 1e-12);
  EXPECT_NEAR(a.quota_utilization, 880.0 / (8 * 405), 1e-12);
  EXPECT_DOUBLE_EQ(a.mean_wait_s, 50);
  EXPECT_DOUBLE_EQ(a.mean_slowdown, 3.5);
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.jobs, 3);
  EXPECT_EQ(b.jobs_completed, 2);
  EXPECT_EQ(b.quota_utilization, 0);  // no quota
  EXPECT_DOUBLE_EQ(b.mean_wait_s, 225);
  const double xb = (380.0 / 300 + 37.5) / 2;
  EXPECT_NEAR(b.mean_slowdown, xb, 1e-12);
  const double xa = 3.5;
  EXPECT_NEAR(s.jain_fairness, (xa + xb) * (xa + xb) / (2 * (xa * xa + xb * xb)), 1e-12);
  EXPECT_NEAR(s.jain_fairness, 0.674866, 1e-6);
}

TEST(SummarizeTest, EqualTeamsArePerfectlyFairAndEmptyRunIsZero) {
  Fixture f;
  // Give both teams one identical finished job each.
  f.workload.jobs.resize(2);
  f.workload.jobs[1].team = 1;
  f.result.outcomes = {Ran(0, 100), Ran(10, 110)};
  Summarize(f.result);
  EXPECT_DOUBLE_EQ(f.result.summary.jain_fairness, 1.0);

  f.result.outcomes = {JobOutcome{}, JobOutcome{}};
  Summarize(f.result);
  EXPECT_EQ(f.result.summary.jobs_completed, 0);
  EXPECT_EQ(f.result.summary.jobs_never_started, 2);
  EXPECT_EQ(f.result.summary.makespan, 0);
  EXPECT_EQ(f.result.summary.gpu_utilization, 0);
  EXPECT_EQ(f.result.summary.jain_fairness, 0);
  EXPECT_EQ(f.result.summary.wait_p99, 0);
}

// Share against entitlement on the fixture (16 GPUs; team a: quota 8, shares 8; team b: no
// quota, shares 1), worked out by hand. Contended intervals, entitlements by water-filling and
// x = used / entitled:
//   [20,100)  a wants 12 (capped at its quota 8), b 8..26: a 8, b 8; a uses 8, b 0 -> Jain 1/2
//   [100,110) a wants 4, b 26: a 4, b 12; a uses 0, b 8 (x 2/3)              -> Jain 1/2
//   [110,130) as above, a uses 4 (x 1)                                       -> Jain 25/26
//   [130,405) only b wants: one team                                         -> Jain 1
// Average over 385 contended seconds: (0.5 * 90 + 25/26 * 20 + 275) / 385; of a 405 s run.
TEST(SummarizeTest, ShareFairnessMatchesHandComputation) {
  Fixture f;
  EXPECT_NEAR(f.result.summary.share_fairness, (0.5 * 90 + 25.0 / 26.0 * 20 + 275) / 385, 1e-9);
  EXPECT_NEAR(f.result.summary.contended_fraction, 385.0 / 405.0, 1e-9);

  // Never contended: everyone got what it wanted.
  f.workload.jobs.resize(2);
  f.result.outcomes = {Ran(0, 100), Ran(10, 130)};
  Summarize(f.result);
  EXPECT_EQ(f.result.summary.share_fairness, 1.0);
  EXPECT_EQ(f.result.summary.contended_fraction, 0.0);

  // Two equal teams wanting the whole cluster each, one served first: Jain 1/2 throughout the
  // first job, then only the second team wants (1).
  f.workload.jobs = {MakeJob(0, "j0", 0, 0, 0, 16), MakeJob(1, "j1", 1, 1, 0, 16)};
  f.result.teams = {{"a", kNoQuota, 1.0}, {"b", kNoQuota, 1.0}};
  f.result.outcomes = {Ran(0, 100), Ran(100, 200)};
  Summarize(f.result);
  EXPECT_NEAR(f.result.summary.share_fairness, 0.5, 1e-12);
  EXPECT_NEAR(f.result.summary.contended_fraction, 0.5, 1e-12);
}

// A run a node failure ended counts as use while it ran. 16 GPUs, two equal teams. Team a's j0
// (8 GPUs) runs [0,100), is interrupted, and runs again [100,200); team b's j1 (8) runs [0,100)
// and j2 (16) runs [200,300), all submitted at 0.
//   [0,100)   a wants 8, b 24: 8 each; a uses 8 (the interrupted run), b 8      -> Jain 1
//   [100,200) a wants 8, b 16: 8 each; a uses 8, b 0                            -> Jain 1/2
//   [200,300) only b wants 16 of 16: not contended
// Average over 200 contended seconds: 0.75. Counting only last runs gave [0,100) x = (0, 1),
// Jain 1/2, and 0.5 overall.
TEST(SummarizeTest, ShareFairnessCountsInterruptedRunsAsUse) {
  Fixture f;
  f.workload.jobs = {MakeJob(0, "j0", 0, 0, 0, 8), MakeJob(1, "j1", 1, 0, 0, 8),
                     MakeJob(2, "j2", 1, 0, 0, 16)};
  f.result.teams = {{"a", kNoQuota, 1.0}, {"b", kNoQuota, 1.0}};
  f.result.outcomes = {Ran(100, 200), Ran(0, 100), Ran(200, 300)};
  f.result.outcomes[0].requeues = 1;
  f.result.interrupted_runs = {{0, 0, 100}};
  Summarize(f.result);
  EXPECT_NEAR(f.result.summary.share_fairness, 0.75, 1e-12);
  EXPECT_NEAR(f.result.summary.contended_fraction, 200.0 / 300.0, 1e-12);
}

TEST(JobsCsvTest, ExactContent) {
  Cluster cluster = TinyCluster();
  Workload w;
  w.users = {"alice", "bob \"the\" builder"};
  w.teams = {"vision", "nlp"};
  w.jobs = {MakeJob(0, "1", 0, 0, 5, 8), MakeJob(1, "job,2", 1, 1, 7, 16),
            MakeJob(2, "3", 1, 0, 9, 1)};
  SimResult r;
  r.workload = &w;
  r.cluster = &cluster;
  r.teams = {{"vision", 8, 8}, {"nlp", kNoQuota, 1}};
  JobOutcome o0 = Ran(5, 6);  // 1-second run: bounded by 10 s -> slowdown max(1, 1/10) = 1
  JobOutcome o1 = Ran(100, 200);
  o1.nodes_spanned = 2;
  o1.span_level = 0;
  o1.backfilled = true;
  o1.killed_at_limit = true;
  o1.requeues = 2;
  o1.preemptions = 3;
  o1.energy_kwh = 2.5;
  o1.preemption_lost_gpu_seconds = 5400;
  o1.reason = "Resources";
  o1.first_estimate = 90;
  JobOutcome o2;
  o2.cancelled = true;
  o2.reason = "Quota";
  r.outcomes = {o0, o1, o2};
  const std::string path = MakeTempDir() + "/jobs.csv";
  ASSERT_TRUE(WriteJobsCsv(r, path).ok());
  EXPECT_EQ(ReadFile(path),
            "id,team,user,gpus,nodes_spanned,span_level,submit,start,end,wait,jct,"
            "bounded_slowdown,backfilled,killed_at_limit,cancelled,requeues,preemptions,"
            "energy_kwh,preemption_lost_gpu_hours,reason,first_estimate\n"
            "1,vision,alice,8,1,-1,5,5,6,0,1,1.0000,0,0,0,0,0,0.000000,0.0000,,\n"
            "\"job,2\",nlp,\"bob \"\"the\"\" builder\",16,2,0,7,100,200,93,193,1.9300,1,1,0,2,3,"
            "2.500000,1.5000,Resources,90\n"
            "3,nlp,alice,1,0,-1,9,,,,,,0,0,1,0,0,0.000000,0.0000,Quota,\n");
  // No temporary file is left beside it.
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
}

TEST(JobsCsvTest, RejectsMismatchedOutcomesAndUnwritablePath) {
  Fixture f;
  f.result.outcomes.pop_back();
  EXPECT_EQ(WriteJobsCsv(f.result, MakeTempDir() + "/jobs.csv").code(), StatusCode::kInternal);
  Fixture g;
  Status st = WriteJobsCsv(g.result, "/nonexistent-dir/jobs.csv");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_THAT(st.message(), HasSubstr("/nonexistent-dir/jobs.csv"));
}

TEST(InterruptedRunsCsvTest, OneRowPerInterruptedRunInTheOrderTheyEnded) {
  Cluster cluster = TinyCluster();
  Workload w;
  w.teams = {"vision"};
  w.users = {"alice"};
  w.jobs = {MakeJob(0, "1", 0, 0, 0, 8), MakeJob(1, "job,2", 0, 0, 0, 8)};
  SimResult r;
  r.workload = &w;
  r.cluster = &cluster;
  r.outcomes = {Ran(500, 600), Ran(400, 700)};
  const std::string dir = MakeTempDir();
  ASSERT_TRUE(WriteInterruptedRunsCsv(r, dir + "/none.csv").ok());
  EXPECT_EQ(ReadFile(dir + "/none.csv"), "id,start,end\n");
  r.interrupted_runs = {{1, 100, 160}, {0, 10, 200}, {1, 220, 400}};
  ASSERT_TRUE(WriteInterruptedRunsCsv(r, dir + "/runs.csv").ok());
  EXPECT_EQ(ReadFile(dir + "/runs.csv"),
            "id,start,end\n\"job,2\",100,160\n1,10,200\n\"job,2\",220,400\n");
  // A run of a job the workload does not have is a bug upstream, not a row to guess.
  r.interrupted_runs.push_back({2, 0, 1});
  EXPECT_EQ(WriteInterruptedRunsCsv(r, dir + "/bad.csv").code(), StatusCode::kInternal);
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad.csv"));
  r.interrupted_runs.pop_back();
  EXPECT_EQ(WriteInterruptedRunsCsv(r, "/nonexistent-dir/x.csv").code(), StatusCode::kIoError);
}

TEST(SummaryJsonTest, DeterministicAndHasPerformance) {
  Fixture f1, f2;
  f2.result.perf = {99.0, 10, 7, 0.1, 1};  // only performance differs
  const std::string d1 = SummaryToJson(f1.result).dump(2);
  const std::string d1_again = SummaryToJson(f1.result).dump(2);
  EXPECT_EQ(d1, d1_again);
  nlohmann::ordered_json j1 = SummaryToJson(f1.result);
  nlohmann::ordered_json j2 = SummaryToJson(f2.result);
  ASSERT_TRUE(j1.contains("performance"));
  EXPECT_EQ(j1["performance"]["wall_seconds"], 1.5);
  EXPECT_EQ(j1["performance"]["peak_rss_kb"], 1234);
  EXPECT_EQ(j1["performance"]["events_per_second"], 6.6667);
  EXPECT_NE(j1.dump(), j2.dump());
  j1.erase("performance");
  j2.erase("performance");
  EXPECT_EQ(j1.dump(), j2.dump());

  // Fixed key order and rounded floats.
  EXPECT_EQ(j1.begin().key(), "profile");
  EXPECT_EQ(j1["makespan_s"], 405);
  EXPECT_EQ(j1["wait_p50_s"], 80.0);
  EXPECT_EQ(j1["gpu_utilization"], 0.507716);  // 3290 / 6480 to 6 significant digits
  EXPECT_EQ(j1["skipped_by_reason"]["zero_gpus"], 2);
  EXPECT_EQ(j1["teams"][1]["quota_gpus"], nullptr);
  EXPECT_EQ(j1["teams"][0]["quota_gpus"], 8);
  EXPECT_EQ(j1["run"]["cluster_gpus"], 16);

  const std::string path = MakeTempDir() + "/summary.json";
  ASSERT_TRUE(WriteSummaryJson(f1.result, path).ok());
  EXPECT_EQ(ReadFile(path), d1 + "\n");
}

TEST(SummaryTableTest, AlignedRowsPerProfile) {
  Fixture f1, f2;
  f2.result.profile = "backfill-long-name";
  Summarize(f2.result);
  const std::string table = SummaryTable({&f1.result, &f2.result});
  std::vector<std::string> lines;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);  // header, rule, two profiles
  EXPECT_THAT(lines[0], HasSubstr("wait p95"));
  EXPECT_EQ(lines[2].rfind("fifo ", 0), 0u);
  EXPECT_EQ(lines[3].rfind("backfill-long-name", 0), 0u);
  for (const std::string& l : lines) EXPECT_EQ(l.size(), lines[0].size()) << l;
  EXPECT_THAT(lines[2], HasSubstr("6.8m"));   // makespan 405 s
  EXPECT_THAT(lines[2], HasSubstr("50.8"));   // utilisation %
  EXPECT_THAT(lines[2], HasSubstr("0.675"));  // Jain
  EXPECT_THAT(lines[2], HasSubstr("25.0"));   // frag-wait %
}

// Oracles and the recorded history are marked in the terminal table as in the report, with a
// line saying what the mark means; a table without them has no such line.
TEST(SummaryTableTest, MarksOraclesAndTheRecordedHistory) {
  Fixture f1, f2, f3;
  f2.result.profile = "sjf-oracle";
  f2.result.oracle = true;
  Summarize(f2.result);
  f3.result.profile = "as-recorded";
  f3.result.as_recorded = true;
  Summarize(f3.result);
  const std::string table = SummaryTable({&f1.result, &f2.result, &f3.result});
  std::vector<std::string> lines;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 7u) << table;  // header, rule, three profiles, two notes
  EXPECT_EQ(lines[2].rfind("fifo ", 0), 0u);
  EXPECT_EQ(lines[3].rfind("sjf-oracle * ", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4].rfind("as-recorded (recorded) ", 0), 0u) << lines[4];
  EXPECT_EQ(lines[5].rfind("* oracle: reads the trace's true run times", 0), 0u);
  EXPECT_EQ(lines[6], "(recorded): the trace's own start times, replayed");
  EXPECT_EQ(SummaryTable({&f1.result}).find("oracle"), std::string::npos);
}

TEST(CompactDurationTest, PicksUnit) {
  EXPECT_EQ(report_internal::CompactDuration(0), "0.0s");
  EXPECT_EQ(report_internal::CompactDuration(42), "42s");
  EXPECT_EQ(report_internal::CompactDuration(750), "12.5m");
  EXPECT_EQ(report_internal::CompactDuration(3.2 * 3600), "3.2h");
  EXPECT_EQ(report_internal::CompactDuration(4.1 * 86400), "4.1d");
}

// Points GANTRY_WEB_DIR at `dir` for one scope.
class ScopedWebDir {
 public:
  explicit ScopedWebDir(const std::string& dir) { setenv("GANTRY_WEB_DIR", dir.c_str(), 1); }
  ~ScopedWebDir() { unsetenv("GANTRY_WEB_DIR"); }
};

size_t CountCharts(const std::string& html) {
  size_t charts = 0;
  for (size_t p = html.find("<div class=\"chart\""); p != std::string::npos;
       p = html.find("<div class=\"chart\"", p + 1)) {
    ++charts;
  }
  return charts;
}

bool HaveWebAssets() {
  const std::string web = GANTRY_WEB_DIR;
  return access((web + "/vega/build/vega.min.js").c_str(), R_OK) == 0;
}

// The text of one table of the page: from `<table class="NAME"` to its end.
std::string Table(const std::string& html, const std::string& name) {
  const size_t begin = html.find("<table class=\"" + name + "\"");
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</table>", begin) - begin);
}

// Per team, over the fixture's contended instants (ShareFairnessMatchesHandComputation's
// intervals; [130,400) and [400,405): only b wants, entitled to all 16 GPUs, using 8 then 2):
//   a: used 8x80 + 0x10 + 4x20 = 720 GPU-s; entitled 8x80 + 4x10 + 4x20 = 760
//   b: used 0x80 + 8x10 + 8x20 + 8x270 + 2x5 = 2410; entitled 8x80 + 12x10 + 12x20 + 16x275 = 5400
// Quota GPU-hours of a: 8 GPUs x 405 s = 0.9 h; it used (8x100 + 4x20) / 3600 h of them.
TEST(SummarizeTest, PerTeamEntitlementMatchesHandComputation) {
  Fixture f;
  const std::vector<TeamSummary>& t = f.result.summary.teams;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0].contended_gpu_hours, 720 / 3600.0, 1e-12);
  EXPECT_NEAR(t[0].entitled_gpu_hours, 760 / 3600.0, 1e-12);
  EXPECT_NEAR(t[0].entitlement_ratio, 720 / 760.0, 1e-12);
  EXPECT_NEAR(t[1].contended_gpu_hours, 2410 / 3600.0, 1e-12);
  EXPECT_NEAR(t[1].entitled_gpu_hours, 5400 / 3600.0, 1e-12);
  EXPECT_NEAR(t[1].entitlement_ratio, 2410 / 5400.0, 1e-12);
  EXPECT_NEAR(t[0].entitled_share, 760 / 6160.0, 1e-12);
  EXPECT_NEAR(t[1].contended_share, 2410 / 3130.0, 1e-12);
  EXPECT_NEAR(t[0].quota_gpu_hours, 0.9, 1e-12);
  EXPECT_NEAR(t[0].quota_utilization, 880 / 3240.0, 1e-12);
  EXPECT_EQ(t[1].quota_gpu_hours, 0);  // no quota
  const nlohmann::ordered_json j = SummaryToJson(f.result);
  EXPECT_EQ(j["teams"][0]["entitlement_ratio"], report_internal::Round6(720 / 760.0));
  EXPECT_EQ(j["teams"][0]["quota_gpu_hours"], 0.9);
  EXPECT_TRUE(j["replay_error"].is_null());
}

// The fixture against a second run in which j3 starts on submission (at 30, ending at 35):
//   JCT mean: fixture (100 + 120 + 380 + 375) / 4 = 243.75; other (100 + 120 + 380 + 5) / 4 =
//   151.25, so -37.9%. Wait mean: 137.5 against (0 + 100 + 80 + 0) / 4 = 45, -67.3%.
//   Utilisation: 3290 GPU-s over 16 x 405 (50.77%) against 16 x 400 (51.41%): +0.6 pp.
struct TwoRuns {
  Fixture base, other;
  TwoRuns() {
    other.result.profile = "sjf-oracle";
    other.result.oracle = true;
    other.result.outcomes[3] = Ran(30, 35);
    Summarize(other.result);
  }
};

TEST(HtmlReportTest, DeltasTeamsAndOracleMarks) {
  if (!HaveWebAssets()) GTEST_SKIP() << "web assets missing; run scripts/setup";
  TwoRuns runs;
  const std::string path = MakeTempDir() + "/report.html";
  ASSERT_TRUE(WriteHtmlReport({&runs.base.result, &runs.other.result}, path).ok());
  const std::string html = ReadFile(path);

  const std::string deltas = Table(html, "deltas");
  ASSERT_FALSE(deltas.empty());
  EXPECT_THAT(deltas, HasSubstr("fifo (baseline)"));
  EXPECT_THAT(deltas, HasSubstr("<span class=\"delta\">-37.9%</span>"));
  EXPECT_THAT(deltas, HasSubstr("<span class=\"delta\">-67.3%</span>"));
  EXPECT_THAT(deltas, HasSubstr("<span class=\"delta\">+0.6 pp</span>"));
  EXPECT_THAT(html, HasSubstr("Baseline: <b>fifo</b>"));

  // The oracle is marked wherever profiles are listed, and the page says what that means.
  const std::string oracle_mark = "sjf-oracle <span class=\"mark oracle\"";
  EXPECT_THAT(Table(html, "summary"), HasSubstr(oracle_mark));
  EXPECT_THAT(deltas, HasSubstr(oracle_mark));
  EXPECT_THAT(Table(html, "summary"), ::testing::Not(HasSubstr("fifo <span class=\"mark")));
  EXPECT_THAT(html, HasSubstr("their numbers are upper bounds"));

  // Per team: a's quota GPU-hours (0.9), used/entitled 720/760 = 0.95 and b's 2410/5400 = 0.45.
  const std::string teams = Table(html, "teams");
  EXPECT_THAT(teams, HasSubstr("<tr><th>a</th><td class=\"name\">fifo</td><td>2</td><td>8</td>"
                               "<td>0.2</td><td>0.9</td><td>27.2%</td>"));
  EXPECT_THAT(teams, HasSubstr("<td>0.95</td>"));
  EXPECT_THAT(teams, HasSubstr("<td>0.45</td>"));
  // Share fairness per profile, from ShareFairnessMatchesHandComputation:
  // (0.5 x 90 + 25/26 x 20 + 275) / 385 = 0.8811.
  EXPECT_THAT(Table(html, "fairness"), HasSubstr("<tr><th>fifo</th><td>0.881</td>"));

  // Wait by size: fifo's 2-4 GPU jobs (j1, j3) waited 100 and 370 s, mean 235.
  EXPECT_THAT(html, HasSubstr("{\"profile\":\"fifo\",\"size\":\"2-4\",\"jobs\":2,"
                              "\"mean_wait\":235.0,\"p90_wait\":370.0}"));

  // Another baseline: fifo against sjf-oracle's JCT mean, (243.75 - 151.25) / 151.25 = +61.2%.
  HtmlReportOptions options;
  options.baseline = "sjf-oracle";
  ASSERT_TRUE(WriteHtmlReport({&runs.base.result, &runs.other.result}, path, options).ok());
  EXPECT_THAT(Table(ReadFile(path), "deltas"), HasSubstr("+61.2%"));
  options.baseline = "nope";
  const Status bad = WriteHtmlReport({&runs.base.result, &runs.other.result}, path, options);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("'nope'"));
}

TEST(HtmlReportTest, CalendarDatesPreemptionChartsAndReplayError) {
  if (!HaveWebAssets()) GTEST_SKIP() << "web assets missing; run scripts/setup";
  TwoRuns runs;
  // Wall-clock trace: t = 0 is 2023-11-14T22:13:20Z.
  runs.base.workload.epoch_unix = 1700000000;
  runs.other.workload.epoch_unix = 1700000000;
  // Two preemptions in the second run, at 100 and 200, losing 1 GPU-hour in all.
  for (TimeSample& s : runs.other.result.samples) {
    s.preemptions = s.t >= 200 ? 2 : s.t >= 100 ? 1 : 0;
    s.preemption_lost_gpu_seconds = s.t >= 200 ? 3600 : 0;
    s.lost_gpu_seconds = s.preemption_lost_gpu_seconds;
  }
  runs.other.result.preemptions = 2;
  Summarize(runs.other.result);
  SetReplayError(runs.other.result, runs.base.result);
  const std::string path = MakeTempDir() + "/report.html";
  ASSERT_TRUE(WriteHtmlReport({&runs.base.result, &runs.other.result}, path).ok());
  const std::string html = ReadFile(path);
  // Times are Unix milliseconds on a UTC scale.
  EXPECT_THAT(html, HasSubstr("\"t\":1700000000000"));
  EXPECT_THAT(html, HasSubstr("\"scale\":{\"type\":\"utc\"}"));
  EXPECT_THAT(html, HasSubstr("utcFormat(datum.value, '%Y-%m-%d %H:%M')"));
  EXPECT_THAT(html, HasSubstr("Date (UTC, as the trace records it)"));
  // + preemptions and failures, + work lost.
  EXPECT_EQ(CountCharts(html), 9u);
  EXPECT_THAT(html, HasSubstr("Preemptions and failures"));
  EXPECT_THAT(html, HasSubstr("\"series\":\"preemptions\",\"t\":1700000200000,\"value\":2.0}"));
  // Only the series some run has: no requeues or node failures drawn.
  EXPECT_THAT(html, ::testing::Not(HasSubstr("\"series\":\"requeues\"")));
  // Replay error against fifo (standing in for the recorded run): only j3 differs, by 370 s
  // of wait: mean 92.5 s.
  const std::string replay = Table(html, "replay");
  EXPECT_THAT(replay, HasSubstr("<td>fifo</td><td>4</td><td>0</td><td>1.5m</td>"));

  // Without wall-clock times: hours since the trace's start.
  runs.other.workload.epoch_unix = 0;
  ASSERT_TRUE(WriteHtmlReport({&runs.base.result, &runs.other.result}, path).ok());
  EXPECT_THAT(ReadFile(path), HasSubstr("Time since trace start (hours)"));
}

TEST(HtmlReportTest, MissingWebAssetsIsAClearError) {
  Fixture f;
  const std::string dir = MakeTempDir();
  ScopedWebDir web(dir);
  const std::string path = dir + "/report.html";
  Status st = WriteHtmlReport({&f.result}, path);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("scripts/setup"));
  EXPECT_THAT(st.message(), HasSubstr("vega"));
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "no chart-less page may be written";
}

TEST(HtmlReportTest, SelfContainedWithEscapedNames) {
  const std::string web = GANTRY_WEB_DIR;
  if (access((web + "/vega/build/vega.min.js").c_str(), R_OK) != 0) {
    GTEST_SKIP() << "web assets missing in " << web << "; run scripts/setup";
  }
  Fixture f1, f2;
  f2.result.profile = "evil</script><b>";
  Summarize(f2.result);
  const std::string path = MakeTempDir() + "/report.html";
  ASSERT_TRUE(WriteHtmlReport({&f1.result, &f2.result}, path).ok());
  const std::string html = ReadFile(path);
  // 3 libraries + chart data + render script; a name must not close a script element early.
  size_t closes = 0;
  for (size_t p = html.find("</script>"); p != std::string::npos;
       p = html.find("</script>", p + 1)) {
    ++closes;
  }
  EXPECT_EQ(closes, 5u);
  EXPECT_THAT(html, HasSubstr("evil&lt;/script&gt;&lt;b&gt;"));  // in the HTML tables
  EXPECT_THAT(html, ::testing::Not(HasSubstr("src=\"http")));    // nothing fetched from the web
  // 4 comparison charts + wait by size + one team-share chart per profile; no preemption or
  // failure charts, as nothing was interrupted.
  EXPECT_EQ(CountCharts(html), 7u);
  EXPECT_THAT(html, ::testing::Not(HasSubstr("Preemptions and failures")));
  EXPECT_THAT(html, HasSubstr("renderer: 'svg'"));

  // Same input, same bytes.
  const std::string path2 = MakeTempDir() + "/report.html";
  ASSERT_TRUE(WriteHtmlReport({&f1.result, &f2.result}, path2).ok());
  EXPECT_EQ(ReadFile(path2), html);
}

}  // namespace
}  // namespace gantry
