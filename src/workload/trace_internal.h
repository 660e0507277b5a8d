// Shared machinery of the trace importers (private to the workload module): splitting lines and
// fields without copies, parsing numbers and date-times with messages that name file, line and
// field, and a builder that turns parsed rows into a sorted, indexed Workload.
//
// Importers parse a whole file held in memory; nothing here allocates per field. Not thread-safe
// (one builder per import).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/workload/job.h"
#include "gantry/workload/trace.h"

namespace gantry::trace_internal {

// Times and durations are accepted in [0, kMaxSeconds] so that differences never overflow.
inline constexpr int64_t kMaxSeconds = int64_t{1} << 40;
// More GPUs than any machine ever built: a row asking for more is a typo or garbage.
inline constexpr int64_t kMaxGpus = int64_t{1} << 20;
// Most jobs reserved up front from a line count; beyond it the vector grows as jobs are read.
inline constexpr size_t kMaxJobReserve = size_t{1} << 16;

// Iterates over the lines of a text, numbering them from 1 and dropping a trailing '\r'.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  bool Next(std::string_view* line);
  int line_number() const { return line_number_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int line_number_ = 0;
};

std::string_view Trim(std::string_view s);
// `text` without a leading UTF-8 byte order mark (spreadsheet tools write one before the header).
std::string_view StripBom(std::string_view text);
bool IsBlank(std::string_view s);
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// Splits `line` at `sep` into trimmed fields. With `quotes`, a field may be enclosed in double
// quotes (which may then contain `sep`); the quotes are removed.
void SplitFields(std::string_view line, char sep, bool quotes, std::vector<std::string_view>* out);
// Splits at runs of spaces and tabs (SWF).
void SplitWhitespace(std::string_view line, std::vector<std::string_view>* out);

// Unix seconds of a proleptic Gregorian UTC date-time; false when any part is out of range.
bool CivilToUnix(int year, int month, int day, int hour, int minute, int second, int64_t* out);
// "YYYY-MM-DD HH:MM:SS" or "YYYY-MM-DDTHH:MM:SS" (UTC) to Unix seconds.
bool ParseDateTimeText(std::string_view s, int64_t* out);
// Slurm durations: "[DD-]HH:MM:SS", "MM:SS", "MM" (minutes), "DD-HH", "DD-HH:MM".
bool ParseSlurmDuration(std::string_view s, int64_t* out);

// Maps a CSV header to column positions by (case-insensitive) name.
class Columns {
 public:
  void SetHeader(const std::vector<std::string_view>& header);
  // Position of `name`, or -1.
  int Find(std::string_view name) const;
  size_t size() const { return names_.size(); }
  const std::string& name(size_t i) const { return names_[i]; }
  std::string Joined() const;

 private:
  std::vector<std::string> names_;
};

// What became of one row; filled by the parse helpers.
class Row {
 public:
  enum class Kind { kJob, kNotAJob, kBad };

  Row(const std::string& source, int line) : source_(source), line_(line) {}
  int line() const { return line_; }
  Kind kind() const { return kind_; }
  const std::string& reason() const { return reason_; }
  const Status& status() const { return status_; }

  // Each parser returns false, and records a bad row naming `field`, when `text` is not valid.
  bool Int(std::string_view field, std::string_view text, int64_t min, int64_t max, int64_t* out);
  // Whole seconds; a decimal fraction is allowed and rounded to the nearest second.
  bool Seconds(std::string_view field, std::string_view text, int64_t* out);
  bool DateTime(std::string_view field, std::string_view text, int64_t* out);
  // False, recording a bad row, when the line's fields do not fit the header: another number of
  // fields, or a NUL byte in one (naming its column: names and ids are used as C strings
  // downstream, in jobs.csv and reports, where a NUL would cut them silently).
  bool MatchesHeader(std::string_view line, const std::vector<std::string_view>& fields,
                     const Columns& columns);

  // Records a bad row: "source:line: field 'field': what", skip reason "bad <field>".
  bool Bad(std::string_view field, const std::string& what);
  // Records a bad row with its own reason and message (the message gets the "source:line: ").
  bool BadRow(std::string reason, const std::string& what);
  // Records a row that is valid but not a GPU job (CPU-only, never started, a job step).
  bool NotAJob(std::string reason);

 private:
  const std::string& source_;
  int line_;
  Kind kind_ = Kind::kJob;
  std::string reason_;
  Status status_;
};

// "\"abc\"" with non-printable bytes escaped and long texts shortened, for messages.
std::string Quote(std::string_view s);

// Accumulates jobs and turns them into a Workload.
class TraceBuilder {
 public:
  // `text` is the whole trace, used only to size the job vector: the reservation is bounded
  // (kMaxJobReserve), so a file of blank or junk lines costs memory for the jobs actually read,
  // not one job per line.
  TraceBuilder(std::string source, std::string format, const ImportOptions& options,
               std::string_view text = {});

  // A file-level error (no header, missing column): "source:line: what".
  Status Error(int line, const std::string& what) const;
  // Counts a finished row that produced no job; returns its error when it was bad and bad rows
  // are not skipped.
  Status Account(const Row& row);

  // Appends a job for `row`; `submit` is in the trace's own time base (see Build).
  Job& AddJob(const Row& row, std::string id, int64_t submit);
  int32_t User(std::string_view name);
  int32_t Team(std::string_view name);
  int32_t Queue(std::string_view name);
  // Interns a QOS name (Job::qos_name); -1 when empty.
  int32_t QosName(std::string_view name);
  // Interns a GPU type set given as names separated by `sep` ("V100M16|V100M32"); -1 when empty.
  int32_t GpuTypeSet(std::string_view names, char sep);

  const std::string& source() const { return workload_.source; }
  const ImportOptions& options() const { return options_; }
  ImportStats& stats() { return workload_.stats; }
  void CountRow() { ++workload_.stats.rows_read; }

  // Shifts submit times (and recorded starts) so the first job submits at 0, sorts by (submit,
  // line), indexes, and estimates missing time limits. `wall_clock` says submit times are Unix
  // seconds offset by `unix_base`, so epoch_unix can be set; otherwise epoch_unix stays 0.
  Workload Build(bool wall_clock, int64_t unix_base = 0) &&;

 private:
  Workload workload_;
  ImportOptions options_;
  struct LastName {
    std::string name;
    int32_t index = -1;
  };
  int32_t Intern(NameTable& table, LastName& last, std::string_view name);

  NameTable users_, teams_, queues_, qos_names_;
  LastName last_user_, last_team_, last_queue_;
  std::unordered_map<std::string, int32_t> gpu_sets_;
  std::string scratch_;
};

// Sets a job's gang shape from a total GPU count and node count; "any" when they do not divide.
void SetShape(Job& job, int64_t nodes);

Result<Workload> ImportPhilly(std::string_view text, const std::string& source,
                              const ImportOptions& options);
Result<Workload> ImportOpenb(std::string_view text, const std::string& source,
                             const ImportOptions& options);
Result<Workload> ImportHelios(std::string_view text, const std::string& source,
                              const ImportOptions& options);
Result<Workload> ImportSacct(std::string_view text, const std::string& source,
                             const ImportOptions& options);
Result<Workload> ImportSwf(std::string_view text, const std::string& source,
                           const ImportOptions& options);

// Guesses the format from the first non-blank line of `text`.
Result<TraceFormat> DetectTraceFormatText(std::string_view text, const std::string& source);

// The estimate model for one job: `key` picks the job's own random stream.
Duration EstimateTimeLimit(const TimeLimitModel& model, Duration run_time, uint64_t key);

// Reads the header line of a CSV-like trace into `columns`; skips leading blank lines. Returns
// an error for an empty text, a header naming a column twice (which one would a row's value
// belong to?) or holding a NUL byte.
Status ReadHeader(LineReader& lines, TraceBuilder& builder, char sep, Columns* columns);
// Position of a required column, or an error naming it and the header.
Result<int> RequireColumn(const Columns& columns, std::string_view name,
                          const TraceBuilder& builder, int header_line);
// An error naming both columns and the header when the header has neither of two columns that
// can each stand for the other (a duration, or an end time to subtract from).
Status RequireEitherColumn(const Columns& columns, std::string_view a, std::string_view b,
                           const TraceBuilder& builder, int header_line);

}  // namespace gantry::trace_internal
