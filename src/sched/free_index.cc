#include "gantry/sched/free_index.h"

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
