#include "gantry/sim/events.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "gantry/common/units.h"

namespace gantry {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitComma(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    out.push_back(
        Trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

std::string Shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 64) out += "...";
  return "'" + out + "'";
}

}  // namespace

const char* ClusterEventName(ClusterEvent::Kind kind) {
  switch (kind) {
    case ClusterEvent::Kind::kDrain:
      return "drain";
    case ClusterEvent::Kind::kDown:
      return "down";
    case ClusterEvent::Kind::kUp:
      return "up";
    case ClusterEvent::Kind::kCancel:
      return "cancel";
  }
  return "?";
}

Result<std::vector<ClusterEvent>> ParseClusterEvents(std::string_view text,
                                                     const std::string& source) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<ClusterEvent> events;
  bool header_seen = false;
  int32_t line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    const std::string where = source + ":" + std::to_string(line_number) + ": ";
    if (line.find('\0') != std::string_view::npos) {
      return InvalidArgument(where + "a NUL byte in the line");
    }
    const std::vector<std::string_view> f = SplitComma(line);
    if (!header_seen) {
      if (f.size() != 3 || f[0] != "time" || f[1] != "event" || f[2] != "target") {
        return InvalidArgument(where + "the header must be 'time,event,target', got " +
                               Shown(line));
      }
      header_seen = true;
      continue;
    }
    if (f.size() != 3) {
      return InvalidArgument(where + "expected 3 fields (time,event,target), got " +
                             std::to_string(f.size()));
    }
    ClusterEvent e;
    e.line = line_number;
    Result<int64_t> at = ParseDurationSeconds(f[0]);
    if (!at.ok()) {
      return Status(at.status().code(), where + "field 'time': " + at.status().message());
    }
    e.at = *at;
    if (f[1] == "drain") {
      e.kind = ClusterEvent::Kind::kDrain;
    } else if (f[1] == "down") {
      e.kind = ClusterEvent::Kind::kDown;
    } else if (f[1] == "up") {
      e.kind = ClusterEvent::Kind::kUp;
    } else if (f[1] == "cancel") {
      e.kind = ClusterEvent::Kind::kCancel;
    } else {
      return InvalidArgument(where + "field 'event': unknown event " + Shown(f[1]) +
                             " (known: drain, down, up, cancel)");
    }
    if (f[2].empty()) return InvalidArgument(where + "field 'target': empty");
    e.target = std::string(f[2]);
    events.push_back(std::move(e));
  }
  if (!header_seen) {
    return InvalidArgument(source + ": empty; the first line must be 'time,event,target'");
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const ClusterEvent& a, const ClusterEvent& b) { return a.at < b.at; });
  return events;
}

Result<std::vector<ClusterEvent>> LoadClusterEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return NotFound(path + ": no such file");
    return IoError(path + ": cannot read: " + std::strerror(err));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError(path + ": read failed");
  return ParseClusterEvents(text.str(), path);
}

Status ResolveClusterEvents(const Cluster& cluster, const Workload& workload,
                            std::vector<ClusterEvent>* events) {
  std::unordered_map<std::string_view, int32_t> nodes, jobs;
  bool jobs_indexed = false;
  for (size_t i = 0; i < cluster.nodes().size(); ++i) {
    nodes.emplace(cluster.nodes()[i].name, static_cast<int32_t>(i));
  }
  for (ClusterEvent& e : *events) {
    const std::string where = "events line " + std::to_string(e.line) + ": ";
    if (e.kind != ClusterEvent::Kind::kCancel) {
      auto it = nodes.find(e.target);
      if (it == nodes.end()) {
        std::string known;
        if (!cluster.nodes().empty()) {
          known = " (its nodes are " + cluster.nodes().front().name +
                  (cluster.nodes().size() > 1 ? " ... " + cluster.nodes().back().name : "") + ")";
        }
        return InvalidArgument(where + "cluster " + cluster.name() + " has no node " +
                               Shown(e.target) + known);
      }
      e.index = it->second;
      continue;
    }
    if (!jobs_indexed) {  // only a file with cancels pays for the index
      for (const Job& j : workload.jobs) jobs.emplace(j.id, j.index);
      jobs_indexed = true;
    }
    auto it = jobs.find(e.target);
    if (it == jobs.end()) {
      return InvalidArgument(where + "the workload has no job " + Shown(e.target));
    }
    e.index = it->second;
    const Job& job = workload.jobs[static_cast<size_t>(e.index)];
    if (e.at < job.submit) {
      return InvalidArgument(where + "cancels job " + job.id + " at t=" + std::to_string(e.at) +
                             ", before its submit time " + std::to_string(job.submit));
    }
  }
  return Status::Ok();
}

}  // namespace gantry
