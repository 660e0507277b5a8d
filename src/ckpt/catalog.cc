#include "gantry/ckpt/catalog.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "gantry/cache/chunk.h"
#include "gantry/ckpt/manifest.h"

namespace gantry::ckpt {
namespace {

constexpr size_t kStepDigits = 12;
constexpr size_t kRankDigits = 5;

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int64_t Digits(std::string_view s) {
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

// The names inside a job's and a step's directory; the builders below and the parser are the
// only code that spells them.
constexpr std::string_view kLatestName = "latest";
constexpr std::string_view kManifestName = "manifest.json";
constexpr std::string_view kPartPrefix = "rank-";
constexpr std::string_view kPartSuffix = ".json";

}  // namespace

// The key builders of manifest.h live here, beside the parser, so the layout is spelled once.
std::string JobPrefix(std::string_view job) {
  return std::string(kCheckpointKeyPrefix) + std::string(job) + "/";
}
std::string StepPrefix(std::string_view job, int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*lld/", static_cast<int>(kStepDigits),
                static_cast<long long>(step));
  return JobPrefix(job) + buf;
}
std::string PartKey(std::string_view job, int64_t step, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*d", static_cast<int>(kRankDigits), rank);
  return StepPrefix(job, step) + std::string(kPartPrefix) + buf + std::string(kPartSuffix);
}
std::string PartKeyPrefix(std::string_view job, int64_t step) {
  return StepPrefix(job, step) + std::string(kPartPrefix);
}
std::string ManifestKey(std::string_view job, int64_t step) {
  return StepPrefix(job, step) + std::string(kManifestName);
}
std::string LatestKey(std::string_view job) { return JobPrefix(job) + std::string(kLatestName); }
std::string DrainRecordKey(std::string_view durable_url, std::string_view job, int64_t step,
                           int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*d-", static_cast<int>(kRankDigits), rank);
  const std::string step_dir = StepPrefix(job, step).substr(kCheckpointKeyPrefix.size());
  return std::string(kDrainRecordPrefix) + step_dir + std::string(kPartPrefix) + buf +
         HashChunk(durable_url).ToHex().substr(0, 16) + std::string(kPartSuffix);
}

std::optional<CheckpointKey> ParseCheckpointKey(std::string_view key) {
  if (!key.starts_with(kCheckpointKeyPrefix)) return std::nullopt;
  key.remove_prefix(kCheckpointKeyPrefix.size());
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  CheckpointKey out;
  out.job = std::string(key.substr(0, slash));
  std::string_view rest = key.substr(slash + 1);
  if (rest == kLatestName) {
    out.kind = CheckpointKey::Kind::kLatest;
    return out;
  }
  const size_t step_end = rest.find('/');
  if (step_end != kStepDigits || !AllDigits(rest.substr(0, kStepDigits))) return std::nullopt;
  out.step = Digits(rest.substr(0, kStepDigits));
  const std::string_view name = rest.substr(kStepDigits + 1);
  if (name == kManifestName) {
    out.kind = CheckpointKey::Kind::kManifest;
  } else if (name.starts_with(kPartPrefix) && name.ends_with(kPartSuffix) &&
             name.size() == kPartPrefix.size() + kRankDigits + kPartSuffix.size() &&
             AllDigits(name.substr(kPartPrefix.size(), kRankDigits))) {
    out.kind = CheckpointKey::Kind::kPart;
    out.rank = static_cast<int>(Digits(name.substr(kPartPrefix.size(), kRankDigits)));
  } else {
    out.kind = CheckpointKey::Kind::kOtherInStep;
  }
  return out;
}

Result<CheckpointLocation> ParseCheckpointLocation(std::string_view url) {
  if (url.empty()) return InvalidArgument("no checkpoint URL");
  std::string_view trimmed = url;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
  // "ROOT/ckpt/JOB": the key prefix ("ckpt/") right before the last segment marks the job's
  // directory. The root must keep a bucket or path of its own ("s3://ckpt/run-7" is bucket
  // "ckpt", a root), else the whole URL is the root.
  const std::string marker = "/" + std::string(kCheckpointKeyPrefix.substr(0, 4));  // "/ckpt"
  const size_t slash = trimmed.rfind('/');
  if (slash != std::string_view::npos && slash + 1 < trimmed.size()) {
    const std::string_view dir = trimmed.substr(0, slash);
    if (dir.ends_with(marker)) {
      const std::string_view root = dir.substr(0, dir.size() - marker.size());
      const size_t scheme = trimmed.find("://");
      const bool has_place =
          scheme == std::string_view::npos ? !root.empty() : root.size() > scheme + 3;
      if (has_place) {
        const std::string_view job = trimmed.substr(slash + 1);
        GANTRY_RETURN_IF_ERROR(ValidateJobName(job));
        return CheckpointLocation{std::string(root), std::string(job)};
      }
    }
  }
  return CheckpointLocation{std::string(url), "default"};
}

Result<int64_t> ParseStepNumber(std::string_view text) {
  if (text.size() > 18 || !AllDigits(text)) {
    return InvalidArgument("step '" + std::string(text) + "' is not a step number");
  }
  return Digits(text);
}

const char* StepStateName(StepState state) {
  switch (state) {
    case StepState::kCommitted:
      return "committed";
    case StepState::kIncomplete:
      return "incomplete";
    case StepState::kDamaged:
      return "damaged";
  }
  return "unknown";
}

Result<std::vector<std::string>> CheckpointCatalog::Jobs(int max_pages) {
  std::set<std::string> jobs;
  std::string token;
  for (int page = 0; max_pages <= 0 || page < max_pages; ++page) {
    GANTRY_ASSIGN_OR_RETURN(ListPage listed, root_.List(kCheckpointKeyPrefix, token, 1000));
    for (const ObjectInfo& o : listed.objects) {
      if (std::optional<CheckpointKey> k = ParseCheckpointKey(o.key)) jobs.insert(k->job);
    }
    if (listed.next_token.empty()) break;
    token = listed.next_token;
  }
  return std::vector<std::string>(jobs.begin(), jobs.end());
}

Result<std::optional<int64_t>> CheckpointCatalog::ReadLatestPointer(std::string_view job) {
  Result<std::string> pointer = root_.Get(LatestKey(job));
  if (!pointer.ok()) {
    if (pointer.status().code() == StatusCode::kNotFound) return std::optional<int64_t>();
    return pointer.status();
  }
  std::string_view text = *pointer;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  Result<int64_t> step = ParseStepNumber(text);
  if (!step.ok()) return std::optional<int64_t>();  // unusable: fall back to the listing
  return std::optional<int64_t>(*step);
}

Result<std::vector<StepEntry>> CheckpointCatalog::Steps(std::string_view job) {
  GANTRY_RETURN_IF_ERROR(ValidateJobName(job));
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, root_.ListAll(JobPrefix(job)));
  std::map<int64_t, StepEntry> steps;
  std::map<int64_t, std::vector<std::string>> part_keys;
  std::set<int64_t> with_manifest;
  for (const ObjectInfo& o : objects) {
    std::optional<CheckpointKey> k = ParseCheckpointKey(o.key);
    if (!k.has_value() || k->job != job || k->kind == CheckpointKey::Kind::kLatest) continue;
    StepEntry& e = steps[k->step];
    e.step = k->step;
    if (k->kind == CheckpointKey::Kind::kManifest) {
      with_manifest.insert(k->step);
    } else if (k->kind == CheckpointKey::Kind::kPart) {
      ++e.parts;
      e.created_unix = std::max(e.created_unix, o.mtime_unix);
      part_keys[k->step].push_back(o.key);
    }
  }
  std::vector<StepEntry> out;
  for (auto& [step, e] : steps) {
    if (with_manifest.contains(step)) {
      Result<CheckpointManifest> m = Manifest(job, step);
      const StatusCode code = m.ok() ? StatusCode::kOk : m.status().code();
      // Damage is what the parser or the checks found; a store failure fails the listing.
      const bool damaged = code == StatusCode::kDataLoss || code == StatusCode::kInvalidArgument;
      if (!m.ok() && !damaged && code != StatusCode::kNotFound) return m.status();
      if (m.ok() || damaged) {
        if (m.ok()) {
          e.state = StepState::kCommitted;
          e.world_size = m->world_size;
          e.bytes = m->TotalBytes();
          e.created_unix = m->created_unix;
          e.tags = m->tags;
        } else {
          e.state = StepState::kDamaged;
          e.problem = m.status().message();
        }
        out.push_back(std::move(e));
        continue;
      }
      // The manifest went between the listing and the read (removed): what is left counts.
    }
    if (e.parts == 0) continue;  // nothing of the step is left
    e.state = StepState::kIncomplete;
    // The parts of an unfinished save say how large the world is and how much they hold.
    for (const std::string& key : part_keys[step]) {
      Result<std::string> text = root_.Get(key);
      if (!text.ok()) {
        if (text.status().code() == StatusCode::kNotFound) continue;  // removed since listed
        return text.status();
      }
      Result<CheckpointManifest> part = CheckpointManifest::FromJson(*text, key);
      if (!part.ok()) continue;  // the world size stays unknown: the step is still listed
      e.world_size = part->world_size;
      for (const RankRecord& r : part->ranks) e.bytes += r.bytes_total;
    }
    out.push_back(std::move(e));
  }
  GANTRY_ASSIGN_OR_RETURN(std::optional<int64_t> pointer, ReadLatestPointer(job));
  StepEntry* latest = nullptr;
  for (StepEntry& e : out) {
    if (e.state != StepState::kCommitted) continue;
    if (pointer.has_value() ? e.step == *pointer : true) latest = &e;
  }
  if (latest == nullptr && pointer.has_value()) {
    // The pointer names no committed step: the newest committed one stands in, as on restore.
    for (StepEntry& e : out) {
      if (e.state == StepState::kCommitted) latest = &e;
    }
  }
  if (latest != nullptr) latest->latest = true;
  return out;
}

Result<CheckpointManifest> CheckpointCatalog::Manifest(std::string_view job, int64_t step) {
  GANTRY_RETURN_IF_ERROR(ValidateJobName(job));
  const std::string key = ManifestKey(job, step);
  Result<std::string> text = root_.Get(key);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound("no committed checkpoint at step " + std::to_string(step) + " of job '" +
                      std::string(job) + "' in " + root_.url());
    }
    return text.status();
  }
  const std::string what = root_.url() + "/" + key;
  GANTRY_ASSIGN_OR_RETURN(CheckpointManifest m, CheckpointManifest::FromJson(*text, what));
  if (m.kind != CheckpointManifest::Kind::kCheckpoint || m.step != step || m.job != job) {
    return DataLoss(what + ": is not the commit record of job '" + std::string(job) + "' step " +
                    std::to_string(step) + " (it names job '" + m.job + "' step " +
                    std::to_string(m.step) + ")");
  }
  return m;
}

Result<int64_t> CheckpointCatalog::Latest(std::string_view job) {
  GANTRY_ASSIGN_OR_RETURN(std::vector<StepEntry> steps, Steps(job));
  for (const StepEntry& e : steps) {
    if (e.latest) return e.step;
  }
  return NotFound("no committed checkpoint of job '" + std::string(job) + "' in " + root_.url());
}

Result<TierCopy> CheckpointCatalog::LatestCopyIn(std::string_view job, ObjectStore& tier) {
  GANTRY_ASSIGN_OR_RETURN(int64_t step, Latest(job));
  GANTRY_ASSIGN_OR_RETURN(CheckpointManifest manifest, Manifest(job, step));
  TierCopy copy;
  copy.step = step;
  for (const PackRecord& c : manifest.StoredChunks()) {
    ++copy.chunks;
    copy.bytes += c.size;
    Result<ObjectInfo> info = tier.Head(ChunkKey(c.id));
    if (info.ok()) {
      ++copy.chunks_held;
      copy.bytes_held += c.size;
    } else if (info.status().code() != StatusCode::kNotFound) {
      return info.status();
    }
  }
  return copy;
}

}  // namespace gantry::ckpt
