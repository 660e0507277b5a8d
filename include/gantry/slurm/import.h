// `gantry cluster import --from-slurm`: a cluster spec (docs/formats/cluster.md) written from a
// live Slurm cluster, so that a site's what-if simulation starts from its real configuration.
//
// Nodes, CPUs, memory and GPUs with their types come from sinfo (GRES "gpu:h100:8"); the
// topology tree from the switches slurmctld loaded from topology.conf; the teams and their GPU
// quotas from the accounts' sacctmgr associations (GrpTRES gres/gpu, Fairshare); the QOS from
// sacctmgr show qos (Priority, Preempt, UsageFactor), each with the level QosLevels gives it.
#pragma once

#include <string>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/slurm/slurm.h"

namespace gantry::slurm {

struct ImportOptions {
  std::string name;   // the spec's cluster name; empty: Slurm's ClusterName
  bool teams = true;  // read accounts and QOS from sacctmgr (needs slurmdbd)
};

// What import reads from Slurm, gathered first so the spec writer is tested without a cluster.
struct SlurmSnapshot {
  std::string cluster_name;
  std::vector<SlurmNode> nodes;
  std::vector<SlurmSwitch> switches;  // empty: a flat cluster
  std::vector<SlurmAccount> accounts;
  std::vector<SlurmQos> qos;
};

// The level of each QOS (in `qos`'s order) in the spec import writes: its rank by Priority,
// lowest first from 0, equal priorities by name. So a higher Priority is a higher level, as
// preemption by priority (mode priority) reads it, and every level is distinct.
std::vector<int> QosLevels(const std::vector<SlurmQos>& qos);

Result<SlurmSnapshot> ReadSnapshot(const SlurmClient& client, const ImportOptions& options);

// The cluster spec YAML of a snapshot. InvalidArgument for what the spec format cannot express:
// a node with GPUs of two types, a node under two leaf switches, a switch cycle, no nodes.
// GPU types Gantry does not know get memory and power 0, with a comment to fill them in.
Result<std::string> WriteClusterSpec(const SlurmSnapshot& snapshot, const ImportOptions& options);

}  // namespace gantry::slurm
