#include "gantry/workload/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "gantry/cluster/cluster.h"
#include "gantry/workload/trace.h"

namespace gantry {
namespace {

Workload MustSynth(const SynthOptions& o) {
  Result<Workload> w = SynthesizeWorkload(o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return w.ok() ? std::move(w).value() : Workload{};
}

SynthOptions Options(int64_t jobs, int64_t gpus, uint64_t seed = 1) {
  SynthOptions o;
  o.jobs = jobs;
  o.cluster_gpus = gpus;
  o.seed = seed;
  return o;
}

TEST(SynthTest, SameSeedSameJobsOtherSeedOtherJobs) {
  const Workload a = MustSynth(Options(5000, 1024, 7));
  const Workload b = MustSynth(Options(5000, 1024, 7));
  const Workload c = MustSynth(Options(5000, 1024, 8));
  ASSERT_EQ(a.jobs.size(), 5000u);
  ASSERT_EQ(b.jobs.size(), a.jobs.size());
  EXPECT_EQ(a.teams, b.teams);
  int differ = 0;
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    const Job& x = a.jobs[i];
    const Job& y = b.jobs[i];
    ASSERT_EQ(x.submit, y.submit) << i;
    ASSERT_EQ(x.gpus, y.gpus) << i;
    ASSERT_EQ(x.run_time, y.run_time) << i;
    ASSERT_EQ(x.time_limit, y.time_limit) << i;
    ASSERT_EQ(x.team, y.team) << i;
    if (c.jobs[i].run_time != x.run_time || c.jobs[i].gpus != x.gpus) ++differ;
  }
  EXPECT_GT(differ, 2500) << "another seed should give other jobs";
}

TEST(SynthTest, OfferedLoadMatchesTarget) {
  for (double target : {0.5, 0.9, 1.5}) {
    SynthOptions o = Options(20000, 100000);
    o.load = target;
    const Workload w = MustSynth(o);
    // Computed here rather than with OfferedLoad, so the test does not trust the code under test.
    double work = 0;
    for (const Job& j : w.jobs)
      work += static_cast<double>(j.gpus) * static_cast<double>(j.run_time);
    const double span = static_cast<double>(w.jobs.back().submit - w.jobs.front().submit);
    ASSERT_GT(span, 0);
    const double load = work / (100000.0 * span);
    EXPECT_NEAR(load, target, 0.1 * target) << "target " << target;
    EXPECT_NEAR(OfferedLoad(w, 100000), load, 1e-9);
  }
}

TEST(SynthTest, JobsAreSortedIndexedAndPhillyShaped) {
  const Workload w = MustSynth(Options(20000, 100000));
  ASSERT_EQ(w.jobs.size(), 20000u);
  EXPECT_EQ(w.jobs.front().submit, 0);
  std::map<int, int> by_gpus;
  std::vector<int> by_team(w.teams.size(), 0);
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const Job& j = w.jobs[i];
    ASSERT_EQ(j.index, static_cast<JobIndex>(i));
    if (i > 0) {
      ASSERT_LE(w.jobs[i - 1].submit, j.submit) << i;
    }
    ASSERT_GE(j.run_time, 60) << i;
    ASSERT_LE(j.run_time, 7 * 86400) << i;
    ASSERT_GE(j.time_limit, j.run_time == 0 ? 0 : 1) << i;
    ASSERT_TRUE(j.time_limit_estimated);
    ASSERT_EQ(j.nodes * j.gpus_per_node, j.gpus) << i;
    if (j.gpus > 8) {
      ASSERT_EQ(j.gpus_per_node, 8) << i;
    } else {
      ASSERT_EQ(j.nodes, 1) << i;
    }
    ASSERT_GE(j.team, 0);
    ASSERT_LT(j.team, static_cast<int>(w.teams.size()));
    ++by_gpus[j.gpus];
    ++by_team[j.team];
  }
  EXPECT_EQ(w.teams.size(), 20u);
  EXPECT_EQ(w.teams[0], "team00");
  // Mostly single-GPU, but every size class shows up at this scale.
  EXPECT_GT(by_gpus[1], 0.85 * 20000);
  EXPECT_LT(by_gpus[1], 0.95 * 20000);
  for (int g : {2, 4, 8, 16, 32, 64}) EXPECT_GT(by_gpus[g], 0) << g;
  EXPECT_EQ(by_gpus.rbegin()->first <= 256, true);
  // Zipf-like: the first team has several times the last one's jobs.
  EXPECT_GT(by_team[0], 5 * by_team[19]);
  // Run times span minutes to days.
  std::vector<Duration> runs;
  for (const Job& j : w.jobs) runs.push_back(j.run_time);
  std::sort(runs.begin(), runs.end());
  EXPECT_LT(runs[runs.size() / 10], 600);
  EXPECT_GT(runs[runs.size() * 99 / 100], 86400);
}

TEST(SynthTest, SizesNeverExceedTheClusterAndResolve) {
  Result<Cluster> cluster = LoadCluster("dgx-h100:nodes=4");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  Workload w = MustSynth(Options(20000, cluster->total_gpus()));
  for (const Job& j : w.jobs) ASSERT_LE(j.gpus, cluster->total_gpus());
  Result<std::vector<Team>> teams = ResolveWorkload(w, *cluster, {});
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  EXPECT_EQ(w.jobs.size(), 20000u);
}

TEST(SynthTest, WrittenCsvReimportsAsTheSameJobs) {
  const SynthOptions o = Options(3000, 4096, 5);
  const Workload w = MustSynth(o);
  const std::string path = testing::TempDir() + "/synth_reimport.csv";
  ASSERT_TRUE(WritePhillyCsv(w, path).ok());
  ImportOptions io;
  io.time_limits.seed = o.seed;
  Result<Workload> back = ImportTrace(path, TraceFormat::kPhilly, io);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->jobs.size(), w.jobs.size());
  EXPECT_EQ(back->epoch_unix, kSynthEpochUnix);
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const Job& x = w.jobs[i];
    const Job& y = back->jobs[i];
    ASSERT_EQ(y.submit, x.submit) << i;
    ASSERT_EQ(y.gpus, x.gpus) << i;
    ASSERT_EQ(y.run_time, x.run_time) << i;
    ASSERT_EQ(y.nodes, x.nodes) << i;
    ASSERT_EQ(y.gpus_per_node, x.gpus_per_node) << i;
    ASSERT_EQ(back->teams[y.team], w.teams[x.team]) << i;
    // Same line, same seed: the time-limit model gives the same limit on both sides.
    ASSERT_EQ(y.time_limit, x.time_limit) << i;
  }
  std::remove(path.c_str());
}

TEST(SynthTest, RejectsBadOptions) {
  EXPECT_FALSE(SynthesizeWorkload(Options(10, 0)).ok());
  EXPECT_FALSE(SynthesizeWorkload(Options(-1, 8)).ok());
  SynthOptions o = Options(10, 8);
  o.load = 0;
  EXPECT_FALSE(SynthesizeWorkload(o).ok());
  o = Options(10, 8);
  o.teams = 0;
  EXPECT_FALSE(SynthesizeWorkload(o).ok());
  // Zero jobs is a valid, empty workload.
  EXPECT_TRUE(MustSynth(Options(0, 8)).jobs.empty());
}

}  // namespace
}  // namespace gantry
