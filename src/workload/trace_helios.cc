// Helios / Acme job logs: job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,
// end_time,duration,queue. See docs/formats/traces.md.
#include "workload/trace_internal.h"

namespace gantry::trace_internal {

namespace {

// Unix time of 2000-01-01: integer times after it are taken to be Unix times.
constexpr int64_t kYear2000 = 946684800;

bool IsMissing(std::string_view s) {
  return s.empty() || EqualsIgnoreCase(s, "None") || EqualsIgnoreCase(s, "NaN") ||
         EqualsIgnoreCase(s, "NULL");
}

// A time is either a date-time string or integer seconds.
bool Time(Row& row, std::string_view field, std::string_view text, int64_t* out, bool* wall) {
  if (!text.empty() && text.find('-') != std::string_view::npos && text.front() != '-') {
    *wall = true;
    return row.DateTime(field, text, out);
  }
  if (!row.Seconds(field, text, out)) return false;
  if (*out >= kYear2000) *wall = true;
  return true;
}

}  // namespace

Result<Workload> ImportHelios(std::string_view text, const std::string& source,
                              const ImportOptions& options) {
  TraceBuilder b(source, "helios", options, text);
  LineReader lines(text);
  Columns columns;
  GANTRY_RETURN_IF_ERROR(ReadHeader(lines, b, ',', &columns));
  const int hl = lines.line_number();
  GANTRY_ASSIGN_OR_RETURN(const int c_id, RequireColumn(columns, "job_id", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_vc, RequireColumn(columns, "vc", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_gpus, RequireColumn(columns, "gpu_num", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_submit, RequireColumn(columns, "submit_time", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_start, RequireColumn(columns, "start_time", b, hl));
  GANTRY_RETURN_IF_ERROR(RequireEitherColumn(columns, "duration", "end_time", b, hl));
  const int c_end = columns.Find("end_time");
  const int c_dur = columns.Find("duration");
  const int c_user = columns.Find("user");
  const int c_nodes = columns.Find("node_num");
  const int c_queue = columns.Find("queue");

  std::string_view line;
  std::vector<std::string_view> f;
  bool wall = false;
  while (lines.Next(&line)) {
    if (IsBlank(line)) continue;
    b.CountRow();
    Row row(b.source(), lines.line_number());
    SplitFields(line, ',', true, &f);
    int64_t gpus = 0, nodes = 0, submit = 0, start = 0, end = 0, run_time = 0;
    if (!row.MatchesHeader(line, f, columns)) {
      // a bad row, recorded
    } else if (f[c_id].empty()) {
      row.Bad("job_id", "missing value");
    } else if (!row.Int("gpu_num", f[c_gpus], 0, kMaxGpus, &gpus)) {
    } else if (gpus == 0) {
      row.NotAJob("cpu-only");
    } else if (c_nodes >= 0 && !f[c_nodes].empty() &&
               !row.Int("node_num", f[c_nodes], 0, kMaxGpus, &nodes)) {
    } else if (!Time(row, "submit_time", f[c_submit], &submit, &wall)) {
    } else if (IsMissing(f[c_start])) {
      row.NotAJob("never-started");
    } else if (!Time(row, "start_time", f[c_start], &start, &wall)) {
    } else if (c_dur >= 0 && !IsMissing(f[c_dur])) {
      row.Seconds("duration", f[c_dur], &run_time);
    } else if (c_end < 0 || IsMissing(f[c_end])) {
      row.Bad(c_end < 0 ? "duration" : "end_time", "missing value");
    } else if (Time(row, "end_time", f[c_end], &end, &wall)) {
      if (end < start) {
        row.Bad("end_time", Quote(f[c_end]) + " is before start_time " + Quote(f[c_start]));
      }
      run_time = end - start;
    }
    if (row.kind() != Row::Kind::kJob) {
      GANTRY_RETURN_IF_ERROR(b.Account(row));
      continue;
    }
    Job& job = b.AddJob(row, std::string(f[c_id]), submit);
    job.gpus = static_cast<int32_t>(gpus);
    job.run_time = run_time;
    job.recorded_start = start;
    job.team = b.Team(f[c_vc]);
    job.user = b.User(c_user >= 0 ? f[c_user] : std::string_view());
    job.queue = b.Queue(c_queue >= 0 ? f[c_queue] : std::string_view());
    SetShape(job, nodes);
  }
  return std::move(b).Build(wall);
}

}  // namespace gantry::trace_internal
