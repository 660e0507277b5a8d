// The "scored" placement: the generic filter + score path (filter_score.h) with only the scores
// a profile names, like the Kubernetes scheduling framework's Filter and Score points.
//
//   filter  nodes of an allowed GPU type with at least the GPUs per node the shape needs (a
//           gang's gpus_per_node, 1 for an "any" job), after reservation caps
//   score   sum over the profile's scores of weight * ScorePlugin::Score; ties: lower node index
//   choose  a gang takes its `nodes` best nodes; an "any" job fills the best nodes in order
//
// Scores are plugins (registry.h), so a new criterion (power, say) is a new file and a
// registry line, with no edit here. Profile: placement: {plugin: scored, args: {scores:
// "pack:2,data-locality:1"}} (name[:weight], comma-separated; default "pack"). The free index gives
// the candidates when it skips most nodes (ScoredSearch), then every candidate is scored.
#include "builtin_plugins.h"
#include "filter_score.h"
#include "placement.h"

namespace gantry {
namespace {

class Scored final : public PlacementPlugin {
 public:
  explicit Scored(OwnedScores scores) : scores_(std::move(scores)) {}
  std::string_view name() const override { return "scored"; }

  bool Place(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
             Placement* out) const override {
    out->clear();
    if (!MayFit(job, free, caps)) return false;  // exact: fails only when nothing fits
    return search_.Place(job, ShapeOf(job), free, caps, scores_.weighted, nullptr, out);
  }

 private:
  OwnedScores scores_;
  mutable ScoredSearch search_;  // scratch (the engine's loop is serial)
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<PlacementPlugin>> NewScored(const PluginArgs& args,
                                                   const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"scores"}));
  GANTRY_ASSIGN_OR_RETURN(std::string list, args.String("scores", "pack"));
  GANTRY_ASSIGN_OR_RETURN(OwnedScores scores, ParseScoreList("scored", list, ctx));
  if (scores.weighted.empty()) {
    return InvalidArgument("plugin 'scored': argument 'scores' names no score");
  }
  return std::unique_ptr<PlacementPlugin>(new Scored(std::move(scores)));
}

}  // namespace builtin
}  // namespace gantry
