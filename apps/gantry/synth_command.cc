// `gantry trace synth`: writes a synthetic, Philly-shaped workload as a Philly CSV, for scaling
// benchmarks (scripts/bench) and what-if runs; `gantry sim --format philly` reads it back.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "gantry/workload/synth.h"

namespace gantry::cli {
namespace {

struct SynthArgs {
  int64_t jobs = 10000;
  int64_t cluster_gpus = 0;
  double load = 0.9;
  int teams = 20;
  uint64_t seed = 1;
  std::string out;
};

int RunSynth(const SynthArgs& a) {
  SynthOptions o;
  o.jobs = a.jobs;
  o.cluster_gpus = a.cluster_gpus;
  o.load = a.load;
  o.teams = a.teams;
  o.seed = a.seed;
  Result<Workload> w = SynthesizeWorkload(o);
  if (!w.ok()) {
    std::fprintf(stderr, "gantry trace synth: %s\n", w.status().message().c_str());
    return kExitUsage;
  }
  Status s = WritePhillyCsv(*w, a.out);
  if (!s.ok()) {
    std::fprintf(stderr, "gantry trace synth: %s\n", s.message().c_str());
    return kExitFailure;
  }
  const Time span = w->jobs.empty() ? 0 : w->jobs.back().submit;
  std::printf("wrote %s: %zu jobs over %.1f days, offered load %.3f on %lld GPUs (seed %llu)\n",
              a.out.c_str(), w->jobs.size(), static_cast<double>(span) / 86400.0,
              OfferedLoad(*w, a.cluster_gpus), static_cast<long long>(a.cluster_gpus),
              static_cast<unsigned long long>(a.seed));
  return kExitOk;
}

}  // namespace

void RegisterSynthCommand(CLI::App& app) {
  CLI::App* trace = nullptr;
  for (CLI::App* sub : app.get_subcommands([](CLI::App* s) { return s->get_name() == "trace"; })) {
    trace = sub;
  }
  if (trace == nullptr) trace = app.add_subcommand("trace", "Import and inspect workload traces");
  auto args = std::make_shared<SynthArgs>();
  CLI::App* synth = trace->add_subcommand(
      "synth",
      "Write a synthetic Philly-shaped workload (Philly CSV) for a cluster of a given size.");
  synth->footer(
      "Example:\n  gantry trace synth --jobs 100000 --cluster-gpus 100000 --out synth.csv\n"
      "  gantry sim --cluster dgx-h100:nodes=12500 --trace synth.csv --format philly\n\n"
      "Same options and seed give a byte-identical file. Time limits are not written: gantry sim\n"
      "estimates them again, identically when its --seed equals this --seed.");
  synth->add_option("--jobs", args->jobs, "Number of jobs")->capture_default_str();
  synth->add_option("--cluster-gpus", args->cluster_gpus, "GPUs of the target cluster")->required();
  synth
      ->add_option("--load", args->load,
                   "Offered load: GPU-seconds asked / (cluster GPUs x arrival span)")
      ->capture_default_str();
  synth->add_option("--teams", args->teams, "Number of teams (Zipf-like shares)")
      ->capture_default_str();
  synth->add_option("--seed", args->seed, "Random seed")->capture_default_str();
  synth->add_option("--out", args->out, "Output CSV file")->required();
  synth->callback([args]() {
    const int rc = RunSynth(*args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gantry::cli
