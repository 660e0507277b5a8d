#include "gantry/sched/power.h"

#include <algorithm>
#include <climits>
#include <cstdio>

namespace gantry {

PowerMeter::PowerMeter(const Cluster& cluster) : cluster_(cluster) {
  for (size_t t = 0; t < cluster.gpu_types().size(); ++t) {
    const int64_t busy = Milliwatts(cluster.BusyWatts(static_cast<GpuTypeIndex>(t)));
    busy_mw_.push_back(busy);
    added_mw_.push_back(busy - Milliwatts(cluster.gpu_types()[t].idle_watts));
  }
  const PowerSpec& power = cluster.power();
  const int64_t node_mw = Milliwatts(power.node_watts);
  // Idle draw summed node by node, in the same integer units as every later change.
  std::vector<int64_t> node_idle(cluster.nodes().size());
  for (size_t n = 0; n < node_idle.size(); ++n) {
    const Node& node = cluster.nodes()[n];
    node_idle[n] = node_mw + node.gpus * Milliwatts(cluster.gpu_types()[node.gpu_type].idle_watts);
    cluster_mw_ += node_idle[n];
  }
  domain_mw_.assign(cluster.domains().size(), 0);
  for (size_t d = 0; d < domain_mw_.size(); ++d) {
    const Domain& dom = cluster.domains()[d];
    for (NodeIndex n = dom.first_node; n < dom.end_node; ++n) domain_mw_[d] += node_idle[n];
  }
  cluster_cap_mw_ = power.cap_watts > 0 ? Milliwatts(power.cap_watts) : 0;
  if (!power.domain_cap_watts.empty()) {
    domain_cap_mw_.assign(domain_mw_.size(), 0);
    for (size_t d = 0; d < domain_mw_.size(); ++d) {
      if (power.domain_cap_watts[d] <= 0) continue;
      domain_cap_mw_[d] = Milliwatts(power.domain_cap_watts[d]);
      capped_.push_back(static_cast<DomainIndex>(d));
    }
  }
}

int64_t PowerMeter::BusyMilliwatts(const Placement& p) const {
  int64_t mw = 0;
  for (const Slot& s : p) mw += s.gpus * busy_mw_[cluster_.nodes()[s.node].gpu_type];
  return mw;
}

int64_t PowerMeter::AddedMilliwatts(const Placement& p) const {
  int64_t mw = 0;
  for (const Slot& s : p) mw += s.gpus * added_mw_[cluster_.nodes()[s.node].gpu_type];
  return mw;
}

int64_t PowerMeter::MinAddedMilliwatts(int gpus, uint32_t mask) const {
  int64_t least = INT64_MAX;
  for (size_t t = 0; t < added_mw_.size(); ++t) {
    if ((mask >> t) & 1u) least = std::min(least, added_mw_[t]);
  }
  return least == INT64_MAX ? 0 : gpus * least;
}

int64_t PowerMeter::BusyGpusLeft(uint32_t mask) const {
  const int64_t per_gpu = MinAddedMilliwatts(1, mask);
  if (cluster_cap_mw_ == 0 || per_gpu <= 0) return INT64_MAX;
  return std::max<int64_t>(0, cluster_cap_mw_ - cluster_mw_) / per_gpu;
}

bool PowerMeter::Fits(const Placement& p, std::string* why, std::vector<DomainIndex>* over) const {
  if (cluster_cap_mw_ > 0) {
    const int64_t after = cluster_mw_ + AddedMilliwatts(p);
    if (after > cluster_cap_mw_) {
      if (why != nullptr) {
        *why = "the cluster would draw " + FormatWatts(after) + ", over its " +
               FormatWatts(cluster_cap_mw_) + " cap";
      }
      return false;
    }
  }
  if (capped_.empty()) return true;
  scratch_.clear();
  for (const Slot& s : p) {
    const Node& node = cluster_.nodes()[s.node];
    const int64_t added = s.gpus * added_mw_[node.gpu_type];
    for (DomainIndex d = node.domain; d >= 0; d = cluster_.domains()[d].parent) {
      if (domain_cap_mw_[d] == 0) continue;
      auto it = std::find_if(scratch_.begin(), scratch_.end(),
                             [d](const auto& e) { return e.first == d; });
      if (it == scratch_.end()) {
        scratch_.emplace_back(d, added);
      } else {
        it->second += added;
      }
    }
  }
  bool fits = true;
  for (const auto& [d, added] : scratch_) {
    const int64_t after = domain_mw_[d] + added;
    if (after > domain_cap_mw_[d]) {
      if (why != nullptr && fits) {
        *why = "domain " + cluster_.domains()[d].name + " would draw " + FormatWatts(after) +
               ", over its " + FormatWatts(domain_cap_mw_[d]) + " cap";
      }
      if (over != nullptr) over->push_back(d);
      fits = false;
    }
  }
  return fits;
}

void PowerMeter::Add(const Placement& p, int sign) {
  for (const Slot& s : p) {
    const Node& node = cluster_.nodes()[s.node];
    const int64_t added = sign * s.gpus * added_mw_[node.gpu_type];
    cluster_mw_ += added;
    for (DomainIndex d = node.domain; d >= 0; d = cluster_.domains()[d].parent) {
      domain_mw_[d] += added;
    }
  }
}

std::string FormatWatts(int64_t milliwatts) {
  char buf[48];
  const double w = static_cast<double>(milliwatts) / 1000.0;
  if (std::abs(w) >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3g MW", w / 1e6);
  } else if (std::abs(w) >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.4g kW", w / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g W", w);
  }
  return buf;
}

}  // namespace gantry
