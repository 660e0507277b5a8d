// ResolveWorkload (a workload checked against a cluster) and ClusterFromOpenbNodes.
#include <cstdio>
#include <map>
#include <utility>

#include "gantry/workload/trace.h"
#include "workload/trace_internal.h"

namespace gantry {

namespace {

namespace ti = trace_internal;

// The trace field that named a job's GPU types, for messages.
const char* GpuTypeField(const std::string& format) {
  return format == "sacct" ? "AllocTRES" : "gpu_spec";
}

std::string TypeNames(const Cluster& cluster) {
  std::string s;
  for (const GpuType& t : cluster.gpu_types()) {
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

std::string JoinSet(const std::vector<std::string>& set) {
  std::string s;
  for (const std::string& n : set) {
    if (!s.empty()) s += '|';
    s += n;
  }
  return s;
}

// What a cluster offers to jobs restricted to one set of GPU types.
struct Capacity {
  int gpus = 0;
  int max_per_node = 0;
};

}  // namespace

Result<std::vector<Team>> ResolveWorkload(Workload& workload, const Cluster& cluster,
                                          const ResolveOptions& options) {
  // Resolve each GPU type set once; an unknown name is reported against the first job using it.
  const size_t num_sets = workload.gpu_type_sets.size();
  std::vector<uint32_t> set_mask(num_sets, 0);
  std::vector<std::vector<std::string>> set_unknown(num_sets);
  for (size_t s = 0; s < num_sets; ++s) {
    for (const std::string& name : workload.gpu_type_sets[s]) {
      const GpuTypeIndex t = cluster.FindGpuType(name);
      if (t < 0 || t >= kMaxGpuTypes) {
        set_unknown[s].push_back(name);
      } else {
        set_mask[s] |= 1u << t;
      }
    }
  }
  workload.stats.gpu_types_not_in_cluster.clear();

  std::vector<Team> teams;
  teams.reserve(workload.teams.size());
  for (const std::string& name : workload.teams) {
    const int t = cluster.FindTeam(name);
    if (t >= 0) {
      teams.push_back(cluster.teams()[t]);
    } else {
      Team team;
      team.name = name;
      team.quota_gpus = cluster.default_quota_gpus();
      team.shares = team.quota_gpus > 0 ? team.quota_gpus : 1.0;
      teams.push_back(std::move(team));
    }
  }

  // Jobs that name their QOS (sacct) get the spec's level of it, as gantryd gives live jobs
  // (Cluster::QosLevel); without QOS in the spec the importer's own levels stay.
  workload.stats.qos_not_in_cluster.clear();
  if (!cluster.qos().empty() && !workload.qos_names.empty()) {
    std::vector<int> level(workload.qos_names.size());
    std::vector<bool> unknown(workload.qos_names.size());
    for (size_t i = 0; i < level.size(); ++i) {
      bool u = false;
      level[i] = cluster.QosLevel(workload.qos_names[i], &u);
      unknown[i] = u;
    }
    for (Job& job : workload.jobs) {
      if (job.qos_name < 0) continue;
      const auto q = static_cast<size_t>(job.qos_name);
      job.qos = level[q];
      if (unknown[q]) ++workload.stats.qos_not_in_cluster[workload.qos_names[q]];
    }
  }

  std::map<uint32_t, Capacity> capacity;
  const auto capacity_of = [&](uint32_t mask) -> const Capacity& {
    auto [it, inserted] = capacity.try_emplace(mask);
    if (inserted) {
      it->second.gpus = cluster.GpusOfTypes(mask);
      for (const Node& n : cluster.nodes()) {
        if (mask & (1u << n.gpu_type))
          it->second.max_per_node = std::max(it->second.max_per_node, n.gpus);
      }
    }
    return it->second;
  };
  // Nodes that can hold `per_node` GPUs of the allowed types.
  std::map<std::pair<uint32_t, int>, int> fitting;
  const auto nodes_fitting = [&](uint32_t mask, int per_node) {
    auto [it, inserted] = fitting.try_emplace({mask, per_node}, 0);
    if (inserted) {
      for (const Node& n : cluster.nodes()) {
        if ((mask & (1u << n.gpu_type)) && n.gpus >= per_node) ++it->second;
      }
    }
    return it->second;
  };

  std::vector<Job> kept;
  kept.reserve(workload.jobs.size());
  for (Job& job : workload.jobs) {
    const std::string where = workload.source + ":" + std::to_string(job.source_line) + ": ";
    std::string reason;
    Status error;
    uint32_t mask = kAnyGpuType;
    std::string of_types;
    const bool has_set = job.gpu_type_set >= 0 && static_cast<size_t>(job.gpu_type_set) < num_sets;
    if (has_set) {
      mask = set_mask[job.gpu_type_set];
      of_types = " of type " + JoinSet(workload.gpu_type_sets[job.gpu_type_set]);
    }
    const bool quota_known = job.team >= 0 && static_cast<size_t>(job.team) < teams.size();
    const int quota = quota_known ? teams[job.team].quota_gpus : kNoQuota;
    if (has_set && mask == 0) {
      // "Any of these" with none of them here: the job can never run on this cluster.
      reason = "unknown GPU type";
      error = NotFound(where + "field '" + GpuTypeField(workload.format) + "': unknown GPU type" +
                       (set_unknown[job.gpu_type_set].size() > 1 ? "s '" : " '") +
                       JoinSet(set_unknown[job.gpu_type_set]) +
                       "' (cluster has: " + TypeNames(cluster) + ")");
    } else if (job.gpus > capacity_of(mask).gpus) {
      reason = "larger than cluster";
      error = FailedPrecondition(where + "job '" + job.id + "' asks for " +
                                 std::to_string(job.gpus) + " GPUs but the cluster has " +
                                 std::to_string(capacity_of(mask).gpus) + of_types);
    } else if (job.gpus_per_node > 0 && (job.gpus_per_node > capacity_of(mask).max_per_node ||
                                         nodes_fitting(mask, job.gpus_per_node) < job.nodes)) {
      reason = "shape fits no node";
      error = FailedPrecondition(where + "job '" + job.id + "' needs " + std::to_string(job.nodes) +
                                 " node(s) with " + std::to_string(job.gpus_per_node) +
                                 " GPUs each" + of_types + " but the cluster has " +
                                 std::to_string(job.gpus_per_node > capacity_of(mask).max_per_node
                                                    ? 0
                                                    : nodes_fitting(mask, job.gpus_per_node)) +
                                 " such node(s)");
    } else if (quota != kNoQuota && job.gpus > quota && !options.keep_over_quota) {
      reason = "larger than quota";
      error = FailedPrecondition(
          where + "job '" + job.id + "' asks for " + std::to_string(job.gpus) + " GPUs but team '" +
          teams[job.team].name + "' has a quota of " + std::to_string(quota));
    }
    if (!reason.empty()) {
      if (!options.skip_bad_jobs) return error;
      ++workload.stats.rows_skipped;
      ++workload.stats.skipped_by_reason[reason];
      continue;
    }
    job.gpu_type_mask = mask;
    if (has_set) {
      for (const std::string& name : set_unknown[job.gpu_type_set]) {
        ++workload.stats.gpu_types_not_in_cluster[name];
      }
    }
    kept.push_back(std::move(job));
  }
  for (size_t i = 0; i < kept.size(); ++i) kept[i].index = static_cast<JobIndex>(i);
  workload.jobs = std::move(kept);
  workload.stats.jobs = static_cast<int64_t>(workload.jobs.size());
  return teams;
}

bool IsOpenbNodeFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf, file);
  std::fclose(file);
  std::string_view head = ti::StripBom(std::string_view(buf, n));
  head = head.substr(0, head.find('\n'));
  std::vector<std::string_view> f;
  ti::SplitFields(head, ',', true, &f);
  if (f.empty() || !ti::EqualsIgnoreCase(f[0], "sn")) return false;
  bool gpu = false, model = false;
  for (std::string_view name : f) {
    gpu = gpu || ti::EqualsIgnoreCase(name, "gpu");
    model = model || ti::EqualsIgnoreCase(name, "model");
  }
  return gpu && model;
}

Result<Cluster> LoadClusterOrNodeList(const std::string& spec_or_path) {
  if (IsOpenbNodeFile(spec_or_path)) return ClusterFromOpenbNodes(spec_or_path);
  return LoadCluster(spec_or_path);
}

Result<Cluster> ClusterFromOpenbNodes(const std::string& path) {
  // Reuse the importer's line and field machinery through a tiny local reader.
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return NotFound(path + ": cannot open openb node file");
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) text.append(buf, n);
  std::fclose(file);

  ImportOptions unused;
  ti::TraceBuilder b(path, "openb-nodes", unused);
  ti::LineReader lines(ti::StripBom(text));
  ti::Columns columns;
  GANTRY_RETURN_IF_ERROR(ti::ReadHeader(lines, b, ',', &columns));
  const int hl = lines.line_number();
  GANTRY_ASSIGN_OR_RETURN(const int c_sn, ti::RequireColumn(columns, "sn", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_gpu, ti::RequireColumn(columns, "gpu", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_model, ti::RequireColumn(columns, "model", b, hl));
  const int c_cpu = columns.Find("cpu_milli");
  const int c_mem = columns.Find("memory_mib");

  ClusterBuilder builder("openb", {});
  std::map<std::string, GpuTypeIndex> types;
  std::string_view line;
  std::vector<std::string_view> f;
  while (lines.Next(&line)) {
    if (ti::IsBlank(line)) continue;
    ti::Row row(path, lines.line_number());
    ti::SplitFields(line, ',', true, &f);
    int64_t gpus = 0, cpu = 0, mem = 0;
    if (!row.MatchesHeader(line, f, columns)) {
      // a bad row, recorded
    } else if (row.Int("gpu", f[c_gpu], 0, ti::kMaxGpus, &gpus) &&
               (c_cpu < 0 || row.Int("cpu_milli", f[c_cpu], 0, INT64_C(1) << 40, &cpu)) &&
               (c_mem < 0 || row.Int("memory_mib", f[c_mem], 0, INT64_C(1) << 40, &mem))) {
      if (gpus > 0 && f[c_model].empty()) row.Bad("model", "missing value for a GPU node");
    }
    if (row.kind() != ti::Row::Kind::kJob) return row.status();
    if (gpus == 0) continue;  // CPU-only nodes run no GPU jobs
    const std::string model(f[c_model]);
    auto it = types.find(model);
    if (it == types.end()) {
      GpuType type;
      type.name = model;
      GANTRY_ASSIGN_OR_RETURN(const GpuTypeIndex index, builder.AddGpuType(std::move(type)));
      it = types.emplace(model, index).first;
    }
    Node node;
    node.name = std::string(f[c_sn]);
    node.gpu_type = it->second;
    node.gpus = static_cast<int>(gpus);
    node.cpus = static_cast<int>(cpu / 1000);
    node.memory_mb = mem;
    GANTRY_RETURN_IF_ERROR(builder.AddNode(std::move(node))
                               .WithContext(path + ":" + std::to_string(lines.line_number())));
  }
  return std::move(builder).Build();
}

}  // namespace gantry
