// jobs.csv: one row per job, in workload order, and interrupted.csv: one row per run a failure
// or preemption ended (formats in docs/formats/outputs.md).

#include <string>
#include <string_view>

#include "gantry/report/result.h"
#include "report/report_internal.h"

namespace gantry {
namespace {

using report_internal::AppendFixed;
using report_internal::AppendInt;

// RFC 4180 quoting, only when the text needs it (trace ids and names are usually plain).
void AppendCsvText(std::string& out, std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) {
    out.append(text);
    return;
  }
  out += '"';
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

const std::string& NameOr(const std::vector<std::string>& table, int32_t index,
                          const std::string& fallback) {
  if (index >= 0 && static_cast<size_t>(index) < table.size())
    return table[static_cast<size_t>(index)];
  return fallback;
}

// Rows are built in one buffer and handed to stdio in large blocks: a million rows then cost
// a few hundred writes instead of millions of small formatted stream insertions.
constexpr size_t kFlushBytes = size_t{4} << 20;

Status FlushIfFull(report_internal::AtomicFile& file, std::string& buf) {
  if (buf.size() < kFlushBytes) return Status::Ok();
  Status s = file.Append(buf);
  buf.clear();
  return s;
}

}  // namespace

Status WriteJobsCsv(const SimResult& result, const std::string& path) {
  if (result.workload == nullptr) return InvalidArgument("WriteJobsCsv: result has no workload");
  const Workload& w = *result.workload;
  if (result.outcomes.size() != w.jobs.size()) {
    return Internal("WriteJobsCsv: " + std::to_string(result.outcomes.size()) + " outcomes for " +
                    std::to_string(w.jobs.size()) + " jobs");
  }
  GANTRY_ASSIGN_OR_RETURN(report_internal::AtomicFile file,
                          report_internal::AtomicFile::Open(path));
  std::string buf;
  buf.reserve(kFlushBytes + 4096);
  buf +=
      "id,team,user,gpus,nodes_spanned,span_level,submit,start,end,wait,jct,bounded_slowdown,"
      "backfilled,killed_at_limit,cancelled,requeues,preemptions,energy_kwh,"
      "preemption_lost_gpu_hours,reason,first_estimate\n";
  const std::string empty;
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const Job& job = w.jobs[i];
    const JobOutcome& o = result.outcomes[i];
    AppendCsvText(buf, job.id);
    buf += ',';
    const std::string& team = job.team >= 0 && static_cast<size_t>(job.team) < result.teams.size()
                                  ? result.teams[static_cast<size_t>(job.team)].name
                                  : NameOr(w.teams, job.team, empty);
    AppendCsvText(buf, team);
    buf += ',';
    AppendCsvText(buf, NameOr(w.users, job.user, empty));
    buf += ',';
    AppendInt(buf, job.gpus);
    buf += ',';
    AppendInt(buf, o.nodes_spanned);
    buf += ',';
    AppendInt(buf, o.span_level);
    buf += ',';
    AppendInt(buf, job.submit);
    buf += ',';
    // Unknown values (never started, still running when the run ended) are empty fields.
    if (o.start >= 0) AppendInt(buf, o.start);
    buf += ',';
    const bool finished = o.start >= 0 && o.end >= 0;
    if (finished) AppendInt(buf, o.end);
    buf += ',';
    if (o.start >= 0) AppendInt(buf, o.start - job.submit);
    buf += ',';
    if (finished) AppendInt(buf, o.end - job.submit);
    buf += ',';
    if (finished) AppendFixed(buf, report_internal::BoundedSlowdown(job.submit, o.start, o.end), 4);
    buf += o.backfilled ? ",1" : ",0";
    buf += o.killed_at_limit ? ",1" : ",0";
    buf += o.cancelled ? ",1," : ",0,";
    AppendInt(buf, o.requeues);
    buf += ',';
    AppendInt(buf, o.preemptions);
    buf += ',';
    AppendFixed(buf, o.energy_kwh, 6);
    buf += ',';
    AppendFixed(buf, o.preemption_lost_gpu_seconds / 3600.0, 4);
    buf += ',';
    buf.append(o.reason);
    buf += ',';
    if (o.first_estimate >= 0) AppendInt(buf, o.first_estimate);
    buf += '\n';
    GANTRY_RETURN_IF_ERROR(FlushIfFull(file, buf));
  }
  GANTRY_RETURN_IF_ERROR(file.Append(buf));
  return file.Commit();
}

Status WriteInterruptedRunsCsv(const SimResult& result, const std::string& path) {
  if (result.workload == nullptr) {
    return InvalidArgument("WriteInterruptedRunsCsv: result has no workload");
  }
  const Workload& w = *result.workload;
  for (const InterruptedRun& run : result.interrupted_runs) {
    if (run.job < 0 || static_cast<size_t>(run.job) >= w.jobs.size()) {
      return Internal("WriteInterruptedRunsCsv: run of job index " + std::to_string(run.job) +
                      " outside the workload's " + std::to_string(w.jobs.size()) + " jobs");
    }
  }
  GANTRY_ASSIGN_OR_RETURN(report_internal::AtomicFile file,
                          report_internal::AtomicFile::Open(path));
  std::string buf = "id,start,end\n";
  for (const InterruptedRun& run : result.interrupted_runs) {
    AppendCsvText(buf, w.jobs[static_cast<size_t>(run.job)].id);
    buf += ',';
    AppendInt(buf, run.start);
    buf += ',';
    AppendInt(buf, run.end);
    buf += '\n';
    GANTRY_RETURN_IF_ERROR(FlushIfFull(file, buf));
  }
  GANTRY_RETURN_IF_ERROR(file.Append(buf));
  return file.Commit();
}

}  // namespace gantry
