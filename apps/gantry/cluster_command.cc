// `gantry cluster show SPEC [--json] [--nodes]`: what a cluster spec or shorthand expands to.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "gantry/cluster/cluster.h"
#include "gantry/slurm/import.h"

namespace gantry::cli {
namespace {

struct ShowOptions {
  std::string spec;
  bool json = false;
  bool nodes = false;
};

// Domains of one level with the same size, so a 1000-rack cluster prints as one line.
struct SizeGroup {
  int count = 0;
  int nodes = 0;
  int gpus = 0;
};

// Per level, outermost first: groups of same-sized domains in order of first appearance.
std::vector<std::vector<SizeGroup>> GroupDomains(const Cluster& c) {
  std::vector<std::vector<SizeGroup>> by_level(c.levels().size());
  for (const Domain& d : c.domains()) {
    std::vector<SizeGroup>& groups = by_level[d.level];
    const int nodes = d.end_node - d.first_node;
    bool found = false;
    for (SizeGroup& g : groups) {
      if (g.nodes == nodes && g.gpus == d.gpus) {
        ++g.count;
        found = true;
        break;
      }
    }
    if (!found) groups.push_back({1, nodes, d.gpus});
  }
  return {by_level.rbegin(), by_level.rend()};
}

struct Totals {
  std::vector<int> gpus_by_type;
  double idle_watts = 0;
  double busy_watts = 0;
  int64_t quota_sum = 0;
  int teams_with_quota = 0;
};

Totals ComputeTotals(const Cluster& c) {
  Totals t;
  t.gpus_by_type.assign(c.gpu_types().size(), 0);
  for (const Node& n : c.nodes()) {
    t.gpus_by_type[n.gpu_type] += n.gpus;
    t.idle_watts += n.gpus * c.gpu_types()[n.gpu_type].idle_watts;
    t.busy_watts += n.gpus * c.gpu_types()[n.gpu_type].busy_watts;
  }
  for (const Team& team : c.teams()) {
    if (team.quota_gpus == kNoQuota) continue;
    t.quota_sum += team.quota_gpus;
    ++t.teams_with_quota;
  }
  return t;
}

std::string Format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

std::string Plural(int n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

nlohmann::ordered_json ToJson(const Cluster& c, bool with_nodes) {
  using json = nlohmann::ordered_json;
  const Totals t = ComputeTotals(c);
  json out;
  out["name"] = c.name();
  out["levels"] = c.levels();
  json types = json::array();
  json by_type = json::object();
  for (size_t i = 0; i < c.gpu_types().size(); ++i) {
    const GpuType& g = c.gpu_types()[i];
    types.push_back({{"name", g.name},
                     {"memory_gb", g.memory_gb},
                     {"idle_watts", g.idle_watts},
                     {"busy_watts", g.busy_watts},
                     {"gpus", t.gpus_by_type[i]}});
    by_type[g.name] = t.gpus_by_type[i];
  }
  out["gpu_types"] = types;
  out["totals"] = {{"nodes", c.nodes().size()},     {"gpus", c.total_gpus()},
                   {"domains", c.domains().size()}, {"gpus_by_type", by_type},
                   {"idle_watts", t.idle_watts},    {"busy_watts", t.busy_watts}};
  json topology = json::array();
  const auto groups = GroupDomains(c);
  for (size_t i = 0; i < groups.size(); ++i) {
    const size_t level = c.levels().size() - 1 - i;
    json level_groups = json::array();
    int count = 0;
    for (const SizeGroup& g : groups[i]) {
      level_groups.push_back({{"count", g.count}, {"nodes", g.nodes}, {"gpus", g.gpus}});
      count += g.count;
    }
    topology.push_back({{"level", c.levels()[level]}, {"domains", count}, {"sizes", level_groups}});
  }
  out["topology"] = topology;
  json domains = json::array();
  for (const Domain& d : c.domains()) {
    domains.push_back({{"name", d.name},
                       {"level", c.levels()[d.level]},
                       {"parent", d.parent < 0 ? json(nullptr) : json(d.parent)},
                       {"first_node", d.first_node},
                       {"end_node", d.end_node},
                       {"gpus", d.gpus}});
  }
  out["domains"] = domains;
  json teams = json::array();
  for (const Team& team : c.teams()) {
    json entry = {
        {"name", team.name},
        {"quota_gpus", team.quota_gpus == kNoQuota ? json(nullptr) : json(team.quota_gpus)},
        {"shares", team.shares}};
    // Kueue ClusterQueue settings, only when the spec gives them (older outputs unchanged).
    if (!team.queue.cohort.empty()) entry["cohort"] = team.queue.cohort;
    if (!team.queue.quotas.empty()) {
      json quotas = json::array();
      for (const FlavorQuota& q : team.queue.quotas) {
        const auto limit = [](int v) { return v == kNoQuota ? json(nullptr) : json(v); };
        quotas.push_back({{"flavor", q.flavor},
                          {"nominal", q.nominal},
                          {"borrowing_limit", limit(q.borrowing_limit)},
                          {"lending_limit", limit(q.lending_limit)}});
      }
      entry["quotas"] = quotas;
    }
    teams.push_back(std::move(entry));
  }
  out["teams"] = teams;
  // The power section, only when the spec has one (older outputs unchanged).
  const PowerSpec& power = c.power();
  if (power.has_caps() || power.capped_clock() || power.node_watts > 0) {
    json caps = json::array();
    for (size_t d = 0; d < power.domain_cap_watts.size(); ++d) {
      if (power.domain_cap_watts[d] > 0) {
        caps.push_back({{"domain", c.domains()[d].name}, {"cap_watts", power.domain_cap_watts[d]}});
      }
    }
    out["power"] = {{"cap_watts", power.cap_watts > 0 ? json(power.cap_watts) : json(nullptr)},
                    {"node_watts", power.node_watts},
                    {"idle_watts", c.IdleWatts()},
                    {"domains", caps},
                    {"capped_watts_factor", power.capped_watts_factor},
                    {"capped_slowdown", power.capped_slowdown}};
  }
  out["quota_sum_gpus"] = t.quota_sum;
  out["default_quota_gpus"] =
      c.default_quota_gpus() == kNoQuota ? json(nullptr) : json(c.default_quota_gpus());
  if (with_nodes) {
    json nodes = json::array();
    for (const Node& n : c.nodes()) {
      nodes.push_back(
          {{"name", n.name},
           {"gpu_type", c.gpu_types()[n.gpu_type].name},
           {"gpus", n.gpus},
           {"cpus", n.cpus},
           {"memory_gb", n.memory_mb / 1024},
           {"domain", n.domain < 0 ? json(nullptr) : json(c.domains()[n.domain].name)}});
    }
    out["nodes"] = nodes;
  }
  return out;
}

void PrintText(const Cluster& c, bool with_nodes, std::ostream& out) {
  const Totals t = ComputeTotals(c);
  out << "cluster " << c.name() << "\n";
  out << "  nodes:      " << c.nodes().size() << "\n";
  out << "  GPUs:       " << c.total_gpus() << " (";
  for (size_t i = 0; i < c.gpu_types().size(); ++i) {
    out << (i ? ", " : "") << c.gpu_types()[i].name << ": " << t.gpus_by_type[i];
  }
  out << ")\n";
  for (const GpuType& g : c.gpu_types()) {
    out << "  GPU type:   " << g.name << ", " << g.memory_gb << " GB, "
        << Format("%.0f", g.idle_watts) << " W idle, " << Format("%.0f", g.busy_watts)
        << " W busy\n";
  }
  out << "  GPU power:  " << Format("%.1f", t.idle_watts / 1000) << " kW idle, "
      << Format("%.1f", t.busy_watts / 1000) << " kW peak (all GPUs busy)\n";
  const PowerSpec& power = c.power();
  if (power.has_caps() || power.capped_clock() || power.node_watts > 0) {
    int capped = 0;
    for (double w : power.domain_cap_watts) capped += w > 0;
    out << "  power:      " << Format("%.1f", c.IdleWatts() / 1000) << " kW idle with "
        << Format("%.0f", power.node_watts) << " W per node; cap "
        << (power.cap_watts > 0 ? Format("%.1f", power.cap_watts / 1000) + " kW" : "none") << ", "
        << Plural(capped, "domain") << " capped";
    if (power.capped_clock()) {
      out << "; capped clock: busy watts x" << Format("%g", power.capped_watts_factor)
          << ", run times x" << Format("%g", power.capped_slowdown);
    }
    out << "\n";
  }

  if (c.levels().empty()) {
    out << "topology: flat (no levels)\n";
  } else {
    out << "topology (outermost level first):\n";
    const auto groups = GroupDomains(c);
    size_t width = 0;
    for (const std::string& l : c.levels()) width = std::max(width, l.size());
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::string& level = c.levels()[c.levels().size() - 1 - i];
      if (groups[i].empty()) {
        out << "  " << level << ": no domains\n";
        continue;
      }
      for (size_t k = 0; k < groups[i].size(); ++k) {
        const SizeGroup& g = groups[i][k];
        std::string label = k == 0 ? level : "";
        label.resize(width, ' ');
        out << "  " << label << " x " << g.count << ": " << Plural(g.nodes, "node") << ", "
            << Plural(g.gpus, "GPU") << (g.count > 1 ? " each" : "") << "\n";
      }
    }
  }

  if (c.teams().empty()) {
    out << "teams: none (one shared pool)\n";
  } else {
    out << "teams: " << c.teams().size();
    if (t.teams_with_quota > 0) {
      out << "; quotas sum to " << t.quota_sum << " of " << c.total_gpus() << " GPUs ("
          << Format("%.1f", c.total_gpus() ? 100.0 * t.quota_sum / c.total_gpus() : 0.0) << "%)";
    }
    out << "\n";
    size_t width = 0;
    for (const Team& team : c.teams()) width = std::max(width, team.name.size());
    for (const Team& team : c.teams()) {
      std::string name = team.name;
      name.resize(width, ' ');
      out << "  " << name << "  quota "
          << (team.quota_gpus == kNoQuota ? std::string("none") : std::to_string(team.quota_gpus))
          << ", shares " << Format("%g", team.shares);
      if (!team.queue.cohort.empty()) out << ", cohort " << team.queue.cohort;
      for (const FlavorQuota& q : team.queue.quotas) {
        out << ", " << q.flavor << " nominal " << q.nominal;
        if (q.borrowing_limit != kNoQuota) out << " (borrows <= " << q.borrowing_limit << ")";
        if (q.lending_limit != kNoQuota) out << " (lends <= " << q.lending_limit << ")";
      }
      out << "\n";
    }
  }
  out << "default quota: "
      << (c.default_quota_gpus() == kNoQuota ? std::string("none (teams not listed share the pool)")
                                             : std::to_string(c.default_quota_gpus()) + " GPUs")
      << "\n";

  if (with_nodes) {
    out << "nodes (index name type gpus cpus memory_gb domain):\n";
    for (size_t i = 0; i < c.nodes().size(); ++i) {
      const Node& n = c.nodes()[i];
      out << "  " << i << " " << n.name << " " << c.gpu_types()[n.gpu_type].name << " " << n.gpus
          << " " << n.cpus << " " << n.memory_mb / 1024 << " "
          << (n.domain < 0 ? std::string("-") : c.domains()[n.domain].name) << "\n";
    }
  }
}

int RunShow(const ShowOptions& options) {
  Result<Cluster> cluster = LoadCluster(options.spec);
  if (!cluster.ok()) {
    std::cerr << "gantry cluster show: " << cluster.status().message() << "\n";
    return kExitBadInput;
  }
  if (options.json) {
    std::cout << ToJson(*cluster, options.nodes).dump(2) << "\n";
  } else {
    PrintText(*cluster, options.nodes, std::cout);
  }
  std::cout.flush();
  return std::cout ? kExitOk : kExitFailure;
}

struct ImportOptions {
  bool from_slurm = false;
  std::string slurm_conf;
  std::string output;
  std::string name;
  bool no_teams = false;
};

int RunImport(const ImportOptions& options) {
  if (!options.from_slurm) {
    std::cerr << "gantry cluster import: name a source (--from-slurm)\n";
    return kExitUsage;
  }
  slurm::SlurmOptions slurm_options;
  slurm_options.slurm_conf = options.slurm_conf;
  slurm::SlurmClient client(slurm_options);
  slurm::ImportOptions import;
  import.name = options.name;
  import.teams = !options.no_teams;
  Result<slurm::SlurmSnapshot> snapshot = slurm::ReadSnapshot(client, import);
  if (!snapshot.ok()) {
    std::cerr << "gantry cluster import: " << snapshot.status().message() << "\n";
    return kExitFailure;
  }
  Result<std::string> yaml = slurm::WriteClusterSpec(*snapshot, import);
  if (!yaml.ok()) {
    std::cerr << "gantry cluster import: " << yaml.status().message() << "\n";
    return kExitBadInput;
  }
  // What is written must load: check it with the spec parser before anyone relies on it.
  Result<Cluster> check =
      ParseClusterSpec(*yaml, options.output.empty() ? "import" : options.output);
  if (!check.ok()) {
    std::cerr << "gantry cluster import: the written spec does not load: "
              << check.status().message() << "\n";
    return kExitFailure;
  }
  if (options.output.empty() || options.output == "-") {
    std::cout << *yaml;
    std::cout.flush();
    return std::cout ? kExitOk : kExitFailure;
  }
  std::ofstream out(options.output, std::ios::binary | std::ios::trunc);
  out << *yaml;
  out.close();
  if (!out) {
    std::cerr << "gantry cluster import: cannot write " << options.output << "\n";
    return kExitFailure;
  }
  std::cerr << "wrote " << options.output << ": " << check->nodes().size() << " nodes, "
            << check->total_gpus() << " GPUs, " << check->teams().size() << " teams\n";
  return kExitOk;
}

std::string ShorthandFooter() {
  std::string text = "SPEC is a cluster spec file (docs/formats/cluster.md) or a shorthand:\n";
  for (const std::string& line : ClusterShorthandHelp()) text += "  " + line + "\n";
  return text;
}

}  // namespace

void RegisterClusterCommands(CLI::App& app) {
  CLI::App* cluster =
      app.add_subcommand("cluster", "Inspect cluster specs and shorthands; import them from Slurm");
  cluster->require_subcommand(1);
  auto options = std::make_shared<ShowOptions>();
  CLI::App* show = cluster->add_subcommand(
      "show", "Print a cluster's totals, topology per level and team quotas");
  show->add_option("SPEC", options->spec, "cluster spec file or shorthand (see below)")->required();
  show->add_flag("--json", options->json, "print everything as one JSON object (for scripts)");
  show->add_flag("--nodes", options->nodes, "also list every node");
  show->footer(ShorthandFooter() +
               "\nExamples:\n  gantry cluster show data/clusters/philly.yaml\n"
               "  gantry cluster show dgx-h100:nodes=16 --json --nodes");
  show->callback([options] {
    const int rc = RunShow(*options);
    // CLI11's way to leave main() with a code; it prints nothing itself.
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });

  auto import_options = std::make_shared<ImportOptions>();
  CLI::App* import = cluster->add_subcommand(
      "import", "Write a cluster spec (nodes, GPUs, topology, teams, QOS) from a live cluster");
  import->add_flag("--from-slurm", import_options->from_slurm,
                   "read it from Slurm: sinfo (nodes, GPU GRES), scontrol show topology "
                   "(topology.conf), sacctmgr (accounts, GrpTRES gres/gpu; QOS)");
  import->add_option("--slurm-conf", import_options->slurm_conf,
                     "the cluster's slurm.conf (default: $SLURM_CONF)");
  import->add_option("-o,--output", import_options->output, "write here (default: stdout)");
  import->add_option("--name", import_options->name, "cluster name (default: Slurm's ClusterName)");
  import->add_flag("--no-teams", import_options->no_teams,
                   "skip the accounts and QOS (for a Slurm without slurmdbd)");
  import->footer(
      "\nExample:\n  gantry cluster import --from-slurm -o site.yaml && "
      "gantry cluster show site.yaml");
  import->callback([import_options] {
    const int rc = RunImport(*import_options);
  if (rc != kExitOk) throw CLI::RuntimeError(rc);
});
}  // namespace gantry::cli

}  // namespace gantry::cli
