// PowerMeter: what a cluster draws under the power model of its spec (cluster.h, PowerSpec), kept
// up to date as jobs start and end, for the whole cluster and for each topology domain.
//
// Draw = node_watts per node + idle_watts per idle GPU + the busy watts (at the capped clock
// when the spec has one) per busy GPU. Drained and down nodes are counted as drawing their idle
// watts (a conservative model: a node that is powered off only lowers the real draw). Watts are
// kept in whole milliwatts so that sums are exact and a cap is never crossed by rounding.
// Used by the "power" admission plugin and by the simulator (energy, peak draw). Not
// thread-safe; the Cluster must outlive it.
//
//   PowerMeter meter(cluster);
//   if (meter.Fits(placement)) meter.Add(placement, +1);  // a job starts there
//   meter.Add(placement, -1);                              // ... and ends
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/sched/plugin.h"

namespace gantry {

class PowerMeter {
 public:
  explicit PowerMeter(const Cluster& cluster);

  static int64_t Milliwatts(double watts) { return std::llround(watts * 1000.0); }

  // Whether starting a job on `p` keeps the cluster and every capped domain within its cap.
  // When it does not: `why` (if given) says which cap, and `over` (if given) gets every capped
  // domain that would be over its cap.
  bool Fits(const Placement& p, std::string* why = nullptr,
            std::vector<DomainIndex>* over = nullptr) const;
  // The placement's GPUs turn busy (sign +1) or idle again (sign -1).
  void Add(const Placement& p, int sign);

  // What the placement's GPUs draw while busy, and how much more than idle.
  int64_t BusyMilliwatts(const Placement& p) const;
  int64_t AddedMilliwatts(const Placement& p) const;
  // The least a job of `gpus` GPUs of the types in `mask` adds to the draw.
  int64_t MinAddedMilliwatts(int gpus, uint32_t mask) const;
  // How many more GPUs of the types in `mask` the cluster's cap has power for (domain caps
  // aside); INT64_MAX without a cluster cap.
  int64_t BusyGpusLeft(uint32_t mask) const;

  int64_t cluster_mw() const { return cluster_mw_; }
  int64_t cluster_cap_mw() const { return cluster_cap_mw_; }  // 0: no cap
  int64_t domain_mw(DomainIndex d) const { return domain_mw_[d]; }
  int64_t domain_cap_mw(DomainIndex d) const {  // 0: no cap
    return domain_cap_mw_.empty() ? 0 : domain_cap_mw_[d];
  }
  // Capped domains, in index order.
  const std::vector<DomainIndex>& capped_domains() const { return capped_; }
  const Cluster& cluster() const { return cluster_; }

 private:
  const Cluster& cluster_;
  std::vector<int64_t> busy_mw_;   // per GPU type
  std::vector<int64_t> added_mw_;  // per GPU type: busy - idle
  int64_t cluster_mw_ = 0;
  int64_t cluster_cap_mw_ = 0;
  std::vector<int64_t> domain_mw_;
  std::vector<int64_t> domain_cap_mw_;  // empty when no domain has a cap
  std::vector<DomainIndex> capped_;
  mutable std::vector<std::pair<DomainIndex, int64_t>> scratch_;  // per capped domain: added
};

// "1.5 kW", "700 W": milliwatts for people.
std::string FormatWatts(int64_t milliwatts);

}  // namespace gantry
