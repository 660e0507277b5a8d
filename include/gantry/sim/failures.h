// Node failures and job checkpoints for the simulator: a seeded model of when nodes fail (hard
// failures take a node down, GPU health events drain it), how long repairs take, hot-spare
// nodes that stand in for failed ones, and how much of an interrupted job's work survives (its
// last checkpoint) and what a restart costs.
//
// Each node draws its failures from its own random stream (the seed mixed with the node index),
// so the failure times do not depend on what the scheduler does: every profile compared in one
// run meets the same failures. Plain values and pure functions, no synchronisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gantry/common/rng.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"

namespace gantry {

struct FailureModel {
  enum class Distribution : uint8_t { kExponential, kWeibull };
  bool enabled = false;
  // Time between failures of one node (its mean), from up to the next failure.
  Duration mtbf = 0;
  Distribution distribution = Distribution::kExponential;
  double weibull_shape = 0.7;  // < 1: failures cluster early after a repair (infant mortality)
  // Mean repair time; each repair is drawn exponentially around it (0: instantly back).
  Duration repair = 4 * 3600;
  // Share of failures that are GPU health events (the node is drained: its jobs run on, it takes
  // nothing new until repaired) rather than hard failures (down: its jobs end and are requeued).
  double health_fraction = 0;
  // Nodes held out of scheduling as hot spares (the highest-numbered ones): one is brought in
  // for each failed node while any remain; a repaired node refills the spare pool first.
  int spares = 0;
  uint64_t seed = 1;
};

// "mtbf=30d,repair=4h,dist=weibull,shape=0.7,health=0.2,spares=2,seed=7" (every key but mtbf
// optional; durations with units). InvalidArgument naming the key for anything else.
Result<FailureModel> ParseFailureModel(std::string_view spec);

// What survives an interruption. A job checkpoints every `interval` seconds of useful work (the
// job's own Job::checkpoint_interval when it has one); after an interruption it resumes from
// the last checkpoint and first spends `restart_cost` seconds (its own Job::restart_cost when
// set) loading it. interval 0: no checkpoints, an interrupted job starts over.
struct CheckpointModel {
  Duration interval = 3600;
  Duration restart_cost = 300;
};
// "interval=1h,restart=5m", or "none" (no checkpoints, no restart cost).
Result<CheckpointModel> ParseCheckpointModel(std::string_view spec);

// One node's failure stream: uptimes, kinds and repair times, in order.
class NodeFailureStream {
 public:
  NodeFailureStream(const FailureModel& model, int32_t node)
      : model_(&model), rng_(Mix(model.seed, static_cast<uint64_t>(node))) {}
  // Seconds from (re)entering service to the next failure; at least 1.
  Duration NextUptime();
  // True when the failure is a GPU health event (drain), false for a hard failure (down).
  bool NextIsHealthEvent();
  // Seconds until the failed node is back; at least 1 when the model's repair is not 0.
  Duration NextRepair();

 private:
  const FailureModel* model_;
  Rng rng_;
};

}  // namespace gantry
