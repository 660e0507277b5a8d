// Drain records and DrainLocalTier (drain.h): finishing, on a node, the saves whose process
// ended between `local` and `durable`.
#include "gantry/ckpt/drain.h"

#include <algorithm>
#include <future>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/engine.h"
#include "gantry/cache/chunk_store.h"
#include "gantry/ckpt/catalog.h"
#include "gantry/common/thread_pool.h"

namespace gantry::ckpt {

namespace {

constexpr int kDrainRecordVersion = 1;

// One record's outcome, beyond the counts.
enum class Outcome { kDrained, kDiscarded, kFailed };

struct Opened {
  std::shared_ptr<ObjectStore> durable;
  std::unique_ptr<ChunkStore> chunks;  // [local, durable]; null when opening failed
  Status error;                        // why it failed
};

// The chunk namespace the record's save wrote through.
Status OpenRoot(const std::shared_ptr<ObjectStore>& local, const DrainRecord& rec,
                const DrainOptions& o, Clock& clock, Opened& root) {
  if (o.open) {
    GANTRY_ASSIGN_OR_RETURN(root.durable, o.open(rec.durable_url));
  } else {
    GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> opened,
                            OpenObjectStore(rec.durable_url, o.store_options));
    root.durable = std::move(opened);
  }
  ChunkStoreOptions co = CheckpointTiers(local, root.durable, rec.durable_codec);
  co.chunk_size = rec.part.chunk_size;
  co.clock = &clock;
  co.store_options = o.store_options;
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ChunkStore> chunks, ChunkStore::Open(std::move(co)));
  // As the engine does before its first part: a GC that cannot read checkpoints must refuse.
  GANTRY_RETURN_IF_ERROR(chunks->DeclareRootKind("ckpt"));
  root.chunks = std::move(chunks);
  return Status::Ok();
}

std::string Name(const DrainRecord& r) {
  return r.part.job + "@" + std::to_string(r.part.step) + " rank " +
         std::to_string(r.part.ranks.empty() ? 0 : r.part.ranks.front().rank) + " (" +
         r.durable_url + ")";
}

// Commits `rec`'s step if every rank of its run has a part in the root and no manifest is
// there; true when this call wrote the manifest.
Result<bool> CommitIfComplete(ObjectStore& durable, const DrainRecord& rec) {
  const CheckpointManifest& mine = rec.part;
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objs,
                          durable.ListAll(PartKeyPrefix(mine.job, mine.step)));
  std::vector<CheckpointManifest> parts;
  for (const ObjectInfo& info : objs) {
    Result<std::string> text = durable.Get(info.key);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;
      return text.status();
    }
    Result<CheckpointManifest> m = CheckpointManifest::FromJson(*text, info.key);
    // Another run's part (a crashed attempt's, or a relaunch's) is not this checkpoint's.
    if (m.ok() && m->run_id == mine.run_id && m->world_size == mine.world_size) {
      parts.push_back(std::move(*m));
    }
  }
  if (parts.size() < static_cast<size_t>(mine.world_size)) return false;
  GANTRY_ASSIGN_OR_RETURN(CheckpointManifest merged, MergeParts(std::move(parts)));
  GANTRY_RETURN_IF_ERROR(PutManifestOnce(durable, ManifestKey(mine.job, mine.step), merged));
  GANTRY_RETURN_IF_ERROR(WriteLatestPointer(durable, mine.job, mine.step));
  return true;
}

Outcome DrainOne(Opened& root, const DrainRecord& rec, const DrainOptions& o, DrainReport& report) {
  const CheckpointManifest& part = rec.part;
  const std::string name = Name(rec);
  ObjectStore& durable = *root.durable;
  auto fail = [&](const Status& s) {
    report.errors.push_back(name + ": " + s.ToString());
    ++report.failed;
    return Outcome::kFailed;
  };
  auto discard = [&](const std::string& why) {
    report.errors.push_back(name + ": discarded: " + why);
    ++report.discarded;
    return Outcome::kDiscarded;
  };
  // Nothing to finish when the step is committed already, or when a later step was saved,
  // committed or not: the job went on (this run, or a relaunch from an earlier checkpoint),
  // and reviving this step now would only confuse its history.
  Result<ObjectInfo> manifest = durable.Head(ManifestKey(part.job, part.step));
  if (manifest.ok()) return discard("step " + std::to_string(part.step) + " is committed");
  if (manifest.status().code() != StatusCode::kNotFound) return fail(manifest.status());
  CheckpointCatalog catalog(durable);
  Result<std::vector<StepEntry>> steps = catalog.Steps(part.job);
  if (!steps.ok()) return fail(steps.status());
  if (!steps->empty() && steps->back().step > part.step) {
    return discard("a later save of its job (step " + std::to_string(steps->back().step) +
                   ") is in the root");
  }

  // The chunks the root lacks, copied (verified) from the local tier in parallel.
  const int durable_tier = root.chunks->durable_tier();
  const std::vector<PackRecord> stored = part.StoredChunks();
  struct Copy {
    Status status;
    bool copied = false;
  };
  std::vector<std::future<Copy>> copies;
  {
    ThreadPool pool(std::max(1, o.threads));
    for (const PackRecord& c : stored) {
      copies.push_back(pool.Submit([&root, durable_tier, id = c.id] {
        Copy r;
        r.status = root.chunks->HasDurableCopy(id);
        if (r.status.code() != StatusCode::kNotFound) return r;
        r.status = root.chunks->CopyChunk(0, durable_tier, id);
        r.copied = r.status.ok();
        return r;
      }));
    }
  }
  Status first;
  bool lost = false;
  for (size_t i = 0; i < copies.size(); ++i) {
    Copy r = copies[i].get();
    if (r.copied) {
      ++report.chunks_copied;
      report.bytes_copied += stored[i].size;
    }
    if (r.status.ok()) continue;
    // Absent from the node, or rotten there, and not in the root: no source is left.
    const bool gone =
        r.status.code() == StatusCode::kNotFound || r.status.code() == StatusCode::kDataLoss;
    if (gone && !lost) {
      lost = true;
      first = r.status.WithContext("chunk " + stored[i].id.ToHex());
    } else if (!gone && first.ok()) {
      first = r.status.WithContext("chunk " + stored[i].id.ToHex());
    }
  }
  if (lost) return discard(first.ToString());
  if (!first.ok()) return fail(first);

  Status put = durable.Put(PartKey(part.job, part.step, part.ranks.front().rank), part.ToJson());
  if (!put.ok()) return fail(put);
  ++report.parts_written;
  Result<bool> committed = CommitIfComplete(durable, rec);
  if (!committed.ok()) {
    // The part is durable: rank 0, or another node's drain, can still commit. Said, not kept.
    report.errors.push_back(name +
                            ": part written, commit failed: " + committed.status().ToString());
  } else if (*committed) {
    report.committed.push_back(part.job + "@" + std::to_string(part.step));
  }
  return Outcome::kDrained;
}

}  // namespace

std::string DrainRecord::ToJson() const {
  nlohmann::json j = {{"version", kDrainRecordVersion},
                      {"kind", "drain"},
                      {"durable_url", durable_url},
                      {"durable_codec", CodecName(durable_codec)},
                      // As text: the part's checksum covers its own serialisation.
                      {"part", part.ToJson()}};
  return j.dump() + "\n";
}

Result<DrainRecord> DrainRecord::FromJson(std::string_view json, std::string_view what) {
  const std::string where = "drain record " + std::string(what) + ": ";
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument(where + "not a JSON object");
  if (j.value("kind", "") != "drain") return InvalidArgument(where + "kind is not \"drain\"");
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      j["version"].get<int>() != kDrainRecordVersion) {
    return InvalidArgument(where + "unknown version (this build reads version " +
                           std::to_string(kDrainRecordVersion) + ")");
  }
  DrainRecord r;
  if (!j.contains("durable_url") || !j["durable_url"].is_string() ||
      j["durable_url"].get<std::string>().empty()) {
    return InvalidArgument(where + "no durable_url");
  }
  r.durable_url = j["durable_url"].get<std::string>();
  if (!j.contains("durable_codec") || !j["durable_codec"].is_string()) {
    return InvalidArgument(where + "no durable_codec");
  }
  Result<Codec> codec = ParseCodec(j["durable_codec"].get<std::string>());
  if (!codec.ok()) return codec.status().WithContext(where);
  r.durable_codec = *codec;
  if (!j.contains("part") || !j["part"].is_string()) return InvalidArgument(where + "no part");
  GANTRY_ASSIGN_OR_RETURN(r.part, CheckpointManifest::FromJson(j["part"].get<std::string>(), what));
  if (r.part.kind != CheckpointManifest::Kind::kPart || r.part.ranks.size() != 1 ||
      r.part.ranks.front().rank < 0 || r.part.ranks.front().rank >= r.part.world_size ||
      r.part.step < 0) {
    return InvalidArgument(where + "its part is not one rank's part");
  }
  // The job names keys in the root: one key segment, as every writer's.
  Status job = ValidateJobName(r.part.job);
  if (!job.ok()) return job.WithContext(where);
  return r;
}

Result<DrainReport> DrainLocalTier(std::shared_ptr<ObjectStore> local,
                                   const DrainOptions& options) {
  Clock& clock = options.clock != nullptr ? *options.clock : DefaultClock();
  DrainReport report;
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, local->ListAll(kDrainRecordPrefix));
  struct Item {
    std::string key;
    DrainRecord record;
  };
  std::vector<Item> items;
  for (const ObjectInfo& info : objects) {
    ++report.records;
    if (options.min_age_seconds > 0 &&
        (info.mtime_unix == 0 || info.mtime_unix > clock.Now() - options.min_age_seconds)) {
      ++report.skipped;  // a live save's, most likely: it finishes on its own
      continue;
    }
    Result<std::string> text = local->Get(info.key);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) {  // its save finished meanwhile
        --report.records;
        continue;
      }
      report.errors.push_back(info.key + ": " + text.status().ToString());
      ++report.failed;
      continue;
    }
    Result<DrainRecord> rec = DrainRecord::FromJson(*text, info.key);
    // The key must be the one its save would have written: a record cannot be planted under
    // another job's name, and one that is not what it says is not trusted.
    if (!rec.ok() || info.key != DrainRecordKey(rec->durable_url, rec->part.job, rec->part.step,
                                                rec->part.ranks.front().rank)) {
      report.errors.push_back(
          info.key + ": discarded: " +
          (rec.ok() ? std::string("not at its own key") : rec.status().ToString()));
      ++report.discarded;
      (void)local->Delete(info.key);
      continue;
    }
    if (options.allow) {
      Status allowed = options.allow(rec->durable_url);
      if (!allowed.ok()) {
        report.errors.push_back(info.key + ": skipped: " + allowed.ToString());
        ++report.skipped;
        continue;
      }
    }
    items.push_back({info.key, std::move(*rec)});
  }
  // Oldest step first: a save whose chunks an earlier save of its process was still writing
  // (deduplicated against it) finds them durable.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.record.part.step < b.record.part.step;
  });
  std::map<std::pair<std::string, Codec>, Opened> roots;
  for (Item& item : items) {
    if (options.cancel != nullptr && options.cancel->load()) break;  // the rest stay
    const DrainRecord& rec = item.record;
    auto [it, fresh] = roots.try_emplace({rec.durable_url, rec.durable_codec});
    Opened& root = it->second;
    if (fresh) {
      root.error = OpenRoot(local, rec, options, clock, root);
      if (!root.error.ok()) root.chunks.reset();
    }
    if (root.chunks == nullptr) {
      report.errors.push_back(Name(rec) + ": " + root.error.ToString());
      ++report.failed;
      continue;
    }
    if (DrainOne(root, rec, options, report) != Outcome::kFailed) {
      (void)local->Delete(item.key);
    }
  }
  return report;
}

}  // namespace gantry::ckpt
