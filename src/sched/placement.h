// Private to sched/: job shapes, shared by the placement plugins and the engine's reservations.
#pragma once

#include "gantry/sched/plugin.h"

namespace gantry {

struct JobShape {
  bool any = false;       // GPUs may be spread over any nodes
  int nodes = 0;          // gang: this many nodes...
  int gpus_per_node = 0;  // ...with this many GPUs each
};

JobShape ShapeOf(const JobRequest& job);

}  // namespace gantry
