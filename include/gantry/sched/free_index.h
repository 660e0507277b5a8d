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
#include <tuple>
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

// SharedGpus: the GPUs that fractional jobs (JobRequest::gpu_milli, 1..999) share, kept apart
// from FreeIndex so that whole-GPU placement does no per-GPU work. A share lands on a shared
// GPU with room (best fit: the least room that still fits, so other shared GPUs keep room and
// whole GPUs stay whole); when none has room, the engine takes one whole GPU out of the
// FreeIndex and opens a shared GPU on it here, and gives it back when its last share ends. So a
// whole-GPU job never lands on a shared GPU: those are not free in the FreeIndex.
//
// Capacity is counted in units: 1000 milli-GPUs per GPU, or, for a GPU type with
// GpuType::mig_slices = S > 0, S fixed slices per GPU, a share of m milli taking
// ceil(m * S / 1000) whole slices (S = 7: 1..142 milli take one slice, 143..285 two, ...).
// Shared GPUs are numbered by the order they were opened (a closed number is reused).
// Not thread-safe; owned by the engine.
class SharedGpus {
 public:
  explicit SharedGpus(const Cluster& cluster);

  // Units one GPU of type `t` holds (1000, or its MIG slices), and what a share of `milli` takes.
  int Capacity(GpuTypeIndex t) const { return capacity_[t]; }
  int Units(GpuTypeIndex t, int milli) const;

  // The shared GPU of a type in `mask` that best fits a share of `milli`: least room left
  // (measured in milli-GPUs, so types with different slices compare), then lowest node, then
  // lowest number. `usable(gpu)` may veto a candidate (a node not up, a reservation). -1: none.
  template <typename F>
  int32_t BestFit(uint32_t mask, int milli, F&& usable) const;

  // Opens a shared GPU on node `n` (the caller took the whole GPU from the FreeIndex).
  int32_t Open(NodeIndex n);
  // `job` takes `units` of shared GPU `g` (which must have them free).
  void Add(int32_t g, int32_t job, int units);
  // `job` gives its units back; true when `g` is now empty and closed (the caller returns the
  // whole GPU to the FreeIndex).
  bool Remove(int32_t g, int32_t job, int units);

  NodeIndex node(int32_t g) const { return gpus_[g].node; }
  int used(int32_t g) const { return gpus_[g].used; }
  const std::vector<int32_t>& jobs(int32_t g) const { return gpus_[g].jobs; }
  // Shared GPUs open on node `n` (each is one busy GPU, whatever its shares).
  int open_on(NodeIndex n) const { return open_on_[n]; }
  int open_total() const { return open_total_; }

 private:
  struct Gpu {
    NodeIndex node = -1;
    int used = 0;  // units taken
    std::vector<int32_t> jobs;
  };
  // Room in milli-GPUs (rounded down for sliced types), for ordering across types.
  int RoomMilli(int32_t g) const;
  void Index(int32_t g, int sign);

  const Cluster& cluster_;
  std::vector<int> capacity_;  // per GPU type
  std::vector<Gpu> gpus_;
  std::vector<int32_t> closed_;  // numbers to reuse
  std::vector<int> open_on_;     // per node
  int open_total_ = 0;
  // Per GPU type: (free units, node, number) of the open shared GPUs with room.
  std::vector<std::set<std::tuple<int, NodeIndex, int32_t>>> room_;
};

template <typename F>
int32_t SharedGpus::BestFit(uint32_t mask, int milli, F&& usable) const {
  int32_t best = -1;
  int best_room = 0;
  for (size_t t = 0; t < room_.size(); ++t) {
    if (!(mask & (1u << t)) || room_[t].empty()) continue;
    const int need = Units(static_cast<GpuTypeIndex>(t), milli);
    for (auto it = room_[t].lower_bound({need, -1, -1}); it != room_[t].end(); ++it) {
      const auto [free_units, n, g] = *it;
      const int room = RoomMilli(g);
      // Sorted by room within the type: once past the best, nothing later of this type wins.
      if (best >= 0 && room > best_room) break;
      if (!usable(g)) continue;
      if (best < 0 || room < best_room || (room == best_room && n < gpus_[best].node) ||
          (room == best_room && n == gpus_[best].node && g < best)) {
        best = g;
        best_room = room;
      }
      break;
    }
  }
  return best;
}

}  // namespace gantry
