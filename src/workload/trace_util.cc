#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "workload/trace_internal.h"

namespace gantry::trace_internal {

bool LineReader::Next(std::string_view* line) {
  if (pos_ >= text_.size()) return false;
  size_t end = text_.find('\n', pos_);
  if (end == std::string_view::npos) end = text_.size();
  std::string_view l = text_.substr(pos_, end - pos_);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  pos_ = end + 1;
  ++line_number_;
  *line = l;
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsBlank(std::string_view s) { return Trim(s).empty(); }

std::string_view StripBom(std::string_view text) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (text.substr(0, kBom.size()) == kBom) text.remove_prefix(kBom.size());
  return text;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

void SplitFields(std::string_view line, char sep, bool quotes, std::vector<std::string_view>* out) {
  out->clear();
  size_t pos = 0;
  while (true) {
    // Skip leading blanks so that a quote after them still opens a quoted field.
    size_t start = pos;
    while (start < line.size() && (line[start] == ' ' || line[start] == '\t')) ++start;
    if (quotes && start < line.size() && line[start] == '"') {
      const size_t close = line.find('"', start + 1);
      if (close != std::string_view::npos) {
        out->push_back(line.substr(start + 1, close - start - 1));
        const size_t next = line.find(sep, close + 1);
        if (next == std::string_view::npos) return;
        pos = next + 1;
        continue;
      }
    }
    const size_t next = line.find(sep, pos);
    if (next == std::string_view::npos) {
      out->push_back(Trim(line.substr(pos)));
      return;
    }
    out->push_back(Trim(line.substr(pos, next - pos)));
    pos = next + 1;
  }
}

void SplitWhitespace(std::string_view line, std::vector<std::string_view>* out) {
  out->clear();
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out->push_back(line.substr(start, i - start));
  }
}

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil idea).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool IsLeap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

// Reads exactly `n` decimal digits.
bool Digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

bool SmallInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 12) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

bool CivilToUnix(int year, int month, int day, int hour, int minute, int second, int64_t* out) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (year < 1970 || year > 9999 || month < 1 || month > 12 || day < 1) return false;
  const int month_days = kDays[month - 1] + (month == 2 && IsLeap(year) ? 1 : 0);
  if (day > month_days || hour > 23 || minute > 59 || second > 59) return false;
  if (hour < 0 || minute < 0 || second < 0) return false;
  *out = DaysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
  return true;
}

bool ParseDateTimeText(std::string_view s, int64_t* out) {
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':') {
    return false;
  }
  int y, mo, d, h, mi, se;
  if (!Digits(s, 0, 4, &y) || !Digits(s, 5, 2, &mo) || !Digits(s, 8, 2, &d) ||
      !Digits(s, 11, 2, &h) || !Digits(s, 14, 2, &mi) || !Digits(s, 17, 2, &se)) {
    return false;
  }
  return CivilToUnix(y, mo, d, h, mi, se, out);
}

bool ParseSlurmDuration(std::string_view s, int64_t* out) {
  int64_t days = 0;
  bool has_days = false;
  const size_t dash = s.find('-');
  if (dash != std::string_view::npos) {
    if (!SmallInt(s.substr(0, dash), &days)) return false;
    has_days = true;
    s = s.substr(dash + 1);
  }
  int64_t parts[3];
  int n = 0;
  while (true) {
    if (n == 3) return false;
    const size_t colon = s.find(':');
    if (!SmallInt(s.substr(0, colon), &parts[n++])) return false;
    if (colon == std::string_view::npos) break;
    s = s.substr(colon + 1);
  }
  int64_t h = 0, m = 0, sec = 0;
  if (has_days) {
    // "D-H", "D-H:M", "D-H:M:S".
    h = parts[0];
    if (n > 1) m = parts[1];
    if (n > 2) sec = parts[2];
  } else if (n == 1) {
    m = parts[0];  // a bare number is minutes
  } else if (n == 2) {
    m = parts[0];
    sec = parts[1];
  } else {
    h = parts[0];
    m = parts[1];
    sec = parts[2];
  }
  if (days > 1000000 || h > 1000000 || m > 100000000 || sec > 100000000) return false;
  *out = ((days * 24 + h) * 60 + m) * 60 + sec;
  return *out <= kMaxSeconds;
}

void Columns::SetHeader(const std::vector<std::string_view>& header) {
  names_.assign(header.begin(), header.end());
}

int Columns::Find(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (EqualsIgnoreCase(names_[i], name)) return static_cast<int>(i);
  }
  return -1;
}

std::string Columns::Joined() const {
  std::string s;
  for (const std::string& n : names_) {
    if (!s.empty()) s += ',';
    s += n;
  }
  return s;
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string q = "\"";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      q += '\\';
      q += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      q += buf;
    } else {
      q += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) q += "...";
  q += '"';
  return q;
}

bool Row::MatchesHeader(std::string_view line, const std::vector<std::string_view>& fields,
                        const Columns& columns) {
  if (fields.size() != columns.size()) {
    return BadRow("wrong column count", "expected " + std::to_string(columns.size()) +
                                            " columns, found " + std::to_string(fields.size()));
  }
  if (line.find('\0') == std::string_view::npos) return true;  // the common case: one memchr
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].find('\0') == std::string_view::npos) continue;
    const std::string name = i < columns.size() ? columns.name(i) : "#" + std::to_string(i + 1);
    return Bad(name, Quote(fields[i]) + " contains a NUL byte");
  }
  return BadRow("NUL byte", "the line contains a NUL byte");  // between fields
}

bool Row::Bad(std::string_view field, const std::string& what) {
  return BadRow("bad " + std::string(field), "field '" + std::string(field) + "': " + what);
}

bool Row::BadRow(std::string reason, const std::string& what) {
  if (kind_ != Kind::kJob) return false;  // keep the first problem
  kind_ = Kind::kBad;
  reason_ = std::move(reason);
  status_ = InvalidArgument(source_ + ":" + std::to_string(line_) + ": " + what);
  return false;
}

bool Row::NotAJob(std::string reason) {
  if (kind_ != Kind::kJob) return false;
  kind_ = Kind::kNotAJob;
  reason_ = std::move(reason);
  return false;
}

bool Row::Int(std::string_view field, std::string_view text, int64_t min, int64_t max,
              int64_t* out) {
  if (text.empty()) return Bad(field, "missing value");
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range) return Bad(field, Quote(text) + " is out of range");
  if (ec != std::errc() || p != end) return Bad(field, Quote(text) + " is not a whole number");
  if (v < min) {
    if (min == 0) return Bad(field, std::to_string(v) + " is negative");
    return Bad(field, std::to_string(v) + " is less than " + std::to_string(min));
  }
  if (v > max) return Bad(field, std::to_string(v) + " is larger than " + std::to_string(max));
  *out = v;
  return true;
}

bool Row::Seconds(std::string_view field, std::string_view text, int64_t* out) {
  if (text.empty()) return Bad(field, "missing value");
  double v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v)) {
    return Bad(field, Quote(text) + " is not a number of seconds");
  }
  if (v < 0) return Bad(field, Quote(text) + " is negative");
  if (v > static_cast<double>(kMaxSeconds)) return Bad(field, Quote(text) + " is out of range");
  *out = std::llround(v);
  return true;
}

bool Row::DateTime(std::string_view field, std::string_view text, int64_t* out) {
  if (text.empty()) return Bad(field, "missing value");
  if (!ParseDateTimeText(text, out)) {
    return Bad(field, Quote(text) + " is not a date-time (YYYY-MM-DD HH:MM:SS, UTC, from 1970)");
  }
  return true;
}

TraceBuilder::TraceBuilder(std::string source, std::string format, const ImportOptions& options,
                           std::string_view text)
    : options_(options),
      users_(workload_.users),
      teams_(workload_.teams),
      queues_(workload_.queues),
      qos_names_(workload_.qos_names) {
  workload_.source = std::move(source);
  workload_.format = std::move(format);
  // About one job per line; reserving avoids regrowing (and re-touching) a large vector. Capped:
  // a line count says nothing about how many lines are jobs (a file of blank lines has none),
  // and one Job per newline of a large junk file exhausts memory before the first row is read.
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  workload_.jobs.reserve(std::min(lines, kMaxJobReserve));
}

Status TraceBuilder::Error(int line, const std::string& what) const {
  return InvalidArgument(workload_.source + ":" + std::to_string(line) + ": " + what);
}

Status TraceBuilder::Account(const Row& row) {
  switch (row.kind()) {
    case Row::Kind::kJob:
      return Status::Ok();
    case Row::Kind::kNotAJob:
      break;
    case Row::Kind::kBad:
      if (!options_.skip_bad_rows) return row.status();
      break;
  }
  ++workload_.stats.rows_skipped;
  ++workload_.stats.skipped_by_reason[row.reason()];
  return Status::Ok();
}

Job& TraceBuilder::AddJob(const Row& row, std::string id, int64_t submit) {
  Job& job = workload_.jobs.emplace_back();
  job.id = std::move(id);
  job.submit = submit;
  job.source_line = row.line();
  return job;
}

int32_t TraceBuilder::Intern(NameTable& table, LastName& last, std::string_view name) {
  if (name.empty()) name = "default";
  // Traces repeat names in runs (one team's burst of jobs); skip the hash lookup for those.
  if (last.index >= 0 && last.name == name) return last.index;
  last.name.assign(name);
  last.index = table.Intern(last.name);
  return last.index;
}

int32_t TraceBuilder::User(std::string_view name) { return Intern(users_, last_user_, name); }
int32_t TraceBuilder::Team(std::string_view name) { return Intern(teams_, last_team_, name); }
int32_t TraceBuilder::Queue(std::string_view name) { return Intern(queues_, last_queue_, name); }

int32_t TraceBuilder::QosName(std::string_view name) {
  return name.empty() ? -1 : qos_names_.Intern(std::string(name));
}

int32_t TraceBuilder::GpuTypeSet(std::string_view names, char sep) {
  names = Trim(names);
  if (names.empty()) return -1;
  scratch_.assign(names);
  auto it = gpu_sets_.find(scratch_);
  if (it != gpu_sets_.end()) return it->second;
  std::vector<std::string> set;
  size_t pos = 0;
  while (pos <= names.size()) {
    size_t next = names.find(sep, pos);
    if (next == std::string_view::npos) next = names.size();
    const std::string_view name = Trim(names.substr(pos, next - pos));
    if (!name.empty() && std::find(set.begin(), set.end(), name) == set.end()) {
      set.emplace_back(name);
    }
    pos = next + 1;
  }
  if (set.empty()) return -1;
  const auto index = static_cast<int32_t>(workload_.gpu_type_sets.size());
  workload_.gpu_type_sets.push_back(std::move(set));
  gpu_sets_.emplace(scratch_, index);
  return index;
}

Workload TraceBuilder::Build(bool wall_clock, int64_t unix_base) && {
  std::vector<Job>& jobs = workload_.jobs;
  int64_t first = 0;
  if (!jobs.empty()) {
    first = jobs[0].submit;
    for (const Job& j : jobs) first = std::min(first, j.submit);
    for (Job& j : jobs) {
      j.submit -= first;
      if (j.recorded_start >= 0) j.recorded_start -= first;
    }
  }
  workload_.epoch_unix = wall_clock ? unix_base + first : 0;
  // Sort small keys, then move each job once: cheaper than sorting the jobs themselves.
  struct Key {
    int64_t submit;
    int32_t line;
    uint32_t pos;
  };
  std::vector<Key> keys(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    keys[i] = {jobs[i].submit, jobs[i].source_line, static_cast<uint32_t>(i)};
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    return a.submit != b.submit ? a.submit < b.submit : a.line < b.line;
  });
  // Permute in place, cycle by cycle: a second job vector would double the memory touched.
  std::vector<bool> placed(jobs.size(), false);
  for (size_t start = 0; start < jobs.size(); ++start) {
    if (placed[start] || keys[start].pos == start) continue;
    Job held = std::move(jobs[start]);
    size_t to = start;
    while (true) {
      placed[to] = true;
      const size_t from = keys[to].pos;
      if (from == start) {
        jobs[to] = std::move(held);
        break;
      }
      jobs[to] = std::move(jobs[from]);
      to = from;
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].index = static_cast<JobIndex>(i);
  workload_.stats.jobs = static_cast<int64_t>(jobs.size());
  ApplyTimeLimitModel(workload_, options_.time_limits);
  return std::move(workload_);
}

void SetShape(Job& job, int64_t nodes) {
  if (nodes > 0 && job.gpus % nodes == 0) {
    job.nodes = static_cast<int32_t>(nodes);
    job.gpus_per_node = static_cast<int32_t>(job.gpus / nodes);
  } else {
    job.nodes = 0;
    job.gpus_per_node = 0;
  }
}

Status ReadHeader(LineReader& lines, TraceBuilder& builder, char sep, Columns* columns) {
  std::string_view line;
  std::vector<std::string_view> fields;
  while (lines.Next(&line)) {
    if (IsBlank(line)) continue;
    SplitFields(line, sep, /*quotes=*/true, &fields);
    const int header_line = lines.line_number();
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].find('\0') != std::string_view::npos) {
        return builder.Error(header_line, "header column " + std::to_string(i + 1) + " (" +
                                              Quote(fields[i]) + ") contains a NUL byte");
      }
      if (fields[i].empty()) continue;  // unnamed columns are never looked up
      for (size_t j = 0; j < i; ++j) {
        if (EqualsIgnoreCase(fields[i], fields[j])) {
          return builder.Error(header_line, "header names column '" + std::string(fields[i]) +
                                                "' twice (columns " + std::to_string(j + 1) +
                                                " and " + std::to_string(i + 1) + ")");
        }
      }
    }
    columns->SetHeader(fields);
    return Status::Ok();
  }
  return InvalidArgument(builder.source() + ": empty trace: no header line");
}

namespace {

// " (header: a,b,c)", shortened: the end of a message about a missing column.
std::string HeaderForMessage(const Columns& columns) {
  return " (header: " + columns.Joined().substr(0, 300) + ")";
}

}  // namespace

Result<int> RequireColumn(const Columns& columns, std::string_view name,
                          const TraceBuilder& builder, int header_line) {
  const int c = columns.Find(name);
  if (c < 0) {
    return builder.Error(header_line, "header has no column '" + std::string(name) + "'" +
                                          HeaderForMessage(columns));
  }
  return c;
}

Status RequireEitherColumn(const Columns& columns, std::string_view a, std::string_view b,
                           const TraceBuilder& builder, int header_line) {
  if (columns.Find(a) >= 0 || columns.Find(b) >= 0) return Status::Ok();
  return builder.Error(header_line, "header has neither '" + std::string(a) + "' nor '" +
                                        std::string(b) + "'" + HeaderForMessage(columns));
}

}  // namespace gantry::trace_internal
