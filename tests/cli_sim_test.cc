// End-to-end tests of `gantry sim` as a user runs it: the real binary on the bundled data.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string output;  // stdout and stderr together
};

CliRun RunCli(const std::string& args) {
  const std::string cmd = std::string(GANTRY_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path TempDir(const std::string& name) {
  fs::path d =
      fs::path(testing::TempDir()) / ("gantry_cli_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const std::string kSource = GANTRY_SOURCE_DIR;
const std::string kSample = kSource + "/data/philly-sample.csv";
const std::string kCluster = kSource + "/data/clusters/philly-256.yaml";

// Same inputs and seed: byte-identical jobs.csv, and summary.json identical except for the
// "performance" object (wall time), which is the one documented non-deterministic part.
TEST(CliSim, SameInputsGiveByteIdenticalOutputs) {
  const fs::path a = TempDir("det_a"), b = TempDir("det_b");
  for (const fs::path& d : {a, b}) {
    CliRun r = RunCli("sim --cluster " + kCluster + " --trace " + kSample +
                      " --format philly --profile fifo,slurm-like,slurm-conservative --seed 7 "
                      "--check-invariants --no-report --out " +
                      d.string());
    ASSERT_EQ(r.code, 0) << r.output;
  }
  for (const std::string profile : {"fifo", "slurm-like", "slurm-conservative"}) {
    const std::string csv_a = ReadFile(a / profile / "jobs.csv");
    ASSERT_GT(csv_a.size(), 1000u);
    EXPECT_EQ(csv_a, ReadFile(b / profile / "jobs.csv")) << profile;
    auto ja = nlohmann::json::parse(ReadFile(a / profile / "summary.json"));
    auto jb = nlohmann::json::parse(ReadFile(b / profile / "summary.json"));
    ASSERT_TRUE(ja.contains("performance"));
    ja.erase("performance");
    jb.erase("performance");
    EXPECT_EQ(ja.dump(), jb.dump()) << profile;
  }
  // A different seed changes the estimated time limits and so, under backfill, the schedule.
  const fs::path c = TempDir("det_c");
  CliRun r =
      RunCli("sim --cluster " + kCluster + " --trace " + kSample +
             " --format philly --profile slurm-like --seed 8 --no-report --out " + c.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(ReadFile(a / "slurm-like" / "jobs.csv"), ReadFile(c / "slurm-like" / "jobs.csv"));
}

// --events replays node failures through the engine: the interrupted jobs are requeued and
// their lost work is reported; the same run twice gives the same jobs.csv; a bad file is exit 3.
TEST(CliSim, EventsRequeueInterruptedJobsAndReportTheLoss) {
  const fs::path d = TempDir("events");
  {
    std::ofstream ev(d / "events.csv");
    ev << "time,event,target\n1d,down,rack-0-n0\n1d,down,rack-1-n3\n3d,up,rack-0-n0\n"
          "3d,up,rack-1-n3\n";
  }
  std::string csv[2];
  for (int i = 0; i < 2; ++i) {
    const fs::path out = d / ("out" + std::to_string(i));
    CliRun r = RunCli("sim --cluster " + kCluster + " --trace " + kSample +
                      " --format philly --profile fifo --check-invariants --json --no-report "
                      "--events " +
                      (d / "events.csv").string() + " --out " + out.string());
    ASSERT_EQ(r.code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j[0]["cluster_events"].get<int64_t>(), 4);
    EXPECT_GT(j[0]["requeues"].get<int64_t>(), 0);
    EXPECT_GT(j[0]["lost_gpu_hours"].get<double>(), 0);
    EXPECT_EQ(j[0]["jobs_completed"].get<int64_t>(), j[0]["jobs"].get<int64_t>());
    csv[i] = ReadFile(out / "fifo" / "jobs.csv");
    // Every run the downs ended is in interrupted.csv, one row each, after the header.
    const std::string runs = ReadFile(out / "fifo" / "interrupted.csv");
    ASSERT_EQ(runs.rfind("id,start,end\n", 0), 0u) << runs;
    EXPECT_EQ(std::count(runs.begin(), runs.end(), '\n') - 1, j[0]["requeues"].get<int64_t>())
        << runs;
  }
  EXPECT_EQ(csv[0], csv[1]);
  {
    std::ofstream ev(d / "bad.csv");
    ev << "time,event,target\n1d,reboot,rack-0-n0\n";
  }
  CliRun r = RunCli("sim --cluster " + kCluster + " --trace " + kSample +
                    " --format philly --profile fifo --no-report --events " +
                    (d / "bad.csv").string() + " --out " + (d / "bad").string());
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("bad.csv:2: field 'event': unknown event 'reboot'"), std::string::npos)
      << r.output;
}

// An openb node list is a cluster (--cluster or --openb-nodes); a gpu_spec type the cluster
// lacks is left out of the job's choices and reported, not an error.
// --sprio names a file inside each profile's directory: one of the other outputs there, or a
// path out of it, is a usage error, not a file silently overwritten or written elsewhere.
TEST(CliSim, SprioIsAFileNameBesideTheOtherOutputs) {
  const fs::path d = TempDir("sprio");
  const std::string base = "sim --cluster " + kCluster + " --trace " + kSample +
                           " --format philly --profile fifo --no-report --sprio-at 1d --out ";
  CliRun ok = RunCli(base + (d / "ok").string() + " --sprio at-1d.txt");
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ReadFile(d / "ok" / "fifo" / "at-1d.txt").find("JOBID"), std::string::npos);
  EXPECT_EQ(ReadFile(d / "ok" / "fifo" / "jobs.csv").rfind("id,team,", 0), 0u);
  for (const std::string name :
       {"jobs.csv", "interrupted.csv", "summary.json", "../escaped.txt", "..", "sub/x.txt"}) {
    CliRun r = RunCli(base + (d / "bad").string() + " --sprio " + name);
    EXPECT_EQ(r.code, 2) << name << ": " << r.output;
    EXPECT_NE(r.output.find("--sprio takes a file name"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(d / "bad"));
  EXPECT_FALSE(fs::exists(d / "escaped.txt"));
}

TEST(CliSim, OpenbNodeListIsACluster) {
  const fs::path d = TempDir("openb");
  {
    std::ofstream nodes(d / "nodes.csv");
    nodes << "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,G2\nn1,96000,786432,8,V100M32\n";
    std::ofstream pods(d / "pods.csv");
    pods << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time\n"
            "p1,1000,100,1,1000,H100|G2,LS,Running,100,1100,160\n"
            "p2,1000,100,8,1000,V100M32,LS,Running,200,900,220\n";
  }
  for (const std::string flag : {"--cluster", "--openb-nodes"}) {
    CliRun r = RunCli("sim " + flag + " " + (d / "nodes.csv").string() + " --trace " +
                      (d / "pods.csv").string() + " --profile fifo --json --no-report --out " +
                      (d / "out").string());
    ASSERT_EQ(r.code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j[0]["jobs_completed"].get<int64_t>(), 2);
    EXPECT_EQ(j[0]["gpu_types_not_in_cluster"]["H100"].get<int64_t>(), 1);
  }
  CliRun both = RunCli("sim --cluster " + (d / "nodes.csv").string() + " --openb-nodes " +
                       (d / "nodes.csv").string() + " --trace " + (d / "pods.csv").string());
  EXPECT_EQ(both.code, 2) << both.output;
}

TEST(CliSim, PoliciesDifferOnAContendedCluster) {
  const fs::path d = TempDir("policies");
  CliRun r =
      RunCli("sim --cluster " + kCluster + " --trace " + kSample +
             " --format philly --profile fifo,fifo-easy --json --no-report --out " + d.string());
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.size(), 2u);
  const double fifo_wait = j[0]["wait_mean_s"].get<double>();
  const double easy_wait = j[1]["wait_mean_s"].get<double>();
  // Backfill must cut the mean wait on this queue-heavy sample (measured: days vs hours).
  EXPECT_LT(easy_wait, fifo_wait / 2) << r.output;
  EXPECT_GT(j[1]["jobs_backfilled"].get<int64_t>(), 0);
}

TEST(CliSim, BadInputNamesFileLineAndFieldWithExitCode3) {
  const fs::path d = TempDir("bad");
  const fs::path trace = d / "bad.csv";
  std::ofstream(trace) << "timestamp,duration,num_gpus,gpu_time,cluster\n"
                       << "2017-10-01 00:00:00,60.0,1,60.0,6214e9\n"
                       << "2017-10-01 00:01:00,60.0,abc,60.0,6214e9\n";
  CliRun r = RunCli("sim --cluster " + kCluster + " --trace " + trace.string() +
                    " --format philly --out " + (d / "out").string());
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("bad.csv:3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("num_gpus"), std::string::npos) << r.output;
  // With --skip-bad the row is skipped and counted, and the run succeeds.
  r = RunCli("sim --cluster " + kCluster + " --trace " + trace.string() +
             " --format philly --skip-bad --no-report --out " + (d / "out").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped 1"), std::string::npos) << r.output;
  // A job larger than the cluster.
  std::ofstream(trace) << "timestamp,duration,num_gpus,gpu_time,cluster\n"
                       << "2017-10-01 00:00:00,60.0,512,60.0,6214e9\n";
  r = RunCli("sim --cluster " + kCluster + " --trace " + trace.string() +
             " --format philly --out " + (d / "out").string());
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("bad.csv:2"), std::string::npos) << r.output;
  // Unknown profile: the message lists the known ones.
  r = RunCli("sim --cluster " + kCluster + " --trace " + kSample + " --profile nope --out " +
             (d / "out").string());
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("slurm-like"), std::string::npos) << r.output;
}

// --profile as-recorded replays a sacct export's own starts, every other profile's summary says
// how far it is from them, and the report carries the comparison; a trace without starts is a
// bad-input error naming its format.
TEST(CliSim, AsRecordedReplaysSacctStartsAndMeasuresReplayError) {
  const fs::path d = TempDir("recorded");
  const fs::path trace = d / "sacct.txt";
  // j2 waited an hour in the site's history although the cluster was idle.
  std::ofstream(trace)
      << "JobID|User|Account|Partition|Submit|Start|Elapsed|Timelimit|AllocTRES|NNodes\n"
      << "j1|alice|vision|gpu|2026-03-01T00:00:00|2026-03-01T00:00:00|01:00:00|02:00:00|"
         "gres/gpu=8|1\n"
      << "j2|bob|nlp|gpu|2026-03-01T00:10:00|2026-03-01T01:10:00|00:30:00|02:00:00|"
         "gres/gpu=8|1\n";
  const fs::path out = d / "out";
  CliRun r =
      RunCli("sim --cluster " + kCluster + " --trace " + trace.string() +
             " --format sacct --profile as-recorded,fifo --check-invariants --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  auto fifo = nlohmann::json::parse(ReadFile(out / "fifo" / "summary.json"));
  // fifo starts j2 on submission (256 GPUs): an hour less wait than recorded; j1 the same.
  ASSERT_TRUE(fifo["replay_error"].is_object()) << fifo.dump();
  EXPECT_EQ(fifo["replay_error"]["jobs_compared"], 2);
  EXPECT_EQ(fifo["replay_error"]["wait_abs_mean_s"], 1800.0);
  EXPECT_EQ(fifo["replay_error"]["wait_abs_p90_s"], 3600.0);
  EXPECT_EQ(fifo["replay_error"]["wait_bias_s"], -1800.0);
  auto recorded = nlohmann::json::parse(ReadFile(out / "as-recorded" / "summary.json"));
  EXPECT_EQ(recorded["as_recorded"], true);
  EXPECT_EQ(recorded["wait_mean_s"], 1800.0);
  EXPECT_TRUE(recorded["replay_error"].is_null());
  const std::string jobs = ReadFile(out / "as-recorded" / "jobs.csv");
  EXPECT_NE(jobs.find("j2,nlp,bob,8,"), std::string::npos) << jobs;
  EXPECT_NE(r.output.find("fifo                 vs as-recorded (2 jobs)"), std::string::npos)
      << r.output;
  if (fs::exists(fs::path(GANTRY_WEB_DIR) / "vega" / "build" / "vega.min.js")) {
    const std::string html = ReadFile(out / "report.html");
    EXPECT_NE(html.find("<h2 id=\"replay-error\">"), std::string::npos);
    EXPECT_NE(html.find("as-recorded <span class=\"mark recorded\""), std::string::npos);
  }

  // --baseline must name one of the profiles.
  r = RunCli("sim --cluster " + kCluster + " --trace " + trace.string() +
             " --format sacct --profile as-recorded,fifo --baseline slurm-like --out " +
             out.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--baseline slurm-like"), std::string::npos) << r.output;

  // A profile named twice would run twice into the same folder.
  for (const char* list : {"fifo,fifo", "as-recorded,fifo,as-recorded"}) {
    r = RunCli("sim --cluster " + kCluster + " --trace " + trace.string() +
               " --format sacct --no-report --profile " + list + " --out " + out.string());
    EXPECT_EQ(r.code, 2) << list << ": " << r.output;
    EXPECT_NE(r.output.find("names '"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("' twice"), std::string::npos) << r.output;
  }

  // Philly records no starts.
  r = RunCli("sim --cluster " + kCluster + " --trace " + kSample +
             " --format philly --profile fifo,as-recorded --no-report --out " + out.string());
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("this philly trace"), std::string::npos) << r.output;
}

// A job larger than its team's quota stays pending (as Kueue leaves such a workload), under
// the quota plugin and the kueue one; --strict makes it the bad-input error it was.
TEST(CliSim, OverQuotaJobStaysPendingUnlessStrict) {
  const fs::path d = TempDir("quota");
  const fs::path cluster = d / "c.yaml";
  std::ofstream(cluster) << "name: c\n"
                         << "gpu_types: [{name: P100, memory_gb: 16, idle_watts: 30, "
                            "busy_watts: 250}]\n"
                         << "nodes: [{count: 2, gpu_type: P100, gpus: 8}]\n"
                         << "teams:\n"
                         << "  - {name: \"6214e9\", quota_gpus: 4}\n";
  const fs::path trace = d / "t.csv";
  std::ofstream(trace) << "timestamp,duration,num_gpus,gpu_time,cluster\n"
                       << "2017-10-01 00:00:00,60.0,8,480.0,6214e9\n"
                       << "2017-10-01 00:01:00,60.0,2,120.0,6214e9\n";
  CliRun r = RunCli("sim --cluster " + cluster.string() + " --trace " + trace.string() +
                    " --format philly --profile fifo-easy,kueue --check-invariants --no-report "
                    "--out " +
                    (d / "out").string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* profile : {"fifo-easy", "kueue"}) {
    const auto j = nlohmann::json::parse(ReadFile(d / "out" / profile / "summary.json"));
    EXPECT_EQ(j["jobs_never_started"].get<int64_t>(), 1) << profile;
    EXPECT_EQ(j["jobs_completed"].get<int64_t>(), 1) << profile;
  }
  r = RunCli("sim --cluster " + cluster.string() + " --trace " + trace.string() +
             " --format philly --strict --no-report --out " + (d / "out").string());
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("has a quota of 4"), std::string::npos) << r.output;
}

// --explain JOB: the job's reasons and estimates under each profile, as text and in --json; an
// unknown id is bad input. The second job waits behind the first on a one-node cluster.
TEST(CliSim, ExplainPrintsAJobsReasonHistory) {
  const fs::path d = TempDir("explain");
  const fs::path cluster = d / "c.yaml";
  std::ofstream(cluster) << "name: c\n"
                         << "gpu_types: [{name: P100, memory_gb: 16, idle_watts: 30, "
                            "busy_watts: 250}]\n"
                         << "nodes: [{count: 1, gpu_type: P100, gpus: 8}]\n";
  const fs::path trace = d / "t.csv";
  std::ofstream(trace) << "timestamp,duration,num_gpus,gpu_time,cluster\n"
                       << "2017-10-01 00:00:00,600.0,8,4800.0,t\n"
                       << "2017-10-01 00:01:00,60.0,8,480.0,t\n";
  const std::string base = "sim --cluster " + cluster.string() + " --trace " + trace.string() +
                           " --format philly --profile fifo-easy --no-report --out " +
                           (d / "out").string();
  CliRun r = RunCli(base);
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream csv(ReadFile(d / "out" / "fifo-easy" / "jobs.csv"));
  std::string header, first, second;
  std::getline(csv, header);
  std::getline(csv, first);
  std::getline(csv, second);
  EXPECT_NE(header.find(",reason,first_estimate"), std::string::npos) << header;
  const std::string id = second.substr(0, second.find(','));
  // The second job waited for the first's GPUs, with the first's time limit as its estimate.
  EXPECT_NE(second.find(",Resources,"), std::string::npos) << second;
  EXPECT_NE(r.output.find("fifo-easy            start estimates: 1 jobs had one"),
            std::string::npos)
      << r.output;

  r = RunCli(base + " --explain " + id);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fifo-easy: job " + id + " (8 GPUs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Resources       estimate t="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("StartedInOrder"), std::string::npos) << r.output;

  r = RunCli(base + " --explain " + id + " --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& h = j.at(0).at("explain");
  EXPECT_EQ(h.at("job"), id);
  ASSERT_EQ(h.at("history").size(), 3u) << h.dump();
  EXPECT_EQ(h["history"][0]["reason"], "Priority");
  EXPECT_TRUE(h["history"][0]["estimate"].is_null());
  EXPECT_EQ(h["history"][1]["reason"], "Resources");
  EXPECT_TRUE(h["history"][1]["estimate"].is_number());
  EXPECT_EQ(h["history"][2]["reason"], "StartedInOrder");
  EXPECT_EQ(j.at(0).at("jobs_with_estimate"), 1);

  r = RunCli(base + " --explain no-such-job");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("no-such-job"), std::string::npos) << r.output;
}

// Regression: 250 MB of blank lines aborted the importer with std::bad_alloc (it reserved a Job
// per newline). Here 24 MB of them under a 1 GiB address-space limit, which that reservation
// (about 3 GB) exceeds: the run must end with exit 3 and a message. Sanitizer builds reserve
// terabytes of shadow memory, so the limit cannot apply there.
TEST(CliSim, BlankLineTraceIsABadInputNotACrash) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "address-space limit does not work under ASan";
#else
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "address-space limit does not work under ASan";
#endif
#endif
  const fs::path d = TempDir("blank");
  const fs::path trace = d / "blank.csv";
  {
    std::ofstream out(trace, std::ios::binary);
    const std::string chunk(1 << 20, '\n');
    for (int i = 0; i < 24; ++i) out << chunk;
  }
  const std::string cmd = "/bin/sh -c 'ulimit -v 1048576; exec " + std::string(GANTRY_CLI) +
                          " sim --cluster " + kCluster + " --trace " + trace.string() +
                          " --format philly --no-report --out " + (d / "out").string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal: " << out;
  EXPECT_EQ(WEXITSTATUS(status), 3) << out;
  EXPECT_NE(out.find("blank.csv: empty trace"), std::string::npos) << out;
#endif
}

// The acceptance run: the full Philly trace on the Philly cluster with fifo and
// slurm-like writes the CSV, JSON and HTML report. Skips when ../shared is not beside the repo.
TEST(CliSim, FullPhillyTraceWritesAllOutputs) {
  std::string trace = kSource + "/../shared/traces/philly.csv";
  if (!fs::exists(trace)) trace = "/work/shared/traces/philly.csv";
  if (!fs::exists(trace)) GTEST_SKIP() << "full Philly trace not present";
  if (!fs::exists(kSource + "/web/node_modules/vega/build/vega.min.js") &&
      std::getenv("GANTRY_WEB_DIR") == nullptr) {
    GTEST_SKIP() << "web assets not installed (scripts/setup)";
  }
  const fs::path d = TempDir("philly");
  CliRun r = RunCli("sim --cluster " + kSource + "/data/clusters/philly.yaml --trace " + trace +
                    " --format philly --profile fifo,slurm-like --out " + d.string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const std::string profile : {"fifo", "slurm-like"}) {
    auto j = nlohmann::json::parse(ReadFile(d / profile / "summary.json"));
    EXPECT_EQ(j["jobs"].get<int64_t>(), 82247);
    EXPECT_EQ(j["jobs_completed"].get<int64_t>(), 82247);
    std::ifstream csv(d / profile / "jobs.csv");
    int64_t lines = 0;
    for (std::string line; std::getline(csv, line);) ++lines;
    EXPECT_EQ(lines, 82248);  // header + one row per job
  }
  const std::string html = ReadFile(d / "report.html");
  EXPECT_GT(html.size(), 100000u);
  EXPECT_NE(html.find("slurm-like"), std::string::npos);
}

}  // namespace

// FGD's packing experiment on an openb node list and a pod list without times: the first-fit
// and best-fit runs put the first any-type pod on the G2 node and the G2-only pair fails; FGD
// keeps G2 free for it (worked out in src/sim/packing_test.cc).
TEST(CliSim, PackingExperimentWritesCsvAndChart) {
  const fs::path d = TempDir("packing");
  {
    std::ofstream nodes(d / "nodes.csv");
    nodes << "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,G2\nn1,64000,262144,2,V100\n";
    std::ofstream pods(d / "pods.csv");
    pods << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
            "p1,1000,100,1,1000,\np2,1000,100,2,1000,G2\np3,1000,100,1,1000,\n";
  }
  CliRun r = RunCli("sim --packing --check-invariants --cluster " + (d / "nodes.csv").string() +
                    " --trace " + (d / "pods.csv").string() + " --out " + (d / "out").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string csv = ReadFile(d / "out" / "packing.csv");
  EXPECT_NE(csv.find("first-fit,3,1,1.000000,0.500000,0.000000\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("best-fit,3,1,1.000000,0.500000,0.000000\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("fgd,3,0,1.000000,1.000000,0.000000\n"), std::string::npos) << csv;
  EXPECT_NE(ReadFile(d / "out" / "packing.svg").find("<svg"), std::string::npos);
  CliRun bad =
      RunCli("sim --packing --packing-policies random --cluster " + (d / "nodes.csv").string() +
             " --trace " + (d / "pods.csv").string() + " --out " + (d / "out").string());
  EXPECT_EQ(bad.code, 3) << bad.output;
  EXPECT_NE(bad.output.find("unknown policy 'random'"), std::string::npos) << bad.output;
}

// The bundled power-capped cluster: every profile holds the cluster's 50 kW and each rack's
// 14 kW at every start (--check-invariants checks each), while the same trace uncapped peaks
// above 50 kW; jobs.csv's energy column adds up to the summary's job energy; `gantry cluster
// show` reports the caps.
TEST(CliSim, PowerCapsHoldAndEnergyIsReported) {
  const std::string power_cluster = kSource + "/data/clusters/philly-256-power.yaml";
  const fs::path d = TempDir("power");
  CliRun r = RunCli("sim --cluster " + power_cluster + " --trace " + kSample +
                    " --format philly --profile fifo,slurm-like --check-invariants --json "
                    "--no-report --out " +
                    d.string());
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.size(), 2u);
  for (const auto& s : j) {
    const auto& p = s["power"];
    EXPECT_EQ(p["cap_watts"].get<double>(), 50000);
    EXPECT_LE(p["peak_watts"].get<double>(), 50000);
    ASSERT_EQ(p["domains"].size(), 4u);
    for (const auto& dom : p["domains"]) {
      EXPECT_LE(dom["peak_watts"].get<double>(), dom["cap_watts"].get<double>());
    }
    EXPECT_GT(p["job_energy_kwh"].get<double>(), 0);
    EXPECT_GT(p["energy_kwh"].get<double>(), p["job_energy_kwh"].get<double>());
    EXPECT_EQ(s["jobs_completed"].get<int64_t>(), s["jobs"].get<int64_t>());
  }
  // jobs.csv: the energy_kwh column, summed, is the summary's job energy (Philly ids hold no
  // commas, so splitting at commas finds the column).
  const auto fields = [](const std::string& row) {
    std::vector<std::string> out;
    std::istringstream in(row);
    for (std::string f; std::getline(in, f, ',');) out.push_back(f);
    if (!row.empty() && row.back() == ',') out.emplace_back();
    return out;
  };
  std::istringstream csv(ReadFile(d / "fifo" / "jobs.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  const std::vector<std::string> header = fields(line);
  const auto col = std::find(header.begin(), header.end(), "energy_kwh");
  ASSERT_NE(col, header.end()) << line;
  const size_t energy = static_cast<size_t>(col - header.begin());
  double sum = 0;
  while (std::getline(csv, line)) {
    const std::vector<std::string> row = fields(line);
    ASSERT_EQ(row.size(), header.size()) << line;
    sum += std::stod(row[energy]);
  }
  EXPECT_NEAR(sum, j[0]["power"]["job_energy_kwh"].get<double>(), 1.0);

  CliRun u = RunCli("sim --cluster " + kCluster + " --trace " + kSample +
                    " --format philly --profile fifo --json --no-report --out " +
                    TempDir("power_uncapped").string());
  ASSERT_EQ(u.code, 0) << u.output;
  auto uj = nlohmann::json::parse(u.output);
  EXPECT_GT(uj[0]["power"]["peak_watts"].get<double>(), 50000);
  EXPECT_EQ(uj[0]["power"]["cap_watts"], nullptr);

  CliRun show = RunCli("cluster show " + power_cluster);
  ASSERT_EQ(show.code, 0) << show.output;
  EXPECT_NE(show.output.find("power:      17.3 kW idle with 300 W per node; cap 50.0 kW, 4 "
                             "domains capped"),
            std::string::npos)
      << show.output;
  CliRun show_json = RunCli("cluster show " + power_cluster + " --json");
  ASSERT_EQ(show_json.code, 0) << show_json.output;
  auto cj = nlohmann::json::parse(show_json.output);
  EXPECT_EQ(cj["power"]["cap_watts"].get<double>(), 50000);
  EXPECT_EQ(cj["power"]["domains"].size(), 4u);
}

// openb end to end: four 250-milli pods and one whole-GPU pod on a node of 2 GPUs. Shared, the
// four fit on one GPU and everything starts at 0 (makespan 100, 200 GPU-seconds busy of 200:
// utilization 1); with --round-fractional each takes a whole GPU, so the five 100-s pods run in
// three waves (starts 0, 0, 100, 100, 200: mean wait 80, makespan 300, 500 of 600 GPU-seconds).
TEST(CliSim, OpenbSharesShareGpusUnlessRounded) {
  const fs::path d = TempDir("openb_shares");
  {
    std::ofstream nodes(d / "nodes.csv");
    nodes << "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\n";
    std::ofstream pods(d / "pods.csv");
    pods << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time\n";
    for (int i = 0; i < 4; ++i) pods << "s" << i << ",1000,100,1,250,,LS,Succeeded,0,100,0\n";
    pods << "w,1000,100,1,1000,,LS,Succeeded,0,100,0\n";
  }
  const std::string base = "sim --check-invariants --cluster " + (d / "nodes.csv").string() +
                           " --trace " + (d / "pods.csv").string() +
                           " --profile fifo --json --no-report --out " + (d / "out").string();
  CliRun shared = RunCli(base);
  ASSERT_EQ(shared.code, 0) << shared.output;
  auto s = nlohmann::json::parse(shared.output);
  EXPECT_EQ(s[0]["fractional_gpus_shared"].get<int64_t>(), 4);
  EXPECT_EQ(s[0]["fractional_gpus_rounded"].get<int64_t>(), 0);
  EXPECT_DOUBLE_EQ(s[0]["wait_mean_s"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(s[0]["gpu_utilization"].get<double>(), 1.0);
  CliRun rounded = RunCli(base + " --round-fractional");
  ASSERT_EQ(rounded.code, 0) << rounded.output;
  auto r = nlohmann::json::parse(rounded.output);
  EXPECT_EQ(r[0]["fractional_gpus_shared"].get<int64_t>(), 0);
  EXPECT_EQ(r[0]["fractional_gpus_rounded"].get<int64_t>(), 4);
  EXPECT_DOUBLE_EQ(r[0]["wait_mean_s"].get<double>(), 80.0);
  EXPECT_NEAR(r[0]["gpu_utilization"].get<double>(), 500.0 / 600.0, 1e-6);
  // trace inspect tells the same story: the shares are requests, not rounded GPUs.
  CliRun inspect = RunCli("trace inspect " + (d / "pods.csv").string());
  ASSERT_EQ(inspect.code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("fractional GPU requests (gpu_milli < 1000): 4; gantry sim shares"),
            std::string::npos)
      << inspect.output;
  EXPECT_EQ(inspect.output.find("rounded up"), std::string::npos) << inspect.output;
  CliRun inspect_json = RunCli("trace inspect --json " + (d / "pods.csv").string());
  ASSERT_EQ(inspect_json.code, 0) << inspect_json.output;
  EXPECT_EQ(nlohmann::json::parse(inspect_json.output)["fractional_gpu_requests"], 4);
}
