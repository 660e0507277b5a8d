// Cluster events for the simulator: what happens to nodes and jobs besides submissions and
// finishes — a node drained, down or back up, a job cancelled by its user. The simulator feeds
// them to the engine through the same calls a live driver makes (Drain, Down with Requeue, Up,
// Cancel), so what-if runs exercise the seams the control plane uses.
//
// File format (CSV, documented in docs/formats/traces.md#cluster-events):
//   time,event,target
//   3600,drain,node-0007        # seconds since the workload's t=0, or with units: 1h, 1h30m
//   2h,down,node-0012           # its running jobs end and are requeued (their work is lost)
//   4h,up,node-0012
//   90m,cancel,job-42           # the trace's job id; pending or running
// Blank lines and lines starting with '#' are skipped. Plain values, no synchronisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/workload/job.h"

namespace gantry {

struct ClusterEvent {
  enum class Kind : uint8_t { kDrain, kDown, kUp, kCancel };
  Time at = 0;
  Kind kind = Kind::kDrain;
  std::string target;  // a node name (drain, down, up) or a job id (cancel)
  int32_t line = 0;    // in the events file, for messages
  // Filled by ResolveClusterEvents: the node or job index the target names.
  int32_t index = -1;
};
const char* ClusterEventName(ClusterEvent::Kind kind);

// Parses an events file's text; `source` names it in messages ("events.csv:3: ..."). Events come
// back sorted by time, ties in file order. InvalidArgument for a missing or wrong header, an
// unknown event, a bad or negative time, a missing target or a wrong field count.
Result<std::vector<ClusterEvent>> ParseClusterEvents(std::string_view text,
                                                     const std::string& source);
// Reads and parses a file (NotFound / IoError naming it when it cannot be read).
Result<std::vector<ClusterEvent>> LoadClusterEvents(const std::string& path);

// Sets each event's index to the node or job its target names. InvalidArgument naming the line
// for a node the cluster does not have or a job id the workload does not have, and for a
// cancel dated before its job's submit time.
Status ResolveClusterEvents(const Cluster& cluster, const Workload& workload,
                            std::vector<ClusterEvent>* events);

}  // namespace gantry
