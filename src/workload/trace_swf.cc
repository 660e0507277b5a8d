// Standard Workload Format (Parallel Workloads Archive): 18 whitespace-separated fields per job,
// ';' comment lines. One SWF processor is taken to be one GPU. See docs/formats/traces.md.
#include "workload/trace_internal.h"

namespace gantry::trace_internal {

namespace {

constexpr size_t kSwfFields = 18;

// Field names as the SWF definition numbers them (1-based there, 0-based here).
constexpr const char* kName[kSwfFields] = {"job number",
                                           "submit time",
                                           "wait time",
                                           "run time",
                                           "allocated processors",
                                           "average CPU time",
                                           "used memory",
                                           "requested processors",
                                           "requested time",
                                           "requested memory",
                                           "status",
                                           "user id",
                                           "group id",
                                           "executable",
                                           "queue",
                                           "partition",
                                           "preceding job",
                                           "think time"};

// A number that may be -1 ("missing"); SWF writers sometimes print decimals, which are rounded.
bool Field(Row& row, const std::vector<std::string_view>& f, size_t i, int64_t* out) {
  int64_t v = 0;
  if (f[i] == "-1") {
    *out = -1;
    return true;
  }
  if (!row.Seconds(kName[i], f[i], &v)) return false;
  *out = v;
  return true;
}

}  // namespace

Result<Workload> ImportSwf(std::string_view text, const std::string& source,
                           const ImportOptions& options) {
  TraceBuilder b(source, "swf", options, text);
  LineReader lines(text);
  std::string_view line;
  std::vector<std::string_view> f;
  int64_t unix_start = -1;
  bool saw_anything = false;
  while (lines.Next(&line)) {
    line = Trim(line);
    if (line.empty()) continue;
    saw_anything = true;
    if (line.front() == ';') {
      // Header comments are "; Key: value"; only the wall-clock origin matters here.
      std::string_view c = Trim(line.substr(1));
      constexpr std::string_view kKey = "UnixStartTime:";
      if (c.substr(0, kKey.size()) == kKey) {
        Row row(b.source(), lines.line_number());
        int64_t v = 0;
        if (!row.Int("UnixStartTime", Trim(c.substr(kKey.size())), 0, kMaxSeconds, &v)) {
          return row.status();
        }
        unix_start = v;
      }
      continue;
    }
    b.CountRow();
    Row row(b.source(), lines.line_number());
    SplitWhitespace(line, &f);
    int64_t id = 0, submit = 0, wait = -1, run_time = 0, alloc = 0, req = 0, limit = 0, user = 0,
            group = 0, queue = 0;
    if (f.size() != kSwfFields) {
      row.BadRow("wrong column count", "expected 18 fields, found " + std::to_string(f.size()));
    } else if (Field(row, f, 0, &id) && Field(row, f, 1, &submit) && Field(row, f, 2, &wait) &&
               Field(row, f, 3, &run_time) && Field(row, f, 4, &alloc) && Field(row, f, 7, &req) &&
               Field(row, f, 8, &limit) && Field(row, f, 11, &user) && Field(row, f, 12, &group) &&
               Field(row, f, 14, &queue)) {
      const int64_t gpus = req > 0 ? req : alloc;
      if (submit < 0) {
        row.Bad("submit time", "missing value (-1)");
      } else if (run_time < 0) {
        row.BadRow("missing run time", "field 'run time': missing value (-1)");
      } else if (gpus <= 0) {
        row.BadRow("no processors",
                   "field 'requested processors': neither requested nor allocated processors "
                   "are given");
      } else if (gpus > kMaxGpus) {
        row.Bad("requested processors",
                std::to_string(gpus) + " is larger than " + std::to_string(kMaxGpus));
      }
    }
    if (row.kind() != Row::Kind::kJob) {
      GANTRY_RETURN_IF_ERROR(b.Account(row));
      continue;
    }
    Job& job = b.AddJob(row, std::string(f[0]), submit);
    job.gpus = static_cast<int32_t>(req > 0 ? req : alloc);
    job.run_time = run_time;
    if (wait >= 0) job.recorded_start = submit + wait;  // -1: the log does not say
    job.time_limit = limit > 0 ? limit : 0;
    job.user = b.User(user >= 0 ? f[11] : std::string_view());
    job.team = b.Team(group >= 0 ? f[12] : std::string_view());
    job.queue = b.Queue(queue >= 0 ? f[14] : std::string_view());
  }
  if (!saw_anything) return InvalidArgument(b.source() + ": empty trace");
  return std::move(b).Build(unix_start >= 0, unix_start >= 0 ? unix_start : 0);
}

}  // namespace gantry::trace_internal
