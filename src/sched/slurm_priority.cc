// Slurm's multifactor arithmetic (see slurm_priority.h).
#include "slurm_priority.h"

#include <algorithm>
#include <cmath>

namespace gantry {

uint32_t SlurmJobPriority(const SlurmWeights& w, const SlurmFactors& f) {
  const double sum = static_cast<double>(f.site) + f.age * w.age + f.assoc * w.assoc +
                     f.fairshare * w.fairshare + f.job_size * w.job_size +
                     f.partition * w.partition + f.qos * w.qos - static_cast<double>(f.nice);
  return TruncateSlurmPriority(sum);
}

uint32_t TruncateSlurmPriority(double sum) {
  if (!(sum >= 1.0)) return 1;  // also catches NaN
  if (sum >= 4294967295.0) return 4294967295u;
  return static_cast<uint32_t>(sum);  // truncation, as slurmctld does
}

int64_t SprioColumn(double factor, uint32_t weight) {
  // printf's %.0f rounds half to even under the default rounding mode; nearbyint matches it.
  return static_cast<int64_t>(std::nearbyint(factor * weight));
}

double SlurmJobSizeFactor(int64_t min_nodes, int64_t cpus, int64_t cluster_nodes,
                          int64_t cluster_cpus, bool favor_small) {
  if (cluster_nodes <= 0) return 0;
  double f;
  const auto nodes = static_cast<double>(cluster_nodes);
  if (favor_small) {
    f = static_cast<double>(cluster_nodes - min_nodes) / nodes;
    if (cpus > 0 && cluster_cpus > 0) {
      f += static_cast<double>(cluster_cpus - cpus) / static_cast<double>(cluster_cpus);
      f /= 2;
    }
  } else {
    f = static_cast<double>(min_nodes) / nodes;
    if (cpus > 0 && cluster_cpus > 0) {
      f += static_cast<double>(cpus) / static_cast<double>(cluster_cpus);
      f /= 2;
    }
  }
  return std::clamp(f, 0.0, 1.0);
}

double SlurmAgeFactor(int64_t waited_seconds, int64_t max_age_seconds) {
  if (max_age_seconds <= 0 || waited_seconds <= 0) return 0;
  if (waited_seconds >= max_age_seconds) return 1;
  return static_cast<double>(waited_seconds) / static_cast<double>(max_age_seconds);
}

}  // namespace gantry
