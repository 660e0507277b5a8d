// FreeIndex: the cluster's free GPUs, indexed so placement never rescans every node.
//
// Nodes sit in buckets by (GPU type, free GPU count); each topology domain keeps its free total
// and a histogram of its nodes by free count. Allocate/Release update all of it in
// O(levels + log nodes); "best node with at least g free" is O(types * max_gpus_per_node).
// Owned by the engine; not thread-safe (the scheduling loop is serial).
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "gantry/cluster/cluster.h"

namespace gantry {

class FreeIndex {
 public:
  explicit FreeIndex(const Cluster& cluster);

  const Cluster& cluster() const { return cluster_; }
  int free(NodeIndex n) const { return free_[n]; }
  int total_free() const { return total_free_; }
  int free_of_type(GpuTypeIndex t) const { return free_by_type_[t]; }
  int FreeOfTypes(uint32_t mask) const;
  int domain_free(DomainIndex d) const { return domain_free_[d]; }
  // GPU type of node n, from a dense array (no trip through the large Node records).
  GpuTypeIndex gpu_type(NodeIndex n) const { return type_[n]; }
  // Nodes below domain `d` (any GPU type) with at least `g` free GPUs.
  int DomainNodesWithFree(DomainIndex d, int g) const;
  // Nodes of the types in `mask` with at least `g` free GPUs.
  int NodesWithFree(uint32_t mask, int g) const;
  const std::vector<DomainIndex>& domains_at_level(int level) const { return by_level_[level]; }

  void Allocate(NodeIndex n, int gpus);
  void Release(NodeIndex n, int gpus);

  // Visits nodes of the types in `mask` with at least `min_free` free GPUs, fewest free first
  // (ties by node index), until `visit(node)` returns false.
  template <typename F>
  void VisitAscending(uint32_t mask, int min_free, F&& visit) const;
  // Same, most free first; ties by GPU type index, then node index (cheaper than a merge, and
  // what EASY reservations and best-fit have always used: changing it changes schedules on
  // clusters with several GPU types).
  template <typename F>
  void VisitDescending(uint32_t mask, int min_free, F&& visit) const;
  // Lowest-index node of the types in `mask` with at least `min_free` free GPUs, or -1.
  NodeIndex FirstWithFree(uint32_t mask, int min_free) const;

 private:
  // Visits the nodes of the types in `mask` with exactly `f` free GPUs by node index; false when
  // `visit` stopped the walk.
  template <typename F>
  bool VisitFreeCount(uint32_t mask, int f, F& visit) const;
  void Move(NodeIndex n, int from, int to);
  const std::set<NodeIndex>& bucket(GpuTypeIndex t, int f) const {
    return buckets_[static_cast<size_t>(t) * (max_gpus_ + 1) + f];
  }
  std::set<NodeIndex>& bucket(GpuTypeIndex t, int f) {
    return buckets_[static_cast<size_t>(t) * (max_gpus_ + 1) + f];
  }

  const Cluster& cluster_;
  int max_gpus_;
  int num_types_;
  std::vector<int> free_;
  std::vector<std::set<NodeIndex>> buckets_;  // [type][free]
  std::vector<int> free_by_type_;
  // count_by_type_[type * (max+1) + f]: nodes of that type with exactly f free.
  std::vector<int> count_by_type_;
  std::vector<int> domain_free_;
  // [domain][g]: nodes below the domain with at least g free GPUs (suffix counts, kept
  // up to date on every change so the topology search reads one number per domain).
  std::vector<int> domain_at_least_;
  std::vector<uint8_t> type_;
  std::vector<std::vector<DomainIndex>> by_level_;
  int total_free_ = 0;
};

template <typename F>
bool FreeIndex::VisitFreeCount(uint32_t mask, int f, F& visit) const {
  // Merge the buckets of all allowed types at this free count by node index, so the order does
  // not depend on type numbering.
  using It = std::set<NodeIndex>::const_iterator;
  std::array<std::pair<It, It>, kMaxGpuTypes> its;
  size_t count = 0;
  for (int t = 0; t < num_types_; ++t) {
    if (!(mask & (1u << t))) continue;
    const auto& b = bucket(t, f);
    if (!b.empty()) its[count++] = {b.begin(), b.end()};
  }
  if (count == 0) return true;
  if (count == 1) {
    for (auto it = its[0].first; it != its[0].second; ++it) {
      if (!visit(*it)) return false;
    }
    return true;
  }
  while (true) {
    int best = -1;
    for (size_t i = 0; i < count; ++i) {
      if (its[i].first == its[i].second) continue;
      if (best < 0 || *its[i].first < *its[best].first) best = static_cast<int>(i);
    }
    if (best < 0) return true;
    if (!visit(*its[best].first)) return false;
    ++its[best].first;
  }
}

template <typename F>
void FreeIndex::VisitAscending(uint32_t mask, int min_free, F&& visit) const {
  if (min_free < 0) min_free = 0;
  for (int f = min_free; f <= max_gpus_; ++f) {
    if (!VisitFreeCount(mask, f, visit)) return;
  }
}

template <typename F>
void FreeIndex::VisitDescending(uint32_t mask, int min_free, F&& visit) const {
  if (min_free < 1) min_free = 1;
  for (int f = max_gpus_; f >= min_free; --f) {
    for (int t = 0; t < num_types_; ++t) {
      if (!(mask & (1u << t))) continue;
      for (NodeIndex n : bucket(t, f)) {
        if (!visit(n)) return;
      }
    }
  }
}

}  // namespace gantry
