// Shorthand cluster generators: "kind[:key=value,...]" -> Cluster, for quick experiments without a
// spec file. Every generator builds the same shapes a spec file would (domains named
// "<prefix>-<n>", nodes "<domain>-n<i>"), so a shorthand and its written-out spec are
// interchangeable.
#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cluster/cluster.h"

namespace gantry {
namespace {

constexpr int64_t kMaxGeneratedNodes = 1 << 20;

// GPU types the generators know. Power: board TDP as busy, a typical idle draw reported by
// nvidia-smi on an unloaded board as idle; memory: HBM per GPU as sold.
const std::vector<GpuType>& GpuCatalog() {
  static const std::vector<GpuType> catalog = {
      {"H100", 80, 70, 700},      // H100 SXM5 80 GB, 700 W TDP
      {"H200", 141, 75, 700},     // H200 SXM 141 GB, 700 W TDP
      {"A100", 80, 50, 400},      // A100 SXM4 80 GB, 400 W TDP
      {"GB200", 186, 100, 1200},  // Blackwell GPU of a GB200 superchip: 186 GB HBM3e, ~1.2 kW
      {"V100", 32, 40, 300},      // V100 SXM2 32 GB, 300 W TDP
      {"P100", 16, 30, 250},      // P100 16 GB, 250 W TDP (Philly's main GPU)
  };
  return catalog;
}

std::string CatalogNames() {
  std::string out;
  for (const GpuType& t : GpuCatalog()) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

struct Param {
  std::string name;
  std::string default_value;
  bool is_int = true;
};

class Params {
 public:
  explicit Params(std::map<std::string, std::string> values) : values_(std::move(values)) {}
  const std::string& Str(const std::string& name) const { return values_.at(name); }
  int64_t Int(const std::string& name) const { return ints_.at(name); }
  std::map<std::string, int64_t>& ints() { return ints_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, int64_t> ints_;
};

struct Generator {
  std::string kind;
  std::string description;
  std::vector<Param> params;
  std::function<Result<Cluster>(const std::string& name, const Params&)> build;
};

// The node and topology shape shared by the tiered generators.
struct TieredShape {
  std::vector<std::string> levels;         // innermost first
  std::vector<std::string> domain_prefix;  // per level: domains are "<prefix>-<n>"
  std::vector<int64_t> fan_out;            // per level: nodes (level 0) or child domains
  GpuType gpu;
  int gpus_per_node = 8;
  int cpus = 0;
  int64_t memory_gb = 0;
  int64_t nodes = 0;
};

// Emits the domains covering nodes [start, end) at `level`, each holding at most capacity[level]
// nodes; the last domain of a level takes the remainder.
Status EmitRange(ClusterBuilder& b, const TieredShape& s, const std::vector<int64_t>& capacity,
                 int level, int64_t start, int64_t end, std::vector<int>& counters,
                 GpuTypeIndex type) {
  for (int64_t first = start; first < end; first += capacity[level]) {
    const int64_t last = std::min(first + capacity[level], end);
    std::string domain = s.domain_prefix[level] + "-" + std::to_string(counters[level]++);
    GANTRY_RETURN_IF_ERROR(b.OpenDomain(domain, level));
    if (level == 0) {
      for (int64_t k = 0; k < last - first; ++k) {
        Node node;
        node.name = domain + "-n" + std::to_string(k);
        node.gpu_type = type;
        node.gpus = s.gpus_per_node;
        node.cpus = s.cpus;
        node.memory_mb = s.memory_gb * 1024;
        GANTRY_RETURN_IF_ERROR(b.AddNode(std::move(node)));
      }
    } else {
      GANTRY_RETURN_IF_ERROR(EmitRange(b, s, capacity, level - 1, first, last, counters, type));
    }
    GANTRY_RETURN_IF_ERROR(b.CloseDomain());
  }
  return Status::Ok();
}

Result<Cluster> BuildTiered(const std::string& name, const TieredShape& s) {
  ClusterBuilder b(name, s.levels);
  GANTRY_ASSIGN_OR_RETURN(GpuTypeIndex type, b.AddGpuType(s.gpu));
  std::vector<int64_t> capacity(s.levels.size());
  int64_t cap = 1;
  for (size_t l = 0; l < s.levels.size(); ++l) {
    // Saturate: a fan-out product past the node count means "one domain holds everything".
    cap = std::min<int64_t>(cap * s.fan_out[l], kMaxGeneratedNodes);
    capacity[l] = cap;
  }
  std::vector<int> counters(s.levels.size(), 0);
  const int top = static_cast<int>(s.levels.size()) - 1;
  GANTRY_RETURN_IF_ERROR(EmitRange(b, s, capacity, top, 0, s.nodes, counters, type));
  return std::move(b).Build();
}

const GpuType& Catalog(const std::string& name) {
  for (const GpuType& t : GpuCatalog()) {
    if (t.name == name) return t;
  }
  return GpuCatalog().front();
}

Result<Cluster> BuildDgx(const std::string& name, const Params& p, const std::string& gpu, int cpus,
                         int64_t memory_gb) {
  TieredShape s;
  s.levels = {"leaf", "spine"};
  s.domain_prefix = {"leaf", "spine"};
  s.fan_out = {p.Int("nodes_per_leaf"), p.Int("leaves_per_spine")};
  s.gpu = Catalog(gpu);
  s.gpus_per_node = 8;
  s.cpus = cpus;
  s.memory_gb = memory_gb;
  s.nodes = p.Int("nodes");
  return BuildTiered(name, s);
}

// Philly's virtual clusters and their sizes in 8-GPU nodes. The first eleven are published in
// the Helios artifact's philly_vc.csv; the last four appear in the trace but not there, and one
// node each is our assumption (their largest jobs ask for 8, 1, 1 and 8 GPUs).
struct PhillyVc {
  const char* name;
  int nodes;
};
constexpr PhillyVc kPhillyVcs[] = {
    {"6214e9", 64}, {"7f04ca", 32}, {"11cb48", 16}, {"b436b2", 64}, {"ee9e8c", 64},
    {"e13805", 16}, {"6c71a0", 32}, {"2869ce", 16}, {"ed69ec", 8},  {"103959", 8},
    {"0e4a51", 32}, {"23dbec", 1},  {"51b7ef", 1},  {"795a4c", 1},  {"925e2b", 1},
};
constexpr int kPhillyGpusPerNode = 8;
constexpr int kPhillyNodesPerRack = 16;

Result<Cluster> BuildPhilly() {
  int nodes = 0;
  for (const PhillyVc& vc : kPhillyVcs) nodes += vc.nodes;
  TieredShape s;
  s.levels = {"rack"};
  s.domain_prefix = {"rack"};
  s.fan_out = {kPhillyNodesPerRack};
  s.gpu = Catalog("P100");
  s.gpus_per_node = kPhillyGpusPerNode;
  s.nodes = nodes;
  // BuildTiered has no teams; rebuild with them through the same builder path.
  ClusterBuilder b("philly", s.levels);
  GANTRY_ASSIGN_OR_RETURN(GpuTypeIndex type, b.AddGpuType(s.gpu));
  std::vector<int> counters(1, 0);
  GANTRY_RETURN_IF_ERROR(EmitRange(b, s, {kPhillyNodesPerRack}, 0, 0, nodes, counters, type));
  for (const PhillyVc& vc : kPhillyVcs) {
    const int quota = vc.nodes * kPhillyGpusPerNode;
    GANTRY_RETURN_IF_ERROR(b.AddTeam({vc.name, quota, static_cast<double>(quota)}));
  }
  return std::move(b).Build();
}

const std::vector<Generator>& Generators() {
  static const std::vector<Generator> generators = {
      {"dgx-h100",
       "DGX H100 nodes (8x H100 80GB, 112 CPU cores, 2 TB), levels leaf, spine",
       {{"nodes", "128"}, {"nodes_per_leaf", "32"}, {"leaves_per_spine", "16"}},
       [](const std::string& name, const Params& p) {
         // DGX H100: 2x Xeon Platinum 8480C (2 x 56 cores), 2 TB DDR5 (NVIDIA DGX H100 datasheet);
         // 32 nodes per leaf is one DGX SuperPOD scalable unit.
         return BuildDgx(name, p, "H100", 112, 2048);
       }},
      {"dgx-a100",
       "DGX A100 nodes (8x A100 80GB, 128 CPU cores, 2 TB), levels leaf, spine",
       {{"nodes", "128"}, {"nodes_per_leaf", "20"}, {"leaves_per_spine", "16"}},
       [](const std::string& name, const Params& p) {
         // DGX A100 640GB: 2x AMD EPYC 7742 (2 x 64 cores), 2 TB DDR4 (NVIDIA datasheet);
         // 20 nodes per leaf is one DGX A100 SuperPOD scalable unit.
         return BuildDgx(name, p, "A100", 128, 2048);
       }},
      {"gb200-nvl72",
       "GB200 NVL72 racks (18 nodes x 4 GB200 GPUs, one NVLink domain per rack), levels nvlink, "
       "leaf, spine",
       {{"racks", "8"}, {"racks_per_leaf", "8"}, {"leaves_per_spine", "16"}},
       [](const std::string& name, const Params& p) -> Result<Cluster> {
         // A compute tray holds two GB200 superchips: 4 Blackwell GPUs and 2 Grace CPUs
         // (2 x 72 Arm cores, 2 x 480 GB LPDDR5X); 18 trays share one NVLink switch domain.
         TieredShape s;
         s.levels = {"nvlink", "leaf", "spine"};
         s.domain_prefix = {"rack", "leaf", "spine"};
         s.fan_out = {18, p.Int("racks_per_leaf"), p.Int("leaves_per_spine")};
         s.gpu = Catalog("GB200");
         s.gpus_per_node = 4;
         s.cpus = 144;
         s.memory_gb = 960;
         s.nodes = p.Int("racks") * 18;
         if (s.nodes > kMaxGeneratedNodes) return InvalidArgument("too many racks");
         return BuildTiered(name, s);
       }},
      {"flat",
       "identical nodes, no topology; type: " + CatalogNames(),
       {{"nodes", "16"},
        {"gpus", "8"},
        {"type", "H100", false},
        {"cpus", "64"},
        {"memory_gb", "512"}},
       [](const std::string& name, const Params& p) -> Result<Cluster> {
         const GpuType* gpu = nullptr;
         for (const GpuType& t : GpuCatalog()) {
           if (t.name == p.Str("type")) gpu = &t;
         }
         if (gpu == nullptr) {
           return InvalidArgument("cluster shorthand '" + name + "': unknown GPU type '" +
                                  p.Str("type") + "' (valid: " + CatalogNames() + ")");
         }
         ClusterBuilder b(name, {});
         GANTRY_ASSIGN_OR_RETURN(GpuTypeIndex type, b.AddGpuType(*gpu));
         for (int64_t k = 0; k < p.Int("nodes"); ++k) {
           Node node;
           // Not "n" + to_string(k): GCC 12 at -O3 warns falsely on that (-Wrestrict, PR105651).
           node.name = "n";
           node.name += std::to_string(k);
           node.gpu_type = type;
           node.gpus = static_cast<int>(p.Int("gpus"));
           node.cpus = static_cast<int>(p.Int("cpus"));
           node.memory_mb = p.Int("memory_gb") * 1024;
           GANTRY_RETURN_IF_ERROR(b.AddNode(std::move(node)));
         }
         return std::move(b).Build();
       }},
      {"philly",
       "Microsoft's Philly cluster as in data/clusters/philly.yaml (356 nodes x 8 P100, 15 "
       "virtual clusters as teams)",
       {},
       [](const std::string&, const Params&) { return BuildPhilly(); }},
  };
  return generators;
}

std::string ParamNames(const Generator& g) {
  std::string out;
  for (const Param& p : g.params) out += (out.empty() ? "" : ", ") + p.name;
  return out.empty() ? "none" : out;
}

std::string KindNames() {
  std::string out;
  for (const Generator& g : Generators()) out += (out.empty() ? "" : ", ") + g.kind;
  return out;
}

// Upper bounds that keep a typo from building a cluster nobody meant; see kMaxGeneratedNodes.
int64_t MaxFor(const std::string& param) {
  if (param == "gpus") return 1024;
  if (param == "cpus") return 1 << 24;
  if (param == "memory_gb") return 1 << 30;
  return kMaxGeneratedNodes;
}

}  // namespace

Result<Cluster> GenerateCluster(const std::string& shorthand) {
  const size_t colon = shorthand.find(':');
  const std::string kind = shorthand.substr(0, colon);
  auto it = std::find_if(Generators().begin(), Generators().end(),
                         [&](const Generator& g) { return g.kind == kind; });
  if (it == Generators().end()) {
    return InvalidArgument("'" + shorthand + "' is neither a cluster spec file nor a known " +
                           "shorthand (shorthands: " + KindNames() + ")");
  }
  const Generator& gen = *it;
  std::map<std::string, std::string> values;
  for (const Param& p : gen.params) values[p.name] = p.default_value;
  std::map<std::string, bool> given;
  if (colon != std::string::npos) {
    std::string_view rest(shorthand);
    rest.remove_prefix(colon + 1);
    while (true) {
      const size_t comma = rest.find(',');
      std::string item(rest.substr(0, comma));
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        return InvalidArgument("cluster shorthand '" + shorthand + "': expected key=value, got '" +
                               item + "' (parameters of " + kind + ": " + ParamNames(gen) + ")");
      }
      std::string key = item.substr(0, eq);
      if (values.count(key) == 0) {
        return InvalidArgument("cluster shorthand '" + shorthand + "': unknown parameter '" + key +
                               "' (parameters of " + kind + ": " + ParamNames(gen) + ")");
      }
      if (given[key]) {
        return InvalidArgument("cluster shorthand '" + shorthand + "': parameter '" + key +
                               "' given twice");
      }
      given[key] = true;
      values[key] = item.substr(eq + 1);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  Params params(values);
  for (const Param& p : gen.params) {
    if (!p.is_int) continue;
    const std::string& v = values[p.name];
    int64_t n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size()) {
      return InvalidArgument("cluster shorthand '" + shorthand + "': parameter '" + p.name +
                             "': expected a whole number, got '" + v + "'");
    }
    const int64_t min = (p.name == "cpus" || p.name == "memory_gb") ? 0 : 1;
    if (n < min || n > MaxFor(p.name)) {
      return InvalidArgument("cluster shorthand '" + shorthand + "': parameter '" + p.name +
                             "' must be between " + std::to_string(min) + " and " +
                             std::to_string(MaxFor(p.name)) + ", got " + v);
    }
    params.ints()[p.name] = n;
  }
  return gen.build(shorthand, params);
}

std::vector<std::string> ClusterShorthandHelp() {
  std::vector<std::string> lines;
  for (const Generator& g : Generators()) {
    std::string line = g.kind;
    if (!g.params.empty()) {
      line += "[:";
      for (size_t i = 0; i < g.params.size(); ++i) {
        line += (i ? "," : "") + g.params[i].name + "=" + g.params[i].default_value;
      }
      line += "]";
    }
    lines.push_back(line + "  " + g.description);
  }
  return lines;
}

const std::vector<GpuType>& KnownGpuTypes() { return GpuCatalog(); }

}  // namespace gantry
