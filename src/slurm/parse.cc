// Parsers of Slurm 22.05's output: sinfo/squeue --json (OpenAPI v0.0.38), hostlists, GRES
// strings, topology.conf and sacctmgr's parsable associations.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/slurm/slurm.h"
#include "workload/trace_internal.h"  // Slurm durations: one parser

namespace gantry::slurm {
namespace {

using json = nlohmann::json;

// A hostlist may name at most this many hosts: a typo such as n[1-100000000] must not exhaust
// memory.
constexpr int64_t kMaxHosts = 1 << 20;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> SplitTopLevel(std::string_view s, char sep) {
  // Splits at `sep` outside brackets: "n[1-2,4],m1" -> "n[1-2,4]", "m1".
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') ++depth;
    if (s[i] == ']') --depth;
    if (s[i] == sep && depth == 0) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(s.substr(start));
  return out;
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

int64_t IntOr(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  return it->get<int64_t>();
}

bool BoolOr(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

std::string StrOr(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

Result<json> ParseDocument(std::string_view text, const char* what, const char* array_key) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return IoError(std::string(what) + ": output is not a JSON object");
  }
  if (auto e = doc.find("errors"); e != doc.end() && e->is_array() && !e->empty()) {
    return IoError(std::string(what) + ": Slurm reported errors: " + e->dump());
  }
  auto it = doc.find(array_key);
  if (it == doc.end() || !it->is_array()) {
    return IoError(std::string(what) + ": no '" + array_key + "' array in the output");
  }
  return doc;
}

// GRES in a job's tres_per_node: "gres:gpu:2", "gres:gpu:h100:8", possibly with other entries.
void ParseTresPerNode(const std::string& tres, SlurmJob* job) {
  for (std::string_view entry : SplitTopLevel(tres, ',')) {
    if (entry.substr(0, 5) == "gres:") entry.remove_prefix(5);
    Result<std::vector<GresGpus>> gpus = ParseGresGpus(entry);
    if (!gpus.ok()) continue;
    for (const GresGpus& g : *gpus) {
      job->gpus_per_node += g.count;
      if (job->gpu_type.empty()) job->gpu_type = g.type;
    }
  }
}

int GpusFromTresString(const std::string& tres) {
  // "cpu=2,mem=2000M,node=2,billing=2,gres/gpu=16" (typed entries gres/gpu:h100=.. also appear
  // next to the untyped total, which is the one to take).
  for (std::string_view entry : SplitTopLevel(tres, ',')) {
    if (entry.substr(0, 9) == "gres/gpu=") {
      int64_t n = 0;
      if (ParseInt(entry.substr(9), &n)) return static_cast<int>(n);
    }
  }
  return 0;
}

JobState JobStateFrom(const std::string& s) {
  if (s == "PENDING") return JobState::kPending;
  if (s == "RUNNING" || s == "CONFIGURING") return JobState::kRunning;
  if (s == "SUSPENDED") return JobState::kSuspended;
  if (s == "COMPLETING") return JobState::kCompleting;
  if (s == "COMPLETED") return JobState::kCompleted;
  if (s == "CANCELLED") return JobState::kCancelled;
  if (s == "FAILED") return JobState::kFailed;
  if (s == "TIMEOUT") return JobState::kTimeout;
  if (s == "NODE_FAIL") return JobState::kNodeFail;
  if (s == "PREEMPTED") return JobState::kPreempted;
  if (s == "OUT_OF_MEMORY") return JobState::kOutOfMemory;
  // A requeue in progress (the job is being stopped and will be pending again): reading it as
  // ended would finish a job that comes back.
  if (s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "REQUEUE_FED") return JobState::kPending;
  return JobState::kOther;
}

NodeState NodeStateFrom(const std::string& base, const std::vector<std::string>& flags) {
  // sinfo --json gives the base state in lower case ("idle", "mixed", "allocated", "down") and
  // flags in upper case ("DRAIN", "NOT_RESPONDING", ...); 22.05 also folds drain into the
  // base state as "drained"/"draining" in some paths, so both spellings are accepted.
  const std::string b = Lower(base);
  bool drain = false;
  bool not_responding = false;
  for (const std::string& f : flags) {
    const std::string lf = Lower(f);
    if (lf == "drain" || lf == "draining" || lf == "drained") drain = true;
    if (lf == "not_responding") not_responding = true;
  }
  if (b == "down" || not_responding) return NodeState::kDown;
  if (b == "drained") return NodeState::kDrained;
  if (b == "draining") return NodeState::kDraining;
  if (drain) {
    return (b == "idle") ? NodeState::kDrained : NodeState::kDraining;
  }
  if (b == "idle") return NodeState::kIdle;
  if (b == "mixed") return NodeState::kMixed;
  if (b == "allocated") return NodeState::kAllocated;
  return NodeState::kUnknown;
}

// Strips "(IDX:0-3)" / "(S:0-1)" suffixes.
std::string_view StripParens(std::string_view s) {
  const size_t p = s.find('(');
  return p == std::string_view::npos ? s : s.substr(0, p);
}

}  // namespace

const char* NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kIdle:
      return "idle";
    case NodeState::kMixed:
      return "mixed";
    case NodeState::kAllocated:
      return "allocated";
    case NodeState::kDraining:
      return "draining";
    case NodeState::kDrained:
      return "drained";
    case NodeState::kDown:
      return "down";
    case NodeState::kUnknown:
      return "unknown";
  }
  return "unknown";
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "pending";
    case JobState::kRunning:
      return "running";
    case JobState::kSuspended:
      return "suspended";
    case JobState::kCompleting:
      return "completing";
    case JobState::kCompleted:
      return "completed";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kFailed:
      return "failed";
    case JobState::kTimeout:
      return "timeout";
    case JobState::kNodeFail:
      return "node_fail";
    case JobState::kPreempted:
      return "preempted";
    case JobState::kOutOfMemory:
      return "out_of_memory";
    case JobState::kOther:
      return "other";
  }
  return "other";
}

Result<std::vector<std::string>> ExpandHostlist(std::string_view hostlist) {
  std::vector<std::string> out;
  if (hostlist.empty() || hostlist == "(null)") return out;
  for (std::string_view item : SplitTopLevel(hostlist, ',')) {
    if (item.empty()) continue;
    const size_t open = item.find('[');
    if (open == std::string_view::npos) {
      out.emplace_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == std::string_view::npos) {
      return InvalidArgument("hostlist '" + std::string(hostlist) + "': unclosed '['");
    }
    const std::string_view prefix = item.substr(0, open);
    const std::string_view ranges = item.substr(open + 1, close - open - 1);
    // Whatever follows the bracket is expanded recursively (n[1-2]-ib[0-1] is legal Slurm).
    GANTRY_ASSIGN_OR_RETURN(std::vector<std::string> suffixes,
                            ExpandHostlist(item.substr(close + 1)));
    if (suffixes.empty()) suffixes.emplace_back();
    for (std::string_view range : SplitTopLevel(ranges, ',')) {
      const size_t dash = range.find('-');
      const std::string_view lo_s = range.substr(0, dash);
      const std::string_view hi_s = dash == std::string_view::npos ? lo_s : range.substr(dash + 1);
      int64_t lo = 0;
      int64_t hi = 0;
      if (!ParseInt(lo_s, &lo) || !ParseInt(hi_s, &hi) || lo < 0 || hi < lo) {
        return InvalidArgument("hostlist '" + std::string(hostlist) + "': bad range '" +
                               std::string(range) + "'");
      }
      if (static_cast<int64_t>(out.size()) + (hi - lo + 1) * static_cast<int64_t>(suffixes.size()) >
          kMaxHosts) {
        return InvalidArgument("hostlist '" + std::string(hostlist) + "': more than " +
                               std::to_string(kMaxHosts) + " hosts");
      }
      // Zero padding: the low bound's width ("gpu[08-10]" -> gpu08 gpu09 gpu10).
      const size_t width = lo_s.size();
      for (int64_t n = lo; n <= hi; ++n) {
        std::string num = std::to_string(n);
        if (num.size() < width) num.insert(0, width - num.size(), '0');
        for (const std::string& suffix : suffixes) {
          out.push_back(std::string(prefix) + num + suffix);
        }
      }
    }
  }
  return out;
}

Result<std::vector<GresGpus>> ParseGresGpus(std::string_view gres) {
  std::vector<GresGpus> out;
  if (gres.empty() || gres == "(null)" || gres == "N/A") return out;
  for (std::string_view entry : SplitTopLevel(gres, ',')) {
    entry = StripParens(entry);
    // name[:type][:count]; count defaults to 1.
    std::vector<std::string_view> parts;
    size_t start = 0;
    for (size_t i = 0; i <= entry.size(); ++i) {
      if (i == entry.size() || entry[i] == ':') {
        parts.push_back(entry.substr(start, i - start));
        start = i + 1;
      }
    }
    if (parts.empty() || parts[0] != "gpu") continue;
    GresGpus g;
    int64_t count = 1;
    if (parts.size() == 2) {
      if (!ParseInt(parts[1], &count)) {
        g.type = Lower(parts[1]);
        count = 1;
      }
    } else if (parts.size() >= 3) {
      g.type = Lower(parts[1]);
      if (!ParseInt(parts[2], &count)) {
        return InvalidArgument("GRES '" + std::string(gres) + "': bad GPU count '" +
                               std::string(parts[2]) + "'");
      }
    }
    if (count < 0 || count > 1 << 20) {
      return InvalidArgument("GRES '" + std::string(gres) + "': GPU count out of range");
    }
    g.count = static_cast<int>(count);
    out.push_back(g);
  }
  return out;
}

Result<std::vector<SlurmNode>> ParseSinfoJson(std::string_view text) {
  GANTRY_ASSIGN_OR_RETURN(json doc, ParseDocument(text, "sinfo --json", "nodes"));
  std::vector<SlurmNode> out;
  for (const json& n : doc["nodes"]) {
    if (!n.is_object()) return IoError("sinfo --json: a node is not an object");
    SlurmNode node;
    node.name = StrOr(n, "name");
    if (node.name.empty()) return IoError("sinfo --json: a node has no name");
    std::vector<std::string> flags;
    if (auto f = n.find("state_flags"); f != n.end() && f->is_array()) {
      for (const json& x : *f) {
        if (x.is_string()) flags.push_back(x.get<std::string>());
      }
    }
    const std::string base = StrOr(n, "state");
    node.state = NodeStateFrom(base, flags);
    node.slurm_state = base;
    for (const std::string& f : flags) {
      node.slurm_state += "+" + f;
      if (Lower(f) == "not_responding") node.not_responding = true;
    }
    node.reason = StrOr(n, "reason");
    node.cpus = static_cast<int>(IntOr(n, "cpus", 0));
    node.alloc_cpus = static_cast<int>(IntOr(n, "alloc_cpus", 0));
    node.memory_mb = IntOr(n, "real_memory", 0);
    node.alloc_memory_mb = IntOr(n, "alloc_memory", 0);
    GANTRY_ASSIGN_OR_RETURN(std::vector<GresGpus> gpus, ParseGresGpus(StrOr(n, "gres")));
    for (const GresGpus& g : gpus) {
      if (node.gres_gpus.empty()) node.gpu_type = g.type;
      node.gpus += g.count;
    }
    node.gres_gpus = std::move(gpus);
    GANTRY_ASSIGN_OR_RETURN(std::vector<GresGpus> used, ParseGresGpus(StrOr(n, "gres_used")));
    for (const GresGpus& g : used) node.gpus_used += g.count;
    if (auto p = n.find("partitions"); p != n.end() && p->is_array()) {
      for (const json& x : *p) {
        if (x.is_string()) node.partitions.push_back(x.get<std::string>());
      }
    }
    out.push_back(std::move(node));
  }
  return out;
}

Result<std::vector<SlurmJob>> ParseSqueueJson(std::string_view text) {
  GANTRY_ASSIGN_OR_RETURN(json doc, ParseDocument(text, "squeue --json", "jobs"));
  std::vector<SlurmJob> out;
  for (const json& j : doc["jobs"]) {
    if (!j.is_object()) return IoError("squeue --json: a job is not an object");
    SlurmJob job;
    job.id = IntOr(j, "job_id", 0);
    if (job.id <= 0) return IoError("squeue --json: a job has no job_id");
    job.name = StrOr(j, "name");
    job.user = StrOr(j, "user_name");
    job.account = StrOr(j, "account");
    job.partition = StrOr(j, "partition");
    job.qos = StrOr(j, "qos");
    job.slurm_state = StrOr(j, "job_state");
    job.state = JobStateFrom(job.slurm_state);
    job.state_reason = StrOr(j, "state_reason");
    job.held = job.state == JobState::kPending && IntOr(j, "priority", 1) == 0;
    job.node_count = static_cast<int>(IntOr(j, "node_count", 0));
    ParseTresPerNode(StrOr(j, "tres_per_node"), &job);
    const std::string alloc = StrOr(j, "tres_alloc_str");
    job.gpus = GpusFromTresString(alloc.empty() ? StrOr(j, "tres_req_str") : alloc);
    GANTRY_ASSIGN_OR_RETURN(job.nodes, ExpandHostlist(StrOr(j, "nodes")));
    GANTRY_ASSIGN_OR_RETURN(job.required_nodes, ExpandHostlist(StrOr(j, "required_nodes")));
    job.submit_time = IntOr(j, "submit_time", 0);
    job.start_time = IntOr(j, "start_time", 0);
    job.end_time = IntOr(j, "end_time", 0);
    job.restart_count = static_cast<int>(IntOr(j, "restart_cnt", 0));
    job.requeue = BoolOr(j, "requeue", true);
    job.admin_comment = StrOr(j, "admin_comment");
    // Minutes; null when UNLIMITED.
    job.time_limit_minutes = IntOr(j, "time_limit", 0);
    out.push_back(std::move(job));
  }
  return out;
}

Result<std::vector<SlurmSwitch>> ParseTopology(std::string_view text) {
  std::vector<SlurmSwitch> out;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    SlurmSwitch sw;
    bool any = false;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      if (j == i) break;
      const std::string_view token = line.substr(i, j - i);
      i = j;
      const size_t eq = token.find('=');
      if (eq == std::string_view::npos) {
        return InvalidArgument("topology line " + std::to_string(line_no) + ": '" +
                               std::string(token) + "' is not Key=Value");
      }
      const std::string key = Lower(token.substr(0, eq));
      const std::string_view value = token.substr(eq + 1);
      any = true;
      if (key == "switchname") {
        sw.name = std::string(value);
      } else if (key == "nodes") {
        GANTRY_ASSIGN_OR_RETURN(sw.nodes, ExpandHostlist(value));
      } else if (key == "switches") {
        GANTRY_ASSIGN_OR_RETURN(sw.switches, ExpandHostlist(value));
      }
      // Level, LinkSpeed: not modelled.
    }
    if (!any) continue;
    if (sw.name.empty()) {
      return InvalidArgument("topology line " + std::to_string(line_no) + ": no SwitchName");
    }
    // `scontrol show topology` lists every node below an inner switch as well as its switches;
    // topology.conf forbids both on one switch, so for inner switches only the switches count.
    if (!sw.switches.empty()) sw.nodes.clear();
    out.push_back(std::move(sw));
  }
  return out;
}

namespace {

// The rows of `sacctmgr -nP` output: one per non-empty line, its '|'-separated fields (empty
// ones kept). IoError naming `columns` for a row with fewer than `min_fields`.
Result<std::vector<std::vector<std::string_view>>> SacctmgrRows(std::string_view text,
                                                                size_t min_fields,
                                                                const char* columns) {
  std::vector<std::vector<std::string_view>> rows;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    std::vector<std::string_view> f;
    size_t s = 0;
    for (size_t i = 0; i <= line.size(); ++i) {
      if (i == line.size() || line[i] == '|') {
        f.push_back(line.substr(s, i - s));
        s = i + 1;
      }
    }
    if (f.size() < min_fields) {
      return IoError(std::string("sacctmgr: expected ") + columns + ", got '" + std::string(line) +
                     "'");
    }
    rows.push_back(std::move(f));
  }
  return rows;
}

}  // namespace

Result<std::vector<SlurmAccount>> ParseAssociations(std::string_view text) {
  std::vector<SlurmAccount> out;
  GANTRY_ASSIGN_OR_RETURN(auto rows, SacctmgrRows(text, 4, "account|user|grptres|fairshare"));
  for (const std::vector<std::string_view>& f : rows) {
    // User rows repeat their account's limit for that user; Gantry's teams are the accounts.
    if (!f[1].empty() || f[0] == "root") continue;
    SlurmAccount account;
    account.name = std::string(f[0]);
    for (std::string_view entry : SplitTopLevel(f[2], ',')) {
      int64_t n = 0;
      if (entry.substr(0, 9) == "gres/gpu=" && ParseInt(entry.substr(9), &n)) {
        account.gpu_limit = static_cast<int>(n);
      }
    }
    int64_t shares = 1;
    if (ParseInt(f[3], &shares) && shares > 0) account.fairshare = static_cast<int>(shares);
    out.push_back(std::move(account));
  }
  return out;
}

Result<std::vector<SlurmQos>> ParseQosList(std::string_view text) {
  std::vector<SlurmQos> out;
  GANTRY_ASSIGN_OR_RETURN(auto rows,
                          SacctmgrRows(text, 5, "name|priority|preempt|usagefactor|gracetime"));
  for (const std::vector<std::string_view>& f : rows) {
    SlurmQos q;
    q.name = std::string(f[0]);
    if (q.name.empty()) return IoError("sacctmgr: a QOS without a name");
    if (!f[1].empty() && (!ParseInt(f[1], &q.priority) || q.priority < 0)) {
      return IoError("sacctmgr: QOS " + q.name + ": priority '" + std::string(f[1]) +
                     "' is not a whole number >= 0");
    }
    for (std::string_view v : SplitTopLevel(f[2], ',')) {
      if (!v.empty()) q.preempt.emplace_back(v);
    }
    if (!f[3].empty()) {
      const std::string factor(f[3]);
      char* end = nullptr;
      q.usage_factor = std::strtod(factor.c_str(), &end);
      if (end != factor.c_str() + factor.size() || q.usage_factor < 0) {
        return IoError("sacctmgr: QOS " + q.name + ": usage factor '" + factor +
                       "' is not a number >= 0");
      }
    }
    if (!f[4].empty() && !trace_internal::ParseSlurmDuration(f[4], &q.grace_time)) {
      return IoError("sacctmgr: QOS " + q.name + ": grace time '" + std::string(f[4]) +
                     "' is not a Slurm duration");
    }
    out.push_back(std::move(q));
  }
  return out;
}

Status StatusFromSlurmError(std::string_view text, const std::string& context) {
  const std::string msg = context + ": " + std::string(text);
  // The strings are entries of Slurm's errno table (slurm_strerror), stable across releases.
  auto has = [&](const char* s) { return text.find(s) != std::string_view::npos; };
  if (has("Invalid job id specified")) return NotFound(msg);
  if (has("Access/permission denied") || has("Permission denied")) return PermissionDenied(msg);
  if (has("Unable to contact slurm controller") || has("Connection refused") ||
      has("Zero Bytes were transmitted or received") || has("Unable to establish connection")) {
    return Unavailable(msg);
  }
  if (has("Socket timed out")) return DeadlineExceeded(msg);
  if (has("Invalid node name specified") || has("Requested node configuration is not available") ||
      has("Job/step already completing or completed") || has("Job is no longer pending") ||
      has("Requested operation is presently disabled") || has("Job is pending execution") ||
      has("Job is current not in") || has("Invalid node state specified") ||
      has("Node count specification invalid") || has("Requested nodes are busy")) {
    return FailedPrecondition(msg);
  }
  return IoError(msg);
}

}  // namespace gantry::slurm
