#include "gantry/control/failopen.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gantry::control {

Status WriteHeartbeat(const std::string& path, const Heartbeat& heartbeat) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return IoError("heartbeat: cannot write " + tmp + ": " + std::strerror(errno));
    f << heartbeat.time << " " << heartbeat.fail_open_after << "\n";
    if (!f.flush()) return IoError("heartbeat: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return IoError("heartbeat: cannot rename to " + path + ": " + std::strerror(e));
  }
  return Status::Ok();
}

Result<Heartbeat> ReadHeartbeat(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("no heartbeat at " + path + " (fail-open is off)");
  std::string line;
  std::getline(f, line);
  std::istringstream in(line);
  Heartbeat h;
  std::string rest;
  if (!(in >> h.time >> h.fail_open_after) || (in >> rest) || h.time < 0 || h.fail_open_after < 0) {
    return DataLoss(path + ": not a heartbeat (expected 'TIME AFTER', got '" + line + "')");
  }
  return h;
}

bool FailOpenDue(const Heartbeat& heartbeat, Time now) {
  return heartbeat.fail_open_after > 0 && now - heartbeat.time > heartbeat.fail_open_after;
}

std::vector<int64_t> JobsToRelease(const std::vector<slurm::SlurmJob>& jobs,
                                   const std::vector<std::string>& partitions) {
  std::vector<int64_t> out;
  for (const slurm::SlurmJob& j : jobs) {
    if (!j.held || j.state != slurm::JobState::kPending || j.gpus <= 0) continue;
    if (!partitions.empty() &&
        std::find(partitions.begin(), partitions.end(), j.partition) == partitions.end()) {
      continue;
    }
    out.push_back(j.id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gantry::control
