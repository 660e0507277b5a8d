// sprio-style rows (see sprio.h).
#include "gantry/sched/sprio.h"

#include <cmath>
#include <cstdio>

#include "slurm_priority.h"

namespace gantry {

SprioRow MakeSprioRow(const std::vector<PriorityTerm>& terms, std::string job_id,
                      std::string partition, std::string user) {
  SprioRow row;
  row.job_id = std::move(job_id);
  row.partition = std::move(partition);
  row.user = std::move(user);
  double sum = 0;
  for (const PriorityTerm& t : terms) {
    const double weighted = t.weight * t.value;
    sum += weighted;
    const auto shown = static_cast<int64_t>(std::nearbyint(weighted));
    if (t.factor == "age") {
      row.age += shown;
    } else if (t.factor == "fairtree" || t.factor == "fairshare") {
      row.fairshare += shown;
    } else if (t.factor == "slurm-job-size" || t.factor == "job-size") {
      row.job_size += shown;
    } else if (t.factor == "partition") {
      row.partition_factor += shown;
    } else if (t.factor == "qos") {
      row.qos += shown;
    }
  }
  row.priority = TruncateSlurmPriority(sum);
  return row;
}

void WriteSprio(std::ostream& out, const std::vector<SprioRow>& rows) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%15s %-9s %8s %10s %10s %10s %10s %10s %10s %10s %10s %6s %20s\n",
                "JOBID", "PARTITION", "USER", "PRIORITY", "SITE", "AGE", "ASSOC", "FAIRSHARE",
                "JOBSIZE", "PARTITION", "QOS", "NICE", "TRES");
  out << buf;
  for (const SprioRow& r : rows) {
    std::snprintf(
        buf, sizeof buf,
        "%15s %-9s %8s %10u %10lld %10lld %10lld %10lld %10lld %10lld %10lld %6lld %20s\n",
        r.job_id.c_str(), r.partition.c_str(), r.user.c_str(), r.priority,
        static_cast<long long>(r.site), static_cast<long long>(r.age),
        static_cast<long long>(r.assoc), static_cast<long long>(r.fairshare),
        static_cast<long long>(r.job_size), static_cast<long long>(r.partition_factor),
        static_cast<long long>(r.qos), static_cast<long long>(r.nice), "");
    out << buf;
  }
}

}  // namespace gantry
