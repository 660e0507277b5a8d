// The "data-locality" score (scores.cc) and DataLocalityMap (sched/data_locality.h): exact
// outcomes on small clusters worked out by hand, the fast paths kept for jobs the score cannot
// matter to, and a property over random workloads: with no data declared (or none held), a
// profile with the score schedules exactly what it schedules without.
#include "gantry/sched/data_locality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gantry/sched/engine.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/profile.h"
#include "gantry/sched/registry.h"

namespace gantry {
namespace {

// `racks` racks of `per_rack` nodes of 8 H100s (flat when racks == 0: `per_rack` nodes).
Cluster MakeCluster(int racks, int per_rack) {
  ClusterBuilder b("test",
                   racks > 0 ? std::vector<std::string>{"rack"} : std::vector<std::string>{});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  int n = 0;
  for (int r = 0; r < std::max(racks, 1); ++r) {
    if (racks > 0) {
      EXPECT_TRUE(b.OpenDomain("r" + std::to_string(r), 0).ok());
    }
    for (int i = 0; i < per_rack; ++i) {
      EXPECT_TRUE(b.AddNode({.name = "n" + std::to_string(n++), .gpu_type = 0, .gpus = 8}).ok());
    }
    if (racks > 0) {
      EXPECT_TRUE(b.CloseDomain().ok());
    }
  }
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

JobRequest MakeJob(JobIndex index, int gpus, int nodes, std::vector<std::string> datasets = {}) {
  JobRequest j;
  j.index = index;
  j.id = "j" + std::to_string(index);
  j.gpus = gpus;
  j.nodes = nodes;
  j.gpus_per_node = nodes > 0 ? gpus / nodes : 0;
  j.time_limit = 100;
  j.gpu_type_mask = 1;
  j.datasets = std::move(datasets);
  return j;
}

std::unique_ptr<PlacementPlugin> MakePlacement(const Cluster& c, const std::string& name,
                                               const std::string& scores,
                                               const DataLocality* locality) {
  PluginContext ctx;
  ctx.cluster = &c;
  ctx.data_locality = locality;
  std::map<std::string, std::string> args;
  if (!scores.empty()) args["scores"] = scores;
  auto p = PluginRegistry::Builtin().CreatePlacement(name, PluginArgs(name, args), ctx);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(p).value() : nullptr;
}

Placement Place(const PlacementPlugin& p, const JobRequest& job, const FreeIndex& free) {
  Placement out;
  EXPECT_TRUE(p.Place(job, free, nullptr, &out)) << job.id;
  return out;
}

TEST(DataLocalityMap, FractionsPerDatasetAndJob) {
  DataLocalityMap m;
  const JobRequest none = MakeJob(0, 1, 1);
  const JobRequest two = MakeJob(1, 1, 1, {"s3://a", "s3://b"});
  EXPECT_FALSE(m.HeldAnywhere(two));
  EXPECT_EQ(m.HeldFraction(0, two), 0);
  m.Set("s3://a", 3, 1.0);
  m.Set("s3://b", 3, 0.5);
  m.Set("s3://b", 4, 2.0);  // clamped to 1
  EXPECT_EQ(m.Fraction("s3://b", 4), 1.0);
  EXPECT_TRUE(m.HeldAnywhere(two));
  EXPECT_FALSE(m.HeldAnywhere(none));
  EXPECT_EQ(m.HeldFraction(3, two), 0.75);  // mean of 1 and 0.5
  EXPECT_EQ(m.HeldFraction(4, two), 0.5);   // b whole, a not at all
  EXPECT_EQ(m.HeldFraction(5, two), 0);
  EXPECT_EQ(m.HeldFraction(3, none), 0);
  m.Set("s3://b", 3, 0.25);  // updated in place
  EXPECT_EQ(m.Fraction("s3://b", 3), 0.25);
  m.Set("s3://b", 3, 0);  // forgotten
  m.Set("s3://b", 4, std::nan(""));
  EXPECT_EQ(m.Fraction("s3://b", 3), 0);
  EXPECT_EQ(m.Fraction("s3://b", 4), 0);
  EXPECT_TRUE(m.HeldAnywhere(two));  // a is still on node 3
  m.Erase("s3://a");
  EXPECT_FALSE(m.HeldAnywhere(two));
  m.Set("s3://a", 1, 1);
  m.Clear();
  EXPECT_EQ(m.Fraction("s3://a", 1), 0);
}

// A declared checkpoint weighs as much as all the job's datasets together (data_locality.h).
TEST(DataLocalityMap, TheCheckpointWeighsAsMuchAsAllDatasets) {
  DataLocalityMap m;
  JobRequest only = MakeJob(0, 1, 1);
  only.checkpoint = "s3://ck/ckpt/run";
  JobRequest both = MakeJob(1, 1, 1, {"s3://a", "s3://b"});
  both.checkpoint = "s3://ck/ckpt/run";
  EXPECT_FALSE(m.HeldAnywhere(only));
  m.Set("s3://ck/ckpt/run", 2, 0.5);
  m.Set("s3://a", 3, 1.0);
  m.Set("s3://b", 3, 1.0);
  EXPECT_TRUE(m.HeldAnywhere(only));
  EXPECT_EQ(m.HeldFraction(2, only), 0.5);
  EXPECT_EQ(m.HeldFraction(3, only), 0);
  EXPECT_EQ(m.HeldFraction(2, both), 0.25);  // (0 + 0.5) / 2
  EXPECT_EQ(m.HeldFraction(3, both), 0.5);   // (1 + 0) / 2
  m.Set("s3://ck/ckpt/run", 3, 1.0);
  EXPECT_EQ(m.HeldFraction(3, both), 1.0);
  m.Erase("s3://a");
  m.Erase("s3://b");
  EXPECT_TRUE(m.HeldAnywhere(both));  // through its checkpoint alone
  EXPECT_EQ(m.HeldFraction(3, both), 0.5);
}

TEST(DataLocalityScore, UniformWhenItCannotMatter) {
  const Cluster c = MakeCluster(0, 4);
  DataLocalityMap m;
  m.Set("s3://held", 2, 1);
  PluginContext ctx;
  ctx.cluster = &c;
  auto blind = PluginRegistry::Builtin().CreateScore("data-locality", {}, ctx);
  ctx.data_locality = &m;
  auto seeing = PluginRegistry::Builtin().CreateScore("data-locality", {}, ctx);
  ASSERT_TRUE(blind.ok() && seeing.ok());
  const JobRequest none = MakeJob(0, 1, 1), held = MakeJob(1, 1, 1, {"s3://held"}),
                   elsewhere = MakeJob(2, 1, 1, {"s3://nowhere"});
  FreeIndex free(c);
  EXPECT_TRUE((*blind)->Uniform(held));
  EXPECT_EQ((*blind)->Score(held, 2, 8, free), 0);
  EXPECT_TRUE((*seeing)->Uniform(none));
  EXPECT_TRUE((*seeing)->Uniform(elsewhere));
  EXPECT_FALSE((*seeing)->Uniform(held));
  EXPECT_EQ((*seeing)->Score(held, 2, 8, free), 1);
  EXPECT_EQ((*seeing)->Score(held, 1, 8, free), 0);
  EXPECT_EQ((*seeing)->Score(none, 2, 8, free), 0);
  // A job that declares only a checkpoint: the node holding it scores, the others not.
  JobRequest ckpt = MakeJob(3, 1, 1);
  ckpt.checkpoint = "s3://held";
  EXPECT_FALSE((*seeing)->Uniform(ckpt));
  EXPECT_EQ((*seeing)->Score(ckpt, 2, 8, free), 1);
  EXPECT_EQ((*seeing)->Score(ckpt, 1, 8, free), 0);
  auto bad = PluginRegistry::Builtin().CreateScore(
      "data-locality", PluginArgs("data-locality", {{"weight", "2"}}), ctx);
  EXPECT_FALSE(bad.ok());
}

// Four empty nodes: best-fit, topology (one node, or a flat cluster: best-fit) and "scored"
// alone rank them alike, and the node holding the job's data wins. A job without data gets the
// placement's own choice, n0.
TEST(DataLocalityScore, AmongEqualNodesTheOneHoldingTheDataWins) {
  const Cluster c = MakeCluster(0, 4);
  DataLocalityMap m;
  m.Set("s3://corpus", 2, 1.0);
  m.Set("s3://corpus", 3, 0.5);
  const FreeIndex free(c);
  const JobRequest job = MakeJob(0, 8, 1, {"s3://corpus"});
  const JobRequest plain = MakeJob(1, 8, 1);
  const JobRequest pair = MakeJob(2, 16, 2, {"s3://corpus"});
  for (const char* name : {"best-fit", "topology"}) {
    SCOPED_TRACE(name);
    auto p = MakePlacement(c, name, "data-locality", &m);
    EXPECT_EQ(Place(*p, job, free), (Placement{{2, 8}}));
    EXPECT_EQ(Place(*p, plain, free), (Placement{{0, 8}}));
    // A gang takes its best nodes, best first: all of the data, then half of it.
    EXPECT_EQ(Place(*p, pair, free), (Placement{{2, 8}, {3, 8}}));
    // Without a map nothing is known: the placement's own order.
    auto blind = MakePlacement(c, name, "data-locality", nullptr);
    EXPECT_EQ(Place(*blind, job, free), (Placement{{0, 8}}));
  }
  // First-fit's own score is lowest-index, 1 - node / 4: n0 1, n1 0.75, n2 0.5, n3 0.25, so
  // with the data n2 scores 1.5 and n3 0.75: the one-node job goes to n2, the pair to n2 and n0.
  auto ff = MakePlacement(c, "first-fit", "data-locality", &m);
  EXPECT_EQ(Place(*ff, job, free), (Placement{{2, 8}}));
  EXPECT_EQ(Place(*ff, pair, free), (Placement{{2, 8}, {0, 8}}));
  EXPECT_EQ(Place(*ff, plain, free), (Placement{{0, 8}}));
  auto scored = MakePlacement(c, "scored", "data-locality", &m);
  EXPECT_EQ(Place(*scored, job, free), (Placement{{2, 8}}));
  EXPECT_EQ(Place(*scored, plain, free), (Placement{{0, 8}}));
}

// Best-fit's own score (weight 1) is least-free = 1 - free / 8. n0 has 2 GPUs free (0.75), n1
// all 8 (0) and holds the job's data. With data-locality:w, n1 scores w * fraction: the data
// wins when w * fraction > 0.75, i.e. when the node holding it is at most 8 * w * fraction GPUs
// looser than the tightest fit (docs/architecture.md).
TEST(DataLocalityScore, WeightAgainstBestFit) {
  const Cluster c = MakeCluster(0, 2);
  FreeIndex free(c);
  free.Allocate(0, 6);
  const JobRequest job = MakeJob(0, 2, 1, {"s3://corpus"});
  DataLocalityMap m;
  m.Set("s3://corpus", 1, 1.0);
  EXPECT_EQ(Place(*MakePlacement(c, "best-fit", "", &m), job, free), (Placement{{0, 2}}));
  EXPECT_EQ(Place(*MakePlacement(c, "best-fit", "data-locality:1", &m), job, free),
            (Placement{{1, 2}}));  // 1 > 0.75
  EXPECT_EQ(Place(*MakePlacement(c, "best-fit", "data-locality:0.5", &m), job, free),
            (Placement{{0, 2}}));  // 0.5 < 0.75
  m.Set("s3://corpus", 1, 0.5);
  EXPECT_EQ(Place(*MakePlacement(c, "best-fit", "data-locality:1", &m), job, free),
            (Placement{{0, 2}}));  // 0.5 < 0.75
  EXPECT_EQ(Place(*MakePlacement(c, "best-fit", "data-locality:2", &m), job, free),
            (Placement{{1, 2}}));  // 1 > 0.75
}

// Topology chooses the rack first (the tightest that holds the gang; the lower index on ties)
// and scores nodes only inside it: data in the other rack does not pull a gang across racks,
// data inside the chosen rack picks its nodes.
TEST(DataLocalityScore, TopologyChoosesTheDomainFirst) {
  const Cluster c = MakeCluster(2, 3);  // r0: n0..n2, r1: n3..n5
  const FreeIndex free(c);
  const JobRequest gang = MakeJob(0, 16, 2, {"s3://corpus"});
  DataLocalityMap m;
  auto p = MakePlacement(c, "topology", "data-locality:1", &m);
  m.Set("s3://corpus", 4, 1.0);
  EXPECT_EQ(Place(*p, gang, free), (Placement{{0, 8}, {1, 8}}));
  m.Set("s3://corpus", 2, 1.0);
  EXPECT_EQ(Place(*p, gang, free), (Placement{{2, 8}, {0, 8}}));
  // A one-node job is placed by best-fit over the whole cluster: the data decides.
  EXPECT_EQ(Place(*p, MakeJob(1, 8, 1, {"s3://corpus"}), free), (Placement{{2, 8}}));
  m.Erase("s3://corpus");
  m.Set("s3://corpus", 4, 1.0);
  EXPECT_EQ(Place(*p, MakeJob(1, 8, 1, {"s3://corpus"}), free), (Placement{{4, 8}}));
}

// A score that counts its calls: uniform (or not) for every job.
class CountingScore final : public ScorePlugin {
 public:
  CountingScore(bool uniform, int* calls) : uniform_(uniform), calls_(calls) {}
  std::string_view name() const override { return "counting"; }
  double Score(const JobRequest&, NodeIndex, int, const FreeIndex&) const override {
    ++*calls_;
    return 0;
  }
  bool Uniform(const JobRequest&) const override { return uniform_; }

 private:
  bool uniform_;
  int* calls_;
};

// A built-in placement whose extra scores are all uniform for a job runs its index-driven fast
// path (no score is called); one that is not runs the generic path (every candidate scored).
TEST(DataLocalityScore, UniformScoresKeepTheFastPath) {
  const Cluster c = MakeCluster(0, 4);
  const FreeIndex free(c);
  for (bool uniform : {true, false}) {
    int calls = 0;
    PluginRegistry r;
    RegisterBuiltinPlugins(r);
    ASSERT_TRUE(r.AddScore("counting", [&](const PluginArgs&, const PluginContext&) {
                   return Result<std::unique_ptr<ScorePlugin>>(
                       std::make_unique<CountingScore>(uniform, &calls));
                 }).ok());
    PluginContext ctx;
    ctx.cluster = &c;
    ctx.registry = &r;
    for (const char* name : {"first-fit", "best-fit", "topology"}) {
      auto p = r.CreatePlacement(name, PluginArgs(name, {{"scores", "counting:3"}}), ctx);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(Place(**p, MakeJob(0, 8, 1), free), (Placement{{0, 8}}));
    }
    EXPECT_EQ(calls, uniform ? 0 : 12) << uniform;  // 3 placements x 4 candidate nodes
  }
}

// Each job runs exactly its limit, and a preempted job is requeued at once (the default profile
// preempts for fair share); returns every start decision as text, in order, and each
// preemption as "<victim> preempted@<time> by <job>".
std::vector<std::string> RunWorkload(const Cluster& c, const Profile& profile,
                                     const std::vector<JobRequest>& jobs,
                                     const DataLocality* locality) {
  EngineOptions options;
  options.data_locality = locality;
  auto e = Engine::Create(c, {{"a", kNoQuota, 1.0}, {"b", kNoQuota, 1.0}}, profile, options);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  Engine& engine = **e;
  std::multimap<Time, JobIndex> events;  // submits (index >= 0) and ends (~index)
  for (const JobRequest& j : jobs) events.insert({j.submit, j.index});
  std::map<JobIndex, Time> ends;  // each running job's end; a preempted run's end event is stale
  std::vector<std::string> out;
  std::vector<StartDecision> starts;
  while (!events.empty()) {
    const Time now = events.begin()->first;
    while (!events.empty() && events.begin()->first == now) {
      const JobIndex x = events.begin()->second;
      events.erase(events.begin());
      if (x >= 0) {
        EXPECT_TRUE(engine.Submit(jobs[x], now).ok());
      } else if (auto it = ends.find(~x); it != ends.end() && it->second == now) {
        ends.erase(it);
        EXPECT_TRUE(engine.Finish(~x, now).ok());
      }
    }
    starts.clear();
    engine.Schedule(now, &starts);
    for (const StartDecision& d : starts) {
      for (JobIndex v : d.preempted) {
        out.push_back(std::to_string(v) + " preempted@" + std::to_string(now) + " by " +
                      std::to_string(d.job));
        ends.erase(v);
        EXPECT_TRUE(engine.Requeue(v, now).ok());
      }
      std::string s = std::to_string(d.job) + "@" + std::to_string(now) + ":";
      for (const Slot& slot : d.placement) {
        s += " " + std::to_string(slot.node) + "x" + std::to_string(slot.gpus);
      }
      out.push_back(s);
      ends[d.job] = now + jobs[d.job].time_limit;
      events.insert({now + jobs[d.job].time_limit, ~d.job});
    }
  }
  return out;
}

// With the default profile ("gantry", which weighs data-locality in) and variants of it without
// the score, with it on other placements, and with it alone: random workloads whose jobs declare
// no data, or declare data no node holds, schedule exactly what the profile without the score
// schedules, with and without a locality map.
TEST(DataLocalityScore, PropertyNoDataChangesNothing) {
  const Cluster c = MakeCluster(3, 4);
  DataLocalityMap m;
  m.Set("s3://unrelated", 5, 1.0);
  const char* kVariants[][2] = {
      {"topology", "{plugin: topology, args: {scores: \"data-locality:1\"}}"},
      {"best-fit", "{plugin: best-fit, args: {scores: \"data-locality:3\"}}"},
      {"first-fit", "{plugin: first-fit, args: {scores: \"data-locality:0.5\"}}"},
      {"{plugin: scored, args: {scores: \"pack\"}}",
       "{plugin: scored, args: {scores: \"pack,data-locality:2\"}}"},
  };
  int compared = 0;
  for (const auto& [without, with] : kVariants) {
    for (const char* backfill : {"none", "easy", "conservative"}) {
      const auto profile = [&](const char* placement) {
        auto p = ParseProfiles(std::string(R"(
profiles:
  p:
    priority: [{plugin: age, args: {max_age: inf}}, {plugin: fairshare, weight: 10}]
    placement: )") + placement +
                                   "\n    backfill: " + backfill + "\n",
                               "test.yaml");
        EXPECT_TRUE(p.ok()) << p.status().ToString();
        return p->front();
      };
      const Profile plain = profile(without), local = profile(with);
      for (int seed = 0; seed < 10; ++seed) {
        SCOPED_TRACE(std::string(with) + " " + backfill + " seed " + std::to_string(seed));
        std::mt19937 rng(seed);
        std::vector<JobRequest> jobs;
        for (int i = 0; i < 60; ++i) {
          const int shape = static_cast<int>(rng() % 3);
          const int gpus = shape == 0   ? 1 + static_cast<int>(rng() % 8)
                           : shape == 1 ? 8 * (1 + static_cast<int>(rng() % 3))
                                        : 1 + static_cast<int>(rng() % 12);
          JobRequest j = MakeJob(i, gpus, shape == 1 ? gpus / 8 : shape == 0 ? 1 : 0);
          j.submit = static_cast<Time>(rng() % 200);
          j.time_limit = 5 + static_cast<Duration>(rng() % 100);
          j.team = static_cast<int>(rng() % 2);
          if (rng() % 2 == 0) j.datasets = {"s3://nowhere/" + std::to_string(i)};
          jobs.push_back(std::move(j));
        }
        const std::vector<std::string> expected = RunWorkload(c, plain, jobs, nullptr);
        EXPECT_EQ(expected.size(), jobs.size());
        EXPECT_EQ(RunWorkload(c, local, jobs, nullptr), expected);
        EXPECT_EQ(RunWorkload(c, local, jobs, &m), expected);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 4 * 3 * 10);
  // The built-in default profile against itself without the score.
  auto gantry = FindProfile("gantry", {});
  ASSERT_TRUE(gantry.ok());
  Profile stripped = *gantry;
  stripped.placement.args = PluginArgs(stripped.placement.name, {});
  std::mt19937 rng(7);
  std::vector<JobRequest> jobs;
  for (int i = 0; i < 80; ++i) {
    JobRequest j = MakeJob(i, 1 + static_cast<int>(rng() % 16), 0);
    j.submit = static_cast<Time>(rng() % 100);
    j.team = static_cast<int>(rng() % 2);
    jobs.push_back(std::move(j));
  }
  const std::vector<std::string> with_score = RunWorkload(c, *gantry, jobs, &m);
  EXPECT_EQ(with_score, RunWorkload(c, stripped, jobs, &m));
  // The workload is contended enough that the default's fair-share preemption takes part.
  EXPECT_TRUE(std::any_of(with_score.begin(), with_score.end(), [](const std::string& s) {
    return s.find("preempted") != std::string::npos;
  }));
}

// Through the engine: the driver's map reaches the score (EngineOptions::data_locality), and the
// default profile puts a job on the empty node holding its data rather than the lowest one.
TEST(DataLocalityScore, EngineUsesTheDriversMap) {
  const Cluster c = MakeCluster(0, 4);
  DataLocalityMap m;
  m.Set("s3://corpus", 3, 1.0);
  auto gantry = FindProfile("gantry", {});
  ASSERT_TRUE(gantry.ok());
  std::vector<JobRequest> jobs = {MakeJob(0, 8, 1, {"s3://corpus"}), MakeJob(1, 8, 1)};
  jobs[1].submit = 1;
  EXPECT_EQ(RunWorkload(c, *gantry, jobs, &m), (std::vector<std::string>{"0@0: 3x8", "1@1: 0x8"}));
  EXPECT_EQ(RunWorkload(c, *gantry, jobs, nullptr),
            (std::vector<std::string>{"0@0: 0x8", "1@1: 1x8"}));
}

}  // namespace
}  // namespace gantry
