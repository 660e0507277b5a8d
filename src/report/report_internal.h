// Helpers shared by the report writers (private to src/report): deterministic number formatting,
// nearest-rank quantiles and all-or-nothing file writes. Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/common/time.h"

namespace gantry {
struct SimResult;
}  // namespace gantry

namespace gantry::report_internal {

// Nearest-rank quantile of ascending `sorted` at probability p in [0, 1]: the smallest value v
// such that at least p of the values are <= v, i.e. sorted[ceil(p * n) - 1] (sorted[0] for
// p = 0). 0 for an empty input. Nearest-rank never interpolates, so every result is a value that
// really occurred and results do not depend on floating-point interpolation details.
double NearestRank(const std::vector<double>& sorted, double p);

// Bounded slowdown of one finished job: max(1, (end - submit) / max(end - start, 10 s)). The
// 10-second bound keeps very short jobs that waited a little from dominating every mean.
double BoundedSlowdown(Time submit, Time start, Time end);

// Jain's index of the teams' share of GPUs against their entitlement (weighted max-min fair
// share of the cluster, capped by what each team wants and by its quota), averaged over the time
// the cluster was contended and someone ran; 1 when it never was. `contended_fraction`, if not
// null, receives that time as a share of the run. Definition: src/report/fairness.cc.
double ShareFairness(const SimResult& result, double* contended_fraction);

// Per team, over the same contended instants: GPU-seconds used and GPU-seconds entitled.
struct TeamEntitlement {
  double used_gpu_seconds = 0;
  double entitled_gpu_seconds = 0;
};
// ShareFairness, also filling `per_team` (indexed like Job::team; resized to the teams seen).
double ShareFairness(const SimResult& result, double* contended_fraction,
                     std::vector<TeamEntitlement>* per_team);

// `x` rounded to 6 significant digits (non-finite values become 0), so that JSON output does not
// expose the last bits of floating-point sums.
double Round6(double x);

// Appends `v` in decimal / fixed-point with `decimals` digits after the point.
void AppendInt(std::string& out, int64_t v);
void AppendFixed(std::string& out, double v, int decimals);

// "42s", "12.5m", "3.2h", "4.1d": compact durations for tables.
std::string CompactDuration(double seconds);

// Writes `content` to `path` via a temporary file in the same directory and rename(), so that
// readers see either the old file or the complete new one, never a partial file.
Status WriteFileAtomically(const std::string& path, std::string_view content);

// An open temporary file that becomes `path` on Commit(); removed if never committed.
class AtomicFile {
 public:
  static Result<AtomicFile> Open(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();

  Status Append(std::string_view data);
  Status Commit();

 private:
  AtomicFile(std::string path, std::string tmp_path, std::FILE* file)
      : path_(std::move(path)), tmp_path_(std::move(tmp_path)), file_(file) {}
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
};

}  // namespace gantry::report_internal
