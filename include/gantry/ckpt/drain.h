// Finishing a save on a node's behalf. A save that has all its chunks in the node-local tier
// leaves a drain record there (its rank's part, and the durable root and codec it was saving
// to) before it reports `local`; the saving process removes the record once its part is in
// the durable root. If the process ends first -- the job finished, was preempted or killed
// between `local` and `durable` -- the record and the chunks stay on the node, and
// DrainLocalTier, run there later by `gantry ckpt drain` or by gantry-agent on gantryd's
// order when the job ends, finishes the save: it copies the chunks the durable root lacks
// (each verified against its id first), writes the part, and, when the parts of every rank of
// that run are there and no manifest is, commits the checkpoint (manifest, then `latest`,
// never moving it backwards) exactly as rank 0 would have. Whoever writes the last part --
// rank 0's engine or any node's drain -- commits, and a second commit of the same data is a
// no-op (the manifest is created once), so drains on several nodes, and a drain racing a live
// engine, agree.
//
// A record is removed once its part is in the durable root, or when it should not or cannot be
// finished (its step is committed, a later step of its job was saved -- the job went on, this
// run or a relaunch -- or one of its chunks is in neither place); a transient failure (the durable
// root unreachable) leaves it for the next drain. Records are drained oldest step first, so a save
// whose chunks an earlier save of the same process was still writing finds them.
//
//   DrainOptions o;
//   GANTRY_ASSIGN_OR_RETURN(DrainReport r, DrainLocalTier(local_tier_store, o));
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cache/chunk.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/storage/object_store.h"

namespace gantry::ckpt {

// What a save leaves in the local tier until its part is durable (docs/formats/checkpoint.md,
// "Drain records").
struct DrainRecord {
  std::string durable_url;  // the checkpoint root the save was writing to
  Codec durable_codec = Codec::kNone;
  CheckpointManifest part;  // kind part, one rank; every chunk id filled in

  std::string ToJson() const;
  // InvalidArgument naming `what` for malformed JSON, an unknown version or codec, or a part
  // that does not parse (manifest.h's checks, its checksum included).
  static Result<DrainRecord> FromJson(std::string_view json, std::string_view what);
};

struct DrainOptions {
  // Only records of saves to roots this returns OK for are drained; the others are left and
  // reported as skipped with the status's message. gantry-agent passes its stage_allow check,
  // since any process on the node can write a record naming any root. Null: every root.
  std::function<Status(const std::string& durable_url)> allow;
  // Opens a record's durable root (tests inject stores); null: OpenObjectStore with
  // store_options.
  std::function<Result<std::shared_ptr<ObjectStore>>(const std::string& durable_url)> open;
  StoreOptions store_options;
  int threads = 4;  // chunk copies in flight per record
  // Records younger than this many seconds are left alone: a live engine writes its part
  // within moments of draining its chunks, and a drain racing it would only copy the same
  // chunks twice. 0: drain every record (after the job ended: nothing else is saving).
  int64_t min_age_seconds = 0;
  Clock* clock = nullptr;  // record ages and commit times; default: the real clock
  // Set (from another thread) to stop after the record being drained; the rest stay for the
  // next drain. Null: never.
  const std::atomic<bool>* cancel = nullptr;
};

struct DrainReport {
  int records = 0;        // records found
  int parts_written = 0;  // parts this drain wrote to their durable root
  int skipped = 0;        // records left alone (not allowed, too young)
  int discarded = 0;      // records removed as unfinishable (see above); reasons in `errors`
  uint64_t chunks_copied = 0;
  uint64_t bytes_copied = 0;  // raw bytes of the chunks copied
  // "JOB@STEP" of the checkpoints this drain committed.
  std::vector<std::string> committed;
  // One line per record not drained or discarded, naming it; records that failed stay.
  std::vector<std::string> errors;
  int failed = 0;  // records left for the next drain after an error
};

// Drains every drain record in `local` (a node's local tier). Errors only when the tier cannot
// be listed; each record's own failure is counted and described in the report.
Result<DrainReport> DrainLocalTier(std::shared_ptr<ObjectStore> local, const DrainOptions& options);

}  // namespace gantry::ckpt
