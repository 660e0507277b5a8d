#include "gantry/sched/free_index.h"

#include <algorithm>

#include "gantry/sched/fragmentation.h"

namespace gantry {

FreeIndex::FreeIndex(const Cluster& cluster)
    : cluster_(cluster),
      max_gpus_(cluster.max_gpus_per_node()),
      num_types_(static_cast<int>(cluster.gpu_types().size())) {
  const auto& nodes = cluster.nodes();
  const auto& domains = cluster.domains();
  free_.resize(nodes.size());
  buckets_.resize(static_cast<size_t>(num_types_) * (max_gpus_ + 1));
  free_by_type_.assign(num_types_, 0);
  count_by_type_.assign(static_cast<size_t>(num_types_) * (max_gpus_ + 1), 0);
  domain_free_.assign(domains.size(), 0);
  domain_at_least_.assign(domains.size() * (max_gpus_ + 1), 0);
  type_.resize(nodes.size());
  by_level_.resize(cluster.levels().size());
  for (size_t d = 0; d < domains.size(); ++d) {
    by_level_[domains[d].level].push_back(static_cast<DomainIndex>(d));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& node = nodes[i];
    const int f = node.gpus;
    free_[i] = f;
    type_[i] = static_cast<uint8_t>(node.gpu_type);
    bucket(node.gpu_type, f).insert(static_cast<NodeIndex>(i));
    free_by_type_[node.gpu_type] += f;
    count_by_type_[static_cast<size_t>(node.gpu_type) * (max_gpus_ + 1) + f]++;
    total_free_ += f;
    for (DomainIndex d = node.domain; d >= 0; d = domains[d].parent) {
      domain_free_[d] += f;
      for (int g = 0; g <= f; ++g) domain_at_least_[static_cast<size_t>(d) * (max_gpus_ + 1) + g]++;
    }
  }
}

int FreeIndex::FreeOfTypes(uint32_t mask) const {
  int total = 0;
  for (int t = 0; t < num_types_; ++t) {
    if (mask & (1u << t)) total += free_by_type_[t];
  }
  return total;
}

int FreeIndex::DomainNodesWithFree(DomainIndex d, int g) const {
  if (g > max_gpus_) return 0;
  return domain_at_least_[static_cast<size_t>(d) * (max_gpus_ + 1) + (g < 0 ? 0 : g)];
}

int FreeIndex::NodesWithFree(uint32_t mask, int g) const {
  int count = 0;
  for (int t = 0; t < num_types_; ++t) {
    if (!(mask & (1u << t))) continue;
    const int* h = &count_by_type_[static_cast<size_t>(t) * (max_gpus_ + 1)];
    for (int f = g < 0 ? 0 : g; f <= max_gpus_; ++f) count += h[f];
  }
  return count;
}

NodeIndex FreeIndex::FirstWithFree(uint32_t mask, int min_free) const {
  NodeIndex best = -1;
  for (int t = 0; t < num_types_; ++t) {
    if (!(mask & (1u << t))) continue;
    for (int f = min_free < 0 ? 0 : min_free; f <= max_gpus_; ++f) {
      const auto& b = bucket(t, f);
      if (!b.empty() && (best < 0 || *b.begin() < best)) best = *b.begin();
    }
  }
  return best;
}

void FreeIndex::Move(NodeIndex n, int from, int to) {
  const Node& node = cluster_.nodes()[n];
  bucket(node.gpu_type, from).erase(n);
  bucket(node.gpu_type, to).insert(n);
  const size_t base = static_cast<size_t>(node.gpu_type) * (max_gpus_ + 1);
  count_by_type_[base + from]--;
  count_by_type_[base + to]++;
  const int delta = to - from;
  free_[n] = to;
  free_by_type_[node.gpu_type] += delta;
  total_free_ += delta;
  const auto& domains = cluster_.domains();
  for (DomainIndex d = node.domain; d >= 0; d = domains[d].parent) {
    domain_free_[d] += delta;
    int* at_least = &domain_at_least_[static_cast<size_t>(d) * (max_gpus_ + 1)];
    if (to > from) {
      for (int g = from + 1; g <= to; ++g) at_least[g]++;
    } else {
      for (int g = to + 1; g <= from; ++g) at_least[g]--;
    }
  }
}

void FreeIndex::Allocate(NodeIndex n, int gpus) { Move(n, free_[n], free_[n] - gpus); }

void FreeIndex::Release(NodeIndex n, int gpus) { Move(n, free_[n], free_[n] + gpus); }

}  // namespace gantry

namespace gantry {

SharedGpus::SharedGpus(const Cluster& cluster)
    : cluster_(cluster), open_on_(cluster.nodes().size(), 0), room_(cluster.gpu_types().size()) {
  for (const GpuType& t : cluster.gpu_types()) {
    capacity_.push_back(t.mig_slices > 0 ? t.mig_slices : kMilliPerGpu);
  }
}

int SharedGpus::Units(GpuTypeIndex t, int milli) const {
  const int slices = cluster_.gpu_types()[t].mig_slices;
  if (slices <= 0) return milli;
  // Whole slices, rounded up: ceil(milli * slices / 1000), exact in integers.
  return (milli * slices + kMilliPerGpu - 1) / kMilliPerGpu;
}

int SharedGpus::RoomMilli(int32_t g) const {
  const GpuTypeIndex t = cluster_.nodes()[gpus_[g].node].gpu_type;
  return (capacity_[t] - gpus_[g].used) * kMilliPerGpu / capacity_[t];
}

void SharedGpus::Index(int32_t g, int sign) {
  const Gpu& gpu = gpus_[g];
  const GpuTypeIndex t = cluster_.nodes()[gpu.node].gpu_type;
  const int free_units = capacity_[t] - gpu.used;
  if (free_units <= 0) return;
  if (sign > 0) {
    room_[t].insert({free_units, gpu.node, g});
  } else {
    room_[t].erase({free_units, gpu.node, g});
  }
}

int32_t SharedGpus::Open(NodeIndex n) {
  int32_t g;
  if (!closed_.empty()) {
    g = closed_.back();
    closed_.pop_back();
  } else {
    g = static_cast<int32_t>(gpus_.size());
    gpus_.emplace_back();
  }
  gpus_[g].node = n;
  gpus_[g].used = 0;
  gpus_[g].jobs.clear();
  ++open_on_[n];
  ++open_total_;
  Index(g, +1);
  return g;
}

void SharedGpus::Add(int32_t g, int32_t job, int units) {
  Index(g, -1);
  gpus_[g].used += units;
  gpus_[g].jobs.push_back(job);
  Index(g, +1);
}

bool SharedGpus::Remove(int32_t g, int32_t job, int units) {
  Gpu& gpu = gpus_[g];
  Index(g, -1);
  gpu.used -= units;
  auto it = std::find(gpu.jobs.begin(), gpu.jobs.end(), job);
  if (it != gpu.jobs.end()) gpu.jobs.erase(it);
  if (!gpu.jobs.empty()) {
    Index(g, +1);
    return false;
  }
  --open_on_[gpu.node];
  --open_total_;
  gpu.node = -1;
  closed_.push_back(g);
  return true;
}

}  // namespace gantry
