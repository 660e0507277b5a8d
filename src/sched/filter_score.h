// Private to sched/: placement as a filter and a score, the form every placement can be written
// in, and the shared filter that every placement (fast or generic) applies.
//
//   filter  a node passes when its GPU type is allowed and it has at least `min_usable` usable
//           GPUs: free, less what reservation caps hold back (NodeCaps). The gang's
//           gpus_per_node, or 1 for an "any" job.
//   score   sum over weighted ScorePlugins, higher is better; ties go to the lower node index.
//   choose  a gang takes its `nodes` best nodes; an "any" job fills the best nodes in order.
//
// The built-ins are defined by scores (scores.cc): first-fit is "lowest-index", best-fit is
// "least-free" (and "most-free" to spread an "any" job too big for one node), topology chooses a
// domain, then "pack"/"spread" inside it. Their index-driven searches in placement.cc are fast
// paths that placement_test.cc proves choose exactly what this generic path chooses.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gantry/sched/plugin.h"
#include "gantry/sched/registry.h"
#include "placement.h"

namespace gantry {

inline bool TypeAllowed(const FreeIndex& f, NodeIndex n, uint32_t mask) {
  return (mask >> f.gpu_type(n)) & 1u;
}

// GPUs a placement may take on node n: free, capped by reservations.
inline int Usable(const FreeIndex& f, const NodeCaps* caps, NodeIndex n) {
  return caps ? caps->Effective(n, f.free(n)) : f.free(n);
}

// The shared filter.
inline bool PassesFilter(const JobRequest& job, const FreeIndex& f, const NodeCaps* caps,
                         NodeIndex n, int min_usable) {
  return TypeAllowed(f, n, job.gpu_type_mask) && Usable(f, caps, n) >= min_usable;
}

// GPUs per node a node must offer to pass the filter for this shape.
inline int MinUsable(const JobShape& s) { return s.any ? 1 : s.gpus_per_node; }

// One term of a placement's score. Borrowed plugin.
struct WeightedScore {
  const ScorePlugin* score;
  double weight;
};

// Score plugins a placement owns, with their weights, in the order given.
struct OwnedScores {
  std::vector<std::unique_ptr<ScorePlugin>> plugins;
  std::vector<WeightedScore> weighted;  // points into `plugins`
  void Add(std::unique_ptr<ScorePlugin> score, double weight) {
    weighted.push_back({score.get(), weight});
    plugins.push_back(std::move(score));
  }
};

// Parses a profile's score list, "name[:weight],..." (weight 1 when omitted), resolving names
// through ctx.registry (the built-in registry when null). Errors name `plugin` and the argument.
Result<OwnedScores> ParseScoreList(const std::string& plugin, const std::string& list,
                                   const PluginContext& ctx);

// Nodes [first, end): a topology domain, or the whole cluster.
struct NodeRange {
  NodeIndex first;
  NodeIndex end;
};

// The generic filter+score placement. Chooses for `job` with shape `s` among the nodes of
// `range` (every node when null) that pass the filter, ranked by `scores`; appends to `out`
// (cleared first). Returns false when the job does not fit. Candidates come from the free
// index (only nodes with enough free GPUs of an allowed type) when that skips most nodes, else
// from a scan of `range` or the cluster. Not thread-safe (reuses its scratch).
class ScoredSearch {
 public:
  bool Place(const JobRequest& job, const JobShape& s, const FreeIndex& free, const NodeCaps* caps,
             std::span<const WeightedScore> scores, const NodeRange* range, Placement* out);

 private:
  struct Candidate {
    double score;
    NodeIndex node;
    int usable;
  };
  std::vector<Candidate> candidates_;
};

}  // namespace gantry
