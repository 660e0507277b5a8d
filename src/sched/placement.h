// Private to sched/: job shapes and the built-in placements' shared pieces, used by the
// placement plugins, the engine's reservations and placement_test.cc.
#pragma once

#include <memory>
#include <string>

#include "gantry/sched/plugin.h"
#include "gantry/sched/registry.h"

namespace gantry {

struct JobShape {
  bool any = false;       // GPUs may be spread over any nodes
  int nodes = 0;          // gang: this many nodes...
  int gpus_per_node = 0;  // ...with this many GPUs each
};

JobShape ShapeOf(const JobRequest& job);

// False exactly when `job` fits nowhere, however nodes are chosen (counts from the free index,
// less what caps hold back). O(touched caps).
bool MayFit(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps);

// How a built-in placement searches. kFast: its index-driven search (what it runs when the
// profile adds no scores). kGeneric: the same placement written as filter + score
// (filter_score.h), which every profile's extra scores go through.
enum class PlacementSearch { kFast, kGeneric };

// The built-in placement `name` (first-fit, best-fit, topology) with its search forced, so that
// placement_test.cc can prove the fast paths choose what the generic path chooses.
Result<std::unique_ptr<PlacementPlugin>> NewBuiltinPlacement(const std::string& name,
                                                             const PluginArgs& args,
                                                             const PluginContext& ctx,
                                                             PlacementSearch search);

}  // namespace gantry
