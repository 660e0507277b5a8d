// Builders the engine's scenario tests share (tests only, header-only): a flat cluster of
// identical H100 nodes and a job request named by its index, so that each test's comments can
// work outcomes out by hand on "n0".."nK" and jobs 'A', 'B', ...
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "gantry/cluster/cluster.h"
#include "gantry/workload/job_request.h"

namespace gantry::test_builders {

// `nodes` nodes of `gpus` H100s each, flat.
inline Cluster FlatCluster(int nodes, int gpus) {
  ClusterBuilder b("test", {});
  EXPECT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  for (int n = 0; n < nodes; ++n) {
    EXPECT_TRUE(b.AddNode({.name = "n" + std::to_string(n), .gpu_type = 0, .gpus = gpus}).ok());
  }
  auto c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// Job `index` is named 'A' + index; `nodes` nodes with gpus / nodes GPUs each (0: any shape);
// on the flat cluster's one GPU type.
inline JobRequest MakeRequest(JobIndex index, Time submit, int gpus, int nodes, Duration limit,
                              int team = 0) {
  JobRequest j;
  j.index = index;
  j.id = std::string(1, static_cast<char>('A' + index));
  j.submit = submit;
  j.gpus = gpus;
  j.nodes = nodes;
  j.gpus_per_node = nodes > 0 ? gpus / nodes : 0;
  j.time_limit = limit;
  j.team = team;
  j.gpu_type_mask = 1;
  return j;
}

}  // namespace gantry::test_builders
