// Built-in score plugins: the criteria of the "scored" placement (scored_placement.cc) and the
// definitions of the built-in placements (placement.cc, filter_score.h). Each is in [0, 1].
//   pack          prefers nodes with fewer usable GPUs: fills partly used nodes first and keeps
//                 whole nodes free for gangs, 1 - usable / max GPUs per node (topology's choice
//                 of nodes for a gang inside its domain)
//   spread        the opposite, usable / max GPUs per node: fewer jobs share a node's links and
//                 power (topology's choice for an "any" job inside its domain)
//   lowest-index  1 - node / nodes: first-fit
//   least-free    1 - free / max GPUs per node: best-fit, the node left with the fewest free GPUs
//                 after placing. Free, not usable: GPUs a reservation holds back still count as
//                 the node's, since they will be free again for the reservation's job.
//   most-free     about free / max GPUs per node, ties to the lower GPU type index: best-fit's
//                 order for an "any" job too big for one node (fewest nodes spanned)
//   fgd           FGD (fragmentation.h): 1/2 - (growth of the node's expected fragmentation if
//                 the job took its GPUs there) / (2 * max GPUs per node), so the node where
//                 fragmentation grows least (or falls most) scores highest. The expectation is
//                 over PluginContext::task_mix when the driver gives one (the packing experiment
//                 gives the trace's), else over the jobs this score has been asked about so far.
//                 A job that may use any type leaves alone the types constrained jobs need,
//                 since emptying those counts against the constrained kinds too.
//   scarcity      1 - TypeContention (fragmentation.h): the share of the mix's GPU demand
//                 that may use the node's type but fewer types than this job, i.e. would be
//                 left with fewer places to run if this job took the node. Constant on a
//                 cluster of one type, or for a job that can use only one type.
//   data-locality the fraction of the job's declared data (JobRequest::datasets, and its newest
//                 checkpoint at JobRequest::checkpoint, weighted as sched/data_locality.h says)
//                 the node's local tier already holds, as the driver's DataLocality says.
//                 0 on every node, and Uniform, for a job that declares
//                 no data, when the driver gives no DataLocality, or when no node holds any of
//                 the job's data: it then changes no placement and costs no fast path.
#include <algorithm>

#include "builtin_plugins.h"
#include "gantry/sched/data_locality.h"
#include "gantry/sched/fragmentation.h"

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

class LowestIndexScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "lowest-index"; }
  double Score(const JobRequest&, NodeIndex node, int, const FreeIndex& free) const override {
    return 1.0 - static_cast<double>(node) / static_cast<double>(free.cluster().nodes().size());
  }
};

class LeastFreeScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "least-free"; }
  double Score(const JobRequest&, NodeIndex node, int, const FreeIndex& free) const override {
    return 1.0 - static_cast<double>(free.free(node)) / free.cluster().max_gpus_per_node();
  }
};

class MostFreeScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "most-free"; }
  // Lexicographic in one number: more free GPUs first, then the lower GPU type index (the free
  // index's order for best-fit, FreeIndex::VisitDescending); the search breaks the remaining
  // ties by node index.
  double Score(const JobRequest&, NodeIndex node, int, const FreeIndex& free) const override {
    const int types = static_cast<int>(free.cluster().gpu_types().size());
    const int top = free.cluster().max_gpus_per_node() * types + types - 1;
    return static_cast<double>(free.free(node) * types + (types - 1 - free.gpu_type(node))) / top;
  }
};

// The mix a score's expectation runs over: the driver's, or the one learned from every job
// scored so far (each counted once, before its first node is scored, so all its nodes are
// scored against the same mix). The engine's loop is serial.
class MixSource {
 public:
  explicit MixSource(const TaskMix* given) : given_(given) {}
  const TaskMix& For(const JobRequest& job) const {
    if (given_ != nullptr) return *given_;
    if (job.index < 0) return learned_;
    const auto i = static_cast<size_t>(job.index);
    if (i >= seen_.size()) seen_.resize(i + 1, false);
    if (!seen_[i]) {
      seen_[i] = true;
      learned_.Add(job);
    }
    return learned_;
  }

 private:
  const TaskMix* given_;
  mutable TaskMix learned_;
  mutable std::vector<bool> seen_;
};

class FgdScore final : public ScorePlugin {
 public:
  explicit FgdScore(const TaskMix* given) : mix_(given) {}
  std::string_view name() const override { return "fgd"; }
  double Score(const JobRequest& job, NodeIndex node, int usable,
               const FreeIndex& free) const override {
    const TaskMix& mix = mix_.For(job);
    const int have = free.free(node);
    const bool gang = job.nodes > 0 && job.gpus_per_node > 0;
    const int take = gang ? job.gpus_per_node : std::min(job.gpus, usable);
    const GpuTypeIndex t = free.gpu_type(node);
    const double growth =
        WholeGpuFragmentation(have - take, t, mix) - WholeGpuFragmentation(have, t, mix);
    return 0.5 - growth / (2.0 * free.cluster().max_gpus_per_node());
  }

 private:
  MixSource mix_;
};

class ScarcityScore final : public ScorePlugin {
 public:
  explicit ScarcityScore(const TaskMix* given) : mix_(given) {}
  std::string_view name() const override { return "scarcity"; }
  double Score(const JobRequest& job, NodeIndex node, int, const FreeIndex& free) const override {
    const auto types = static_cast<int>(free.cluster().gpu_types().size());
    const uint32_t all = types >= 32 ? ~0u : (1u << types) - 1;
    return 1.0 - TypeContention(mix_.For(job), free.gpu_type(node), job.gpu_type_mask, all);
  }

 private:
  MixSource mix_;
};

class DataLocalityScore final : public ScorePlugin {
 public:
  explicit DataLocalityScore(const DataLocality* locality) : locality_(locality) {}
  std::string_view name() const override { return "data-locality"; }
  double Score(const JobRequest& job, NodeIndex node, int, const FreeIndex&) const override {
    if (locality_ == nullptr || !DeclaresData(job)) return 0;
    return std::clamp(locality_->HeldFraction(node, job), 0.0, 1.0);
  }
  bool Uniform(const JobRequest& job) const override {
    return locality_ == nullptr || !DeclaresData(job) || !locality_->HeldAnywhere(job);
  }

 private:
  static bool DeclaresData(const JobRequest& job) {
    return !job.datasets.empty() || !job.checkpoint.empty();
  }

  const DataLocality* locality_;  // borrowed from the driver (EngineOptions); may be null
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

Result<std::unique_ptr<ScorePlugin>> NewLowestIndexScore(const PluginArgs& args,
                                                         const PluginContext&) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new LowestIndexScore());
}

Result<std::unique_ptr<ScorePlugin>> NewLeastFreeScore(const PluginArgs& args,
                                                       const PluginContext&) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new LeastFreeScore());
}

Result<std::unique_ptr<ScorePlugin>> NewMostFreeScore(const PluginArgs& args,
                                                      const PluginContext&) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new MostFreeScore());
}

Result<std::unique_ptr<ScorePlugin>> NewScarcityScore(const PluginArgs& args,
                                                      const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new ScarcityScore(ctx.task_mix));
}

Result<std::unique_ptr<ScorePlugin>> NewFgdScore(const PluginArgs& args, const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new FgdScore(ctx.task_mix));
}

Result<std::unique_ptr<ScorePlugin>> NewDataLocalityScore(const PluginArgs& args,
                                                          const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({}));
  return std::unique_ptr<ScorePlugin>(new DataLocalityScore(ctx.data_locality));
}

}  // namespace builtin
}  // namespace gantry
