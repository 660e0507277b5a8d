// Google Benchmark: the FreeIndex operations every placement and every start/finish pays for,
// on a 12,500-node (100,000-GPU) DGX H100 cluster. The index is built once per benchmark, outside
// the timed loop (first-touch of its memory is not included).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/rng.h"
#include "gantry/sched/free_index.h"
#include "sched/benchmark_support.h"

namespace gantry {
namespace {

using bench::BigCluster;

// Takes a deterministic ~`fraction` of every node's GPUs, so buckets of every free count are
// populated as on a busy cluster.
void Fill(FreeIndex& index, double fraction, uint64_t seed) {
  Rng rng(seed);
  const int nodes = static_cast<int>(index.cluster().nodes().size());
  for (NodeIndex n = 0; n < nodes; ++n) {
    int take = 0;
    for (int g = 0; g < index.free(n); ++g) take += rng.Uniform() < fraction ? 1 : 0;
    if (take > 0) index.Allocate(n, take);
  }
}

// One Allocate and one Release of 1-8 GPUs on a random node (a job start and its finish).
void BM_FreeIndexAllocateRelease(benchmark::State& state) {
  FreeIndex index(BigCluster());
  Fill(index, 0.5, 1);
  const int nodes = static_cast<int>(BigCluster().nodes().size());
  Rng rng(2);
  std::vector<std::pair<NodeIndex, int>> ops;
  for (int i = 0; i < 4096; ++i)
    ops.emplace_back(static_cast<NodeIndex>(rng.Below(nodes)), 1 + static_cast<int>(rng.Below(8)));
  size_t i = 0;
  for (auto _ : state) {
    const auto [n, g] = ops[i++ & 4095];
    const int take = g <= index.free(n) ? g : index.free(n);
    if (take > 0) {
      index.Allocate(n, take);
      index.Release(n, take);
    }
    benchmark::DoNotOptimize(index.total_free());
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_FreeIndexAllocateRelease);

// Best-fit for a single-node job: the first node (fewest free first) with >= g free.
void BM_FreeIndexVisitAscendingFirst(benchmark::State& state) {
  FreeIndex index(BigCluster());
  Fill(index, 0.9, 3);
  const int g = static_cast<int>(state.range(0));
  for (auto _ : state) {
    NodeIndex found = -1;
    index.VisitAscending(kAnyGpuType, g, [&](NodeIndex n) {
      found = n;
      return false;
    });
    benchmark::DoNotOptimize(found);
  }
}
BENCHMARK(BM_FreeIndexVisitAscendingFirst)->Arg(1)->Arg(8);

// Best-fit gang: collect the first 32 nodes with all 8 GPUs free.
void BM_FreeIndexVisitAscending32Nodes(benchmark::State& state) {
  FreeIndex index(BigCluster());
  Fill(index, 0.5, 4);
  std::vector<NodeIndex> picked;
  picked.reserve(32);
  for (auto _ : state) {
    picked.clear();
    index.VisitAscending(kAnyGpuType, 8, [&](NodeIndex n) {
      picked.push_back(n);
      return picked.size() < 32;
    });
    benchmark::DoNotOptimize(picked.data());
  }
}
BENCHMARK(BM_FreeIndexVisitAscending32Nodes);

// First-fit for a single-node job.
void BM_FreeIndexFirstWithFree(benchmark::State& state) {
  FreeIndex index(BigCluster());
  Fill(index, 0.9, 5);
  const int g = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(index.FirstWithFree(kAnyGpuType, g));
}
BENCHMARK(BM_FreeIndexFirstWithFree)->Arg(1)->Arg(8);

// What topology placement asks of every leaf: how many nodes below it have >= g free.
void BM_FreeIndexDomainNodesWithFreeAllLeaves(benchmark::State& state) {
  FreeIndex index(BigCluster());
  Fill(index, 0.5, 6);
  const int g = static_cast<int>(state.range(0));
  const auto& leaves = index.domains_at_level(0);
  for (auto _ : state) {
    int64_t total = 0;
    for (DomainIndex d : leaves) total += index.DomainNodesWithFree(d, g);
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(leaves.size()));
}
BENCHMARK(BM_FreeIndexDomainNodesWithFreeAllLeaves)->Arg(1)->Arg(8);

}  // namespace
}  // namespace gantry
