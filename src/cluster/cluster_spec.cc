// Cluster spec files: YAML in, Cluster out (format in docs/formats/cluster.md).
//
// The reader walks the YAML tree once, expanding `repeat` and node `count` as it goes and feeding
// a ClusterBuilder, so node indices come out contiguous per domain by construction. Everything it
// rejects is reported as "<source>:<line>:<column>: field '<name>': <what is wrong>", pointing at
// the offending value (or at the enclosing mapping when a required field is missing), because a
// spec with hundreds of lines is otherwise hard to fix.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/units.h"

namespace gantry {
namespace {

// Caps that keep a typo such as `repeat: 1000000` from exhausting memory; they are far above any
// real cluster (the largest today have a few tens of thousands of nodes).
constexpr int64_t kMaxNodes = 1 << 20;
constexpr int64_t kMaxDomains = 1 << 20;
constexpr int64_t kMaxGpusPerNode = 1024;

// Long scalars (a whole CSV file read as YAML is one) are cut so a message stays one line.
std::string Quote(const std::string& s) {
  constexpr size_t kMax = 60;
  std::string shown = s.size() > kMax ? s.substr(0, kMax) + "..." : s;
  for (char& c : shown) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return "\"" + shown + "\"";
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// How a value that is not what we wanted looks, for messages.
std::string Describe(const YAML::Node& v) {
  switch (v.Type()) {
    case YAML::NodeType::Scalar:
      return Quote(v.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "something else";
}

// Expands `{name}` placeholders in `pattern`; any other `{...}` is an error that lists `vars`.
Result<std::string> ExpandPattern(const std::string& pattern,
                                  const std::vector<std::pair<std::string, std::string>>& vars) {
  std::string out;
  size_t pos = 0;
  while (pos < pattern.size()) {
    size_t open = pattern.find('{', pos);
    if (open == std::string::npos) {
      out.append(pattern, pos, std::string::npos);
      break;
    }
    out.append(pattern, pos, open - pos);
    size_t close = pattern.find('}', open);
    if (close == std::string::npos) return InvalidArgument("unclosed '{' in " + Quote(pattern));
    std::string key = pattern.substr(open + 1, close - open - 1);
    auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == key; });
    if (it == vars.end()) {
      std::vector<std::string> valid;
      for (const auto& v : vars) valid.push_back("{" + v.first + "}");
      return InvalidArgument("unknown placeholder '{" + key + "}' in " + Quote(pattern) +
                             " (valid here: " + (valid.empty() ? "none" : Join(valid)) + ")");
    }
    out += it->second;
    pos = close + 1;
  }
  return out;
}

bool HasPlaceholder(const std::string& pattern) { return pattern.find('{') != std::string::npos; }

class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

  Result<Cluster> Read(const YAML::Node& root);

 private:
  // "<source>:<line>:<column>: field '<field>': <message>"; the location is `at`'s, or the
  // nearest enclosing one when `at` has none (a missing field has no position of its own).
  Status Error(const YAML::Node& at, const std::string& field, const std::string& message) const {
    std::string where = source_;
    YAML::Mark mark = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
    if (mark.is_null()) mark = context_mark_;
    if (!mark.is_null()) {
      where += ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
    }
    std::string text = where + ": ";
    if (!field.empty()) text += "field '" + field + "': ";
    return InvalidArgument(text + message);
  }

  // Checks that `map` is a mapping whose keys are all in `allowed`, each given once.
  Status CheckMap(const YAML::Node& map, const std::string& what,
                  const std::vector<std::string>& allowed) {
    if (!map.IsMap()) return Error(map, "", what + ": expected a mapping, got " + Describe(map));
    context_mark_ = map.Mark();
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar()) return Error(key, "", what + ": keys must be plain names");
      const std::string name = key.Scalar();
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        return Error(key, name,
                     "unknown field in " + what + " (valid fields: " + Join(allowed) + ")");
      }
      if (!seen.insert(name).second) return Error(key, name, "given twice in " + what);
    }
    return Status::Ok();
  }

  // Returns the value of `field`, or an undefined node when it is absent or null.
  static YAML::Node Get(const YAML::Node& map, const std::string& field) {
    YAML::Node v = map[field];
    if (v.IsDefined() && v.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    return v;
  }

  Status Missing(const YAML::Node& map, const std::string& field, const std::string& what) {
    context_mark_ = map.Mark();
    return Error(YAML::Node(YAML::NodeType::Undefined), field,
                 "required field is missing in " + what);
  }

  Result<std::optional<std::string>> OptString(const YAML::Node& map, const std::string& field) {
    YAML::Node v = Get(map, field);
    if (!v.IsDefined()) return std::optional<std::string>();
    if (!v.IsScalar()) return Error(v, field, "expected a string, got " + Describe(v));
    if (v.Scalar().empty()) return Error(v, field, "must not be empty");
    return std::optional<std::string>(v.Scalar());
  }

  Result<std::string> ReqString(const YAML::Node& map, const std::string& field,
                                const std::string& what) {
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> s, OptString(map, field));
    if (!s) return Missing(map, field, what);
    return *s;
  }

  Result<std::optional<int64_t>> OptInt(const YAML::Node& map, const std::string& field,
                                        int64_t min, int64_t max) {
    YAML::Node v = Get(map, field);
    if (!v.IsDefined()) return std::optional<int64_t>();
    if (!v.IsScalar()) return Error(v, field, "expected a whole number, got " + Describe(v));
    const std::string& s = v.Scalar();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec == std::errc::result_out_of_range) {
      return Error(v, field, "number " + s + " is out of range");
    }
    if (ec != std::errc() || end != s.data() + s.size()) {
      return Error(v, field, "expected a whole number, got " + Quote(s));
    }
    if (value < min) {
      return Error(v, field, "must be at least " + std::to_string(min) + ", got " + s);
    }
    if (value > max) {
      return Error(v, field, "must be at most " + std::to_string(max) + ", got " + s);
    }
    return std::optional<int64_t>(value);
  }

  Result<int64_t> ReqInt(const YAML::Node& map, const std::string& field, const std::string& what,
                         int64_t min, int64_t max) {
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> n, OptInt(map, field, min, max));
    if (!n) return Missing(map, field, what);
    return *n;
  }

  Result<std::optional<double>> OptNumber(const YAML::Node& map, const std::string& field,
                                          double min) {
    YAML::Node v = Get(map, field);
    if (!v.IsDefined()) return std::optional<double>();
    if (!v.IsScalar()) return Error(v, field, "expected a number, got " + Describe(v));
    const std::string& s = v.Scalar();
    char* end = nullptr;
    errno = 0;
    double value = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(value) ||
        std::isspace(static_cast<unsigned char>(s[0]))) {
      return Error(v, field, "expected a number, got " + Quote(s));
    }
    if (value < min)
      return Error(v, field, "must be at least " + std::to_string(min) + ", got " + s);
    return std::optional<double>(value);
  }

  Result<double> ReqNumber(const YAML::Node& map, const std::string& field, const std::string& what,
                           double min) {
    GANTRY_ASSIGN_OR_RETURN(std::optional<double> n, OptNumber(map, field, min));
    if (!n) return Missing(map, field, what);
    return *n;
  }

  // Returns `field` as a list (absent = empty list).
  Result<YAML::Node> OptList(const YAML::Node& map, const std::string& field) {
    YAML::Node v = Get(map, field);
    if (!v.IsDefined()) return YAML::Node(YAML::NodeType::Sequence);
    if (!v.IsSequence()) return Error(v, field, "expected a list, got " + Describe(v));
    return v;
  }

  Status ReadLevels(const YAML::Node& root);
  Status ReadGpuTypes(const YAML::Node& root);
  Status ReadDomains(const YAML::Node& list, const std::string& field, int parent_level,
                     const std::string& parent_name);
  Status ReadDomain(const YAML::Node& d, int parent_level, const std::string& parent_name);
  Status ReadNodes(const YAML::Node& list, const std::string& field, const std::string* domain);
  Status ReadTeams(const YAML::Node& root);
  Status ReadQos(const YAML::Node& root);
  Status ReadQueueSettings(const YAML::Node& t, Team& team);
  Status ReadCohorts(const YAML::Node& root);
  Status ReadPower(const YAML::Node& root);
  // A Kueue enum value: one of `names` (as Kueue spells them), its index.
  Result<std::optional<int>> OptEnum(const YAML::Node& map, const std::string& field,
                                     const std::vector<std::string>& names) {
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> v, OptString(map, field));
    if (!v) return std::optional<int>();
    std::string valid;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == *v) return std::optional<int>(static_cast<int>(i));
      valid += (i ? ", " : "") + names[i];
    }
    return Error(map[field], field, "unknown value " + Quote(*v) + " (valid: " + valid + ")");
  }

  std::string source_;
  YAML::Mark context_mark_ = YAML::Mark::null_mark();
  std::vector<std::string> levels_;
  std::vector<std::string> gpu_type_names_;
  std::optional<ClusterBuilder> builder_;
  std::unordered_map<std::string, int> pattern_counts_;       // `{n}` per domain-name template
  std::unordered_map<std::string, int> node_pattern_counts_;  // `{n}` per node-name pattern
  std::unordered_map<std::string, int> domain_lines_;         // domain name -> line it came from
  std::unordered_map<std::string, int> node_lines_;           // node name -> line it came from
  int64_t nodes_ = 0;
  int64_t domains_ = 0;
};

Status SpecReader::ReadLevels(const YAML::Node& root) {
  GANTRY_ASSIGN_OR_RETURN(YAML::Node list, OptList(root, "levels"));
  for (const YAML::Node& v : list) {
    if (!v.IsScalar() || v.Scalar().empty()) {
      return Error(v, "levels", "expected a level name, got " + Describe(v));
    }
    if (std::find(levels_.begin(), levels_.end(), v.Scalar()) != levels_.end()) {
      return Error(v, "levels", "level '" + v.Scalar() + "' is named twice");
    }
    levels_.push_back(v.Scalar());
  }
  return Status::Ok();
}

Status SpecReader::ReadGpuTypes(const YAML::Node& root) {
  YAML::Node list = Get(root, "gpu_types");
  if (!list.IsDefined()) return Missing(root, "gpu_types", "the cluster spec");
  if (!list.IsSequence() || list.size() == 0) {
    return Error(list, "gpu_types", "expected a non-empty list, got " + Describe(list));
  }
  const std::string what = "a gpu_types entry";
  for (const YAML::Node& t : list) {
    GANTRY_RETURN_IF_ERROR(
        CheckMap(t, what, {"name", "memory_gb", "idle_watts", "busy_watts", "mig_slices"}));
    GpuType type;
    GANTRY_ASSIGN_OR_RETURN(type.name, ReqString(t, "name", what));
    GANTRY_ASSIGN_OR_RETURN(int64_t memory, ReqInt(t, "memory_gb", what, 0, 1 << 20));
    type.memory_gb = static_cast<int>(memory);
    // Watts default to the catalog's model of a known type (KnownGpuTypes: vendor TDPs).
    const GpuType* known = nullptr;
    for (const GpuType& k : KnownGpuTypes()) {
      if (EqualsIgnoreCase(k.name, type.name)) known = &k;
    }
    GANTRY_ASSIGN_OR_RETURN(std::optional<double> idle, OptNumber(t, "idle_watts", 0));
    GANTRY_ASSIGN_OR_RETURN(std::optional<double> busy, OptNumber(t, "busy_watts", 0));
    if (known == nullptr && !idle)
      return Missing(t, "idle_watts", what + " of a type Gantry does not know");
    if (known == nullptr && !busy)
      return Missing(t, "busy_watts", what + " of a type Gantry does not know");
    type.idle_watts = idle ? *idle : known->idle_watts;
    type.busy_watts = busy ? *busy : known->busy_watts;
    if (type.busy_watts < type.idle_watts) {
      return Error(t["busy_watts"], "busy_watts", "is below idle_watts");
    }
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> slices, OptInt(t, "mig_slices", 0, 1000));
    type.mig_slices = static_cast<int>(slices.value_or(0));
    for (const std::string& other : gpu_type_names_) {
      if (EqualsIgnoreCase(other, type.name)) {
        return Error(t["name"], "name", "GPU type '" + type.name + "' is defined twice");
      }
    }
    gpu_type_names_.push_back(type.name);
    Result<GpuTypeIndex> added = builder_->AddGpuType(std::move(type));
    if (!added.ok()) return Error(t, "", added.status().message());
  }
  return Status::Ok();
}

Status SpecReader::ReadDomains(const YAML::Node& list, const std::string& field, int parent_level,
                               const std::string& parent_name) {
  if (!list.IsSequence() || list.size() == 0) {
    return Error(list, field, "expected a non-empty list of domains, got " + Describe(list));
  }
  for (const YAML::Node& d : list) {
    GANTRY_RETURN_IF_ERROR(ReadDomain(d, parent_level, parent_name));
  }
  return Status::Ok();
}

Status SpecReader::ReadDomain(const YAML::Node& d, int parent_level,
                              const std::string& parent_name) {
  const std::string what = "a topology domain";
  GANTRY_RETURN_IF_ERROR(CheckMap(d, what, {"name", "level", "repeat", "children", "nodes"}));
  GANTRY_ASSIGN_OR_RETURN(std::string name, ReqString(d, "name", what));
  GANTRY_ASSIGN_OR_RETURN(std::string level_name, ReqString(d, "level", what));
  auto level_it = std::find(levels_.begin(), levels_.end(), level_name);
  if (level_it == levels_.end()) {
    return Error(d["level"], "level",
                 "unknown level '" + level_name + "' (levels: " + Join(levels_) + ")");
  }
  const int level = static_cast<int>(level_it - levels_.begin());
  if (level >= parent_level) {
    return Error(d["level"], "level",
                 "a '" + level_name + "' domain cannot sit inside '" + parent_name + "' (level '" +
                     levels_[parent_level] + "'); children must be at an inner level (levels " +
                     "innermost first: " + Join(levels_) + ")");
  }
  GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> repeat, OptInt(d, "repeat", 1, kMaxDomains));
  const YAML::Node children = Get(d, "children");
  const YAML::Node nodes = Get(d, "nodes");
  if (level == 0) {
    if (children.IsDefined()) {
      return Error(children, "children",
                   "a '" + level_name + "' domain is at the innermost level and holds nodes, " +
                       "not child domains");
    }
    if (!nodes.IsDefined()) return Missing(d, "nodes", "a '" + level_name + "' domain");
  } else {
    if (nodes.IsDefined()) {
      return Error(nodes, "nodes",
                   "only domains at the innermost level '" + levels_[0] +
                       "' hold nodes; put them in child domains");
    }
    if (!children.IsDefined()) return Missing(d, "children", "a '" + level_name + "' domain");
  }

  const int copies = static_cast<int>(repeat.value_or(1));
  // Without a placeholder, repeated copies are told apart by a running number.
  const std::string pattern = (copies > 1 && !HasPlaceholder(name)) ? name + "-{n}" : name;
  for (int i = 0; i < copies; ++i) {
    if (++domains_ > kMaxDomains) {
      return Error(d["repeat"], "repeat",
                   "the cluster would have more than " + std::to_string(kMaxDomains) + " domains");
    }
    int& counter = pattern_counts_[pattern];
    Result<std::string> expanded =
        ExpandPattern(pattern, {{"i", std::to_string(i)}, {"n", std::to_string(counter)}});
    ++counter;
    if (!expanded.ok()) return Error(d["name"], "name", expanded.status().message());
    const int line = d.Mark().line + 1;
    auto [it, inserted] = domain_lines_.emplace(*expanded, line);
    if (!inserted) {
      return Error(d["name"], "name",
                   "domain name '" + *expanded + "' is used twice (also at line " +
                       std::to_string(it->second) + "); add {n} or {i} to the name");
    }
    Status opened = builder_->OpenDomain(*expanded, level);
    if (!opened.ok()) return Error(d, "", opened.message());
    if (level == 0) {
      GANTRY_RETURN_IF_ERROR(ReadNodes(nodes, "nodes", &*expanded));
    } else {
      GANTRY_RETURN_IF_ERROR(ReadDomains(children, "children", level, *expanded));
    }
    Status closed = builder_->CloseDomain();
    if (!closed.ok()) return Error(d, "", closed.message());
  }
  return Status::Ok();
}

Status SpecReader::ReadNodes(const YAML::Node& list, const std::string& field,
                             const std::string* domain) {
  if (!list.IsSequence() || list.size() == 0) {
    return Error(list, field, "expected a non-empty list of node groups, got " + Describe(list));
  }
  const std::string what = "a nodes entry";
  int index_in_domain = 0;
  for (const YAML::Node& g : list) {
    GANTRY_RETURN_IF_ERROR(CheckMap(
        g, what, {"count", "name", "name_prefix", "gpu_type", "gpus", "cpus", "memory_gb"}));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> count_field, OptInt(g, "count", 1, kMaxNodes));
    const int64_t count = count_field.value_or(1);
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> name, OptString(g, "name"));
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> prefix, OptString(g, "name_prefix"));
    if (name && prefix) {
      return Error(g["name_prefix"], "name_prefix",
                   "give either 'name' or 'name_prefix', not both");
    }
    std::string pattern;
    std::string name_field = "name";
    if (name) {
      pattern = *name;
    } else if (prefix) {
      if (HasPlaceholder(*prefix)) {
        return Error(g["name_prefix"], "name_prefix", "takes no placeholders; use 'name' instead");
      }
      pattern = *prefix + "{n}";
      name_field = "name_prefix";
    } else {
      pattern = domain ? "{domain}-n{i}" : "n{n}";
    }
    GANTRY_ASSIGN_OR_RETURN(std::string type_name, ReqString(g, "gpu_type", what));
    GpuTypeIndex type = -1;
    for (size_t t = 0; t < gpu_type_names_.size(); ++t) {
      if (EqualsIgnoreCase(gpu_type_names_[t], type_name)) type = static_cast<GpuTypeIndex>(t);
    }
    if (type < 0) {
      return Error(
          g["gpu_type"], "gpu_type",
          "unknown GPU type '" + type_name + "' (gpu_types: " + Join(gpu_type_names_) + ")");
    }
    GANTRY_ASSIGN_OR_RETURN(int64_t gpus, ReqInt(g, "gpus", what, 0, kMaxGpusPerNode));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> cpus, OptInt(g, "cpus", 0, 1 << 24));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> memory_gb, OptInt(g, "memory_gb", 0, 1 << 30));

    std::vector<std::pair<std::string, std::string>> vars = {{"i", ""}, {"n", ""}};
    if (domain) vars.emplace_back("domain", *domain);
    for (int64_t k = 0; k < count; ++k) {
      if (nodes_ >= kMaxNodes) {
        return Error(g["count"], "count",
                     "the cluster would have more than " + std::to_string(kMaxNodes) + " nodes");
      }
      int& counter = node_pattern_counts_[pattern];
      // `{i}` counts within the domain (flat: the whole cluster), `{n}` per name pattern.
      vars[0].second = std::to_string(domain ? index_in_domain : nodes_);
      vars[1].second = std::to_string(counter);
      ++counter;
      ++index_in_domain;
      Result<std::string> node_name = ExpandPattern(pattern, vars);
      if (!node_name.ok()) {
        return Error(g[name_field], name_field, node_name.status().message());
      }
      const YAML::Node at = g[name_field].IsDefined() ? g[name_field] : g;
      auto [it, inserted] = node_lines_.emplace(*node_name, g.Mark().line + 1);
      if (!inserted) {
        return Error(at, name_field,
                     "node name '" + *node_name + "' is used twice (also at line " +
                         std::to_string(it->second) + "); add {i}, {n} or {domain} to the name");
      }
      Node node;
      node.name = std::move(*node_name);
      node.gpu_type = type;
      node.gpus = static_cast<int>(gpus);
      node.cpus = static_cast<int>(cpus.value_or(0));
      node.memory_mb = memory_gb.value_or(0) * 1024;
      Status added = builder_->AddNode(std::move(node));
      if (!added.ok()) return Error(g, "", added.message());
      ++nodes_;
    }
  }
  return Status::Ok();
}

Status SpecReader::ReadTeams(const YAML::Node& root) {
  GANTRY_ASSIGN_OR_RETURN(YAML::Node list, OptList(root, "teams"));
  const std::string what = "a teams entry";
  std::set<std::string> names;
  for (const YAML::Node& t : list) {
    GANTRY_RETURN_IF_ERROR(CheckMap(t, what,
                                    {"name", "quota_gpus", "shares", "parent", "users", "cohort",
                                     "quotas", "preemption", "flavor_fungibility", "fair_weight"}));
    Team team;
    GANTRY_ASSIGN_OR_RETURN(team.name, ReqString(t, "name", what));
    if (!names.insert(team.name).second) {
      return Error(t["name"], "name", "team '" + team.name + "' is defined twice");
    }
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> quota, OptInt(t, "quota_gpus", 0, 1 << 30));
    GANTRY_ASSIGN_OR_RETURN(std::optional<double> shares, OptNumber(t, "shares", 0));
    if (shares && *shares <= 0) return Error(t["shares"], "shares", "must be above 0");
    team.quota_gpus = quota ? static_cast<int>(*quota) : kNoQuota;
    // Fair share follows the quota unless the spec says otherwise (see cluster.h).
    team.shares = shares ? *shares : (quota && *quota > 0 ? static_cast<double>(*quota) : 1.0);
    Account account;
    account.team = team.name;
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> parent, OptString(t, "parent"));
    if (parent) account.parent = *parent;
    const YAML::Node users = Get(t, "users");
    if (users.IsDefined()) {
      if (!users.IsMap()) {
        return Error(users, "users",
                     "expected a mapping of user name to shares, got " + Describe(users));
      }
      for (auto it = users.begin(); it != users.end(); ++it) {
        if (!it->first.IsScalar() || it->first.Scalar().empty()) {
          return Error(it->first, "users", "user names must be plain names");
        }
        const std::string user = it->first.Scalar();
        for (const UserShares& u : account.users) {
          if (u.user == user) return Error(it->first, "users", "user '" + user + "' given twice");
        }
        YAML::Node holder;
        holder["shares"] = it->second;
        GANTRY_ASSIGN_OR_RETURN(std::optional<double> us, OptNumber(holder, "shares", 0));
        if (!us) return Error(it->second, "users", "user '" + user + "': expected a number");
        account.users.push_back({user, *us});
      }
    }
    GANTRY_RETURN_IF_ERROR(ReadQueueSettings(t, team));
    Status added = builder_->AddTeam(std::move(team));
    if (!added.ok()) return Error(t, "", added.message());
    if (!account.parent.empty() || !account.users.empty()) {
      added = builder_->AddAccount(std::move(account));
      if (!added.ok()) return Error(t, "", added.message());
    }
  }
  return Status::Ok();
}

Status SpecReader::ReadQos(const YAML::Node& root) {
  GANTRY_ASSIGN_OR_RETURN(YAML::Node list, OptList(root, "qos"));
  const std::string what = "a qos entry";
  for (const YAML::Node& q : list) {
    GANTRY_RETURN_IF_ERROR(
        CheckMap(q, what, {"name", "level", "priority", "usage_factor", "preempt", "grace_time"}));
    Qos qos;
    GANTRY_ASSIGN_OR_RETURN(qos.name, ReqString(q, "name", what));
    GANTRY_ASSIGN_OR_RETURN(int64_t level, ReqInt(q, "level", what, -(1 << 30), 1 << 30));
    qos.level = static_cast<int>(level);
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> priority,
                            OptInt(q, "priority", 0, 4294967295LL));
    qos.priority = priority.value_or(0);
    GANTRY_ASSIGN_OR_RETURN(std::optional<double> factor, OptNumber(q, "usage_factor", 0));
    qos.usage_factor = factor.value_or(1.0);
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> grace, OptString(q, "grace_time"));
    if (grace) {
      Result<int64_t> seconds = ParseDurationSeconds(*grace);
      if (!seconds.ok()) return Error(q["grace_time"], "grace_time", seconds.status().message());
      qos.grace_time = *seconds;
    }
    GANTRY_ASSIGN_OR_RETURN(YAML::Node preempt, OptList(q, "preempt"));
    for (const YAML::Node& v : preempt) {
      if (!v.IsScalar() || v.Scalar().empty()) {
        return Error(v, "preempt", "expected a qos name, got " + Describe(v));
      }
      qos.preempt.push_back(v.Scalar());
    }
    Status added = builder_->AddQos(std::move(qos));
    if (!added.ok()) return Error(q, "", added.message());
  }
  return Status::Ok();
}

Status SpecReader::ReadQueueSettings(const YAML::Node& t, Team& team) {
  QueueSettings& q = team.queue;
  GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> cohort, OptString(t, "cohort"));
  q.cohort = cohort.value_or("");
  GANTRY_ASSIGN_OR_RETURN(YAML::Node quotas, OptList(t, "quotas"));
  const std::string what = "a quotas entry";
  for (const YAML::Node& f : quotas) {
    GANTRY_RETURN_IF_ERROR(
        CheckMap(f, what, {"flavor", "nominal", "borrowing_limit", "lending_limit"}));
    FlavorQuota fq;
    GANTRY_ASSIGN_OR_RETURN(fq.flavor, ReqString(f, "flavor", what));
    bool known = fq.flavor == kAnyFlavor;
    for (const std::string& type : gpu_type_names_) {
      if (EqualsIgnoreCase(type, fq.flavor)) {
        fq.flavor = type;  // spelled as the GPU type, so cohorts match case-insensitively
        known = true;
      }
    }
    if (!known) {
      std::string types;
      for (const std::string& type : gpu_type_names_) types += (types.empty() ? "" : ", ") + type;
      return Error(f["flavor"], "flavor",
                   "unknown flavor " + Quote(fq.flavor) + " (a GPU type: " + types + ", or \"*\")");
    }
    for (const FlavorQuota& other : q.quotas) {
      if (other.flavor == fq.flavor) {
        return Error(f["flavor"], "flavor", "flavor " + Quote(fq.flavor) + " is listed twice");
      }
      if (other.flavor == kAnyFlavor || fq.flavor == kAnyFlavor) {
        return Error(f["flavor"], "flavor",
                     "\"*\" covers every GPU type and cannot be combined with other flavors");
      }
    }
    GANTRY_ASSIGN_OR_RETURN(fq.nominal, ReqInt(f, "nominal", what, 0, 1 << 30));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> borrow,
                            OptInt(f, "borrowing_limit", 0, 1 << 30));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> lend, OptInt(f, "lending_limit", 0, 1 << 30));
    fq.borrowing_limit = borrow ? static_cast<int>(*borrow) : kNoQuota;
    fq.lending_limit = lend ? static_cast<int>(*lend) : kNoQuota;
    q.quotas.push_back(std::move(fq));
  }
  if (!q.quotas.empty() && team.quota_gpus != kNoQuota) {
    return Error(t["quotas"], "quotas", "give quota_gpus or quotas, not both");
  }
  if (q.quotas.empty() && !q.cohort.empty() && team.quota_gpus == kNoQuota) {
    return Error(t["cohort"], "cohort", "a team in a cohort needs quota_gpus or quotas");
  }
  const YAML::Node pre = Get(t, "preemption");
  if (pre.IsDefined()) {
    GANTRY_RETURN_IF_ERROR(
        CheckMap(pre, "preemption",
                 {"within_cluster_queue", "reclaim_within_cohort", "borrow_within_cohort"}));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int> within,
                            OptEnum(pre, "within_cluster_queue",
                                    {"Never", "LowerPriority", "LowerOrNewerEqualPriority"}));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int> reclaim, OptEnum(pre, "reclaim_within_cohort",
                                                                {"Never", "LowerPriority", "Any"}));
    if (within) q.within_cluster_queue = static_cast<WithinClusterQueue>(*within);
    if (reclaim) q.reclaim_within_cohort = static_cast<ReclaimWithinCohort>(*reclaim);
    const YAML::Node borrow = Get(pre, "borrow_within_cohort");
    if (borrow.IsDefined()) {
      GANTRY_RETURN_IF_ERROR(
          CheckMap(borrow, "borrow_within_cohort", {"policy", "max_priority_threshold"}));
      GANTRY_ASSIGN_OR_RETURN(std::optional<int> policy,
                              OptEnum(borrow, "policy", {"Never", "LowerPriority"}));
      GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> threshold,
                              OptInt(borrow, "max_priority_threshold", INT32_MIN, INT32_MAX));
      if (policy) q.borrow_within_cohort = static_cast<BorrowWithinCohort>(*policy);
      if (threshold) q.borrow_max_priority = static_cast<int>(*threshold);
    }
  }
  const YAML::Node fung = Get(t, "flavor_fungibility");
  if (fung.IsDefined()) {
    GANTRY_RETURN_IF_ERROR(
        CheckMap(fung, "flavor_fungibility", {"when_can_borrow", "when_can_preempt"}));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int> borrow,
                            OptEnum(fung, "when_can_borrow", {"Borrow", "TryNextFlavor"}));
    GANTRY_ASSIGN_OR_RETURN(std::optional<int> preempt,
                            OptEnum(fung, "when_can_preempt", {"Preempt", "TryNextFlavor"}));
    if (borrow) {
      q.when_can_borrow =
          *borrow == 0 ? FlavorFungibility::kBorrow : FlavorFungibility::kTryNextFlavor;
    }
    if (preempt) {
      q.when_can_preempt =
          *preempt == 0 ? FlavorFungibility::kPreempt : FlavorFungibility::kTryNextFlavor;
    }
  }
  GANTRY_ASSIGN_OR_RETURN(std::optional<double> weight, OptNumber(t, "fair_weight", 0));
  if (weight) q.fair_weight = *weight;
  return Status::Ok();
}

Status SpecReader::ReadCohorts(const YAML::Node& root) {
  GANTRY_ASSIGN_OR_RETURN(YAML::Node list, OptList(root, "cohorts"));
  const std::string what = "a cohorts entry";
  std::map<std::string, std::string> parent;
  std::map<std::string, YAML::Node> where;
  for (const YAML::Node& c : list) {
    GANTRY_RETURN_IF_ERROR(CheckMap(c, what, {"name", "parent"}));
    Cohort cohort;
    GANTRY_ASSIGN_OR_RETURN(cohort.name, ReqString(c, "name", what));
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> p, OptString(c, "parent"));
    cohort.parent = p.value_or("");
    if (!parent.emplace(cohort.name, cohort.parent).second) {
      return Error(c["name"], "name", "cohort " + Quote(cohort.name) + " is defined twice");
    }
    where[cohort.name] = c;
    builder_->AddCohort(std::move(cohort));
  }
  // Parents must not form a loop (a parent not listed is a root).
  for (const auto& [name, p] : parent) {
    std::string at = p;
    for (size_t steps = 0; !at.empty(); ++steps) {
      if (at == name || steps > parent.size()) {
        return Error(where[name]["parent"], "parent",
                     "cohort " + Quote(name) + " is its own ancestor");
      }
      auto it = parent.find(at);
      at = it == parent.end() ? "" : it->second;
    }
  }
  return Status::Ok();
}

Status SpecReader::ReadPower(const YAML::Node& root) {
  const YAML::Node p = Get(root, "power");
  if (!p.IsDefined()) return Status::Ok();
  const std::string what = "the power section";
  GANTRY_RETURN_IF_ERROR(CheckMap(p, what, {"cap_watts", "node_watts", "domains", "capped_clock"}));
  PowerSpec power;
  GANTRY_ASSIGN_OR_RETURN(std::optional<double> cap, OptNumber(p, "cap_watts", 0));
  if (cap && *cap <= 0) return Error(p["cap_watts"], "cap_watts", "must be above 0");
  power.cap_watts = cap.value_or(0);
  GANTRY_ASSIGN_OR_RETURN(std::optional<double> node_watts, OptNumber(p, "node_watts", 0));
  power.node_watts = node_watts.value_or(0);
  const YAML::Node clock = Get(p, "capped_clock");
  if (clock.IsDefined()) {
    const std::string cwhat = "power.capped_clock";
    GANTRY_RETURN_IF_ERROR(CheckMap(clock, cwhat, {"watts_factor", "slowdown"}));
    GANTRY_ASSIGN_OR_RETURN(power.capped_watts_factor, ReqNumber(clock, "watts_factor", cwhat, 0));
    if (power.capped_watts_factor <= 0 || power.capped_watts_factor > 1) {
      return Error(clock["watts_factor"], "watts_factor", "must be above 0 and at most 1");
    }
    GANTRY_ASSIGN_OR_RETURN(power.capped_slowdown, ReqNumber(clock, "slowdown", cwhat, 1));
  }
  GANTRY_ASSIGN_OR_RETURN(YAML::Node domains, OptList(p, "domains"));
  for (const YAML::Node& d : domains) {
    const std::string dwhat = "a power.domains entry";
    GANTRY_RETURN_IF_ERROR(CheckMap(d, dwhat, {"name", "level", "cap_watts"}));
    GANTRY_ASSIGN_OR_RETURN(double w, ReqNumber(d, "cap_watts", dwhat, 0));
    if (w <= 0) return Error(d["cap_watts"], "cap_watts", "must be above 0");
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> name, OptString(d, "name"));
    GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> level, OptString(d, "level"));
    if (name.has_value() == level.has_value()) {
      return Error(d, "name",
                   "give a domain's name or a level (every domain of it), not " +
                       std::string(name ? "both" : "neither"));
    }
    if (name) {
      if (domain_lines_.count(*name) == 0) {
        return Error(d["name"], "name", "no domain is named " + Quote(*name));
      }
      builder_->CapDomainPower(*name, w);
    } else {
      if (std::find(levels_.begin(), levels_.end(), *level) == levels_.end()) {
        return Error(d["level"], "level",
                     "unknown level " + Quote(*level) + " (levels: " + Join(levels_) + ")");
      }
      builder_->CapLevelPower(*level, w);
    }
  }
  context_mark_ = p.Mark();
  builder_->SetPower(std::move(power));
  return Status::Ok();
}

Result<Cluster> SpecReader::Read(const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) return Error(root, "", "the cluster spec is empty");
  GANTRY_RETURN_IF_ERROR(
      CheckMap(root, "the cluster spec",
               {"name", "description", "levels", "gpu_types", "topology", "nodes", "teams",
                "default_quota_gpus", "qos", "cohorts", "power"}));
  const YAML::Mark root_mark = root.Mark();
  GANTRY_ASSIGN_OR_RETURN(std::string name, ReqString(root, "name", "the cluster spec"));
  GANTRY_ASSIGN_OR_RETURN(std::optional<std::string> description, OptString(root, "description"));
  GANTRY_RETURN_IF_ERROR(ReadLevels(root));
  builder_.emplace(name, levels_);
  GANTRY_RETURN_IF_ERROR(ReadGpuTypes(root));

  const YAML::Node topology = Get(root, "topology");
  const YAML::Node nodes = Get(root, "nodes");
  context_mark_ = root_mark;
  if (levels_.empty()) {
    if (topology.IsDefined()) {
      return Error(topology, "topology",
                   "a flat cluster (no 'levels') lists its nodes under 'nodes', not 'topology'");
    }
    if (!nodes.IsDefined()) return Missing(root, "nodes", "a flat cluster spec (no 'levels')");
    GANTRY_RETURN_IF_ERROR(ReadNodes(nodes, "nodes", nullptr));
  } else {
    if (nodes.IsDefined()) {
      return Error(nodes, "nodes",
                   "a cluster with 'levels' places its nodes inside 'topology' domains");
    }
    if (!topology.IsDefined()) return Missing(root, "topology", "a cluster spec with 'levels'");
    GANTRY_RETURN_IF_ERROR(
        ReadDomains(topology, "topology", static_cast<int>(levels_.size()), "the cluster"));
  }

  GANTRY_RETURN_IF_ERROR(ReadTeams(root));
  GANTRY_RETURN_IF_ERROR(ReadQos(root));
  GANTRY_RETURN_IF_ERROR(ReadCohorts(root));
  GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> default_quota,
                          OptInt(root, "default_quota_gpus", 0, 1 << 30));
  if (default_quota) builder_->SetDefaultQuota(static_cast<int>(*default_quota));
  GANTRY_RETURN_IF_ERROR(ReadPower(root));

  Result<Cluster> cluster = std::move(*builder_).Build();
  context_mark_ = root_mark;
  if (!cluster.ok()) return Error(root, "", cluster.status().message());
  return cluster;
}

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

Result<Cluster> ParseClusterSpec(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    std::string where = source_name;
    if (!e.mark.is_null()) {
      where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    }
    return InvalidArgument(where + ": not valid YAML: " + e.msg);
  }
  try {
    return SpecReader(source_name).Read(root);
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on some malformed node accesses; keep it inside the Result vocabulary.
    return InvalidArgument(source_name + ": " + e.what());
  }
}

Result<Cluster> LoadClusterSpecFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return NotFound("cluster spec '" + path + "' not found");
    return IoError("cannot read cluster spec '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError("error reading cluster spec '" + path + "'");
  return ParseClusterSpec(text.str(), path);
}

Result<Cluster> LoadCluster(const std::string& spec_or_shorthand) {
  if (IsRegularFile(spec_or_shorthand)) return LoadClusterSpecFile(spec_or_shorthand);
  const std::string& s = spec_or_shorthand;
  auto ends_with = [&](std::string_view suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
  };
  // Something that looks like a path is a missing file, not a misspelt shorthand.
  if (s.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml")) {
    return NotFound("cluster spec '" + s + "' not found");
  }
  return GenerateCluster(s);
}

}  // namespace gantry
