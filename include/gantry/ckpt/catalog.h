// CheckpointCatalog: what a checkpoint root holds, read from its keys — the jobs under it, each
// job's steps with their state (committed, incomplete, damaged) and which one is latest. It is
// the one place that parses the checkpoint key layout (docs/formats/checkpoint.md):
//
//   ckpt/<job>/<step, 12 digits>/rank-<5 digits>.json   one rank's part
//   ckpt/<job>/<step, 12 digits>/manifest.json          the commit record
//   ckpt/<job>/latest                                    the newest commit's step, as text
//
// (the keys are built by StepPrefix, PartKey, ManifestKey and LatestKey in manifest.h). The
// command line and the daemon list checkpoints through it without opening a checkpoint engine,
// and a damaged manifest is reported as a damaged step instead of failing the whole listing.
//
//   CheckpointCatalog catalog(*root);
//   GANTRY_ASSIGN_OR_RETURN(std::vector<StepEntry> steps, catalog.Steps("llama-7b"));
//
// Thread-safe as far as the store is: it holds no state besides the store reference, which
// must outlive it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/ckpt/manifest.h"
#include "gantry/common/status.h"
#include "gantry/storage/object_store.h"

namespace gantry::ckpt {

// Every checkpoint key starts with this.
inline constexpr std::string_view kCheckpointKeyPrefix = "ckpt/";

// A key of the layout above, taken apart.
struct CheckpointKey {
  enum class Kind { kPart, kManifest, kLatest, kOtherInStep };
  Kind kind = Kind::kOtherInStep;
  std::string job;
  int64_t step = -1;  // -1 for kLatest
  int rank = -1;      // kPart only
};
// nullopt for a key outside the layout (not under ckpt/, a malformed step directory, ...).
std::optional<CheckpointKey> ParseCheckpointKey(std::string_view key);

// A step as a user types it: digits only, at most 18 of them; InvalidArgument otherwise.
Result<int64_t> ParseStepNumber(std::string_view text);

// Where one job's checkpoints live, as a single URL names it: the checkpoint root and the job.
struct CheckpointLocation {
  std::string root;  // the durable tier, as EngineOptions::durable_url takes it
  std::string job;
};
// The one reading of such a URL (a job's `#GANTRY --checkpoint=URL`): "ROOT/ckpt/JOB" -- the
// job's own directory in the layout above -- names JOB under ROOT; any other URL is a root and
// names its job "default" (GANTRY_CKPT_JOB's default). "s3://b/runs/ckpt/llama-7b" is job
// "llama-7b" under "s3://b/runs"; "s3://ckpt/run-7" is a root (bucket "ckpt": the root part
// before "/ckpt/" must name a bucket or path). InvalidArgument for an empty URL, or a JOB that is
// not one key segment.
Result<CheckpointLocation> ParseCheckpointLocation(std::string_view url);

// How much of a job's newest committed checkpoint one tier (a node's local tier) holds: the
// distinct chunks of its manifest (a pack counted once, by its whole size) and their raw bytes,
// against those whose object the tier has. Presence only: a damaged copy is caught by its
// checksum when a restore reads it, and read elsewhere.
struct TierCopy {
  int64_t step = -1;
  uint64_t chunks = 0;
  uint64_t chunks_held = 0;
  uint64_t bytes = 0;
  uint64_t bytes_held = 0;
  // bytes_held / bytes; a checkpoint of no bytes counts as held when it has no chunks.
  double fraction() const {
    return bytes == 0 ? (chunks_held == chunks ? 1.0 : 0.0)
                      : static_cast<double>(bytes_held) / static_cast<double>(bytes);
  }
  bool operator==(const TierCopy&) const = default;
};

enum class StepState {
  kCommitted,   // manifest present and valid
  kIncomplete,  // parts but no manifest: a save in flight, or abandoned
  kDamaged,     // a manifest that cannot be read back (truncated, bad checksum, wrong step)
};
const char* StepStateName(StepState state);  // "committed", "incomplete", "damaged"

struct StepEntry {
  int64_t step = 0;
  StepState state = StepState::kIncomplete;
  bool latest = false;       // the step the latest pointer resolves to
  int parts = 0;             // rank parts present
  int world_size = 0;        // 0: unknown (no readable part or manifest)
  uint64_t bytes = 0;        // tensor bytes (of the parts present, for an incomplete step)
  int64_t created_unix = 0;  // the manifest's time, or the newest part's mtime
  std::vector<std::string> tags;
  std::string problem;  // kDamaged: what is wrong, naming the object
};

class CheckpointCatalog {
 public:
  explicit CheckpointCatalog(ObjectStore& root) : root_(root) {}

  // Jobs with at least one key under the root, sorted. max_pages > 0 reads at most that many
  // listing pages (a cheap hint for an error message on a large S3 root); 0 reads all.
  Result<std::vector<std::string>> Jobs(int max_pages = 0);

  // Every step of `job`, ascending. Errors only for a failing store (a damaged manifest is a
  // kDamaged entry); InvalidArgument for a job name that is not one key segment.
  Result<std::vector<StepEntry>> Steps(std::string_view job);

  // The commit record of `step`, checked (checksum, kind, job and step). NotFound naming the
  // step, job and root when there is none; DataLoss (or the parser's InvalidArgument) naming
  // the object when it is damaged.
  Result<CheckpointManifest> Manifest(std::string_view job, int64_t step);

  // The newest committed step: the latest pointer when it names a committed step, else the
  // newest committed step listed. NotFound when the job has none.
  Result<int64_t> Latest(std::string_view job);

  // The newest committed checkpoint of `job` (Latest, then Manifest) measured against `tier`:
  // one Head per distinct chunk there. NotFound when the job has none; the catalog's errors for
  // a damaged manifest or a failing store; a tier's error other than NotFound.
  Result<TierCopy> LatestCopyIn(std::string_view job, ObjectStore& tier);

  ObjectStore& root() { return root_; }

 private:
  // The step the latest pointer names, if it names one (unset, unparsable: nullopt).
  Result<std::optional<int64_t>> ReadLatestPointer(std::string_view job);

  ObjectStore& root_;
};

}  // namespace gantry::ckpt
