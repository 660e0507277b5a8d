// Slurm's multifactor job priority as integers, the way slurmctld computes it and sprio prints
// it (priority_multifactor.html, sprio(1)); pure functions, used by the sprio output of the
// simulator and by the tests that pin Slurm's arithmetic.
//
//   Job_priority = site_factor
//                + PriorityWeightAge       * age_factor
//                + PriorityWeightAssoc     * assoc_factor
//                + PriorityWeightFairshare * fair-share_factor
//                + PriorityWeightJobSize   * job_size_factor
//                + PriorityWeightPartition * partition_factor
//                + PriorityWeightQOS       * QOS_factor
//                - nice
// Factors are in [0, 1], weights are unsigned 32-bit integers. The sum is formed in floating
// point and truncated to an unsigned 32-bit integer; Slurm keeps 0 for held jobs, so a computed
// priority below 1 becomes 1. sprio's weighted columns are each factor times its weight printed
// with no decimals (rounded), so they need not add up to PRIORITY, which is truncated once.
#pragma once

#include <cstdint>
#include <string>

namespace gantry {

struct SlurmWeights {
  uint32_t age = 0;
  uint32_t assoc = 0;
  uint32_t fairshare = 0;
  uint32_t job_size = 0;
  uint32_t partition = 0;
  uint32_t qos = 0;
};

struct SlurmFactors {
  double age = 0;
  double assoc = 0;
  double fairshare = 0;
  double job_size = 0;
  double partition = 0;
  double qos = 0;
  int64_t site = 0;
  int64_t nice = 0;
};

// The job's integer priority.
uint32_t SlurmJobPriority(const SlurmWeights& w, const SlurmFactors& f);
// The floating sum of a job's weighted factors as slurmctld stores it: truncated to an unsigned
// 32-bit integer, at least 1.
uint32_t TruncateSlurmPriority(double sum);

// One weighted sprio column: factor * weight, rounded as printf("%.0f") rounds.
int64_t SprioColumn(double factor, uint32_t weight);

// Slurm's job size factor: with PriorityFavorSmall=NO, (min_nodes / nodes + cpus / cluster_cpus)
// / 2, or min_nodes / nodes when the job's CPU count is unknown (0); with YES, the same with
// (nodes - min_nodes) and (cluster_cpus - cpus). Clamped to [0, 1].
double SlurmJobSizeFactor(int64_t min_nodes, int64_t cpus, int64_t cluster_nodes,
                          int64_t cluster_cpus, bool favor_small);

// Age factor: min(wait, max_age) / max_age (0 when max_age is 0).
double SlurmAgeFactor(int64_t waited_seconds, int64_t max_age_seconds);

}  // namespace gantry
