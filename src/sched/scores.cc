// Built-in score plugins for the "scored" placement (scored_placement.cc).
//   pack    prefers nodes with fewer usable GPUs: fills partly used nodes first and keeps whole
//           nodes free for gangs (best-fit's criterion), 1 - usable / max GPUs per node
//   spread  the opposite, usable / max GPUs per node: fewer jobs share a node's links and power
#include "builtin_plugins.h"

namespace gantry {
namespace {

class PackScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "pack"; }
  double Score(const JobRequest&, NodeIndex, int usable, const FreeIndex& free) const override {
    return 1.0 - static_cast<double>(usable) / free.cluster().max_gpus_per_node();
  }
};

class SpreadScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "spread"; }
  double Score(const JobRequest&, NodeIndex, int usable, const FreeIndex& free) const override {
    return static_cast<double>(usable) / free.cluster().max_gpus_per_node();
  }
};

}  // namespace

namespace builtin {

Result<std::unique_ptr<ScorePlugin>> NewPackScore(const PluginArgs& args, const PluginContext&) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new PackScore());
}

Result<std::unique_ptr<ScorePlugin>> NewSpreadScore(const PluginArgs& args, const PluginContext&) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new SpreadScore());
}

}  // namespace builtin
}  // namespace gantry
