// Every built-in scheduling plugin, registered under the name profiles use. Adding a plugin is
// a new file with its factory and one line here.
#include "builtin_plugins.h"

#include <cstdio>
#include <cstdlib>

namespace gantry {

void RegisterBuiltinPlugins(PluginRegistry& r) {
  using namespace builtin;
  Status s;
  const auto add = [&s](Status st) {
    if (s.ok()) s = std::move(st);
  };
  add(r.AddPriority("age", NewAge));
  add(r.AddPriority("fairshare", NewFairShare));
  add(r.AddPriority("job-size", NewJobSize));
  add(r.AddPriority("qos", NewQos));
  add(r.AddPriority("oracle-runtime", NewOracleRuntime));
  add(r.AddPriority("oracle-service", NewOracleService));
  add(r.AddPriority("fairtree", NewFairTree));
  add(r.AddPriority("slurm-job-size", NewSlurmJobSize));
  add(r.AddPriority("partition", NewPartition));
  add(r.AddAdmission("quota", NewQuota));
  add(r.AddAdmission("kueue", NewKueue));
  add(r.AddAdmission("power", NewPower));
  add(r.AddPlacement("first-fit", NewFirstFit));
  add(r.AddPlacement("best-fit", NewBestFit));
  add(r.AddPlacement("topology", NewTopology));
  add(r.AddPlacement("scored", NewScored));
  add(r.AddScore("pack", NewPackScore));
  add(r.AddScore("spread", NewSpreadScore));
  add(r.AddScore("lowest-index", NewLowestIndexScore));
  add(r.AddScore("least-free", NewLeastFreeScore));
  add(r.AddScore("most-free", NewMostFreeScore));
  add(r.AddScore("fgd", NewFgdScore));
  add(r.AddScore("scarcity", NewScarcityScore));
  add(r.AddScore("data-locality", NewDataLocalityScore));
  add(r.AddPreemption("none", NewNoPreemption));
  add(r.AddPreemption("kueue-order", NewKueueOrder));
  add(r.AddPreemption("checkpoint-aware", NewCheckpointAware));
  if (!s.ok()) {
    std::fprintf(stderr, "gantry: built-in plugins clash: %s\n", s.ToString().c_str());
    std::abort();
  }
}

}  // namespace gantry
