#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "gantry/sched/plugin.h"

namespace gantry {
namespace {

Status BadArg(const std::string& plugin, const std::string& key, const std::string& value,
              const std::string& expected) {
  return InvalidArgument("plugin '" + plugin + "': argument '" + key + "': \"" + value +
                         "\" is not " + expected);
}

}  // namespace

Result<double> PluginArgs::Number(const std::string& key, double fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || errno != 0 || !std::isfinite(v)) {
    return BadArg(plugin_, key, it->second, "a number");
  }
  return v;
}

Result<int64_t> PluginArgs::Integer(const std::string& key, int64_t fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || errno != 0) {
    return BadArg(plugin_, key, it->second, "a whole number");
  }
  return static_cast<int64_t>(v);
}

Result<Duration> PluginArgs::DurationArg(const std::string& key, Duration fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  if (s == "inf" || s == "infinite" || s == "unlimited") return kInfiniteTime;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || v < 0 || !std::isfinite(v)) {
    return BadArg(plugin_, key, s, "a duration like 300, 5m, 12h or 7d");
  }
  double scale = 1;
  const std::string unit(end);
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else if (unit == "d") {
    scale = 86400;
  } else {
    return BadArg(plugin_, key, s, "a duration like 300, 5m, 12h or 7d");
  }
  return static_cast<Duration>(std::llround(v * scale));
}

Result<bool> PluginArgs::Bool(const std::string& key, bool fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (it->second == "true" || it->second == "yes" || it->second == "1") return true;
  if (it->second == "false" || it->second == "no" || it->second == "0") return false;
  return BadArg(plugin_, key, it->second, "true or false");
}

Result<std::string> PluginArgs::String(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

Status PluginArgs::CheckKnown(const std::vector<std::string>& known) const {
  for (const auto& [key, value] : values_) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == key;
    if (!ok) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument("plugin '" + plugin_ + "': unknown argument '" + key + "'" +
                             (known.empty() ? " (it takes none)" : " (known: " + list + ")"));
    }
  }
  return Status::Ok();
}

std::string PriorityFactor::Describe(const JobRequest& job) const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*s=%.4f", static_cast<int>(name().size()), name().data(),
                JobValue(job) + TeamValue(job.team));
  return buf;
}

}  // namespace gantry
