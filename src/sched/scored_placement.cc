// The "scored" placement: placement split into a filter and weighted scores, like the
// Kubernetes scheduling framework's Filter and Score points.
//
//   filter  nodes of an allowed GPU type with at least the GPUs per node the shape needs (a
//           gang's gpus_per_node, 1 for an "any" job), after reservation caps
//   score   sum over the profile's scores of weight * ScorePlugin::Score; ties: lower node index
//   choose  a gang takes its `nodes` best nodes; an "any" job fills the best nodes in order
//
// Scores are plugins (registry.h), so a new criterion (data locality, power) is a new file and a
// registry line, with no edit here. Profile: placement: {plugin: scored, args: {scores:
// "pack:2,locality:1"}} (name[:weight], comma-separated; default "pack"). The scan is O(nodes)
// per attempt, slower than the index-driven built-ins, which stay the defaults.
#include <algorithm>
#include <cstdlib>

#include "builtin_plugins.h"
#include "placement.h"

namespace gantry {
namespace {

class Scored final : public PlacementPlugin {
 public:
  struct WeightedScore {
    std::unique_ptr<ScorePlugin> score;
    double weight;
  };
  explicit Scored(std::vector<WeightedScore> scores) : scores_(std::move(scores)) {}
  std::string_view name() const override { return "scored"; }

  bool Place(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
             Placement* out) const override {
    out->clear();
    const JobShape s = ShapeOf(job);
    const int need_per_node = s.any ? 1 : s.gpus_per_node;
    // Filter.
    candidates_.clear();
    const auto count = static_cast<NodeIndex>(free.cluster().nodes().size());
    for (NodeIndex n = 0; n < count; ++n) {
      if (!((job.gpu_type_mask >> free.gpu_type(n)) & 1u)) continue;
      const int usable = caps ? caps->Effective(n, free.free(n)) : free.free(n);
      if (usable < need_per_node) continue;
      double total = 0;
      for (const WeightedScore& w : scores_)
        total += w.weight * w.score->Score(job, n, usable, free);
      candidates_.push_back({total, n, usable});
    }
    // Score order: best first, lower index on ties.
    std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
      return a.score != b.score ? a.score > b.score : a.node < b.node;
    });
    if (!s.any) {
      if (static_cast<int>(candidates_.size()) < s.nodes) return false;
      for (int i = 0; i < s.nodes; ++i) out->push_back({candidates_[i].node, s.gpus_per_node});
      return true;
    }
    int need = job.gpus;
    for (const Candidate& c : candidates_) {
      if (need == 0) break;
      const int take = std::min(need, c.usable);
      out->push_back({c.node, take});
      need -= take;
    }
    return need == 0;
  }

 private:
  struct Candidate {
    double score;
    NodeIndex node;
    int usable;
  };
  std::vector<WeightedScore> scores_;
  mutable std::vector<Candidate> candidates_;  // scratch (the engine's loop is serial)
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<PlacementPlugin>> NewScored(const PluginArgs& args,
                                                   const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"scores"}));
  GANTRY_ASSIGN_OR_RETURN(std::string list, args.String("scores", "pack"));
  const PluginRegistry& registry = ctx.registry ? *ctx.registry : PluginRegistry::Builtin();
  std::vector<Scored::WeightedScore> scores;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(pos, end - pos);
    pos = end + 1;
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    double weight = 1.0;
    const size_t colon = item.find(':');
    if (colon != std::string::npos) {
      const std::string w = item.substr(colon + 1);
      char* stop = nullptr;
      weight = std::strtod(w.c_str(), &stop);
      if (w.empty() || *stop != '\0') {
        return InvalidArgument("plugin 'scored': argument 'scores': weight \"" + w + "\" of '" +
                               item.substr(0, colon) + "' is not a number");
      }
      item.resize(colon);
    }
    auto score = registry.CreateScore(item, PluginArgs(item, {}), ctx);
    if (!score.ok()) return score.status().WithContext("plugin 'scored'");
    scores.push_back({std::move(score).value(), weight});
  }
  if (scores.empty()) return InvalidArgument("plugin 'scored': argument 'scores' names no score");
  return std::unique_ptr<PlacementPlugin>(new Scored(std::move(scores)));
}

}  // namespace builtin
}  // namespace gantry
