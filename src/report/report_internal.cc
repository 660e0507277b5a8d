#include "report/report_internal.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

namespace gantry::report_internal {

double NearestRank(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double n = static_cast<double>(sorted.size());
  // The small slack keeps e.g. 0.95 * 100 (= 95.00000000000001) from rounding up to rank 96.
  int64_t rank = static_cast<int64_t>(std::ceil(p * n - 1e-9));
  rank = std::clamp<int64_t>(rank, 1, static_cast<int64_t>(sorted.size()));
  return sorted[static_cast<size_t>(rank - 1)];
}

double BoundedSlowdown(Time submit, Time start, Time end) {
  constexpr double kBoundSeconds = 10;
  const double run = static_cast<double>(end - start);
  const double jct = static_cast<double>(end - submit);
  return std::max(1.0, jct / std::max(run, kBoundSeconds));
}

double Round6(double x) {
  if (!std::isfinite(x) || x == 0) return 0;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific, 5);
  double out = 0;
  std::from_chars(buf, r.ptr, out);
  return out;
}

void AppendInt(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void AppendFixed(std::string& out, double v, int decimals) {
  if (!std::isfinite(v)) v = 0;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  if (r.ec != std::errc()) {  // only for absurdly large values
    out.append("0");
    return;
  }
  out.append(buf, r.ptr);
}

std::string CompactDuration(double s) {
  if (!std::isfinite(s)) return "-";
  std::string out;
  if (s < 0) {
    out = "-";
    s = -s;
  }
  if (s < 60) {
    AppendFixed(out, s, s < 10 ? 1 : 0);
    out += "s";
  } else if (s < 3600) {
    AppendFixed(out, s / 60, 1);
    out += "m";
  } else if (s < 86400) {
    AppendFixed(out, s / 3600, 1);
    out += "h";
  } else {
    AppendFixed(out, s / 86400, 1);
    out += "d";
  }
  return out;
}

Result<AtomicFile> AtomicFile::Open(const std::string& path) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return IoError("cannot create " + tmp + ": " + std::strerror(errno));
  }
  return AtomicFile(path, std::move(tmp), f);
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)), tmp_path_(std::move(other.tmp_path_)), file_(other.file_) {
  other.file_ = nullptr;
  other.tmp_path_.clear();
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!tmp_path_.empty()) std::remove(tmp_path_.c_str());
}

Status AtomicFile::Append(std::string_view data) {
  if (file_ == nullptr) return Internal("AtomicFile::Append after Commit");
  if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
    return IoError("cannot write " + tmp_path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status AtomicFile::Commit() {
  if (file_ == nullptr) return Internal("AtomicFile::Commit twice");
  std::FILE* f = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(f) == 0;
  const int saved_errno = errno;
  if (std::fclose(f) != 0 || !flushed) {
    return IoError("cannot write " + tmp_path_ + ": " +
                   std::strerror(flushed ? errno : saved_errno));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return IoError("cannot rename " + tmp_path_ + " to " + path_ + ": " + std::strerror(errno));
  }
  tmp_path_.clear();
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view content) {
  GANTRY_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Open(path));
  GANTRY_RETURN_IF_ERROR(file.Append(content));
  return file.Commit();
}

}  // namespace gantry::report_internal
