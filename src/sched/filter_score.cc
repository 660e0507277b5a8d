#include "filter_score.h"

#include <algorithm>
#include <cstdlib>

namespace gantry {

bool ScoredSearch::Place(const JobRequest& job, const JobShape& s, const FreeIndex& free,
                         const NodeCaps* caps, std::span<const WeightedScore> scores,
                         const NodeRange* range, Placement* out) {
  out->clear();
  const int min_usable = MinUsable(s);
  candidates_.clear();
  const auto consider = [&](NodeIndex n) {
    if (!PassesFilter(job, free, caps, n, min_usable)) return;
    const int usable = Usable(free, caps, n);
    double total = 0;
    for (const WeightedScore& w : scores) total += w.weight * w.score->Score(job, n, usable, free);
    candidates_.push_back({total, n, usable});
  };
  const auto nodes = static_cast<NodeIndex>(free.cluster().nodes().size());
  // Usable <= free, so nodes with fewer free GPUs than the filter asks cannot pass: the free
  // index lists the only nodes worth visiting. Walking its buckets costs more per node than a
  // scan of the dense arrays, so it pays only when it skips most nodes (a busy cluster).
  if (range == nullptr && free.NodesWithFree(job.gpu_type_mask, min_usable) * 4 < nodes) {
    free.VisitAscending(job.gpu_type_mask, min_usable, [&](NodeIndex n) {
      consider(n);
      return true;
    });
  } else {
    const NodeRange all{0, nodes};
    if (range == nullptr) range = &all;
    for (NodeIndex n = range->first; n < range->end; ++n) consider(n);
  }
  // Best first, lower index on ties: a strict order, so the choice does not depend on how the
  // candidates were found, and a gang needs only its `nodes` best in order.
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score > b.score : a.node < b.node;
  };
  if (!s.any) {
    if (static_cast<int>(candidates_.size()) < s.nodes) return false;
    std::partial_sort(candidates_.begin(), candidates_.begin() + s.nodes, candidates_.end(),
                      better);
    for (int i = 0; i < s.nodes; ++i) out->push_back({candidates_[i].node, s.gpus_per_node});
    return true;
  }
  std::sort(candidates_.begin(), candidates_.end(), better);
  int need = job.gpus;
  for (const Candidate& c : candidates_) {
    if (need == 0) break;
    const int take = std::min(need, c.usable);
    out->push_back({c.node, take});
    need -= take;
  }
  return need == 0;
}

Result<OwnedScores> ParseScoreList(const std::string& plugin, const std::string& list,
                                   const PluginContext& ctx) {
  const PluginRegistry& registry = ctx.registry ? *ctx.registry : PluginRegistry::Builtin();
  OwnedScores scores;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(pos, end - pos);
    pos = end + 1;
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    double weight = 1.0;
    const size_t colon = item.find(':');
    if (colon != std::string::npos) {
      const std::string w = item.substr(colon + 1);
      char* stop = nullptr;
      weight = std::strtod(w.c_str(), &stop);
      if (w.empty() || *stop != '\0') {
        return InvalidArgument("plugin '" + plugin + "': argument 'scores': weight \"" + w +
                               "\" of '" + item.substr(0, colon) + "' is not a number");
      }
      item.resize(colon);
    }
    auto score = registry.CreateScore(item, PluginArgs(item, {}), ctx);
    if (!score.ok()) return score.status().WithContext("plugin '" + plugin + "'");
    scores.Add(std::move(score).value(), weight);
  }
  return scores;
}

}  // namespace gantry
