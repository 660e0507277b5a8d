// Renders an HTML report in headless Chromium and checks that every Vega-Lite chart drew marks.

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gantry/report/result.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gantry {
namespace {

constexpr char kChromium[] = "/usr/bin/chromium";

std::string MakeTempDir() {
  std::string tmpl = testing::TempDir() + "gantry_browser_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  return tmpl;
}

// Two profiles over the same synthetic workload: 40 jobs of three teams on 64 GPUs.
struct SyntheticRuns {
  Cluster cluster;
  Workload workload;
  SimResult fifo, backfill;

  SyntheticRuns() {
    ClusterBuilder b("browser-test", {"leaf"});
    auto gpu = b.AddGpuType({"H100", 80, 70, 700});
    EXPECT_TRUE(gpu.ok());
    EXPECT_TRUE(b.OpenDomain("leaf0", 0).ok());
    for (int n = 0; n < 8; ++n) {
      EXPECT_TRUE(b.AddNode({.name = "n" + std::to_string(n), .gpu_type = *gpu, .gpus = 8}).ok());
    }
    EXPECT_TRUE(b.CloseDomain().ok());
    Result<Cluster> c = std::move(b).Build();
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    cluster = std::move(c).value();

    workload.source = "synthetic";
    workload.format = "test";
    workload.epoch_unix = 1700000000;  // wall-clock times: dates on the time axes
    workload.users = {"u0", "u1"};
    workload.teams = {"vision", "language", "robotics"};
    for (int i = 0; i < 40; ++i) {
      Job j;
      j.index = i;
      j.id = std::to_string(i);
      j.team = i % 3;
      j.user = i % 2;
      j.submit = i * 600;
      j.gpus = 1 << (i % 4);
      j.run_time = 1800 + (i * 977) % 7200;
      workload.jobs.push_back(j);
    }
    Fill(fifo, "fifo", 1.0);
    Fill(backfill, "backfill", 0.4);
    // The second run preempts (the preemption and work-lost charts appear) and is an oracle.
    backfill.oracle = true;
    for (TimeSample& s : backfill.samples) {
      s.preemptions = s.t / 8000;
      s.preemption_lost_gpu_seconds = 1800.0 * static_cast<double>(s.preemptions);
      s.lost_gpu_seconds = s.preemption_lost_gpu_seconds;
    }
    backfill.preemptions = backfill.samples.back().preemptions;
    Summarize(backfill);
  }

  // A plausible outcome per job: waits scaled by `wait_scale`; the last job never starts.
  void Fill(SimResult& r, const std::string& profile, double wait_scale) {
    r.profile = profile;
    r.workload = &workload;
    r.cluster = &cluster;
    r.teams = {{"vision", 16, 16}, {"language", kNoQuota, 1}, {"robotics", 8, 8}};
    for (const Job& j : workload.jobs) {
      JobOutcome o;
      if (j.index != 39) {
        o.start = j.submit + static_cast<Time>(wait_scale * ((j.index * 4099) % 20000));
        o.end = o.start + j.run_time;
        o.nodes_spanned = 1;
        r.busy_gpu_seconds += static_cast<double>(j.gpus) * j.run_time;
      }
      r.outcomes.push_back(o);
    }
    for (Time t = 0; t <= 48000; t += 400) {
      TimeSample s;
      s.t = t;
      s.team_busy_gpus.assign(3, 0);
      for (const Job& j : workload.jobs) {
        const JobOutcome& o = r.outcomes[static_cast<size_t>(j.index)];
        if (o.start >= 0 && o.start <= t && t < o.end) {
          s.team_busy_gpus[static_cast<size_t>(j.team)] += j.gpus;
          s.busy_gpus += j.gpus;
          ++s.running_jobs;
        } else if (j.submit <= t && (o.start < 0 || t < o.start)) {
          ++s.pending_jobs;
        }
      }
      r.samples.push_back(s);
    }
    r.total_wait_job_seconds = 1000;
    r.frag_wait_job_seconds = 100;
    Summarize(r);
  }
};

std::string RunCapture(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(ReportBrowserTest, ChartsRenderInHeadlessChromium) {
  if (access(kChromium, X_OK) != 0) {
    GTEST_SKIP() << kChromium << " not installed; scripts/setup installs it";
  }
  const std::string web = GANTRY_WEB_DIR;
  if (access((web + "/vega/build/vega.min.js").c_str(), R_OK) != 0) {
    GTEST_SKIP() << "web assets missing in " << web << "; run scripts/setup";
  }
  SyntheticRuns runs;
  const std::string dir = MakeTempDir();
  const std::string page = dir + "/report.html";
  Status st = WriteHtmlReport({&runs.fifo, &runs.backfill}, page);
  ASSERT_TRUE(st.ok()) << st.ToString();

  const std::string profile_dir = MakeTempDir();
  const std::string dom = RunCapture(
      "timeout 120 " + std::string(kChromium) +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --user-data-dir=" +
      profile_dir + " --virtual-time-budget=20000 --dump-dom file://" + page + " 2>/dev/null");
  ASSERT_FALSE(dom.empty()) << "chromium printed no DOM";

  // 4 comparison charts, wait by size, preemptions and work lost, a team-share chart per
  // profile.
  constexpr int kCharts = 9;
  EXPECT_THAT(dom,
              ::testing::HasSubstr("data-charts-rendered=\"" + std::to_string(kCharts) + "\""));
  const size_t err = dom.find("data-chart-error=\"");
  EXPECT_EQ(err, std::string::npos) << dom.substr(err == std::string::npos ? 0 : err, 300);

  for (int i = 0; i < kCharts; ++i) {
    const std::string open = "id=\"chart-" + std::to_string(i) + "\"";
    const size_t begin = dom.find(open);
    ASSERT_NE(begin, std::string::npos) << open;
    size_t end = dom.find("id=\"chart-" + std::to_string(i + 1) + "\"", begin);
    if (end == std::string::npos) end = dom.size();
    const std::string chart = dom.substr(begin, end - begin);
    EXPECT_THAT(chart, ::testing::HasSubstr("<svg")) << "chart " << i;
    // Charts 0-3 and 5-6 are lines per profile, 4 bars, the rest stacked areas per team.
    const std::string mark = i == 4 ? "mark-rect" : i < 7 ? "mark-line" : "mark-area";
    const size_t m = chart.find(mark);
    ASSERT_NE(m, std::string::npos) << "chart " << i << " has no " << mark;
    // The mark group holds drawn paths with geometry, not an empty group.
    const size_t path = chart.find("<path", m);
    ASSERT_NE(path, std::string::npos) << "chart " << i;
    EXPECT_NE(chart.find(" d=\"M", path), std::string::npos) << "chart " << i;
    // An axis title shows the chart is labelled.
    EXPECT_THAT(chart, ::testing::HasSubstr("role-axis-title")) << "chart " << i;
  }
}

}  // namespace
}  // namespace gantry
