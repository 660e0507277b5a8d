// Per-job priority breakdowns written the way Slurm's `sprio -l` prints them, so a site can put
// a simulated instant beside its own sprio output (docs/formats/outputs.md, "sprio").
//
// A row comes from Engine::PriorityTerms: each factor's weight x value goes to sprio's column
// for it (age -> AGE; fairtree, fairshare -> FAIRSHARE; slurm-job-size, job-size -> JOBSIZE;
// partition -> PARTITION; qos -> QOS), printed rounded to an integer as sprio prints it. PRIORITY
// is the sum of every term (factors without a sprio column too, such as the oracles) truncated to
// an unsigned 32-bit integer and at least 1, as slurmctld computes it (slurm_priority.h). SITE,
// ASSOC and NICE are 0: Gantry has no site factor, association priority or nice value yet.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gantry/sched/engine.h"

namespace gantry {

struct SprioRow {
  std::string job_id;
  std::string partition;
  std::string user;
  uint32_t priority = 1;
  int64_t site = 0;
  int64_t age = 0;
  int64_t assoc = 0;
  int64_t fairshare = 0;
  int64_t job_size = 0;
  int64_t partition_factor = 0;
  int64_t qos = 0;
  int64_t nice = 0;
};

SprioRow MakeSprioRow(const std::vector<PriorityTerm>& terms, std::string job_id,
                      std::string partition, std::string user);

// Writes `sprio -l`'s header and one line per row (the order given), columns right-aligned to
// sprio's default widths and never truncated: JOBID PARTITION USER PRIORITY SITE AGE ASSOC
// FAIRSHARE JOBSIZE PARTITION QOS NICE TRES (TRES is empty).
void WriteSprio(std::ostream& out, const std::vector<SprioRow>& rows);

}  // namespace gantry
