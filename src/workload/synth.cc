#include "gantry/workload/synth.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <vector>

#include "gantry/common/rng.h"

namespace gantry {
namespace {

// Job sizes and their probabilities. Philly is 93% 1-GPU, ~2% each 2/4/8, 0.3% larger; we keep a
// little more mass on gangs (1.5% of 16-256) so topology-aware placement is exercised at scale.
struct SizeWeight {
  int gpus;
  double p;
};
constexpr SizeWeight kSizes[] = {{1, 0.900},  {2, 0.030},  {4, 0.030},   {8, 0.025},   {16, 0.0075},
                                 {32, 0.004}, {64, 0.002}, {128, 0.001}, {256, 0.0005}};

// Run times: log-normal around Philly's median (~20 min) with its spread (sigma ~2 in log space),
// clamped to [1 minute, 1 week].
constexpr double kRunLogMean = 7.0;
constexpr double kRunLogSigma = 2.0;
constexpr Duration kMinRun = 60;
constexpr Duration kMaxRun = 7 * 86400;

// Stream tags so that per-job draws and arrival draws never share a sequence.
constexpr uint64_t kJobStream = 0x6a6f6273ULL;      // "jobs"
constexpr uint64_t kArrivalStream = 0x61727276ULL;  // "arrv"

int DrawGpus(Rng& rng, int64_t cluster_gpus) {
  const double u = rng.Uniform();
  double acc = 0;
  int gpus = kSizes[std::size(kSizes) - 1].gpus;
  for (const SizeWeight& s : kSizes) {
    acc += s.p;
    if (u < acc) {
      gpus = s.gpus;
      break;
    }
  }
  // Sizes are powers of two, so halving keeps the gang a whole number of nodes (or one node).
  while (gpus > 1 && gpus > cluster_gpus) gpus /= 2;
  return gpus;
}

Duration DrawRunTime(Rng& rng) {
  const double v = std::exp(kRunLogMean + kRunLogSigma * rng.Normal());
  if (!(v < static_cast<double>(kMaxRun))) return kMaxRun;
  return std::max<Duration>(kMinRun, static_cast<Duration>(std::llround(v)));
}

}  // namespace

Result<Workload> SynthesizeWorkload(const SynthOptions& o) {
  if (o.jobs < 0) return InvalidArgument("synth: jobs must be >= 0");
  if (o.jobs > INT32_MAX) return InvalidArgument("synth: at most 2^31-1 jobs");
  if (o.cluster_gpus <= 0) return InvalidArgument("synth: cluster_gpus must be > 0");
  if (!(o.load > 0) || !std::isfinite(o.load)) return InvalidArgument("synth: load must be > 0");
  if (o.teams <= 0) return InvalidArgument("synth: teams must be > 0");

  Workload w;
  char name[160];
  std::snprintf(name, sizeof name, "synth:jobs=%" PRId64 ",gpus=%" PRId64 ",load=%g,seed=%" PRIu64,
                o.jobs, o.cluster_gpus, o.load, o.seed);
  w.source = name;
  w.format = "synth";
  w.epoch_unix = kSynthEpochUnix;
  for (int t = 0; t < o.teams; ++t) {
    std::snprintf(name, sizeof name, "team%02d", t);
    w.teams.emplace_back(name);
  }
  w.users = w.teams;  // one user per team, as the Philly importer does
  w.queues = {"default"};

  // Zipf-like team shares: team k gets weight 1 / (k + 1).
  std::vector<double> team_cdf(o.teams);
  double acc = 0;
  for (int t = 0; t < o.teams; ++t) team_cdf[t] = (acc += 1.0 / (t + 1));
  for (double& c : team_cdf) c /= acc;

  const size_t n = static_cast<size_t>(o.jobs);
  w.jobs.resize(n);
  double work = 0;  // GPU-seconds offered
  for (size_t i = 0; i < n; ++i) {
    Rng rng(Mix(Mix(o.seed, kJobStream), i));
    Job& j = w.jobs[i];
    j.index = static_cast<JobIndex>(i);
    j.id = "synth-" + std::to_string(i);
    j.source_line = static_cast<int32_t>(i + 2);  // its line in WritePhillyCsv's output
    j.gpus = DrawGpus(rng, o.cluster_gpus);
    // Gang shape as the Philly importer gives it: one node up to 8 GPUs, else whole 8-GPU nodes.
    j.nodes = j.gpus <= 8 ? 1 : j.gpus / 8;
    j.gpus_per_node = j.gpus / j.nodes;
    j.run_time = DrawRunTime(rng);
    const double u = rng.Uniform();
    j.team = static_cast<int32_t>(std::upper_bound(team_cdf.begin(), team_cdf.end(), u) -
                                  team_cdf.begin());
    if (j.team >= o.teams) j.team = o.teams - 1;
    j.user = j.team;
    j.queue = 0;
    work += static_cast<double>(j.gpus) * static_cast<double>(j.run_time);
  }

  // Poisson arrivals conditioned on the span: exponential gaps, rescaled so the last submit falls
  // at span = work / (load * GPUs). The first job arrives at t = 0 (as an importer rebases it).
  if (n > 1) {
    const double span = work / (o.load * static_cast<double>(o.cluster_gpus));
    Rng arrivals(Mix(o.seed, kArrivalStream));
    std::vector<double> cum(n, 0.0);
    for (size_t i = 1; i < n; ++i) cum[i] = cum[i - 1] - std::log1p(-arrivals.Uniform());
    const double scale = span / cum[n - 1];
    for (size_t i = 0; i < n; ++i)
      w.jobs[i].submit = static_cast<Time>(std::llround(cum[i] * scale));
  }

  TimeLimitModel model = o.time_limits;
  model.seed = o.seed;
  ApplyTimeLimitModel(w, model);
  w.stats.rows_read = o.jobs;
  w.stats.jobs = o.jobs;
  return w;
}

double OfferedLoad(const Workload& w, int64_t cluster_gpus) {
  if (w.jobs.empty() || cluster_gpus <= 0) return 0;
  double work = 0;
  Time first = w.jobs.front().submit, last = first;
  for (const Job& j : w.jobs) {
    work += static_cast<double>(j.gpus) * static_cast<double>(j.run_time);
    first = std::min(first, j.submit);
    last = std::max(last, j.submit);
  }
  const double span = static_cast<double>(std::max<Time>(1, last - first));
  return work / (static_cast<double>(cluster_gpus) * span);
}

Status WritePhillyCsv(const Workload& w, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) return IoError("cannot open '" + path + "' for writing");
  std::fputs("timestamp,duration,num_gpus,gpu_time,cluster\n", f.get());
  for (const Job& j : w.jobs) {
    const std::time_t t = static_cast<std::time_t>(w.epoch_unix + j.submit);
    std::tm tm{};
    if (gmtime_r(&t, &tm) == nullptr) {
      return InvalidArgument("job " + j.id + ": submit time out of range");
    }
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    const char* team = j.team >= 0 && static_cast<size_t>(j.team) < w.teams.size()
                           ? w.teams[j.team].c_str()
                           : "default";
    std::fprintf(f.get(), "%s,%" PRId64 ".0,%d,%" PRId64 ".0,%s\n", stamp,
                 static_cast<int64_t>(j.run_time), j.gpus,
                 static_cast<int64_t>(j.run_time) * j.gpus, team);
  }
  if (std::ferror(f.get())) return IoError("error writing '" + path + "'");
  FILE* raw = f.release();
  if (std::fclose(raw) != 0) return IoError("error closing '" + path + "'");
  return Status::Ok();
}

}  // namespace gantry
