// Philly (Sia CSV): timestamp,duration,num_gpus,gpu_time,cluster. See docs/formats/traces.md.
#include "workload/trace_internal.h"

namespace gantry::trace_internal {

Result<Workload> ImportPhilly(std::string_view text, const std::string& source,
                              const ImportOptions& options) {
  TraceBuilder b(source, "philly", options, text);
  LineReader lines(text);
  Columns columns;
  GANTRY_RETURN_IF_ERROR(ReadHeader(lines, b, ',', &columns));
  const int header_line = lines.line_number();
  GANTRY_ASSIGN_OR_RETURN(const int c_time, RequireColumn(columns, "timestamp", b, header_line));
  GANTRY_ASSIGN_OR_RETURN(const int c_dur, RequireColumn(columns, "duration", b, header_line));
  GANTRY_ASSIGN_OR_RETURN(const int c_gpus, RequireColumn(columns, "num_gpus", b, header_line));
  GANTRY_ASSIGN_OR_RETURN(const int c_gtime, RequireColumn(columns, "gpu_time", b, header_line));
  GANTRY_ASSIGN_OR_RETURN(const int c_team, RequireColumn(columns, "cluster", b, header_line));

  std::string_view line;
  std::vector<std::string_view> f;
  std::string id;
  while (lines.Next(&line)) {
    if (IsBlank(line)) continue;
    b.CountRow();
    Row row(b.source(), lines.line_number());
    SplitFields(line, ',', true, &f);
    int64_t submit = 0, run_time = 0, gpus = 0, gpu_time = 0;
    if (!row.MatchesHeader(line, f, columns)) {
      // a bad row, recorded
    } else if (row.DateTime("timestamp", f[c_time], &submit) &&
               row.Seconds("duration", f[c_dur], &run_time) &&
               row.Int("num_gpus", f[c_gpus], 1, kMaxGpus, &gpus) &&
               // Only sanity-checked: the trace rounds it independently of duration.
               row.Seconds("gpu_time", f[c_gtime], &gpu_time)) {
      if (f[c_team].empty()) row.Bad("cluster", "missing value");
    }
    if (row.kind() != Row::Kind::kJob) {
      GANTRY_RETURN_IF_ERROR(b.Account(row));
      continue;
    }
    id = "philly-";
    id += std::to_string(row.line());
    Job& job = b.AddJob(row, std::move(id), submit);
    job.gpus = static_cast<int32_t>(gpus);
    job.run_time = run_time;
    job.team = b.Team(f[c_team]);
    job.user = b.User(f[c_team]);  // Philly has no users; each virtual cluster stands for one
    job.queue = b.Queue("default");
    if (gpus <= 8) {
      SetShape(job, 1);
    } else if (gpus % 8 == 0) {
      SetShape(job, gpus / 8);
    }
  }
  return std::move(b).Build(/*wall_clock=*/true);
}

}  // namespace gantry::trace_internal
