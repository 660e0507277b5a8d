// The built-in placements are filter + score (filter_score.h); their index-driven searches are
// fast paths. These tests prove, over random clusters (flat and two-level, one to three GPU
// types, uneven nodes), random free capacity, random reservation caps and random jobs (gangs
// and "any", any subset of GPU types), that each fast path chooses exactly what the generic
// filter + score path chooses; and that a profile's extra score goes on top of any placement.
#include "placement.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "gantry/common/rng.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/registry.h"

namespace gantry {
namespace {

std::string Describe(const Placement& p) {
  std::string s;
  for (const Slot& slot : p) s += std::to_string(slot.node) + ":" + std::to_string(slot.gpus) + " ";
  return s.empty() ? "(none)" : s;
}

// A random cluster: flat, or spines of leaves of nodes; 1-3 GPU types; 1-8 GPUs per node.
Cluster RandomCluster(Rng& rng) {
  const bool flat = rng.Below(4) == 0;
  ClusterBuilder b("random",
                   flat ? std::vector<std::string>{} : std::vector<std::string>{"leaf", "spine"});
  const int types = 1 + static_cast<int>(rng.Below(3));
  for (int t = 0; t < types; ++t) {
    EXPECT_TRUE(b.AddGpuType({"T" + std::to_string(t), 80, 70, 700}).ok());
  }
  const int max_gpus = rng.Below(2) == 0 ? 8 : 1 + static_cast<int>(rng.Below(8));
  int node = 0;
  const auto add_node = [&] {
    const int gpus = rng.Below(3) == 0 ? 1 + static_cast<int>(rng.Below(max_gpus)) : max_gpus;
    EXPECT_TRUE(b.AddNode({.name = "n" + std::to_string(node++),
                           .gpu_type = static_cast<GpuTypeIndex>(rng.Below(types)),
                           .gpus = gpus})
                    .ok());
  };
  if (flat) {
    const int nodes = 1 + static_cast<int>(rng.Below(40));
    for (int n = 0; n < nodes; ++n) add_node();
  } else {
    const int spines = 1 + static_cast<int>(rng.Below(3));
    for (int s = 0; s < spines; ++s) {
      EXPECT_TRUE(b.OpenDomain("s" + std::to_string(s), 1).ok());
      const int leaves = 1 + static_cast<int>(rng.Below(4));
      for (int l = 0; l < leaves; ++l) {
        EXPECT_TRUE(b.OpenDomain("s" + std::to_string(s) + "l" + std::to_string(l), 0).ok());
        const int nodes = 1 + static_cast<int>(rng.Below(8));
        for (int n = 0; n < nodes; ++n) add_node();
        EXPECT_TRUE(b.CloseDomain().ok());
      }
      EXPECT_TRUE(b.CloseDomain().ok());
    }
  }
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

JobRequest RandomJob(Rng& rng, const Cluster& c) {
  JobRequest j;
  const int types = static_cast<int>(c.gpu_types().size());
  j.gpu_type_mask =
      rng.Below(2) == 0 ? kAnyGpuType : static_cast<uint32_t>(1 + rng.Below((1u << types) - 1));
  if (rng.Below(2) == 0) {  // gang
    j.gpus_per_node = 1 + static_cast<int>(rng.Below(c.max_gpus_per_node()));
    j.nodes = rng.Below(3) == 0 ? 1 : 1 + static_cast<int>(rng.Below(6));
    j.gpus = j.nodes * j.gpus_per_node;
  } else {
    j.gpus = 1 + static_cast<int>(rng.Below(rng.Below(3) == 0 ? 3 * c.max_gpus_per_node()
                                                              : c.max_gpus_per_node()));
  }
  return j;
}

PluginContext Context(const Cluster& c) { return PluginContext{&c, nullptr, nullptr, nullptr}; }

std::unique_ptr<PlacementPlugin> Make(const std::string& name, const Cluster& c,
                                      PlacementSearch search,
                                      std::map<std::string, std::string> args = {}) {
  auto p = NewBuiltinPlacement(name, PluginArgs(name, std::move(args)), Context(c), search);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

struct Variant {
  std::string name;
  std::map<std::string, std::string> args;
};

TEST(Placement, FastPathsChooseExactlyWhatFilterAndScoreChoose) {
  Rng rng(20261130);
  int compared = 0, placed = 0, with_caps = 0, multi_type = 0;
  for (int round = 0; round < 300; ++round) {
    const Cluster c = RandomCluster(rng);
    std::vector<Variant> variants = {{"first-fit", {}}, {"best-fit", {}}, {"topology", {}}};
    if (!c.levels().empty()) {
      variants.push_back({"topology", {{"max_span_level", "leaf"}}});
      variants.push_back({"topology", {{"max_span_level", "spine"}}});
    }
    std::vector<std::pair<std::unique_ptr<PlacementPlugin>, std::unique_ptr<PlacementPlugin>>>
        plugins;
    for (const Variant& v : variants) {
      plugins.emplace_back(Make(v.name, c, PlacementSearch::kFast, v.args),
                           Make(v.name, c, PlacementSearch::kGeneric, v.args));
    }
    FreeIndex free(c);
    const auto nodes = static_cast<NodeIndex>(c.nodes().size());
    for (NodeIndex n = 0; n < nodes; ++n) {  // random load
      const int used = static_cast<int>(rng.Below(c.nodes()[n].gpus + 1));
      if (rng.Below(3) != 0 && used > 0) free.Allocate(n, used);
    }
    NodeCaps caps(c.nodes().size());
    for (int attempt = 0; attempt < 20; ++attempt) {
      caps.Clear();
      if (rng.Below(2) == 0) {
        const int capped = 1 + static_cast<int>(rng.Below(nodes));
        for (int i = 0; i < capped; ++i) {
          const auto n = static_cast<NodeIndex>(rng.Below(nodes));
          caps.Set(n, static_cast<int>(rng.Below(c.nodes()[n].gpus + 1)));
        }
      }
      const NodeCaps* cp = caps.empty() ? (rng.Below(2) ? &caps : nullptr) : &caps;
      const JobRequest job = RandomJob(rng, c);
      for (size_t v = 0; v < variants.size(); ++v) {
        Placement fast, generic;
        const bool f = plugins[v].first->Place(job, free, cp, &fast);
        const bool g = plugins[v].second->Place(job, free, cp, &generic);
        ASSERT_EQ(f, g) << variants[v].name << " round " << round << " attempt " << attempt
                        << ": fast " << Describe(fast) << " generic " << Describe(generic);
        if (f) {
          ASSERT_EQ(fast, generic)
              << variants[v].name << " round " << round << " attempt " << attempt << ": fast "
              << Describe(fast) << " generic " << Describe(generic);
          ++placed;
        }
        ++compared;
        if (cp != nullptr && !cp->empty()) ++with_caps;
        if (c.gpu_types().size() > 1 && job.gpu_type_mask != kAnyGpuType) ++multi_type;
      }
      // Place one of the jobs now and then, so the load changes between attempts.
      Placement p;
      if (rng.Below(4) == 0 && plugins[0].first->Place(job, free, nullptr, &p)) {
        for (const Slot& s : p) free.Allocate(s.node, s.gpus);
      }
    }
  }
  // The comparisons covered the cases that matter, not only trivial ones.
  EXPECT_GT(compared, 20000);
  EXPECT_GT(placed, compared / 5);
  EXPECT_GT(placed, 0);
  EXPECT_GT(with_caps, compared / 5);
  EXPECT_GT(multi_type, compared / 10);
}

// "scored" with a built-in placement's score is that placement: first-fit is "lowest-index",
// a gang's best-fit is "least-free".
TEST(Placement, ScoredWithTheBuiltinsScoresIsTheBuiltin) {
  Rng rng(7);
  const PluginRegistry& r = PluginRegistry::Builtin();
  for (int round = 0; round < 100; ++round) {
    const Cluster c = RandomCluster(rng);
    const PluginContext ctx = Context(c);
    auto lowest =
        r.CreatePlacement("scored", PluginArgs("scored", {{"scores", "lowest-index"}}), ctx);
    auto least = r.CreatePlacement("scored", PluginArgs("scored", {{"scores", "least-free"}}), ctx);
    ASSERT_TRUE(lowest.ok() && least.ok());
    auto first_fit = Make("first-fit", c, PlacementSearch::kFast);
    auto best_fit = Make("best-fit", c, PlacementSearch::kFast);
    FreeIndex free(c);
    for (NodeIndex n = 0; n < static_cast<NodeIndex>(c.nodes().size()); ++n) {
      const int used = static_cast<int>(rng.Below(c.nodes()[n].gpus + 1));
      if (used > 0) free.Allocate(n, used);
    }
    for (int attempt = 0; attempt < 10; ++attempt) {
      const JobRequest job = RandomJob(rng, c);
      Placement a, b;
      const bool fa = (*lowest)->Place(job, free, nullptr, &a);
      ASSERT_EQ(fa, first_fit->Place(job, free, nullptr, &b));
      if (fa) {
        EXPECT_EQ(a, b);
      }
      if (job.nodes > 0) {
        const bool fl = (*least)->Place(job, free, nullptr, &a);
        ASSERT_EQ(fl, best_fit->Place(job, free, nullptr, &b));
        if (fl) {
          EXPECT_EQ(a, b);
        }
      }
    }
  }
}

// A profile adds a weighted score on top of a built-in placement, here "spread" on first-fit:
// the emptiest node now wins over the lowest index.
TEST(Placement, ExtraScoreGoesOnTopOfABuiltinPlacement) {
  ClusterBuilder b("flat", {});
  ASSERT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  for (int n = 0; n < 3; ++n)
    ASSERT_TRUE(b.AddNode({.name = "n" + std::to_string(n), .gpus = 8}).ok());
  auto c = std::move(b).Build();
  ASSERT_TRUE(c.ok());
  FreeIndex free(*c);
  free.Allocate(0, 4);
  free.Allocate(1, 2);
  JobRequest job;
  job.gpus = 2;
  job.nodes = 1;
  job.gpus_per_node = 2;
  Placement p;
  ASSERT_TRUE(Make("first-fit", *c, PlacementSearch::kFast)->Place(job, free, nullptr, &p));
  EXPECT_EQ(p, (Placement{{0, 2}}));
  ASSERT_TRUE(Make("first-fit", *c, PlacementSearch::kFast, {{"scores", "spread:5"}})
                  ->Place(job, free, nullptr, &p));
  EXPECT_EQ(p, (Placement{{2, 2}}));
  ASSERT_TRUE(Make("best-fit", *c, PlacementSearch::kFast, {{"scores", "spread:0.1"}})
                  ->Place(job, free, nullptr, &p));
  EXPECT_EQ(p, (Placement{{0, 2}}));  // a small weight only breaks ties
  auto bad = NewBuiltinPlacement("topology", PluginArgs("topology", {{"scores", "nope"}}),
                                 Context(*c), PlacementSearch::kFast);
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gantry
