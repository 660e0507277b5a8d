// Private to sched/: the factories of the built-in plugins, one per plugin, each defined beside
// its plugin and registered under its name in builtin_plugins.cc.
#pragma once

#include "gantry/sched/registry.h"

namespace gantry::builtin {

// priority_factors.cc
Result<std::unique_ptr<PriorityFactor>> NewAge(const PluginArgs& args, const PluginContext& ctx);
Result<std::unique_ptr<PriorityFactor>> NewFairShare(const PluginArgs& args,
                                                     const PluginContext& ctx);
Result<std::unique_ptr<PriorityFactor>> NewJobSize(const PluginArgs& args,
                                                   const PluginContext& ctx);
Result<std::unique_ptr<PriorityFactor>> NewQos(const PluginArgs& args, const PluginContext& ctx);
Result<std::unique_ptr<PriorityFactor>> NewOracleRuntime(const PluginArgs& args,
                                                         const PluginContext& ctx);
Result<std::unique_ptr<PriorityFactor>> NewOracleService(const PluginArgs& args,
                                                         const PluginContext& ctx);
// slurm_factors.cc
Result<std::unique_ptr<PriorityFactor>> NewFairTree(const PluginArgs& args,
                                                    const PluginContext& ctx);
Result<std::unique_ptr<PriorityFactor>> NewSlurmJobSize(const PluginArgs& args,
                                                        const PluginContext& ctx);
Result<std::unique_ptr<PriorityFactor>> NewPartition(const PluginArgs& args,
                                                     const PluginContext& ctx);
// admission.cc
Result<std::unique_ptr<AdmissionPlugin>> NewQuota(const PluginArgs& args, const PluginContext& ctx);
Result<std::unique_ptr<PreemptionPlugin>> NewNoPreemption(const PluginArgs& args,
                                                          const PluginContext& ctx);
// power_admission.cc: power caps per cluster and topology domain
Result<std::unique_ptr<AdmissionPlugin>> NewPower(const PluginArgs& args, const PluginContext& ctx);
// preemption.cc: victim order (Kueue's, or by checkpoint cost), minimum run time, GraceTime,
// priority/QoS preemption
Result<std::unique_ptr<PreemptionPlugin>> NewKueueOrder(const PluginArgs& args,
                                                        const PluginContext& ctx);
Result<std::unique_ptr<PreemptionPlugin>> NewCheckpointAware(const PluginArgs& args,
                                                             const PluginContext& ctx);
// kueue.cc: ClusterQueues, cohorts, borrowing, lending, flavors, preemption, fair sharing
Result<std::unique_ptr<AdmissionPlugin>> NewKueue(const PluginArgs& args, const PluginContext& ctx);
// placement.cc: index-driven fast paths of filter + score (filter_score.h); each also takes a
// "scores" argument, extra weighted scores on top of its own
Result<std::unique_ptr<PlacementPlugin>> NewFirstFit(const PluginArgs& args,
                                                     const PluginContext& ctx);
Result<std::unique_ptr<PlacementPlugin>> NewBestFit(const PluginArgs& args,
                                                    const PluginContext& ctx);
Result<std::unique_ptr<PlacementPlugin>> NewTopology(const PluginArgs& args,
                                                     const PluginContext& ctx);
// scored_placement.cc: filter, then the profile's weighted score plugins
Result<std::unique_ptr<PlacementPlugin>> NewScored(const PluginArgs& args,
                                                   const PluginContext& ctx);
// scores.cc
Result<std::unique_ptr<ScorePlugin>> NewPackScore(const PluginArgs& args, const PluginContext& ctx);
Result<std::unique_ptr<ScorePlugin>> NewSpreadScore(const PluginArgs& args,
                                                    const PluginContext& ctx);
Result<std::unique_ptr<ScorePlugin>> NewLowestIndexScore(const PluginArgs& args,
                                                         const PluginContext& ctx);
Result<std::unique_ptr<ScorePlugin>> NewLeastFreeScore(const PluginArgs& args,
                                                       const PluginContext& ctx);
Result<std::unique_ptr<ScorePlugin>> NewMostFreeScore(const PluginArgs& args,
                                                      const PluginContext& ctx);
Result<std::unique_ptr<ScorePlugin>> NewScarcityScore(const PluginArgs& args,
                                                      const PluginContext& ctx);
Result<std::unique_ptr<ScorePlugin>> NewFgdScore(const PluginArgs& args, const PluginContext& ctx);
Result<std::unique_ptr<ScorePlugin>> NewDataLocalityScore(const PluginArgs& args,
                                                          const PluginContext& ctx);

}  // namespace gantry::builtin
