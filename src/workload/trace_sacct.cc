// Slurm accounting: `sacct --parsable2` output, columns found by name. See docs/formats/traces.md.
#include <charconv>

#include "workload/trace_internal.h"

namespace gantry::trace_internal {

namespace {

bool NotStarted(std::string_view s) {
  return s.empty() || EqualsIgnoreCase(s, "Unknown") || EqualsIgnoreCase(s, "None");
}

// Reads the GPU count and GPU types of a TRES list such as
// "billing=8,cpu=8,gres/gpu:h100=8,gres/gpu=8,mem=64G,node=1". A typed entry without a plain
// "gres/gpu" entry contributes to the total; `types` collects the type names joined by '|'.
bool ParseTres(Row& row, std::string_view field, std::string_view tres, int64_t* gpus,
               std::string* types) {
  *gpus = 0;
  types->clear();
  int64_t plain = -1, typed = 0;
  size_t pos = 0;
  while (pos < tres.size()) {
    size_t next = tres.find(',', pos);
    if (next == std::string_view::npos) next = tres.size();
    const std::string_view entry = tres.substr(pos, next - pos);
    pos = next + 1;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = entry.substr(0, eq);
    const std::string_view value = entry.substr(eq + 1);
    const bool is_plain = key == "gres/gpu";
    const bool is_typed = key.size() > 9 && key.substr(0, 9) == "gres/gpu:";
    if (!is_plain && !is_typed) continue;
    int64_t n = 0;
    if (!row.Int(field, value, 0, kMaxGpus, &n)) return false;
    if (is_plain) {
      plain = n;
    } else {
      typed += n;
      if (typed > kMaxGpus) return row.Bad(field, "GPU count is out of range");
      if (n > 0) {
        if (!types->empty()) *types += '|';
        *types += key.substr(9);
      }
    }
  }
  *gpus = plain >= 0 ? plain : typed;
  return true;
}

}  // namespace

Result<Workload> ImportSacct(std::string_view text, const std::string& source,
                             const ImportOptions& options) {
  TraceBuilder b(source, "sacct", options, text);
  LineReader lines(text);
  Columns columns;
  GANTRY_RETURN_IF_ERROR(ReadHeader(lines, b, '|', &columns));
  const int hl = lines.line_number();
  GANTRY_ASSIGN_OR_RETURN(const int c_id, RequireColumn(columns, "JobID", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_submit, RequireColumn(columns, "Submit", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_start, RequireColumn(columns, "Start", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_limit, RequireColumn(columns, "Timelimit", b, hl));
  GANTRY_RETURN_IF_ERROR(RequireEitherColumn(columns, "Elapsed", "End", b, hl));
  GANTRY_RETURN_IF_ERROR(RequireEitherColumn(columns, "AllocTRES", "ReqTRES", b, hl));
  const int c_elapsed = columns.Find("Elapsed");
  const int c_end = columns.Find("End");
  const int c_alloc = columns.Find("AllocTRES");
  const int c_req = columns.Find("ReqTRES");
  const int c_user = columns.Find("User");
  const int c_account = columns.Find("Account");
  const int c_partition = columns.Find("Partition");
  const int c_qos = columns.Find("QOS");
  const int c_nodes = columns.Find("NNodes");

  std::string_view line;
  std::vector<std::string_view> f;
  std::string types;
  while (lines.Next(&line)) {
    if (IsBlank(line)) continue;
    b.CountRow();
    Row row(b.source(), lines.line_number());
    SplitFields(line, '|', false, &f);
    int64_t gpus = 0, submit = 0, start = 0, end = 0, run_time = 0, limit = 0, nodes = 0;
    if (!row.MatchesHeader(line, f, columns)) {
      // a bad row, recorded
    } else if (f[c_id].empty()) {
      row.Bad("JobID", "missing value");
    } else if (f[c_id].find('.') != std::string_view::npos) {
      row.NotAJob("job-step");  // 123.batch, 123.0: steps of a job already counted
    } else {
      // Allocated resources are what the job ran with; pending jobs only have requested ones.
      const bool use_alloc = c_alloc >= 0 && !f[c_alloc].empty();
      const int c_tres = use_alloc ? c_alloc : c_req;
      const char* tres_name = use_alloc ? "AllocTRES" : "ReqTRES";
      if (c_tres < 0 || !ParseTres(row, tres_name, f[c_tres], &gpus, &types)) {
        if (c_tres < 0) row.Bad("ReqTRES", "missing value");
      } else if (gpus == 0) {
        row.NotAJob("cpu-only");
      } else if (!row.DateTime("Submit", f[c_submit], &submit)) {
      } else if (NotStarted(f[c_start])) {
        row.NotAJob("never-started");
      } else if (!row.DateTime("Start", f[c_start], &start)) {
      } else if (c_elapsed >= 0 && !f[c_elapsed].empty()) {
        if (!ParseSlurmDuration(f[c_elapsed], &run_time)) {
          row.Bad("Elapsed", Quote(f[c_elapsed]) + " is not a duration ([DD-]HH:MM:SS)");
        }
      } else if (c_end < 0 || f[c_end].empty()) {
        row.Bad(c_end < 0 ? "Elapsed" : "End", "missing value");
      } else if (row.DateTime("End", f[c_end], &end)) {
        if (end < start) row.Bad("End", Quote(f[c_end]) + " is before Start " + Quote(f[c_start]));
        run_time = end - start;
      }
      if (row.kind() == Row::Kind::kJob) {
        const std::string_view tl = f[c_limit];
        if (tl.empty() || EqualsIgnoreCase(tl, "UNLIMITED") ||
            EqualsIgnoreCase(tl, "Partition_Limit")) {
          limit = 0;  // no own limit: the estimate model supplies one
        } else if (!ParseSlurmDuration(tl, &limit)) {
          row.Bad("Timelimit", Quote(tl) +
                                   " is not a time limit ([DD-]HH:MM:SS, MM:SS, MM, "
                                   "UNLIMITED)");
        } else if (limit == 0) {
          row.Bad("Timelimit", "0 is not a time limit");
        }
      }
      if (row.kind() == Row::Kind::kJob && c_nodes >= 0 && !f[c_nodes].empty()) {
        row.Int("NNodes", f[c_nodes], 0, kMaxGpus, &nodes);
      }
    }
    if (row.kind() != Row::Kind::kJob) {
      GANTRY_RETURN_IF_ERROR(b.Account(row));
      continue;
    }
    Job& job = b.AddJob(row, std::string(f[c_id]), submit);
    job.gpus = static_cast<int32_t>(gpus);
    job.run_time = run_time;
    job.recorded_start = start;
    job.time_limit = limit;
    job.user = b.User(c_user >= 0 ? f[c_user] : std::string_view());
    job.team = b.Team(c_account >= 0 ? f[c_account] : std::string_view());
    job.queue = b.Queue(c_partition >= 0 ? f[c_partition] : std::string_view());
    const std::string_view qos = c_qos >= 0 ? f[c_qos] : std::string_view();
    // Without a cluster spec's QOS levels (ResolveWorkload applies them by name).
    job.qos = qos.empty() || EqualsIgnoreCase(qos, "normal") ? 0 : 1;
    job.qos_name = b.QosName(qos);
    job.gpu_type_set = b.GpuTypeSet(types, '|');
    SetShape(job, nodes);
  }
  return std::move(b).Build(/*wall_clock=*/true);
}

}  // namespace gantry::trace_internal
