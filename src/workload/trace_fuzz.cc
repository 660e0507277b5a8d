// libFuzzer target for the trace importers and ResolveWorkload. The first input byte picks the
// format ('P' philly, 'O' openb, 'H' helios, 'S' sacct, 'W' swf; any other byte: byte % 5); the
// rest is the trace text. Every import runs with and without skip_bad_rows, and every workload
// that imports is resolved against a small fixed cluster. Bugs show up as crashes, sanitizer
// reports, leaks or hangs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gantry/cluster/cluster.h"
#include "gantry/workload/trace.h"

namespace {

gantry::Cluster MakeCluster() {
  gantry::ClusterBuilder b("fuzz", {"rack"});
  auto v100 = b.AddGpuType({"V100M16", 16, 50, 300});
  auto a100 = b.AddGpuType({"A100", 80, 60, 400});
  if (!v100.ok() || !a100.ok()) std::abort();
  bool ok = b.OpenDomain("r0", 0).ok() &&
            b.AddNode({.name = "n0", .gpu_type = *v100, .gpus = 8}).ok() &&
            b.AddNode({.name = "n1", .gpu_type = *v100, .gpus = 8}).ok() &&
            b.AddNode({.name = "n2", .gpu_type = *a100, .gpus = 4}).ok() && b.CloseDomain().ok() &&
            b.AddTeam({.name = "vc1", .quota_gpus = 8, .shares = 8}).ok();
  if (!ok) std::abort();
  b.SetDefaultQuota(16);
  auto c = std::move(b).Build();
  if (!c.ok()) std::abort();
  return std::move(c).value();
}

gantry::TraceFormat PickFormat(uint8_t byte) {
  switch (byte) {
    case 'P':
      return gantry::TraceFormat::kPhilly;
    case 'O':
      return gantry::TraceFormat::kOpenb;
    case 'H':
      return gantry::TraceFormat::kHelios;
    case 'S':
      return gantry::TraceFormat::kSacct;
    case 'W':
      return gantry::TraceFormat::kSwf;
    default:
      return static_cast<gantry::TraceFormat>(byte % 5);
  }
}

// Checks the importer's promises; a broken one aborts so the fuzzer reports it.
void CheckWorkload(const gantry::Workload& w) {
  if (w.stats.jobs != static_cast<int64_t>(w.jobs.size())) std::abort();
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const gantry::Job& j = w.jobs[i];
    if (j.index != static_cast<gantry::JobIndex>(i) || j.gpus <= 0 || j.run_time < 0 ||
        j.submit < 0 || j.time_limit < 1) {
      std::abort();
    }
    if (j.time_limit_estimated && j.time_limit < j.run_time) std::abort();
    if (i > 0 && w.jobs[i - 1].submit > j.submit) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const gantry::Cluster cluster = MakeCluster();
  if (size == 0) return 0;
  const gantry::TraceFormat format = PickFormat(data[0]);
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  for (bool skip : {false, true}) {
    gantry::ImportOptions options;
    options.skip_bad_rows = skip;
    options.round_fractional_gpus = !skip;
    auto w = gantry::ImportTraceText(text, "fuzz", format, options);
    if (!w.ok()) {
      if (skip && w.status().message().empty()) std::abort();
      continue;
    }
    CheckWorkload(*w);
    (void)gantry::ComputeTraceStats(*w);
    for (bool skip_jobs : {false, true}) {
      gantry::Workload copy = *w;
      gantry::ResolveOptions resolve;
      resolve.skip_bad_jobs = skip_jobs;
      auto teams = gantry::ResolveWorkload(copy, cluster, resolve);
      if (skip_jobs && !teams.ok()) std::abort();  // skipping must always succeed
      if (teams.ok()) CheckWorkload(copy);
    }
  }
  return 0;
}
