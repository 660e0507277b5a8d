// Data locality: how much of a job's declared data (JobRequest::datasets) each node already
// holds in its local tier, as the engine's "data-locality" score (src/sched/scores.cc) sees it.
//
// The engine never does I/O, so it cannot look; the driver tells it. A live driver (gantryd)
// knows what its stager put on each node's agent and fills a DataLocalityMap between cycles;
// it hands the engine a borrowed pointer through EngineOptions::data_locality (null: nothing is
// known, and the score changes no placement). The simulator gives none. Read only from the
// engine's serial scheduling loop; a driver that updates the map from another thread must not
// do so while Schedule runs.
//
//   DataLocalityMap held;
//   EngineOptions options;
//   options.data_locality = &held;
//   auto engine = Engine::Create(cluster, teams, profile, options);
//   held.Set("s3://corpus/shards", node, 1.0);   // the stager finished that node
//   engine->Schedule(now, &starts);               // the score now prefers that node
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/workload/job_request.h"

namespace gantry {

class DataLocality {
 public:
  virtual ~DataLocality();
  // The fraction, in [0, 1], of `job`'s declared data (datasets and checkpoint) already on
  // `node`'s local tier. 0 for a job that declares none.
  virtual double HeldFraction(NodeIndex node, const JobRequest& job) const = 0;
  // False when no node holds any of `job`'s data, so that HeldFraction is 0 everywhere and the
  // score may skip the job (placements then keep their index-driven fast paths). The default
  // (true) is always correct, only slower.
  virtual bool HeldAnywhere(const JobRequest& job) const { return true; }
};

// A DataLocality filled by the driver: for each URL -- a dataset, or a checkpoint location --
// the fraction of it on each node (of a checkpoint: of its newest committed step's bytes). A
// job's datasets count as the mean over them (each dataset alike: the engine knows no sizes);
// its checkpoint (JobRequest::checkpoint), when it declares one, weighs as much as all its
// datasets together: a job with both scores (datasets' mean + checkpoint) / 2, one with only a
// checkpoint the checkpoint's fraction. The checkpoint weighs that much because a restart
// restores it whole before the first step -- every GPU of the job waits on it -- while
// datasets stream behind the loader's prefetch. A URL the map does not name counts 0. URLs are
// matched exactly, as the job declares them.
class DataLocalityMap final : public DataLocality {
 public:
  // `fraction` of `dataset` (a dataset or checkpoint URL) is on `node` now (clamped to [0, 1];
  // 0, a negative value or NaN forgets the pair).
  void Set(const std::string& dataset, NodeIndex node, double fraction);
  // Forgets every node's copy of `dataset` (it was deleted, or the driver refills it).
  void Erase(const std::string& dataset);
  // Forgets everything.
  void Clear();
  // The fraction of `dataset` on `node` (0 when unknown).
  double Fraction(const std::string& dataset, NodeIndex node) const;

  double HeldFraction(NodeIndex node, const JobRequest& job) const override;
  bool HeldAnywhere(const JobRequest& job) const override;

 private:
  // Per dataset: (node, fraction) pairs, few per dataset (the nodes it was staged to).
  std::unordered_map<std::string, std::vector<std::pair<NodeIndex, double>>> held_;
};

}  // namespace gantry
