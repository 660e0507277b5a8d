// Staging through a node's gantry-agent, from the caller's side: the state of one dataset's
// staging (StageState, the JSON the agent's /v1/stage routes answer with) and the calls gantryd
// makes to ask an agent to stage a dataset into its node's shard cache and to poll it
// (docs/storage.md, "Peer agent"; the staging itself is include/gantry/data/stage.h); and the
// call that asks how much of a job's newest checkpoint the node's local tier holds
// (GET /v1/checkpoint; the measure is CheckpointCatalog::LatestCopyIn).
//
//   GANTRY_ASSIGN_OR_RETURN(StageState s,
//                           RequestStage("http://node7:7070", token, "s3://bkt/train", "1234"));
//   ...
//   GANTRY_ASSIGN_OR_RETURN(s, GetStage("http://node7:7070", token, "s3://bkt/train"));
//   if (s.state == "done") Release(job);
//
// The calls are thread-safe (each opens its own connection).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gantry/ckpt/catalog.h"
#include "gantry/ckpt/drain.h"
#include "gantry/common/status.h"

namespace gantry {

// One dataset's staging on one agent. JSON (every field always present):
//   {"dataset": URL, "state": "queued"|"staging"|"done"|"failed", "shards_total": N,
//    "shards_done": k, "bytes_total": B, "bytes_done": b, "bytes_fetched": f, "error": "...",
//    "code": "NotFound"|..., "jobs": ["123", ...], "started": unix_s, "finished": unix_s,
//    "pinned_until": unix_s}
struct StageState {
  std::string dataset;           // the URL, as asked
  std::string state = "queued";  // queued, staging, done or failed
  uint64_t shards_total = 0;     // 0 until the dataset has been listed
  uint64_t shards_done = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;
  uint64_t bytes_fetched = 0;  // of bytes_done, those fetched from a source (not already cached)
  // Failed: what went wrong and its StatusCodeName ("NotFound", "DataLoss",
  // "ResourceExhausted": the cache holds only part of it, ...); "" otherwise.
  std::string error;
  std::string code;
  std::vector<std::string> jobs;  // the jobs that asked for it (informative), in asking order
  int64_t started = 0;            // unix seconds the latest attempt started; 0: not yet
  int64_t finished = 0;           // unix seconds it ended (done or failed); 0: not yet
  // Staged for a job that has not released it yet: its shards are pinned against the cache's
  // LRU eviction until then at the latest (the agent's clock, unix seconds); 0: not pinned.
  // (Absent from an older agent's answer: 0.)
  int64_t pinned_until = 0;

  bool terminal() const { return state == "done" || state == "failed"; }
  // The failure as a Status (OK unless failed).
  Status status() const;
};

nlohmann::json StageStateToJson(const StageState& s);
// InvalidArgument for a document that is not a StageState.
Result<StageState> StageStateFromJson(const nlohmann::json& j);

// POST AGENT_URL/v1/stage?dataset=DATASET[&job=JOB]: starts staging (or answers the state of a
// dataset already staging or staged; a failed one is retried). `agent_url` is "http://HOST:PORT";
// `token` the cluster's agent token ("" sends none); `job` may be "". Errors by the agent's
// answer: 400 InvalidArgument (a URL scheme it refuses), 401/403 PermissionDenied, 501
// Unimplemented (the agent has no --data-cache); Unavailable when it cannot be reached.
Result<StageState> RequestStage(const std::string& agent_url, const std::string& token,
                                const std::string& dataset, const std::string& job);
// DELETE AGENT_URL/v1/stage?dataset=DATASET&job=JOB: JOB no longer needs the dataset pinned
// (it started, or ended); the pins go when no job holds them. The state; NotFound when the
// agent was never asked.
Result<StageState> ReleaseStage(const std::string& agent_url, const std::string& token,
                                const std::string& dataset, const std::string& job);
// GET AGENT_URL/v1/stage?dataset=DATASET: the state; NotFound when the agent was never asked.
Result<StageState> GetStage(const std::string& agent_url, const std::string& token,
                            const std::string& dataset);
// GET AGENT_URL/v1/stage: every dataset the agent was asked to stage since it started.
Result<std::vector<StageState>> ListStages(const std::string& agent_url, const std::string& token);

// GET /v1/checkpoint's answer: {"checkpoint": URL, "step": S, "chunks": N, "chunks_held": k,
// "bytes": B, "bytes_held": b} (every field always present).
nlohmann::json TierCopyToJson(const std::string& checkpoint, const ckpt::TierCopy& c);
// InvalidArgument for a document that is not one.
Result<ckpt::TierCopy> TierCopyFromJson(const nlohmann::json& j);

// GET AGENT_URL/v1/checkpoint?url=CHECKPOINT: how much of the newest committed checkpoint at
// CHECKPOINT (a root, or ROOT/ckpt/JOB: ckpt::ParseCheckpointLocation) the agent's local tier
// holds. NotFound when the job has no committed checkpoint; PermissionDenied for a URL outside
// the agent's --stage-allow prefixes (or a wrong token); Unavailable when it cannot be reached.
Result<ckpt::TierCopy> LocateCheckpoint(const std::string& agent_url, const std::string& token,
                                        const std::string& checkpoint);

// The state of an agent's checkpoint drains (POST|GET /v1/drain): "draining" while one is
// queued or running, else "idle"; how many finished since the agent started, and the last one's
// report (or why it could not list the tier).
struct DrainStatus {
  std::string state = "idle";
  int64_t runs = 0;
  ckpt::DrainReport last;
  std::string error;
};
// {"state", "runs", "error", "last": {"records", "parts_written", "committed": ["JOB@STEP"],
// "skipped", "discarded", "failed", "chunks_copied", "bytes_copied", "errors": [...]}}.
nlohmann::json DrainReportToJson(const ckpt::DrainReport& r);
nlohmann::json DrainStatusToJson(const DrainStatus& s);

// POST AGENT_URL/v1/drain: the agent drains its local tier's drain records in the background
// (ckpt/drain.h: saves whose process ended before they were durable) and answers its drain
// state at once. Unavailable when it cannot be reached; PermissionDenied for a wrong token.
Result<DrainStatus> RequestDrain(const std::string& agent_url, const std::string& token);
// GET AGENT_URL/v1/drain: the drain state, with the last drain's report.
Result<DrainStatus> GetDrain(const std::string& agent_url, const std::string& token);

}  // namespace gantry
