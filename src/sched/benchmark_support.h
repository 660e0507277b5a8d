// Helpers shared by the scheduling benchmarks (header-only, included from
// src/sched/*_benchmark.cc): the 12,500-node (100,000-GPU) DGX H100 cluster they all measure on.
#pragma once

#include <cstdlib>
#include <utility>

#include "gantry/cluster/cluster.h"

namespace gantry::bench {

// Built on first use and never freed (benchmarks hold references into it until exit).
inline const Cluster& BigCluster() {
  static const Cluster* cluster = [] {
    Result<Cluster> c = LoadCluster("dgx-h100:nodes=12500");
    if (!c.ok()) std::abort();
    return new Cluster(std::move(c).value());
  }();
  return *cluster;
}

}  // namespace gantry::bench
