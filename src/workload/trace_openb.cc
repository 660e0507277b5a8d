// Alibaba PAI "openb" pod list: name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
// pod_phase,creation_time,deletion_time,scheduled_time. See docs/formats/traces.md.
#include "workload/trace_internal.h"

namespace gantry::trace_internal {

namespace {

// Latency-sensitive pods outrank guaranteed ones, which outrank best-effort and the rest.
int32_t OpenbQos(std::string_view qos) {
  if (EqualsIgnoreCase(qos, "LS")) return 2;
  if (EqualsIgnoreCase(qos, "Guaranteed")) return 1;
  return 0;
}

}  // namespace

Result<Workload> ImportOpenb(std::string_view text, const std::string& source,
                             const ImportOptions& options) {
  TraceBuilder b(source, "openb", options, text);
  LineReader lines(text);
  Columns columns;
  GANTRY_RETURN_IF_ERROR(ReadHeader(lines, b, ',', &columns));
  const int hl = lines.line_number();
  GANTRY_ASSIGN_OR_RETURN(const int c_name, RequireColumn(columns, "name", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_gpus, RequireColumn(columns, "num_gpu", b, hl));
  GANTRY_ASSIGN_OR_RETURN(const int c_milli, RequireColumn(columns, "gpu_milli", b, hl));
  // A pod list with no time columns at all is a list of requests (FGD's packing input): every
  // pod is submitted at 0 and runs 0 s. With any of them present, all three are required.
  const bool timed = columns.Find("creation_time") >= 0 || columns.Find("deletion_time") >= 0 ||
                     columns.Find("scheduled_time") >= 0;
  int c_create = -1, c_delete = -1, c_sched = -1;
  if (timed) {
    GANTRY_ASSIGN_OR_RETURN(c_create, RequireColumn(columns, "creation_time", b, hl));
    GANTRY_ASSIGN_OR_RETURN(c_delete, RequireColumn(columns, "deletion_time", b, hl));
    GANTRY_ASSIGN_OR_RETURN(c_sched, RequireColumn(columns, "scheduled_time", b, hl));
  }
  const int c_spec = columns.Find("gpu_spec");
  const int c_qos = columns.Find("qos");

  std::string_view line;
  std::vector<std::string_view> f;
  while (lines.Next(&line)) {
    if (IsBlank(line)) continue;
    b.CountRow();
    Row row(b.source(), lines.line_number());
    SplitFields(line, ',', true, &f);
    int64_t gpus = 0, milli = 0, created = 0, deleted = 0, scheduled = 0;
    bool fractional = false;
    if (!row.MatchesHeader(line, f, columns)) {
      // a bad row, recorded
    } else if (f[c_name].empty()) {
      row.Bad("name", "missing value");
    } else if (!row.Int("num_gpu", f[c_gpus], 0, kMaxGpus, &gpus)) {
    } else if (gpus == 0) {
      row.NotAJob("cpu-only");  // CPU pods share the cluster but are not GPU jobs
    } else if (!row.Int("gpu_milli", f[c_milli], 0, 1000, &milli)) {
    } else if (milli < 1000 && gpus > 1) {
      row.Bad("gpu_milli", std::to_string(milli) + " is a fraction of a GPU, but num_gpu is " +
                               std::to_string(gpus));
    } else if (milli < 1000 && !options.round_fractional_gpus) {
      row.Bad("gpu_milli", std::to_string(milli) +
                               "/1000 of a GPU: fractional GPUs are not supported "
                               "(round_fractional_gpus is off)");
    } else if (!timed) {
      fractional = milli < 1000;
    } else if (!row.Int("creation_time", f[c_create], 0, kMaxSeconds, &created)) {
    } else if (f[c_sched].empty()) {
      row.NotAJob("never-started");
    } else if (row.Int("scheduled_time", f[c_sched], 0, kMaxSeconds, &scheduled) &&
               row.Int("deletion_time", f[c_delete], 0, kMaxSeconds, &deleted)) {
      fractional = milli < 1000;
      if (scheduled < created) {
        row.Bad("scheduled_time",
                std::to_string(scheduled) + " is before creation_time " + std::to_string(created));
      } else if (deleted < scheduled) {
        row.Bad("deletion_time",
                std::to_string(deleted) + " is before scheduled_time " + std::to_string(scheduled));
      }
    }
    if (row.kind() != Row::Kind::kJob) {
      GANTRY_RETURN_IF_ERROR(b.Account(row));
      continue;
    }
    Job& job = b.AddJob(row, std::string(f[c_name]), created);
    job.gpus = static_cast<int32_t>(gpus);
    job.run_time = deleted - scheduled;
    if (timed) job.recorded_start = scheduled;  // a request list records no start
    job.team = b.Team("default");
    job.user = b.User("default");
    const std::string_view qos = c_qos >= 0 ? f[c_qos] : std::string_view();
    job.queue = b.Queue(qos);
    job.qos = OpenbQos(qos);
    job.gpu_type_set = c_spec >= 0 ? b.GpuTypeSet(f[c_spec], '|') : -1;
    // One pod is one node's worth of GPUs.
    SetShape(job, 1);
    if (fractional) {
      job.gpu_milli = static_cast<int32_t>(milli);
      ++b.stats().fractional_gpu_rounded;
    }
  }
  return std::move(b).Build(/*wall_clock=*/false);
}

}  // namespace gantry::trace_internal
