// The plugin registry: every scheduling plugin, by extension point and name, and the seam through
// which oracle plugins learn what only a simulator knows.
//
// Profiles name plugins; the engine resolves each name through a registry (the built-in one
// unless EngineOptions gives another). Built-ins are registered in one place,
// src/sched/builtin_plugins.cc; a new plugin is one file and one line there (docs/architecture.md,
// "How to add a score plugin"). Unknown names are NotFound errors that list the known ones.
// A registry is filled once and then only read, so concurrent reads are safe.
//
//   PluginContext ctx{&cluster, &teams, /*oracle=*/nullptr};
//   auto placement = PluginRegistry::Builtin().CreatePlacement("topology", args, ctx);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/sched/plugin.h"
#include "gantry/workload/job_request.h"

namespace gantry {

// What a job's run time truly is: an ORACLE. Only the trace-driven simulator knows it (the
// trace records it; it looks the request up by JobRequest::index); a live driver does not and
// provides none. Oracle plugins (oracle-runtime,
// oracle-service, and so the sjf-oracle and srsf-oracle profiles) need one: creating them
// without it is a FailedPrecondition error, so an oracle profile can never run live by mistake.
class RuntimeOracle {
 public:
  virtual ~RuntimeOracle() = default;
  virtual Duration TrueRunTime(const JobRequest& job) const = 0;
};

class DataLocality;
class PluginRegistry;
class SharedGpus;
class TaskMix;

// What a plugin may look at when it is created. Borrowed; outlives the plugin.
struct PluginContext {
  const Cluster* cluster = nullptr;
  const std::vector<Team>* teams = nullptr;
  const RuntimeOracle* oracle = nullptr;  // null outside the simulator
  // Where plugins that compose others (the "scored" placement and its scores) resolve names.
  const PluginRegistry* registry = nullptr;
  // Names behind JobRequest::user and JobRequest::queue (the driver's tables), for plugins that
  // match configuration by name (Fair Tree's users' shares, partition priorities); null when the
  // driver has none.
  const std::vector<std::string>* users = nullptr;
  const std::vector<std::string>* queues = nullptr;
  // The workload's kinds of task, for the "fgd" score's expectation; null: it learns them from
  // the jobs it scores. Set by drivers that know the workload up front (the packing experiment).
  const TaskMix* task_mix = nullptr;
  // What each node holds of each job's declared data, for the "data-locality" score; null: none
  // known (a live driver gives it through EngineOptions::data_locality).
  const DataLocality* data_locality = nullptr;
  // The engine's shared GPUs (fractional jobs, free_index.h), and the shared GPU a share is on:
  // -1 for a share that holds a whole GPU booked instead (a preemptor waiting for its victims
  // under GraceTime) and for any other job. For plugins that count GPUs as the hardware does
  // (the "power" plugin: a shared GPU draws once, whatever its shares). Null and empty outside
  // an engine.
  const SharedGpus* shared_gpus = nullptr;
  std::function<int32_t(JobIndex)> shared_gpu_of = nullptr;
};

template <class Plugin>
using PluginFactory =
    std::function<Result<std::unique_ptr<Plugin>>(const PluginArgs&, const PluginContext&)>;

class PluginRegistry {
 public:
  // The registry holding every built-in plugin.
  static const PluginRegistry& Builtin();

  // Each returns AlreadyExists when the name is taken at that extension point.
  Status AddPriority(std::string name, PluginFactory<PriorityFactor> factory);
  Status AddAdmission(std::string name, PluginFactory<AdmissionPlugin> factory);
  Status AddPlacement(std::string name, PluginFactory<PlacementPlugin> factory);
  Status AddScore(std::string name, PluginFactory<ScorePlugin> factory);
  Status AddPreemption(std::string name, PluginFactory<PreemptionPlugin> factory);

  Result<std::unique_ptr<PriorityFactor>> CreatePriority(const std::string& name,
                                                         const PluginArgs& args,
                                                         const PluginContext& ctx) const;
  Result<std::unique_ptr<AdmissionPlugin>> CreateAdmission(const std::string& name,
                                                           const PluginArgs& args,
                                                           const PluginContext& ctx) const;
  Result<std::unique_ptr<PlacementPlugin>> CreatePlacement(const std::string& name,
                                                           const PluginArgs& args,
                                                           const PluginContext& ctx) const;
  Result<std::unique_ptr<ScorePlugin>> CreateScore(const std::string& name, const PluginArgs& args,
                                                   const PluginContext& ctx) const;
  Result<std::unique_ptr<PreemptionPlugin>> CreatePreemption(const std::string& name,
                                                             const PluginArgs& args,
                                                             const PluginContext& ctx) const;

  // Names per extension point ("priority", "admission", "placement", "score", "backfill",
  // "preemption"), in registration order, for --help and error messages.
  std::vector<std::pair<std::string, std::vector<std::string>>> Names() const;

 private:
  template <class Plugin>
  struct Point {
    const char* what;  // "placement plugin", for messages
    std::vector<std::pair<std::string, PluginFactory<Plugin>>> entries;
    Status Add(std::string name, PluginFactory<Plugin> factory);
    Result<std::unique_ptr<Plugin>> Create(const std::string& name, const PluginArgs& args,
                                           const PluginContext& ctx) const;
    std::vector<std::string> names() const;
  };
  Point<PriorityFactor> priority_{"priority factor", {}};
  Point<AdmissionPlugin> admission_{"admission plugin", {}};
  Point<PlacementPlugin> placement_{"placement plugin", {}};
  Point<ScorePlugin> score_{"score plugin", {}};
  Point<PreemptionPlugin> preemption_{"preemption plugin", {}};
};

// Registers every built-in plugin into `registry` (src/sched/builtin_plugins.cc).
void RegisterBuiltinPlugins(PluginRegistry& registry);

}  // namespace gantry
