// FakeAgents (tests only): the nodes' gantry-agents as the Stager's tests and the control loop's
// tests see them -- staging that advances one step per poll, agents that can be down, datasets that
// fail, pins released, and local tiers holding the checkpoints a test puts there.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gantry/control/stager.h"

namespace gantry::control {

// Agents that stage in steps: each Get moves a dataset 50 bytes further, of 100.
class FakeAgents final : public StagingAgents {
 public:
  Result<StageProgress> Stage(const std::string& node, const std::string& dataset,
                              const std::string& job) override {
    ++asks[{node, dataset}];
    asked_by.push_back(job);
    if (down.count(node) > 0) return Unavailable("connection refused");
    if (dataset.find("missing") != std::string::npos) {
      StageProgress p;
      p.state = "failed";
      p.error = "NotFound: shard.00000.mds";
      return p;
    }
    StageProgress& p = state[{node, dataset}];
    if (p.state.empty()) {
      p.state = "staging";
      p.bytes_total = 100;
    }
    return p;
  }
  Result<StageProgress> Get(const std::string& node, const std::string& dataset) override {
    ++gets[{node, dataset}];
    if (down.count(node) > 0) return Unavailable("connection refused");
    auto it = state.find({node, dataset});
    if (it == state.end()) return NotFound("never asked");
    StageProgress& p = it->second;
    p.bytes_done = std::min<int64_t>(p.bytes_done + 50, p.bytes_total);
    p.bytes_fetched = p.bytes_done;
    if (p.bytes_done == p.bytes_total) p.state = "done";
    return p;
  }

  Status Release(const std::string& node, const std::string& dataset,
                 const std::string& job) override {
    released.push_back(node + " " + dataset + " " + job);
    return down.count(node) > 0 ? Unavailable("connection refused") : Status::Ok();
  }
  Result<ckpt::TierCopy> Checkpoint(const std::string& node,
                                    const std::string& checkpoint) override {
    ++checkpoint_asks[{node, checkpoint}];
    if (down.count(node) > 0) return Unavailable("connection refused");
    auto it = copies.find({node, checkpoint});
    if (it == copies.end()) return NotFound("no committed checkpoint");
    return it->second;
  }

  // A drain accepted finishes at once, unless its node is in `draining`.
  Result<NodeDrain> Drain(const std::string& node) override {
    drains.push_back(node);
    if (during_drain) during_drain(node);
    if (down.count(node) > 0) return Unavailable("connection refused");
    return NodeDrain{"draining", drain_runs[node]++};
  }
  Result<NodeDrain> DrainState(const std::string& node) override {
    drain_states.push_back(node);
    if (down.count(node) > 0) return Unavailable("connection refused");
    return NodeDrain{draining.count(node) > 0 ? "draining" : "idle",
                     draining.count(node) > 0 ? drain_runs[node] - 1 : drain_runs[node]};
  }

  std::map<std::pair<std::string, std::string>, StageProgress> state;
  std::vector<std::string> drains;                       // nodes asked to drain, in order
  std::function<void(const std::string&)> during_drain;  // runs inside each Drain call
  std::vector<std::string> drain_states;                 // nodes asked how their drain went
  std::map<std::string, int64_t> drain_runs;             // drains each agent finished
  std::set<std::string> draining;                        // agents whose drain has not ended
  // (node, checkpoint URL) -> what its local tier holds of the newest checkpoint.
  std::map<std::pair<std::string, std::string>, ckpt::TierCopy> copies;
  std::map<std::pair<std::string, std::string>, int> checkpoint_asks;
  std::vector<std::string> released;  // "node dataset job", in order
  std::map<std::pair<std::string, std::string>, int> asks;
  std::map<std::pair<std::string, std::string>, int> gets;
  std::vector<std::string> asked_by;
  std::set<std::string> down;
};

}  // namespace gantry::control
