// Built-in placement plugins: first-fit, best-fit and topology-aware, each defined as filter +
// score (filter_score.h) and run by an index-driven fast path that chooses exactly the same
// nodes (placement_test.cc proves it on random clusters, jobs and caps):
//
//   first-fit  filter, score "lowest-index"
//   best-fit   gang: filter, score "least-free". "any": if one node can hold the whole job, as a
//              one-node gang; otherwise filter, score "most-free" (fewest nodes spanned)
//   topology   single-node jobs: best-fit. Else, level by level from the innermost: a domain
//              filter (domains holding enough passing nodes, or GPUs for "any"), domains ranked
//              by the capacity they would have left (least first, then index), and inside the
//              first domain: filter, score "pack" (gang) or "spread" ("any"). Past the levels
//              (or max_span_level): best-fit over the cluster, or wait
//
// A profile may add weighted scores on top of any of them (`args: {scores: "data-locality:2"}`);
// the placement's own score then joins the sum with weight 1 and the generic path runs, since
// the fast paths know only their own criterion, except for a job for which every extra score is
// 0 on every node (ScorePlugin::Uniform: "data-locality" for a job that declares no data): it
// keeps the fast path, which chooses exactly the same.
//
// A job's shape is either a gang (`nodes` nodes x `gpus_per_node` GPUs) or "any" (its GPUs may
// be spread; we still pack them onto as few nodes as we can, since every extra node adds
// network hops to the job's collectives).
#include "placement.h"

#include <algorithm>

#include "builtin_plugins.h"
#include "filter_score.h"

namespace gantry {
namespace {

// Gang with `k` nodes of `g` GPUs, lowest node indices first.
bool FirstFitGang(const JobRequest& job, int k, int g, const FreeIndex& free, const NodeCaps* caps,
                  Placement* out) {
  const Cluster& c = free.cluster();
  if (k == 1 && (caps == nullptr || caps->empty())) {
    const NodeIndex n = free.FirstWithFree(job.gpu_type_mask, g);
    if (n < 0) return false;
    out->push_back({n, g});
    return true;
  }
  const NodeIndex count = static_cast<NodeIndex>(c.nodes().size());
  for (NodeIndex n = 0; n < count && static_cast<int>(out->size()) < k; ++n) {
    if (TypeAllowed(free, n, job.gpu_type_mask) && Usable(free, caps, n) >= g)
      out->push_back({n, g});
  }
  return static_cast<int>(out->size()) == k;
}

bool FirstFitAny(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
                 Placement* out) {
  const Cluster& c = free.cluster();
  int need = job.gpus;
  const NodeIndex count = static_cast<NodeIndex>(c.nodes().size());
  for (NodeIndex n = 0; n < count && need > 0; ++n) {
    if (!TypeAllowed(free, n, job.gpu_type_mask)) continue;
    const int take = std::min(need, Usable(free, caps, n));
    if (take > 0) {
      out->push_back({n, take});
      need -= take;
    }
  }
  return need == 0;
}

// Gang: the k nodes with the fewest free GPUs that still hold g (least fragmentation left).
bool BestFitGang(const JobRequest& job, int k, int g, const FreeIndex& free, const NodeCaps* caps,
                 Placement* out) {
  free.VisitAscending(job.gpu_type_mask, g, [&](NodeIndex n) {
    if (Usable(free, caps, n) >= g) out->push_back({n, g});
    return static_cast<int>(out->size()) < k;
  });
  return static_cast<int>(out->size()) == k;
}

// Any: one best-fit node when the job fits on one; otherwise the fullest-free nodes first.
bool BestFitAny(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
                Placement* out) {
  if (job.gpus <= free.cluster().max_gpus_per_node() &&
      BestFitGang(job, 1, job.gpus, free, caps, out)) {
    return true;
  }
  out->clear();
  int need = job.gpus;
  free.VisitDescending(job.gpu_type_mask, 1, [&](NodeIndex n) {
    const int take = std::min(need, Usable(free, caps, n));
    if (take > 0) {
      out->push_back({n, take});
      need -= take;
    }
    return need > 0;
  });
  return need == 0;
}

// What reservation caps take away from the job's view of free capacity: nodes that hold `g`
// free GPUs but may not give them, and GPUs held back. Caps touch few nodes (those reserved for
// one job), so this is cheap, and it lets every search fail fast and exactly instead of scanning
// nodes the counts say are usable.
struct CapLoss {
  NodeIndex node;
  int lost_node;  // 1 if the node has >= g free but may give fewer than g
  int lost_gpus;  // free - effective
};

void CollectCapLoss(const JobRequest& job, int g, const FreeIndex& free, const NodeCaps* caps,
                    std::vector<CapLoss>* out) {
  out->clear();
  if (caps == nullptr) return;
  for (NodeIndex n : caps->touched()) {
    if (!TypeAllowed(free, n, job.gpu_type_mask)) continue;
    const int f = free.free(n), e = Usable(free, caps, n);
    if (f == e) continue;
    out->push_back({n, (f >= g && e < g) ? 1 : 0, f - e});
  }
}

// False when the job cannot fit anywhere, however nodes are chosen.
bool MayFit(const JobRequest& job, const JobShape& s, const FreeIndex& free,
            const std::vector<CapLoss>& loss) {
  if (s.any) {
    int64_t have = free.FreeOfTypes(job.gpu_type_mask);
    for (const CapLoss& l : loss) have -= l.lost_gpus;
    return have >= job.gpus;
  }
  int64_t have = free.NodesWithFree(job.gpu_type_mask, s.gpus_per_node);
  for (const CapLoss& l : loss) have -= l.lost_node;
  return have >= s.nodes;
}

// What a built-in placement holds besides its own criterion: the search it runs, the scores
// the profile adds, and scratch.
class BuiltinPlacement : public PlacementPlugin {
 public:
  BuiltinPlacement(PlacementSearch search, OwnedScores extra)
      : forced_generic_(search == PlacementSearch::kGeneric), extra_(std::move(extra)) {}

 protected:
  // Whether `job` goes through the generic path: when forced (the equivalence test), or when an
  // extra score may rank nodes differently for it. A score that is 0 on every node for this job
  // (ScorePlugin::Uniform: "data-locality" for a job without data) changes nothing, so the fast
  // path, which knows only the placement's own criterion, still chooses exactly the same.
  bool Generic(const JobRequest& job) const {
    if (forced_generic_) return true;
    for (const WeightedScore& w : extra_.weighted) {
      if (!w.score->Uniform(job)) return true;
    }
    return false;
  }
  // The placement's own score with weight 1, then the profile's.
  std::span<const WeightedScore> Scores(const ScorePlugin& own) const {
    scores_.clear();
    scores_.push_back({&own, 1.0});
    scores_.insert(scores_.end(), extra_.weighted.begin(), extra_.weighted.end());
    return scores_;
  }
  // Generic best-fit (also topology's single-node and fallback choice).
  bool GenericBestFit(const JobRequest& job, const JobShape& s, const FreeIndex& free,
                      const NodeCaps* caps, Placement* out) const {
    if (!s.any) return search_.Place(job, s, free, caps, Scores(*least_free_), nullptr, out);
    if (job.gpus <= free.cluster().max_gpus_per_node()) {
      const JobShape one{.any = false, .nodes = 1, .gpus_per_node = job.gpus};
      if (search_.Place(job, one, free, caps, Scores(*least_free_), nullptr, out)) return true;
    }
    return search_.Place(job, s, free, caps, Scores(*most_free_), nullptr, out);
  }

  const bool forced_generic_;
  OwnedScores extra_;
  mutable std::vector<WeightedScore> scores_;
  mutable ScoredSearch search_;
  const std::unique_ptr<ScorePlugin> least_free_ = Own(builtin::NewLeastFreeScore);
  const std::unique_ptr<ScorePlugin> most_free_ = Own(builtin::NewMostFreeScore);

  // A built-in score, which takes no arguments and so cannot fail to be created.
  static std::unique_ptr<ScorePlugin> Own(
      Result<std::unique_ptr<ScorePlugin>> (*factory)(const PluginArgs&, const PluginContext&)) {
    return std::move(factory(PluginArgs(), PluginContext()).value());
  }
};

class FirstFit final : public BuiltinPlacement {
 public:
  using BuiltinPlacement::BuiltinPlacement;
  std::string_view name() const override { return "first-fit"; }
  bool Place(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
             Placement* out) const override {
    out->clear();
    if (!MayFit(job, free, caps)) return false;
    const JobShape s = ShapeOf(job);
    if (Generic(job)) {
      return search_.Place(job, s, free, caps, Scores(*lowest_index_), nullptr, out);
    }
    return s.any ? FirstFitAny(job, free, caps, out)
                 : FirstFitGang(job, s.nodes, s.gpus_per_node, free, caps, out);
  }

 private:
  const std::unique_ptr<ScorePlugin> lowest_index_ = Own(builtin::NewLowestIndexScore);
};

class BestFit final : public BuiltinPlacement {
 public:
  using BuiltinPlacement::BuiltinPlacement;
  std::string_view name() const override { return "best-fit"; }
  bool Place(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
             Placement* out) const override {
    out->clear();
    if (!MayFit(job, free, caps)) return false;
    const JobShape s = ShapeOf(job);
    if (Generic(job)) return GenericBestFit(job, s, free, caps, out);
    return s.any ? BestFitAny(job, free, caps, out)
                 : BestFitGang(job, s.nodes, s.gpus_per_node, free, caps, out);
  }
};

// See the file comment. The fast path counts candidate domains from the free index's domain
// histograms (any GPU type, less what caps hold back on nodes of allowed types) and scans only
// the candidates; the generic path scans every domain of the level.
class Topology final : public BuiltinPlacement {
 public:
  Topology(int max_span_level, PlacementSearch search, OwnedScores extra)
      : BuiltinPlacement(search, std::move(extra)), max_span_level_(max_span_level) {}
  std::string_view name() const override { return "topology"; }

  bool Place(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
             Placement* out) const override {
    out->clear();
    const JobShape s = ShapeOf(job);
    CollectCapLoss(job, s.any ? 1 : s.gpus_per_node, free, caps, &loss_);
    if (!MayFit(job, s, free, loss_)) return false;
    const bool generic = Generic(job);
    const auto best_fit = [&] {
      if (generic) return GenericBestFit(job, s, free, caps, out);
      return s.any ? BestFitAny(job, free, caps, out)
                   : BestFitGang(job, s.nodes, s.gpus_per_node, free, caps, out);
    };
    const bool single = s.any ? job.gpus <= free.cluster().max_gpus_per_node() : s.nodes == 1;
    if (single) {
      if (best_fit()) {
        if (out->size() == 1 || max_span_level_ < 0) return true;
      }
      if (!s.any) return false;
      out->clear();  // an "any" job split over nodes: fall through to domain search
    }
    const int levels = static_cast<int>(free.cluster().levels().size());
    const int top = max_span_level_ >= 0 ? std::min(max_span_level_, levels - 1) : levels - 1;
    for (int level = 0; level <= top; ++level) {
      if (generic ? GenericInLevel(job, s, level, free, caps, out)
                  : PlaceInLevel(job, s, level, free, caps, out)) {
        return true;
      }
    }
    if (max_span_level_ >= 0 && levels > 0) return false;
    out->clear();
    return best_fit();
  }

 private:
  // Domain filter: the domain holds enough nodes that pass the node filter (GPUs, for "any").
  // Domain score: the capacity it would have left, over every GPU type, less what caps hold
  // back on nodes the job may use (least first: the tightest fit). Inside the domain: the node
  // filter, then "pack" for a gang, "spread" for an "any" job.
  bool GenericInLevel(const JobRequest& job, const JobShape& s, int level, const FreeIndex& free,
                      const NodeCaps* caps, Placement* out) const {
    const Cluster& c = free.cluster();
    const int min_usable = MinUsable(s);
    const int64_t want = s.any ? job.gpus : s.nodes;
    std::vector<std::pair<int64_t, DomainIndex>> ranked;  // (spare, domain)
    for (DomainIndex d : free.domains_at_level(level)) {
      const Domain& dom = c.domains()[d];
      int64_t passing = 0, capacity = 0;
      for (NodeIndex n = dom.first_node; n < dom.end_node; ++n) {
        const bool allowed = TypeAllowed(free, n, job.gpu_type_mask);
        const int usable = allowed ? Usable(free, caps, n) : free.free(n);
        if (s.any) {
          capacity += usable;
          if (allowed) passing += usable;
        } else if (usable >= min_usable) {
          ++capacity;
          if (allowed) ++passing;
        }
      }
      if (passing >= want) ranked.emplace_back(capacity - want, d);
    }
    if (ranked.empty()) return false;
    const auto best = std::min_element(ranked.begin(), ranked.end());
    const Domain& dom = c.domains()[best->second];
    const NodeRange range{dom.first_node, dom.end_node};
    return search_.Place(job, s, free, caps, Scores(s.any ? *spread_ : *pack_), &range, out);
  }

  bool PlaceInLevel(const JobRequest& job, const JobShape& s, int level, const FreeIndex& free,
                    const NodeCaps* caps, Placement* out) const {
    // Candidates by the domain histograms (an upper bound when caps or GPU types restrict).
    struct Candidate {
      int64_t spare;
      DomainIndex d;
    };
    // Subtract what reservation caps hold back in each domain, so the counts stay exact.
    const Cluster& cl = free.cluster();
    adjust_.clear();
    for (const CapLoss& l : loss_) {
      DomainIndex d = cl.nodes()[l.node].domain;
      while (d >= 0 && cl.domains()[d].level < level) d = cl.domains()[d].parent;
      if (d >= 0) adjust_.emplace_back(d, s.any ? l.lost_gpus : l.lost_node);
    }
    std::sort(adjust_.begin(), adjust_.end());
    std::vector<Candidate> candidates;
    size_t a = 0;
    for (DomainIndex d : free.domains_at_level(level)) {
      int64_t have = s.any ? free.domain_free(d) : free.DomainNodesWithFree(d, s.gpus_per_node);
      while (a < adjust_.size() && adjust_[a].first < d) ++a;
      for (size_t b = a; b < adjust_.size() && adjust_[b].first == d; ++b)
        have -= adjust_[b].second;
      const int64_t want = s.any ? job.gpus : s.nodes;
      if (have >= want) candidates.push_back({have - want, d});
    }
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.spare != b.spare ? a.spare < b.spare : a.d < b.d;
    });
    const Cluster& c = free.cluster();
    std::vector<std::pair<int, NodeIndex>> nodes;  // (effective free, node)
    for (const Candidate& cand : candidates) {
      const Domain& dom = c.domains()[cand.d];
      nodes.clear();
      const int min_free = s.any ? 1 : s.gpus_per_node;
      for (NodeIndex n = dom.first_node; n < dom.end_node; ++n) {
        if (!TypeAllowed(free, n, job.gpu_type_mask)) continue;
        const int e = Usable(free, caps, n);
        if (e >= min_free) nodes.emplace_back(e, n);
      }
      out->clear();
      if (s.any) {
        // Fullest nodes first: fewest nodes spanned.
        std::sort(nodes.begin(), nodes.end(), [](auto& a, auto& b) {
          return a.first != b.first ? a.first > b.first : a.second < b.second;
        });
        int need = job.gpus;
        for (auto& [e, n] : nodes) {
          if (need == 0) break;
          const int take = std::min(need, e);
          out->push_back({n, take});
          need -= take;
        }
        if (need == 0) return true;
      } else {
        std::sort(nodes.begin(), nodes.end());
        if (static_cast<int>(nodes.size()) >= s.nodes) {
          for (int i = 0; i < s.nodes; ++i) out->push_back({nodes[i].second, s.gpus_per_node});
          return true;
        }
      }
    }
    return false;
  }

  int max_span_level_;
  const std::unique_ptr<ScorePlugin> pack_ = Own(builtin::NewPackScore);
  const std::unique_ptr<ScorePlugin> spread_ = Own(builtin::NewSpreadScore);
  // Scratch reused across calls (the engine's loop is serial).
  mutable std::vector<CapLoss> loss_;
  mutable std::vector<std::pair<DomainIndex, int>> adjust_;
};

Result<int> SpanLevel(const PluginArgs& args, const Cluster& cluster) {
  GANTRY_ASSIGN_OR_RETURN(std::string level, args.String("max_span_level", ""));
  int index = -1;
  if (!level.empty()) {
    const auto& levels = cluster.levels();
    for (size_t i = 0; i < levels.size(); ++i) {
      if (levels[i] == level) index = static_cast<int>(i);
    }
    if (index < 0) {
      std::string known;
      for (const auto& l : levels) known += (known.empty() ? "" : ", ") + l;
      return InvalidArgument("plugin 'topology': max_span_level '" + level +
                             "' is not a level of cluster '" + cluster.name() + "' (levels: " +
                             (known.empty() ? "none, the cluster is flat" : known) + ")");
    }
  }
  return index;
}

}  // namespace

bool MayFit(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps) {
  const JobShape s = ShapeOf(job);
  if (caps == nullptr || caps->empty()) return MayFit(job, s, free, {});
  std::vector<CapLoss> loss;
  CollectCapLoss(job, s.any ? 1 : s.gpus_per_node, free, caps, &loss);
  return MayFit(job, s, free, loss);
}

JobShape ShapeOf(const JobRequest& job) {
  JobShape s;
  if (job.nodes > 0 && job.gpus_per_node > 0) {
    s.nodes = job.nodes;
    s.gpus_per_node = job.gpus_per_node;
  } else {
    s.any = true;
  }
  return s;
}

Result<std::unique_ptr<PlacementPlugin>> NewBuiltinPlacement(const std::string& name,
                                                             const PluginArgs& args,
                                                             const PluginContext& ctx,
                                                             PlacementSearch search) {
  const bool topology = name == "topology";
  if (!topology && name != "first-fit" && name != "best-fit") {
    return NotFound("no built-in placement '" + name + "'");
  }
  GANTRY_RETURN_IF_ERROR(topology ? args.CheckKnown({"max_span_level", "scores"})
                                  : args.CheckKnown({"scores"}));
  GANTRY_ASSIGN_OR_RETURN(std::string list, args.String("scores", ""));
  GANTRY_ASSIGN_OR_RETURN(OwnedScores extra, ParseScoreList(name, list, ctx));
  if (topology) {
    GANTRY_ASSIGN_OR_RETURN(int level, SpanLevel(args, *ctx.cluster));
    return std::unique_ptr<PlacementPlugin>(new Topology(level, search, std::move(extra)));
  }
  if (name == "first-fit") {
    return std::unique_ptr<PlacementPlugin>(new FirstFit(search, std::move(extra)));
  }
  return std::unique_ptr<PlacementPlugin>(new BestFit(search, std::move(extra)));
}

namespace builtin {

Result<std::unique_ptr<PlacementPlugin>> NewFirstFit(const PluginArgs& args,
                                                     const PluginContext& ctx) {
  return NewBuiltinPlacement("first-fit", args, ctx, PlacementSearch::kFast);
}

Result<std::unique_ptr<PlacementPlugin>> NewBestFit(const PluginArgs& args,
                                                    const PluginContext& ctx) {
  return NewBuiltinPlacement("best-fit", args, ctx, PlacementSearch::kFast);
}

Result<std::unique_ptr<PlacementPlugin>> NewTopology(const PluginArgs& args,
                                                     const PluginContext& ctx) {
  return NewBuiltinPlacement("topology", args, ctx, PlacementSearch::kFast);
}

}  // namespace builtin
}  // namespace gantry
