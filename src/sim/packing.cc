// The packing experiment (packing.h). Every policy keeps each device's free capacity in units
// (milli, or MIG-like slices) and each node's expected fragmentation, updated only on the node
// a task lands on, so a task costs O(nodes) for first-fit and best-fit and a point O(nodes). FGD
// caches each node's best choice per kind of task and recomputes it only when that node changed,
// which keeps it O(nodes) per task as well.
#include "gantry/sim/packing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "gantry/sched/fragmentation.h"
#include "invariant_checker.h"

namespace gantry {
namespace {

enum class Policy { kFirstFit, kBestFit, kFgd };

Result<Policy> ParsePolicy(const std::string& name) {
  if (name == "first-fit") return Policy::kFirstFit;
  if (name == "best-fit") return Policy::kBestFit;
  if (name == "fgd") return Policy::kFgd;
  return InvalidArgument("packing: unknown policy '" + name +
                         "' (known: first-fit, best-fit, fgd)");
}

// One task as the packer sees it.
struct Task {
  const Job* job;
  JobRequest request;      // gpu_milli cleared when the share is rounded to a whole GPU
  std::vector<int> parts;  // whole GPUs on each of distinct nodes (empty for a share)
  int milli = 0;           // > 0: a share of one device
  double demand = 0;       // GPUs asked for
  int kind = -1;           // index in the mix, when the task is one part (cacheable)
};

constexpr double kNever = std::numeric_limits<double>::infinity();

class Packer {
 public:
  // `capacity`: units per device, per node.
  Packer(const Cluster& c, const TaskMix& mix, std::vector<int> capacity, Policy policy,
         DeviceCapacityChecker* checker)
      : c_(c), mix_(mix), cap_(std::move(capacity)), policy_(policy), checker_(checker) {
    const size_t nodes = c.nodes().size();
    dev_.resize(nodes);
    frag_.resize(nodes);
    free_.resize(nodes);
    version_.assign(nodes, 1);
    cache_.assign(nodes * std::max<size_t>(1, mix.classes().size()), Cached{});
    for (size_t n = 0; n < nodes; ++n) {
      dev_[n].assign(c.nodes()[n].gpus, cap_[n]);
      free_[n] = static_cast<int64_t>(cap_[n]) * c.nodes()[n].gpus;
      frag_[n] = NodeFragmentation(dev_[n], cap_[n], c.nodes()[n].gpu_type, mix_) / cap_[n];
    }
  }

  // In GPUs (a device's units over its capacity).
  double allocated_gpus() const { return allocated_; }
  // Summed afresh (O(nodes), once per point): the running sum drifts by rounding, and a point
  // must not read -0.0%.
  double fragmented_gpus() const {
    double sum = 0;
    for (double f : frag_) sum += f;
    return sum;
  }

  // Places `t` (all parts, or none). Errors only from the invariant checker.
  Result<bool> Place(const Task& t) {
    if (t.milli > 0) {
      Choice best = Best(t, 1, {});
      if (best.node < 0) return false;
      GANTRY_RETURN_IF_ERROR(Take(t, best.node, {best.device}, Need(t, best.node)));
      return true;
    }
    std::vector<std::pair<NodeIndex, std::vector<int>>> taken;
    std::vector<NodeIndex> used;
    for (int g : t.parts) {
      Choice best = Best(t, g, used);
      if (best.node < 0) {
        for (auto& [n, devices] : taken) Give(n, devices, cap_[n]);
        return false;
      }
      std::vector<int> devices = WholeDevices(best.node, g);
      GANTRY_RETURN_IF_ERROR(Take(t, best.node, devices, cap_[best.node]));
      taken.emplace_back(best.node, std::move(devices));
      used.push_back(best.node);
    }
    return true;
  }

 private:
  struct Choice {
    NodeIndex node = -1;
    int device = -1;  // for a share
    double key = kNever;
  };
  struct Cached {
    uint32_t version = 0;
    int device = -1;
    double growth = kNever;
  };

  // The lowest-index `g` fully free devices of node n (all alike to every measure here).
  std::vector<int> WholeDevices(NodeIndex n, int g) const {
    std::vector<int> out;
    for (int d = 0; d < static_cast<int>(dev_[n].size()) && static_cast<int>(out.size()) < g; ++d) {
      if (dev_[n][d] == cap_[n]) out.push_back(d);
    }
    return out;
  }

  // Units of one device of node n the task needs: a whole device, or its share in the node's
  // units (rounded up to whole slices).
  int Need(const Task& t, NodeIndex n) const {
    return t.milli > 0 ? DeviceNeed(TaskClass{.gpus = 1, .milli = t.milli}, cap_[n]) : cap_[n];
  }

  // The node (and device, for a share) the policy picks for `g` whole devices or one share,
  // among nodes not in `exclude`; node -1 when none fits. Ties go to the lower node index.
  Choice Best(const Task& t, int g, const std::vector<NodeIndex>& exclude) {
    Choice best;
    const auto nodes = static_cast<NodeIndex>(c_.nodes().size());
    for (NodeIndex n = 0; n < nodes; ++n) {
      if (!((t.request.gpu_type_mask >> c_.nodes()[n].gpu_type) & 1u)) continue;
      if (std::find(exclude.begin(), exclude.end(), n) != exclude.end()) continue;
      Choice here = Evaluate(t, n, Need(t, n), g);
      if (here.key == kNever) continue;
      if (here.key < best.key) {
        best = here;
        best.node = n;
      }
      if (policy_ == Policy::kFirstFit && best.node >= 0) break;
    }
    return best;
  }

  // This node's key for the task (lower is better), kNever when it does not fit.
  Choice Evaluate(const Task& t, NodeIndex n, int need, int g) {
    const std::vector<int>& dev = dev_[n];
    Choice ch;
    if (t.milli > 0) {
      // Which device: first-fit the lowest index, best-fit the fullest that fits, FGD the one
      // whose use grows fragmentation least.
      if (policy_ == Policy::kFgd) return FgdShare(t, n, need);
      for (int d = 0; d < static_cast<int>(dev.size()); ++d) {
        if (dev[d] < need) continue;
        if (ch.device < 0 || (policy_ == Policy::kBestFit && dev[d] < dev[ch.device]))
          ch.device = d;
        if (policy_ == Policy::kFirstFit) break;
      }
      if (ch.device < 0) return ch;
      ch.key = policy_ == Policy::kFirstFit
                   ? n
                   : static_cast<double>(free_[n] - need) / static_cast<double>(cap_[n]);
      return ch;
    }
    int whole = 0;
    for (int f : dev) whole += f == cap_[n] ? 1 : 0;
    if (whole < g) return ch;
    switch (policy_) {
      case Policy::kFirstFit:
        ch.key = n;
        break;
      case Policy::kBestFit:
        ch.key = static_cast<double>(free_[n] - static_cast<int64_t>(g) * cap_[n]) /
                 static_cast<double>(cap_[n]);
        break;
      case Policy::kFgd: {
        // Cached per kind only when the part is the kind's whole need (an "any" job's part is
        // not: its kind needs one GPU).
        const bool cacheable = t.kind >= 0 && t.parts.size() == 1 &&
                               mix_.classes()[t.kind].gpus == g &&
                               mix_.classes()[t.kind].milli == 0;
        Cached* slot = cacheable ? &cache_[n * mix_.classes().size() + t.kind] : nullptr;
        if (slot != nullptr && slot->version == version_[n]) {
          ch.key = slot->growth;
          break;
        }
        scratch_ = dev;
        int left = g;
        for (int& f : scratch_) {
          if (left > 0 && f == cap_[n]) {
            f = 0;
            --left;
          }
        }
        ch.key = Growth(n);
        if (slot != nullptr) *slot = {version_[n], -1, ch.key};
        break;
      }
    }
    return ch;
  }

  Choice FgdShare(const Task& t, NodeIndex n, int need) {
    Cached* slot = t.kind >= 0 ? &cache_[n * mix_.classes().size() + t.kind] : nullptr;
    if (slot != nullptr && slot->version == version_[n]) {
      return {.node = -1, .device = slot->device, .key = slot->growth};
    }
    Choice ch;
    const std::vector<int>& dev = dev_[n];
    for (int d = 0; d < static_cast<int>(dev.size()); ++d) {
      if (dev[d] < need) continue;
      bool seen = false;  // devices with the same free capacity are alike: try the first
      for (int e = 0; e < d && !seen; ++e) seen = dev[e] == dev[d];
      if (seen) continue;
      scratch_ = dev;
      scratch_[d] -= need;
      const double growth = Growth(n);
      if (growth < ch.key) {
        ch.key = growth;
        ch.device = d;
      }
    }
    if (slot != nullptr) *slot = {version_[n], ch.device, ch.key};
    return ch;
  }

  // Growth of node n's expected fragmentation, in GPUs, if its devices became scratch_.
  double Growth(NodeIndex n) const {
    return NodeFragmentation(scratch_, cap_[n], c_.nodes()[n].gpu_type, mix_) / cap_[n] - frag_[n];
  }

  Status Take(const Task& t, NodeIndex n, const std::vector<int>& devices, int units) {
    for (int d : devices) {
      if (checker_ != nullptr) GANTRY_RETURN_IF_ERROR(checker_->OnTake(t.job->id, n, d, units));
      dev_[n][d] -= units;
    }
    Changed(n, -static_cast<int64_t>(units) * static_cast<int64_t>(devices.size()));
    if (checker_ != nullptr) GANTRY_RETURN_IF_ERROR(checker_->Agrees(n, dev_[n]));
    return Status::Ok();
  }

  // Undoes Take for a gang part whose later parts found no room.
  void Give(NodeIndex n, const std::vector<int>& devices, int units) {
    for (int d : devices) {
      if (checker_ != nullptr) checker_->OnGive(n, d, units);
      dev_[n][d] += units;
    }
    Changed(n, static_cast<int64_t>(units) * static_cast<int64_t>(devices.size()));
  }

  void Changed(NodeIndex n, int64_t delta_free) {
    free_[n] += delta_free;
    allocated_ -= static_cast<double>(delta_free) / cap_[n];
    frag_[n] = NodeFragmentation(dev_[n], cap_[n], c_.nodes()[n].gpu_type, mix_) / cap_[n];
    ++version_[n];
  }

  const Cluster& c_;
  const TaskMix& mix_;
  const std::vector<int> cap_;  // units per device, per node
  const Policy policy_;
  DeviceCapacityChecker* checker_;
  std::vector<std::vector<int>> dev_;  // free units per device
  std::vector<double> frag_;           // per node, GPUs
  std::vector<int64_t> free_;          // per node, units of its devices
  std::vector<uint32_t> version_;      // bumped on every change of the node
  std::vector<Cached> cache_;          // [node][kind], FGD only
  std::vector<int> scratch_;
  double allocated_ = 0;
};

}  // namespace

Result<PackingResult> RunPacking(const Cluster& cluster, const Workload& workload,
                                 const PackingOptions& options) {
  if (options.mig_slices < 0 || options.mig_slices > kMilliPerGpu) {
    return InvalidArgument("packing: mig_slices must be 0 (milli shares) or 1.." +
                           std::to_string(kMilliPerGpu));
  }
  if (!(options.max_load > 0) || !(options.step > 0)) {
    return InvalidArgument("packing: max_load and step must be positive");
  }
  if (options.policies.empty()) return InvalidArgument("packing: no policy");
  std::vector<Policy> policies;
  for (const std::string& p : options.policies) {
    GANTRY_ASSIGN_OR_RETURN(Policy parsed, ParsePolicy(p));
    policies.push_back(parsed);
  }
  PackingResult result;
  result.capacity = options.mig_slices > 0 ? options.mig_slices : kMilliPerGpu;
  // Units per device, per node: the --mig-slices override, else the GPU type's slices, else milli.
  std::vector<int> capacity(cluster.nodes().size(), result.capacity);
  for (size_t n = 0; n < capacity.size(); ++n) {
    const int slices = cluster.gpu_types()[cluster.nodes()[n].gpu_type].mig_slices;
    if (options.mig_slices == 0 && slices > 0) {
      capacity[n] = slices;
      result.sliced_by_type = true;
    }
  }
  result.cluster_gpus = cluster.total_gpus();
  if (result.cluster_gpus <= 0) return InvalidArgument("packing: the cluster has no GPUs");
  const int max_per_node = cluster.max_gpus_per_node();

  // Tasks in trace order, and the workload's mix (as placed: rounded shares are whole GPUs).
  std::vector<Task> tasks;
  tasks.reserve(workload.jobs.size());
  TaskMix mix;
  for (const Job& job : workload.jobs) {
    Task t;
    t.job = &job;
    t.request = job;
    const bool share = IsShare(job);
    if (share) ++result.fractional;
    if (share && options.round_fractional) {
      ++result.rounded;
      t.request.gpu_milli = 0;
    }
    if (share && !options.round_fractional) {
      t.milli = job.gpu_milli;
      t.demand = job.gpu_milli / static_cast<double>(kMilliPerGpu);
    } else if (job.nodes > 0 && job.gpus_per_node > 0) {
      t.parts.assign(job.nodes, job.gpus_per_node);
      t.demand = job.gpus;
    } else {
      // "any": whole nodes' worth (the most GPUs a node has) and the rest, each part on a node
      // of its own. Simpler than the engine, which may spread an "any" job over partly used nodes.
      for (int left = job.gpus; left > 0; left -= max_per_node) {
        t.parts.push_back(std::min(left, max_per_node));
      }
      t.demand = job.gpus;
    }
    mix.Add(t.request);
    tasks.push_back(std::move(t));
  }
  for (Task& t : tasks) t.kind = mix.Find(t.request);

  const double gpus = static_cast<double>(result.cluster_gpus);
  for (size_t p = 0; p < policies.size(); ++p) {
    std::unique_ptr<DeviceCapacityChecker> checker;
    if (options.check_invariants) {
      checker = std::make_unique<DeviceCapacityChecker>(cluster, capacity);
    }
    Packer packer(cluster, mix, capacity, policies[p], checker.get());
    PackingCurve curve{.policy = options.policies[p], .points = {}};
    const auto point = [&](const PackingPoint& base) {
      PackingPoint pt = base;
      pt.allocated = packer.allocated_gpus() / gpus;
      pt.fragmented = packer.fragmented_gpus() / gpus;
      curve.points.push_back(pt);
    };
    PackingPoint at;
    point(at);
    double demand = 0, next = options.step;
    for (const Task& t : tasks) {
      if (at.arrived >= options.max_load) break;
      GANTRY_ASSIGN_OR_RETURN(bool placed, packer.Place(t));
      ++at.tasks;
      if (!placed) ++at.failed;
      demand += t.demand;
      at.arrived = demand / gpus;
      if (at.arrived + 1e-12 >= next || at.arrived >= options.max_load) {
        point(at);
        while (next <= at.arrived + 1e-12) next += options.step;
      }
    }
    if (curve.points.back().tasks != at.tasks) point(at);
    result.curves.push_back(std::move(curve));
  }
  return result;
}

Status WritePackingCsv(const PackingResult& result, const std::string& path) {
  std::ofstream out(path);
  if (!out) return IoError("cannot write '" + path + "'");
  out << "policy,tasks,failed,arrived,allocated,fragmented\n";
  char line[256];
  for (const PackingCurve& c : result.curves) {
    for (const PackingPoint& p : c.points) {
      std::snprintf(line, sizeof(line), "%s,%lld,%lld,%.6f,%.6f,%.6f\n", c.policy.c_str(),
                    static_cast<long long>(p.tasks), static_cast<long long>(p.failed), p.arrived,
                    p.allocated, p.fragmented);
      out << line;
    }
  }
  out.close();
  if (!out) return IoError("error writing '" + path + "'");
  return Status::Ok();
}

Status WritePackingSvg(const PackingResult& result, const std::string& path) {
  // 640x400, plot area 60..600 x 20..340; both axes 0..1 (shares of cluster GPUs).
  constexpr double kX0 = 60, kX1 = 600, kY0 = 340, kY1 = 20;
  static const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\" "
       "font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"640\" height=\"400\" fill=\"white\"/>\n";
  char buf[256];
  for (int i = 0; i <= 10; ++i) {
    const double v = i / 10.0;
    const double x = kX0 + v * (kX1 - kX0), y = kY0 + v * (kY1 - kY0);
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n"
                  "<text x=\"%.1f\" y=\"358\" text-anchor=\"middle\">%.0f%%</text>"
                  "<text x=\"52\" y=\"%.1f\" text-anchor=\"end\">%.0f%%</text>\n",
                  x, kY0, x, kY1, kX0, y, kX1, y, x, v * 100, y + 4, v * 100);
    s << buf;
  }
  s << "<text x=\"330\" y=\"380\" text-anchor=\"middle\">arrived GPU demand (share of cluster "
       "GPUs)</text>\n"
    << "<text x=\"14\" y=\"180\" transform=\"rotate(-90 14 180)\" text-anchor=\"middle\">share "
       "of cluster GPUs</text>\n";
  const auto xy = [&](double a, double v) {
    std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", kX0 + std::min(a, 1.0) * (kX1 - kX0),
                  kY0 + std::min(v, 1.0) * (kY1 - kY0));
    return std::string(buf);
  };
  for (size_t i = 0; i < result.curves.size(); ++i) {
    const PackingCurve& c = result.curves[i];
    const char* color = kColors[i % 5];
    std::string alloc, frag;
    for (const PackingPoint& p : c.points) {
      alloc += xy(p.arrived, p.allocated);
      frag += xy(p.arrived, p.fragmented);
    }
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"" << alloc
      << "\"/>\n<polyline fill=\"none\" stroke=\"" << color
      << "\" stroke-width=\"2\" stroke-dasharray=\"6 4\" points=\"" << frag << "\"/>\n";
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"70\" y=\"%d\" fill=\"%s\">%s: allocated (solid), fragmented "
                  "(dashed)</text>\n",
                  36 + 16 * static_cast<int>(i), color, c.policy.c_str());
    s << buf;
  }
  s << "</svg>\n";
  std::ofstream out(path);
  if (!out) return IoError("cannot write '" + path + "'");
  out << s.str();
  out.close();
  if (!out) return IoError("error writing '" + path + "'");
  return Status::Ok();
}

}  // namespace gantry
