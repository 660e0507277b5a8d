#include "gantry/sched/profile.h"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace gantry {
namespace {

constexpr const char* kBuiltinProfiles =
#include "builtin_profiles.yaml.inc"
    ;

std::string Where(const std::string& source, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return source;
  return source + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

Status FieldError(const std::string& source, const YAML::Node& node, const std::string& field,
                  const std::string& what) {
  return InvalidArgument(Where(source, node) + ": field '" + field + "': " + what);
}

Result<std::string> Scalar(const std::string& source, const YAML::Node& node,
                           const std::string& field) {
  if (!node.IsScalar()) return FieldError(source, node, field, "expected a single value");
  return node.Scalar();
}

// yaml-cpp keeps both entries of a key written twice in one map, and a lookup or a loop then
// silently takes one of them: a second `reserve:` in a plugin's args, or a second profile of
// the same name, would win or lose unseen. So every map of the file is checked first. Aliases
// let a few lines name a tree of billions of nodes, so the walk stops at a bound no profile
// comes near.
constexpr int64_t kMaxProfileValues = 100000;

Status CheckNoDuplicateKeys(const std::string& source, const YAML::Node& node,
                            const std::string& field, int depth, int64_t& visited) {
  if (depth > 64) return FieldError(source, node, field, "nested more than 64 levels deep");
  if (++visited > kMaxProfileValues) {
    return FieldError(source, node, field,
                      "the file holds more than " + std::to_string(kMaxProfileValues) +
                          " values (with aliases expanded)");
  }
  if (node.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) continue;  // the parsers reject such keys where they look
      const std::string key = kv.first.Scalar();
      const std::string sub = field.empty() ? key : field + "." + key;
      const auto [first, fresh] = seen.emplace(key, kv.first.Mark());
      if (!fresh) {
        return FieldError(
            source, kv.first, sub,
            "given twice (first at line " + std::to_string(first->second.line + 1) + ")");
      }
      GANTRY_RETURN_IF_ERROR(CheckNoDuplicateKeys(source, kv.second, sub, depth + 1, visited));
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      GANTRY_RETURN_IF_ERROR(CheckNoDuplicateKeys(
          source, node[i], field + "[" + std::to_string(i) + "]", depth + 1, visited));
    }
  }
  return Status::Ok();
}

// A plugin is written either as its bare name or as {plugin: NAME, weight: W, args: {...}}.
Result<PluginSpec> ParsePluginSpec(const std::string& source, const YAML::Node& node,
                                   const std::string& field, const char* name_key) {
  PluginSpec spec;
  if (node.IsScalar()) {
    spec.name = node.Scalar();
    spec.args = PluginArgs(spec.name, {});
    return spec;
  }
  if (!node.IsMap()) return FieldError(source, node, field, "expected a plugin name or a map");
  std::map<std::string, std::string> args;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (key == name_key) {
      GANTRY_ASSIGN_OR_RETURN(spec.name, Scalar(source, kv.second, field + "." + key));
    } else if (key == "weight") {
      GANTRY_ASSIGN_OR_RETURN(std::string w, Scalar(source, kv.second, field + ".weight"));
      try {
        size_t used = 0;
        spec.weight = std::stod(w, &used);
        if (used != w.size()) throw std::invalid_argument(w);
      } catch (const std::exception&) {
        return FieldError(source, kv.second, field + ".weight", "\"" + w + "\" is not a number");
      }
    } else if (key == "args") {
      if (!kv.second.IsMap())
        return FieldError(source, kv.second, field + ".args", "expected a map");
      for (const auto& a : kv.second) {
        GANTRY_ASSIGN_OR_RETURN(std::string v,
                                Scalar(source, a.second, field + ".args." + a.first.Scalar()));
        args[a.first.Scalar()] = v;
      }
    } else if (std::string(name_key) == "mode") {
      // backfill: {mode: easy, max_jobs: 500} keeps its few settings inline.
      GANTRY_ASSIGN_OR_RETURN(std::string v, Scalar(source, kv.second, field + "." + key));
      args[key] = v;
    } else {
      return FieldError(source, kv.first, field + "." + key, "unknown key");
    }
  }
  if (spec.name.empty()) {
    return FieldError(source, node, field, std::string("missing '") + name_key + "'");
  }
  spec.args = PluginArgs(spec.name, std::move(args));
  return spec;
}

Result<Profile> ParseOne(const std::string& source, const std::string& name,
                         const YAML::Node& node) {
  Profile p;
  p.name = name;
  p.placement.name = "best-fit";
  p.placement.args = PluginArgs("best-fit", {});
  p.preemption.name = "none";
  p.preemption.args = PluginArgs("none", {});
  if (!node.IsMap()) return FieldError(source, node, name, "expected a map");
  const std::string f = "profiles." + name;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (key == "description") {
      GANTRY_ASSIGN_OR_RETURN(p.description, Scalar(source, v, f + ".description"));
    } else if (key == "priority" || key == "admission") {
      if (!v.IsSequence())
        return FieldError(source, v, f + "." + key, "expected a list of plugins");
      for (size_t i = 0; i < v.size(); ++i) {
        GANTRY_ASSIGN_OR_RETURN(
            PluginSpec s,
            ParsePluginSpec(source, v[i], f + "." + key + "[" + std::to_string(i) + "]", "plugin"));
        (key == "priority" ? p.priority : p.admission).push_back(std::move(s));
      }
    } else if (key == "placement") {
      GANTRY_ASSIGN_OR_RETURN(p.placement, ParsePluginSpec(source, v, f + ".placement", "plugin"));
    } else if (key == "preemption") {
      GANTRY_ASSIGN_OR_RETURN(p.preemption,
                              ParsePluginSpec(source, v, f + ".preemption", "plugin"));
    } else if (key == "backfill") {
      GANTRY_ASSIGN_OR_RETURN(PluginSpec b, ParsePluginSpec(source, v, f + ".backfill", "mode"));
      if (b.name == "none") {
        p.backfill = BackfillMode::kNone;
      } else if (b.name == "easy") {
        p.backfill = BackfillMode::kEasy;
      } else if (b.name == "conservative") {
        p.backfill = BackfillMode::kConservative;
      } else {
        return FieldError(source, v, f + ".backfill",
                          "unknown mode '" + b.name + "' (known: none, easy, conservative)");
      }
      auto max_jobs = b.args.Integer("max_jobs", 0);
      if (!max_jobs.ok()) return max_jobs.status().WithContext(Where(source, v));
      if (*max_jobs < 0) return FieldError(source, v, f + ".backfill.max_jobs", "must be >= 0");
      p.max_jobs_per_cycle = static_cast<int>(*max_jobs);
      auto max_scan = b.args.Integer("max_scan", 0);
      if (!max_scan.ok()) return max_scan.status().WithContext(Where(source, v));
      if (*max_scan < 0) return FieldError(source, v, f + ".backfill.max_scan", "must be >= 0");
      p.max_scan_per_cycle = static_cast<int>(*max_scan);
      auto below = b.args.String("below_share_first", "none");
      if (!below.ok()) return below.status().WithContext(Where(source, v));
      if (*below == "none") {
        p.below_share_first = BelowShareFirst::kNone;
      } else if (*below == "backfill") {
        p.below_share_first = BelowShareFirst::kBackfill;
      } else if (*below == "all") {
        p.below_share_first = BelowShareFirst::kAll;
      } else {
        return FieldError(source, v, f + ".backfill.below_share_first",
                          "unknown value '" + *below + "' (known: none, backfill, all)");
      }
      Status known = b.args.CheckKnown({"max_jobs", "max_scan", "below_share_first"});
      if (!known.ok()) return known.WithContext(Where(source, v));
    } else if (key == "priority_recalc_interval") {
      GANTRY_ASSIGN_OR_RETURN(std::string s, Scalar(source, v, f + "." + key));
      auto d = PluginArgs(name, {{key, s}}).DurationArg(key, 300);
      if (!d.ok()) return d.status().WithContext(Where(source, v));
      if (*d <= 0) return FieldError(source, v, f + "." + key, "must be positive");
      p.priority_recalc_interval = *d;
    } else {
      return FieldError(source, kv.first, f + "." + key,
                        "unknown key (known: description, priority, admission, placement, "
                        "backfill, preemption, priority_recalc_interval)");
    }
  }
  if (p.priority.empty()) {
    p.priority.push_back({"age", 1.0, PluginArgs("age", {{"max_age", "inf"}})});
  }
  return p;
}

}  // namespace

Result<std::vector<Profile>> ParseProfiles(const std::string& yaml_text,
                                           const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  int64_t visited = 0;
  GANTRY_RETURN_IF_ERROR(CheckNoDuplicateKeys(source, root, "", 0, visited));
  if (!root.IsMap() || !root["profiles"]) {
    return InvalidArgument(source + ": expected a top-level 'profiles:' map");
  }
  const YAML::Node profiles = root["profiles"];
  if (!profiles.IsMap())
    return FieldError(source, profiles, "profiles", "expected a map of profiles");
  std::vector<Profile> out;
  for (const auto& kv : profiles) {
    GANTRY_ASSIGN_OR_RETURN(Profile p, ParseOne(source, kv.first.Scalar(), kv.second));
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::vector<Profile>> LoadProfilesFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open profiles file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseProfiles(ss.str(), path);
}

const std::vector<Profile>& BuiltinProfiles() {
  static const std::vector<Profile> profiles = [] {
    auto r = ParseProfiles(kBuiltinProfiles, "builtin_profiles.yaml");
    if (!r.ok()) {
      std::fprintf(stderr, "gantry: built-in profiles are broken: %s\n",
                   r.status().ToString().c_str());
      std::abort();
    }
    return std::move(r).value();
  }();
  return profiles;
}

Result<Profile> FindProfile(const std::string& name, const std::vector<Profile>& extra) {
  for (const Profile& p : extra) {
    if (p.name == name) return p;
  }
  for (const Profile& p : BuiltinProfiles()) {
    if (p.name == name) return p;
  }
  std::string known;
  for (const Profile& p : extra) known += (known.empty() ? "" : ", ") + p.name;
  for (const Profile& p : BuiltinProfiles()) known += (known.empty() ? "" : ", ") + p.name;
  return NotFound("unknown profile '" + name + "' (known: " + known + ")");
}

}  // namespace gantry
