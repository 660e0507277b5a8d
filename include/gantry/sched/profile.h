// Scheduling profiles: named sets of plugins with weights and arguments, read from YAML.
//
// Built-in profiles (fifo, fifo-easy, slurm-like, ...) are defined in the same YAML format
// (src/sched/builtin_profiles.yaml.inc, listed by `gantry sim --list-profiles`); a site adds or
// overrides profiles with a file of its own. Format: docs/formats/profiles.md.
#pragma once

#include <string>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/sched/plugin.h"

namespace gantry {

struct PluginSpec {
  std::string name;
  double weight = 1.0;
  PluginArgs args;
};

enum class BackfillMode { kNone, kEasy, kConservative };
enum class BelowShareFirst { kNone, kBackfill, kAll };

struct Profile {
  std::string name;
  std::string description;
  std::vector<PluginSpec> priority;   // weighted factors, summed
  std::vector<PluginSpec> admission;  // all must admit
  PluginSpec placement;
  BackfillMode backfill = BackfillMode::kNone;
  // Most pending jobs a cycle examines (Slurm's bf_max_job_test). 0 = unlimited.
  int max_jobs_per_cycle = 0;
  // With max_scan > 0, a job the cycle settles without trying a placement (its shape already
  // failed this cycle, or admission refused it) counts toward max_scan instead of max_jobs, so
  // a job that fits is found behind any number of queued jobs like ones that did not. 0: every
  // job counts toward max_jobs, as in Slurm.
  int max_scan_per_cycle = 0;
  // Which jobs of teams at or above their entitlement (their weighted max-min fair share of the
  // cluster's GPUs among the teams that want GPUs now, as share_fairness measures it) wait until
  // the cycle has examined every other job: kBackfill, those behind a blocked head, so the GPUs
  // the head cannot use go first to teams short of their share; kAll, every one, so the head too
  // is the first job of a team below its share. They are examined after the others in priority
  // order, so no GPU a job of theirs could take is left idle. Default: kNone (priority order).
  BelowShareFirst below_share_first = BelowShareFirst::kNone;
  PluginSpec preemption;
  Duration priority_recalc_interval = 300;  // Slurm's PriorityCalcPeriod
};

// Parses a YAML document `profiles: {name: {...}, ...}`; errors name source:line and the field.
Result<std::vector<Profile>> ParseProfiles(const std::string& yaml_text, const std::string& source);
Result<std::vector<Profile>> LoadProfilesFile(const std::string& path);
// The built-in profiles, in a fixed order.
const std::vector<Profile>& BuiltinProfiles();
// Looks `name` up in `extra` first, then the built-ins; the error lists what exists.
Result<Profile> FindProfile(const std::string& name, const std::vector<Profile>& extra);

}  // namespace gantry
