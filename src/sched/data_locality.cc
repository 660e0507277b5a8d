#include "gantry/sched/data_locality.h"

#include <algorithm>

namespace gantry {

DataLocality::~DataLocality() = default;

void DataLocalityMap::Set(const std::string& dataset, NodeIndex node, double fraction) {
  // `!(fraction > 0)` also catches NaN.
  const bool forget = !(fraction > 0);
  fraction = std::min(fraction, 1.0);
  auto it = held_.find(dataset);
  if (it == held_.end()) {
    if (!forget) held_[dataset].emplace_back(node, fraction);
    return;
  }
  auto& nodes = it->second;
  auto at =
      std::find_if(nodes.begin(), nodes.end(), [&](const auto& p) { return p.first == node; });
  if (forget) {
    if (at != nodes.end()) nodes.erase(at);
    if (nodes.empty()) held_.erase(it);
  } else if (at != nodes.end()) {
    at->second = fraction;
  } else {
    nodes.emplace_back(node, fraction);
  }
}

void DataLocalityMap::Erase(const std::string& dataset) { held_.erase(dataset); }

void DataLocalityMap::Clear() { held_.clear(); }

double DataLocalityMap::Fraction(const std::string& dataset, NodeIndex node) const {
  auto it = held_.find(dataset);
  if (it == held_.end()) return 0;
  for (const auto& [n, f] : it->second) {
    if (n == node) return f;
  }
  return 0;
}

double DataLocalityMap::HeldFraction(NodeIndex node, const JobRequest& job) const {
  double datasets = 0;
  for (const std::string& d : job.datasets) datasets += Fraction(d, node);
  if (!job.datasets.empty()) datasets /= static_cast<double>(job.datasets.size());
  if (job.checkpoint.empty()) return datasets;
  const double checkpoint = Fraction(job.checkpoint, node);
  return job.datasets.empty() ? checkpoint : (datasets + checkpoint) / 2;
}

bool DataLocalityMap::HeldAnywhere(const JobRequest& job) const {
  if (!job.checkpoint.empty() && held_.count(job.checkpoint) != 0) return true;
  for (const std::string& d : job.datasets) {
    if (held_.count(d) != 0) return true;
  }
  return false;
}

}  // namespace gantry
