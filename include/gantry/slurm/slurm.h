// A client of a live Slurm cluster: observes its nodes and jobs and starts, cancels and requeues
// jobs, so that Gantry can decide where Slurm's jobs run while Slurm stays the resource manager
// (docs/slurm.md describes the division of labour).
//
// Observation runs `sinfo --json` and `squeue --json` (Slurm's OpenAPI v0.0.38 documents, 22.05);
// actions run `scontrol` and `scancel`. Why the command-line tools and not libslurm or
// slurmrestd: they need no extra daemon and no authentication set-up (slurmrestd needs both, and
// in 22.05 cannot even set a job's node list), and they keep Gantry free of libslurm's ABI, which
// changes with every Slurm release. One observation (sinfo + squeue) costs about 55 ms on an idle
// machine and 100-200 ms on two loaded cores with 100 jobs (docs/slurm.md), inside a 1 s cycle.
//
//   SlurmClient slurm({});  // SLURM_CONF from the environment, the tools from /usr/bin
//   GANTRY_ASSIGN_OR_RETURN(auto jobs, slurm.Jobs());
//   for (const SlurmJob& j : jobs)
//     if (j.held) GANTRY_RETURN_IF_ERROR(slurm.StartOnNodes(j.id, {"n3"}));
//
// Errors are status codes (callers never read the message): NotFound for a job or node Slurm
// does not know; FailedPrecondition when Slurm refuses a well-formed request in the job's or
// node's current state (an unknown or unsuitable node list, a job that is no longer pending, a
// job that already finished); PermissionDenied when Slurm denies the caller; Unavailable when
// slurmctld cannot be reached; DeadlineExceeded when a command outlives its timeout; NotFound
// when a Slurm command is not installed; IoError for any other failure or output Gantry cannot
// read. Thread-compatible: a SlurmClient holds only its options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"

namespace gantry::slurm {

// A node's state as Gantry's engine needs it. Slurm's base state plus the flags that matter:
// DRAIN turns idle/mixed/allocated into kDraining (jobs still running) or kDrained (none left).
enum class NodeState {
  kIdle,
  kMixed,      // some CPUs or GPUs allocated
  kAllocated,  // fully allocated
  kDraining,   // drain requested, jobs still running: no new jobs
  kDrained,    // drained and empty
  kDown,       // down or not responding
  kUnknown,    // anything else (future, power saving, rebooting ...)
};
const char* NodeStateName(NodeState state);

// One GPU entry of a GRES string ("gpu:h100:8" -> {"h100", 8}).
struct GresGpus {
  std::string type;  // lower case; empty when untyped
  int count = 0;
};

struct SlurmNode {
  std::string name;
  NodeState state = NodeState::kUnknown;
  std::string slurm_state;  // Slurm's own words, e.g. "idle", "mixed", "down" plus flags
  std::string reason;       // why it is down or drained (empty otherwise)
  // NOT_RESPONDING: slurmctld lost contact (state kDown) but has not set the node DOWN yet, so
  // its jobs may still run; Slurm sets it DOWN after SlurmdTimeout.
  bool not_responding = false;
  int cpus = 0;
  int alloc_cpus = 0;
  int64_t memory_mb = 0;
  int64_t alloc_memory_mb = 0;
  // GPUs from GRES "gpu[:type]:count". A node may hold several types; Gantry's cluster model
  // has one per node, so gpu_type is the first one's and gpus the sum (import rejects mixes).
  std::string gpu_type;  // lower case as in slurm.conf, e.g. "h100"; empty for untyped GRES
  int gpus = 0;
  int gpus_used = 0;
  std::vector<GresGpus> gres_gpus;  // every GPU entry of its GRES, in order
  std::vector<std::string> partitions;
};

enum class JobState {
  kPending,
  kRunning,
  kSuspended,
  kCompleting,
  kCompleted,
  kCancelled,
  kFailed,
  kTimeout,
  kNodeFail,
  kPreempted,
  kOutOfMemory,
  kOther,  // BOOT_FAIL, DEADLINE, REQUEUED ... (see slurm_state)
};
const char* JobStateName(JobState state);

struct SlurmJob {
  int64_t id = 0;
  std::string name;
  std::string user;
  std::string account;  // the Gantry team
  std::string partition;
  std::string qos;  // its Slurm QOS by name ("normal" unless it asked for one); empty: none given
  JobState state = JobState::kOther;
  std::string slurm_state;   // e.g. "PENDING"
  std::string state_reason;  // e.g. "JobHeldUser", "Resources", "None"
  // Pending with priority 0 (held by Gantry's job_submit.lua, by scontrol hold or by its user):
  // Slurm will not start it until someone releases it.
  bool held = false;
  int node_count = 0;
  int gpus_per_node = 0;                    // from tres_per_node "gres:gpu[:type]:N"
  std::string gpu_type;                     // requested type, empty when any
  int gpus = 0;                             // GPUs of the whole job, from tres_req_str gres/gpu=N
  std::vector<std::string> nodes;           // where it runs or ran, expanded
  std::vector<std::string> required_nodes;  // its ReqNodeList, expanded
  int64_t submit_time = 0;                  // Unix seconds; 0 when not yet
  int64_t start_time = 0;
  int64_t end_time = 0;
  int64_t time_limit_minutes = 0;  // 0: unlimited
  int restart_count = 0;
  // False for a job that may not be requeued (sbatch --no-requeue, or JobRequeue=0 without
  // --requeue): `scontrol requeuehold` refuses it ("Requested operation is presently disabled").
  bool requeue = true;
  // Its AdminComment: Gantry's job_submit.lua writes the job's data declarations there
  // ("gantry-data dataset=URL ... checkpoint=URL"; see ParseDataDeclarations in mapping.h).
  std::string admin_comment;
};

struct SlurmOptions {
  // slurm.conf of the cluster; empty: the SLURM_CONF of this process (or Slurm's default).
  std::string slurm_conf;
  // Directory of sinfo, squeue, scontrol, scancel, sacctmgr; empty: /usr/bin.
  std::string bin_dir;
  // Longest any one command may run.
  int timeout_ms = 30000;
};

// The accounting association of an account (a team) with its GPU limit.
struct SlurmAccount {
  std::string name;
  int gpu_limit = -1;  // GrpTRES gres/gpu; -1 when none
  int fairshare = 1;   // Fairshare (Shares); 1 is Slurm's default
};

// A QOS of the cluster (sacctmgr show qos).
struct SlurmQos {
  std::string name;
  int64_t priority = 0;              // Priority
  std::vector<std::string> preempt;  // Preempt: the QOS its jobs may preempt
  double usage_factor = 1.0;         // UsageFactor
  int64_t grace_time = 0;            // GraceTime, seconds (0: preempted at once)
};

// One switch of topology.conf (or `scontrol show topology`).
struct SlurmSwitch {
  std::string name;
  std::vector<std::string> nodes;     // leaf switch: its nodes, expanded
  std::vector<std::string> switches;  // inner switch: its child switches, expanded
};

// OK for a signal name scancel --signal takes ("TERM", "USR1", "9"); InvalidArgument otherwise
// (nothing that could carry another option or word into the command).
Status CheckSignalName(std::string_view signal);

class SlurmClient {
 public:
  explicit SlurmClient(SlurmOptions options);

  Result<std::vector<SlurmNode>> Nodes() const;
  // Every job slurmctld still remembers (finished ones for MinJobAge, 300 s by default).
  Result<std::vector<SlurmJob>> Jobs() const;
  // NotFound when slurmctld does not know `id` (any more).
  Result<SlurmJob> Job(int64_t id) const;

  // Starts a held job on exactly `nodes`: pins its node list and node count, then releases it.
  // Slurm then starts it there within about a second (or as soon as the nodes are free). Also
  // makes the job eligible now: Slurm delays a requeued job's begin time by two minutes.
  Status StartOnNodes(int64_t id, const std::vector<std::string>& nodes) const;
  // Puts a released job that has not started back on hold.
  Status Hold(int64_t id) const;
  // Releases a held job without pinning nodes: Slurm's own scheduler places it (fail-open).
  Status Release(int64_t id) const;
  Status Cancel(int64_t id) const;
  // Sends `signal` (a name: "TERM", "USR1", ...) to every process of a running job: its batch
  // script and its steps (scancel --signal --full).
  Status Signal(int64_t id, const std::string& signal) const;
  // Stops a running job and queues it again, held, so that Gantry decides again where it runs.
  // PermissionDenied when the job may not be requeued (--no-requeue); FailedPrecondition when
  // it is not running.
  Status RequeueHeld(int64_t id) const;
  // Administrator actions on nodes (tests use them; the engine observes their effects).
  Status DrainNode(const std::string& node, const std::string& reason) const;
  Status ResumeNode(const std::string& node) const;

  // The cluster's name (ClusterName in slurm.conf).
  Result<std::string> ClusterName() const;
  // The switches slurmctld loaded from topology.conf; empty when it has no topology plugin.
  Result<std::vector<SlurmSwitch>> Topology() const;
  // The accounts of this cluster with their limits (sacctmgr; needs slurmdbd).
  Result<std::vector<SlurmAccount>> Accounts() const;
  // The QOS slurmdbd knows (sacctmgr; needs slurmdbd).
  Result<std::vector<SlurmQos>> QosList() const;

  // OK when the commands a controller runs (sinfo, squeue, scontrol, scancel) are executable
  // files in bin_dir and slurm_conf, when set (here or in SLURM_CONF), can be read. Asks
  // slurmctld nothing, so a check before a start passes while slurmctld is still coming up.
  // NotFound or PermissionDenied naming the first that is not.
  Status CheckCommands() const;

  // Runs one of the Slurm commands (argv[0] a name in bin_dir) and returns its stdout, mapping
  // failures to the codes above. Public for tests and tools that need a command not wrapped here.
  Result<std::string> Run(std::vector<std::string> argv) const;

 private:
  // scancel -v FLAGS ID, with its refusals (printed on stderr, exit 0) as errors.
  Status Scancel(int64_t id, const std::vector<std::string>& flags) const;

  SlurmOptions options_;
};

// Parsers of Slurm's output, separate so they are tested without a cluster.
Result<std::vector<SlurmNode>> ParseSinfoJson(std::string_view json);
Result<std::vector<SlurmJob>> ParseSqueueJson(std::string_view json);
// Topology in topology.conf syntax (also what `scontrol show topology` prints).
Result<std::vector<SlurmSwitch>> ParseTopology(std::string_view text);
// `sacctmgr -nP show assoc format=account,user,grptres,fairshare` (account rows only).
Result<std::vector<SlurmAccount>> ParseAssociations(std::string_view text);
// `sacctmgr -nP show qos format=name,priority,preempt,usagefactor`.
Result<std::vector<SlurmQos>> ParseQosList(std::string_view text);
// Expands a Slurm hostlist: "n[1-3,7],gpu[08-09]" -> n1 n2 n3 n7 gpu08 gpu09.
Result<std::vector<std::string>> ExpandHostlist(std::string_view hostlist);

// The GPU entries of a GRES string: "gpu:h100:8(S:0-1),gpu:a100:2" -> {h100 8} {a100 2}.
Result<std::vector<GresGpus>> ParseGresGpus(std::string_view gres);

// The status code for a Slurm error message (the text of Slurm's fixed errno table, e.g.
// "Invalid job id specified"), so callers decide on codes; `context` prefixes the message.
Status StatusFromSlurmError(std::string_view stderr_text, const std::string& context);

}  // namespace gantry::slurm
