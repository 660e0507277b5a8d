// `gantry ckpt`: list, inspect, verify, remove and garbage-collect the checkpoints of a job under
// a checkpoint root (the engine in include/gantry/ckpt/checkpoint.h), and convert them to and
// from plain torch.save files through the Python module (`python3 -m gantry export|import`).
//
//   gantry ckpt --root s3://bkt/ckpt --job llama-7b ls
//   gantry ckpt --root /shared/ckpt verify --all
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "gantry/ckpt/checkpoint.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/storage/object_store.h"

#ifndef GANTRY_PYTHONPATH
#define GANTRY_PYTHONPATH ""
#endif

namespace gantry::cli {
namespace {

using ckpt::CheckpointEngine;
using ckpt::CheckpointInfo;
using ckpt::CheckpointManifest;

struct CkptArgs {
  std::string root;
  std::string job;
  std::string local;
  std::vector<std::string> peers;
  StoreOptions store;
  int threads = 8;
  bool json = false;
  // show, verify, export: a step number or "latest".
  std::string step = "latest";
  bool all = false;
  bool all_tensors = false;
  bool force = false;
  std::vector<std::string> steps;  // rm
  int keep_last = 0;
  int64_t keep_every = 0;
  bool no_keep_tagged = false;
  int64_t grace_seconds = 3600;
  bool dry_run = false;
  std::vector<std::string> positionals;  // export: [STEP] OUT.pt
  std::string file;                      // export: OUT.pt; import: IN.pt
  int64_t import_step = -1;              // import --step
  std::vector<std::string> tags;         // import --tag
};

int Fail(const std::string& what, const Status& s) { return ReportFailure("ckpt " + what, s); }

// "812 B", "64.0 KiB", "1.50 GiB".
std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

// "2025-01-31T12:00:00Z"; "-" when unknown.
std::string IsoTime(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// A progress line on stderr, only on a terminal; safe to call from the engine's threads.
class Progress {
 public:
  Progress(bool enabled, std::string label) : enabled_(enabled), label_(std::move(label)) {}
  ~Progress() {
    if (drawn_) std::fputs("\r\033[K", stderr);
  }
  ckpt::ProgressFn Callback() {
    if (!enabled_) return {};
    return [this](uint64_t done, uint64_t total) {
      std::lock_guard<std::mutex> lock(mu_);
      const int pct = total ? static_cast<int>(done * 100 / total) : 100;
      if (pct == last_) return;
      last_ = pct;
      drawn_ = true;
      std::fprintf(stderr, "\r\033[K%s: %s / %s  %3d%%", label_.c_str(), HumanBytes(done).c_str(),
                   HumanBytes(total).c_str(), pct);
      std::fflush(stderr);
    };
  }

 private:
  bool enabled_;
  std::string label_;
  std::mutex mu_;
  bool drawn_ = false;
  int last_ = -1;
};

// Fills what the flags left empty from the variables the Python API reads, so one environment
// serves both.
void ApplyEnvironment(CkptArgs& a) {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? "" : v;
  };
  if (a.root.empty()) a.root = env("GANTRY_CKPT_ROOT");
  if (a.job.empty()) a.job = env("GANTRY_CKPT_JOB");
  if (a.job.empty()) a.job = "default";
  if (a.local.empty()) a.local = env("GANTRY_CKPT_LOCAL");
  if (a.peers.empty()) {
    std::string peers = env("GANTRY_CKPT_PEERS");
    size_t start = 0;
    while (start < peers.size()) {
      size_t comma = peers.find(',', start);
      if (comma == std::string::npos) comma = peers.size();
      if (comma > start) a.peers.push_back(peers.substr(start, comma - start));
      start = comma + 1;
    }
  }
}

// A directory tier would be created by opening it; an inspection command must not invent an
// empty root out of a typo, so a missing directory is an error here.
Status CheckDirectoryExists(const std::string& url, const char* what) {
  std::string path = url;
  if (path.starts_with("file://")) {
    path = path.substr(7);
  } else if (path.find("://") != std::string::npos) {
    return Status::Ok();
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::Ok();
  if (std::filesystem::exists(path, ec)) {
    return InvalidArgument(std::string(what) + " '" + url + "' is not a directory");
  }
  return NotFound(std::string(what) + " '" + url + "' does not exist");
}

// An overlay that keeps writes and deletes in memory and never changes the store below, so
// `gc --dry-run` runs the engine's own retention and sweep and reports exactly what they would
// remove. Thread-safe.
class DryRunStore final : public ObjectStore {
 public:
  explicit DryRunStore(std::unique_ptr<ObjectStore> base)
      : base_(std::move(base)), name_("dry-run(" + std::string(base_->backend()) + ")") {}

  std::string_view backend() const override { return name_; }
  std::string url() const override { return base_->url(); }
  bool SupportsCreateIfAbsent() const override { return true; }

  Status Put(std::string_view key, std::string_view data, const PutOptions& options) override {
    if (options.create_if_absent && Head(key).ok()) {
      return FailedPrecondition(url() + ": put '" + std::string(key) + "': exists");
    }
    std::lock_guard<std::mutex> lock(mu_);
    deleted_.erase(std::string(key));
    written_[std::string(key)] = std::string(data);
    return Status::Ok();
  }
  Result<std::string> Get(std::string_view key) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = written_.find(std::string(key));
      if (it != written_.end()) return it->second;
      if (deleted_.count(std::string(key)) > 0) return Gone("get", key);
    }
    return base_->Get(key);
  }
  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override {
    GANTRY_ASSIGN_OR_RETURN(std::string all, Get(key));
    if (offset > all.size()) {
      return OutOfRange(url() + ": get '" + std::string(key) + "': offset past the end");
    }
    return all.substr(offset, length == kToEnd ? std::string::npos : length);
  }
  Result<ObjectInfo> Head(std::string_view key) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = written_.find(std::string(key));
      if (it != written_.end()) return ObjectInfo{it->first, it->second.size(), time(nullptr), ""};
      if (deleted_.count(std::string(key)) > 0) return Gone("head", key);
    }
    return base_->Head(key);
  }
  // One page with everything: the overlay must merge and filter the whole listing anyway.
  Result<ListPage> List(std::string_view prefix, std::string_view page_token,
                        int max_keys) override {
    ListPage page;
    if (!page_token.empty()) return page;
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> below, base_->ListAll(prefix));
    std::map<std::string, ObjectInfo> merged;
    std::lock_guard<std::mutex> lock(mu_);
    for (ObjectInfo& o : below) {
      if (deleted_.count(o.key) == 0) merged[o.key] = std::move(o);
    }
    for (const auto& [key, data] : written_) {
      if (key.starts_with(prefix)) merged[key] = ObjectInfo{key, data.size(), time(nullptr), ""};
    }
    for (auto& [key, info] : merged) page.objects.push_back(std::move(info));
    return page;
  }
  Status Delete(std::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    written_.erase(std::string(key));
    deleted_.insert(std::string(key));
    return Status::Ok();
  }

 private:
  Status Gone(const char* op, std::string_view key) const {
    return NotFound(url() + ": " + op + " '" + std::string(key) + "': deleted in this dry run");
  }

  std::unique_ptr<ObjectStore> base_;
  std::string name_;
  std::mutex mu_;
  std::map<std::string, std::string> written_;  // guarded by mu_
  std::set<std::string> deleted_;               // guarded by mu_
};

struct OpenFlags {
  bool with_local = false;  // open the local tier (gc cleans it)
  bool dry_run = false;
};

Result<std::unique_ptr<CheckpointEngine>> Open(CkptArgs& a, OpenFlags flags = {}) {
  if (a.root.empty()) {
    return InvalidArgument(
        "no checkpoint root: pass --root URL (a path, file:///dir or s3://bucket/prefix) or set "
        "GANTRY_CKPT_ROOT");
  }
  if (a.threads < 1) return InvalidArgument("--threads must be at least 1");
  GANTRY_RETURN_IF_ERROR(ckpt::ValidateJobName(a.job).WithContext("--job"));
  GANTRY_RETURN_IF_ERROR(CheckDirectoryExists(a.root, "checkpoint root"));
  ckpt::EngineOptions o;
  o.durable_url = a.root;
  o.job = a.job;
  o.peers = a.peers;
  o.io_threads = a.threads;
  o.store_options = a.store;
  o.gc_grace_seconds = a.grace_seconds;  // an engine option, used only by gc
  // Only the garbage collector touches the local tier: reading commands leave it alone, and a
  // missing local directory is then no reason to fail.
  if (flags.with_local && !a.local.empty()) {
    GANTRY_RETURN_IF_ERROR(CheckDirectoryExists(a.local, "local tier"));
    o.local_url = a.local;
  }
  if (flags.dry_run) {
    GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> durable,
                            OpenObjectStore(o.durable_url, o.store_options));
    o.durable_store = std::make_shared<DryRunStore>(std::move(durable));
    if (!o.local_url.empty()) {
      GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> local,
                              OpenObjectStore(o.local_url, o.store_options));
      o.local_store = std::make_shared<DryRunStore>(std::move(local));
    }
  }
  return CheckpointEngine::Open(std::move(o));
}

// The other jobs under the root, as a hint for an error about this one: a wrong or missing
// --job is the likeliest reason for "no checkpoint". Best effort: the first 10 pages of the
// listing at most, so a typo on a large S3 root costs a few requests, not a full scan.
std::string JobsHint(CheckpointEngine& engine) {
  std::set<std::string> jobs;
  std::string token;
  for (int page = 0; page < 10; ++page) {
    Result<ListPage> listed = engine.durable().List("ckpt/", token, 1000);
    if (!listed.ok()) break;
    for (const ObjectInfo& o : listed->objects) {
      const size_t slash = o.key.find('/', 5);
      if (slash != std::string::npos) jobs.insert(o.key.substr(5, slash - 5));
    }
    if (listed->next_token.empty()) break;
    token = listed->next_token;
  }
  jobs.erase(engine.options().job);
  if (jobs.empty()) return "";
  return " (other jobs under this root: " +
         Join(std::vector<std::string>(jobs.begin(), jobs.end()), ", ") + "; pass --job)";
}

Result<int64_t> Latest(CheckpointEngine& engine) {
  Result<int64_t> latest = engine.LatestStep();
  if (!latest.ok() && latest.status().code() == StatusCode::kNotFound) {
    return NotFound(latest.status().message() + JobsHint(engine));
  }
  return latest;
}

Result<int64_t> ParseStep(const std::string& text) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("step '" + text + "' is neither a step number nor 'latest'");
  }
  return static_cast<int64_t>(std::stoll(text));
}

Result<int64_t> ResolveStep(CheckpointEngine& engine, const std::string& text) {
  if (text == "latest") return Latest(engine);
  return ParseStep(text);
}

// A row of `ls`: the engine's listing, plus what the parts of an unfinished save say about it
// (the engine reports only committed checkpoints' world size and bytes).
struct StepRow {
  CheckpointInfo info;
  bool latest = false;
};

Result<std::vector<StepRow>> ListSteps(CheckpointEngine& engine) {
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, engine.List());
  Result<int64_t> latest = engine.LatestStep();
  if (!latest.ok() && latest.status().code() != StatusCode::kNotFound) return latest.status();
  std::vector<StepRow> rows;
  for (CheckpointInfo& info : infos) {
    StepRow row;
    row.latest = latest.ok() && *latest == info.step;
    if (!info.committed) {
      const std::string& job = engine.options().job;
      GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                              engine.durable().ListAll(ckpt::StepPrefix(job, info.step)));
      for (const ObjectInfo& o : objects) {
        if (o.key.find("/rank-") == std::string::npos) continue;
        Result<std::string> text = engine.durable().Get(o.key);
        if (!text.ok()) continue;  // removed since the listing
        Result<CheckpointManifest> part = CheckpointManifest::FromJson(*text, o.key);
        if (!part.ok()) continue;  // shown as "?": the listing still names the step
        info.world_size = part->world_size;
        for (const ckpt::RankRecord& r : part->ranks) info.bytes += r.bytes_total;
      }
    }
    row.info = std::move(info);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string StatusText(const StepRow& r) {
  if (r.info.committed) return r.latest ? "committed, latest" : "committed";
  return "incomplete (" + std::to_string(r.info.parts) + "/" +
         (r.info.world_size > 0 ? std::to_string(r.info.world_size) : std::string("?")) + " parts)";
}

int List(CkptArgs& a) {
  auto engine = Open(a);
  if (!engine.ok()) return Fail("ls", engine.status());
  auto rows = ListSteps(**engine);
  if (!rows.ok()) return Fail("ls", rows.status());
  if (a.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const StepRow& r : *rows) {
      out.push_back({{"step", r.info.step},
                     {"committed", r.info.committed},
                     {"latest", r.latest},
                     {"parts", r.info.parts},
                     {"world_size", r.info.world_size},
                     {"bytes", r.info.bytes},
                     {"created_unix", r.info.created_unix},
                     {"created", IsoTime(r.info.created_unix)},
                     {"tags", r.info.tags}});
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (rows->empty()) {
    std::fprintf(stderr, "no checkpoints of job '%s' in %s%s\n", a.job.c_str(),
                 (*engine)->durable().url().c_str(), JobsHint(**engine).c_str());
    return kExitOk;
  }
  std::printf("%12s  %-24s %5s %11s  %-20s  %s\n", "STEP", "STATUS", "WORLD", "SIZE",
              "CREATED (UTC)", "TAGS");
  for (const StepRow& r : *rows) {
    const std::string world =
        r.info.world_size > 0 ? std::to_string(r.info.world_size) : std::string("?");
    std::printf("%12lld  %-24s %5s %11s  %-20s  %s\n", static_cast<long long>(r.info.step),
                StatusText(r).c_str(), world.c_str(), HumanBytes(r.info.bytes).c_str(),
                IsoTime(r.info.created_unix).c_str(),
                r.info.tags.empty() ? "-" : Join(r.info.tags, ",").c_str());
  }
  return kExitOk;
}

uint64_t TensorBytes(const ckpt::TensorRecord& t) {
  uint64_t n = 0;
  for (const ckpt::SliceRecord& s : t.slices) n += s.nbytes;
  return n;
}

int Show(CkptArgs& a) {
  auto engine = Open(a);
  if (!engine.ok()) return Fail("show", engine.status());
  CheckpointEngine& e = **engine;
  auto step = ResolveStep(e, a.step);
  if (!step.ok()) return Fail("show", step.status());
  auto m = e.ReadManifest(*step);  // checks the checksum before anything is shown
  if (!m.ok()) return Fail("show", m.status());
  if (a.json) {
    auto text = e.durable().Get(ckpt::ManifestKey(a.job, *step));
    if (!text.ok()) return Fail("show", text.status());
    std::cout << *text;
    if (!text->empty() && text->back() != '\n') std::cout << "\n";
    return kExitOk;
  }
  uint64_t chunks = 0;
  for (const ckpt::TensorRecord& t : m->tensors) {
    for (const ckpt::SliceRecord& s : t.slices) chunks += s.chunks.size();
  }
  std::printf("job:         %s\n", m->job.c_str());
  std::printf("step:        %lld\n", static_cast<long long>(m->step));
  std::printf("root:        %s\n", e.durable().url().c_str());
  std::printf("created:     %s\n", IsoTime(m->created_unix).c_str());
  std::printf("world size:  %d\n", m->world_size);
  std::printf("chunk size:  %s\n", HumanBytes(m->chunk_size).c_str());
  std::printf("size:        %s in %zu tensors, %zu distinct chunks (%llu references)\n",
              HumanBytes(m->TotalBytes()).c_str(), m->tensors.size(), m->ChunkIds().size(),
              static_cast<unsigned long long>(chunks));
  std::printf("tags:        %s\n", m->tags.empty() ? "-" : Join(m->tags, ", ").c_str());
  std::printf("metadata:    %s\n", m->metadata_json.c_str());

  // Written vs total per rank: how much of this step the incremental save had to store.
  std::printf("\n%6s %11s %11s %8s %13s\n", "RANK", "BYTES", "WRITTEN", "WRITTEN%", "CHUNKS W/T");
  for (const ckpt::RankRecord& r : m->ranks) {
    const double pct = r.bytes_total == 0 ? 0.0 : 100.0 * r.bytes_written / r.bytes_total;
    const std::string chunk_text =
        std::to_string(r.chunks_written) + "/" + std::to_string(r.chunks_total);
    std::printf("%6d %11s %11s %7.1f%% %13s\n", r.rank, HumanBytes(r.bytes_total).c_str(),
                HumanBytes(r.bytes_written).c_str(), pct, chunk_text.c_str());
  }
  std::printf("(WRITTEN: stored by this save; the rest were unchanged chunks already stored)\n");

  constexpr size_t kDefaultTensors = 20;
  const size_t shown =
      a.all_tensors ? m->tensors.size() : std::min(kDefaultTensors, m->tensors.size());
  size_t name_width = 4;
  for (size_t i = 0; i < shown; ++i) name_width = std::max(name_width, m->tensors[i].name.size());
  std::printf("\n%-*s  %-10s  %-22s %6s %11s\n", static_cast<int>(name_width), "TENSOR", "DTYPE",
              "SHAPE", "SLICES", "BYTES");
  for (size_t i = 0; i < shown; ++i) {
    const ckpt::TensorRecord& t = m->tensors[i];
    std::printf("%-*s  %-10s  %-22s %6zu %11s\n", static_cast<int>(name_width), t.name.c_str(),
                ckpt::DTypeName(t.dtype), ckpt::ShapeString(t.global_shape).c_str(),
                t.slices.size(), HumanBytes(TensorBytes(t)).c_str());
  }
  if (shown < m->tensors.size()) {
    std::printf("... and %zu more tensors (--tensors lists all %zu)\n", m->tensors.size() - shown,
                m->tensors.size());
  }
  return kExitOk;
}

int Verify(CkptArgs& a) {
  auto engine = Open(a);
  if (!engine.ok()) return Fail("verify", engine.status());
  CheckpointEngine& e = **engine;
  std::vector<int64_t> steps;
  if (a.all) {
    auto infos = e.List();
    if (!infos.ok()) return Fail("verify", infos.status());
    for (const CheckpointInfo& c : *infos) {
      if (c.committed) steps.push_back(c.step);
    }
    if (steps.empty()) {
      return Fail("verify", NotFound("no committed checkpoint of job '" + a.job + "' in " +
                                     e.durable().url() + JobsHint(e)));
    }
  } else {
    auto step = ResolveStep(e, a.step);
    if (!step.ok()) return Fail("verify", step.status());
    steps.push_back(*step);
  }
  const bool terminal = isatty(STDERR_FILENO) != 0;
  bool clean = true;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t step : steps) {
    Result<ckpt::VerifyCkptReport> r = [&] {
      Progress progress(terminal, "verify step " + std::to_string(step));
      return e.Verify(step, progress.Callback());
    }();
    if (!r.ok()) return Fail("verify", r.status());
    const bool ok = r->missing == 0 && r->corrupt == 0;
    clean = clean && ok;
    if (a.json) {
      out.push_back({{"step", step},
                     {"ok", ok},
                     {"chunks", r->chunks},
                     {"bytes", r->bytes},
                     {"missing", r->missing},
                     {"corrupt", r->corrupt},
                     {"errors", r->errors}});
      continue;
    }
    std::printf("step %lld: %s: %llu chunks (%s) read from %s: %llu missing, %llu corrupt\n",
                static_cast<long long>(step), ok ? "ok" : "DAMAGED",
                static_cast<unsigned long long>(r->chunks), HumanBytes(r->bytes).c_str(),
                e.durable().url().c_str(), static_cast<unsigned long long>(r->missing),
                static_cast<unsigned long long>(r->corrupt));
    for (const std::string& err : r->errors) std::printf("  %s\n", err.c_str());
  }
  if (a.json) std::cout << (a.all ? out : out[0]).dump(2) << "\n";
  // A damaged checkpoint is a failure a script must notice.
  return clean ? kExitOk : kExitFailure;
}

int Remove(CkptArgs& a) {
  auto engine = Open(a);
  if (!engine.ok()) return Fail("rm", engine.status());
  CheckpointEngine& e = **engine;
  auto infos = e.List();
  if (!infos.ok()) return Fail("rm", infos.status());
  Result<int64_t> latest = e.LatestStep();
  if (!latest.ok() && latest.status().code() != StatusCode::kNotFound) {
    return Fail("rm", latest.status());
  }
  // Every step is checked before any is removed: a typo in the third argument must not leave
  // the first two gone.
  std::vector<int64_t> steps;
  for (const std::string& text : a.steps) {
    auto step = ResolveStep(e, text);
    if (!step.ok()) return Fail("rm", step.status());
    bool exists = false;
    for (const CheckpointInfo& c : *infos) exists = exists || c.step == *step;
    if (!exists) {
      return Fail("rm", NotFound("no checkpoint at step " + std::to_string(*step) + " of job '" +
                                 a.job + "' in " + e.durable().url() + JobsHint(e)));
    }
    if (latest.ok() && *step == *latest && !a.force) {
      return Fail("rm", FailedPrecondition("step " + std::to_string(*step) +
                                           " is the latest checkpoint of job '" + a.job +
                                           "'; pass --force to remove it (nothing removed)"));
    }
    steps.push_back(*step);
  }
  for (int64_t step : steps) {
    Status s = e.Remove(step);
    if (!s.ok()) return Fail("rm", s);
    std::printf("removed step %lld\n", static_cast<long long>(step));
  }
  std::fprintf(stderr, "their chunks are deleted by the next `gantry ckpt gc`\n");
  return kExitOk;
}

int CollectGarbage(CkptArgs& a) {
  if (a.keep_last < 0 || a.keep_every < 0 || a.grace_seconds < 0) {
    std::fprintf(stderr,
                 "gantry ckpt gc: --keep-last, --keep-every and --grace must not be "
                 "negative\n");
    return kExitUsage;
  }
  if (a.keep_last == 0 && (a.keep_every > 0 || a.no_keep_tagged)) {
    std::fprintf(stderr,
                 "gantry ckpt gc: --keep-every and --no-keep-tagged refine --keep-last N; without "
                 "it no checkpoint is removed by retention\n");
    return kExitUsage;
  }
  auto engine = Open(a, {.with_local = true, .dry_run = a.dry_run});
  if (!engine.ok()) return Fail("gc", engine.status());
  ckpt::Retention retention;
  retention.keep_last = a.keep_last;
  retention.keep_every = a.keep_every;
  retention.keep_tagged = !a.no_keep_tagged;
  auto r = (*engine)->CollectGarbage(retention);
  if (!r.ok()) return Fail("gc", r.status());
  if (a.json) {
    nlohmann::ordered_json j = {{"dry_run", a.dry_run},
                                {"removed_steps", r->removed_steps},
                                {"deleted_chunks", r->deleted_chunks},
                                {"deleted_bytes", r->deleted_bytes},
                                {"referenced_chunks", r->referenced_chunks},
                                {"kept_young", r->kept_young}};
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::vector<std::string> removed;
  for (int64_t s : r->removed_steps) removed.push_back(std::to_string(s));
  std::printf("%s %zu checkpoint%s%s%s%s\n", a.dry_run ? "would remove" : "removed", removed.size(),
              removed.size() == 1 ? "" : "s", removed.empty() ? "" : " (step ",
              Join(removed, ", ").c_str(), removed.empty() ? "" : ")");
  std::printf(
      "%s %llu chunk copies (%s); %llu chunks still referenced; %llu unreferenced kept "
      "(younger than the %lld s grace period)\n",
      a.dry_run ? "would delete" : "deleted", static_cast<unsigned long long>(r->deleted_chunks),
      HumanBytes(r->deleted_bytes).c_str(), static_cast<unsigned long long>(r->referenced_chunks),
      static_cast<unsigned long long>(r->kept_young), static_cast<long long>(a.grace_seconds));
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// export / import: the torch.save side lives in Python (python/gantry/__main__.py).

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// Runs `argv` and returns its stdout; stderr passes through.
Result<std::string> Capture(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return IoError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return IoError("'" + argv[0] + "' failed (exit status " +
                   std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  }
  return out;
}

// What `python3 -m gantry export|import` needs, named one by one; importing torch itself would
// cost seconds, finding it costs milliseconds.
constexpr const char* kModuleCheck =
    "import importlib.util as u\n"
    "for m in ('torch', 'gantry', 'gantry.__main__', '_gantry'):\n"
    "    try:\n"
    "        found = u.find_spec(m) is not None\n"
    "    except Exception:\n"
    "        found = False\n"
    "    if not found:\n"
    "        print(m)\n";

Status CheckPython(const std::string& python, const std::string& pythonpath) {
  if (access(python.c_str(), X_OK) != 0) {
    return FailedPrecondition("cannot run '" + python + "' (" + std::strerror(errno) +
                              "): export and import need Python 3 with PyTorch; install "
                              "python3-torch or point GANTRY_PYTHON at such a Python");
  }
  GANTRY_ASSIGN_OR_RETURN(std::string missing, Capture({python, "-c", kModuleCheck}));
  auto lacks = [&](const std::string& m) { return missing.find(m + "\n") != std::string::npos; };
  if (lacks("torch")) {
    return FailedPrecondition("PyTorch is not installed for " + python +
                              " (export and import write and read torch.save files): install "
                              "python3-torch, or point GANTRY_PYTHON at a Python that has it");
  }
  if (lacks("gantry") || lacks("gantry.__main__")) {
    return FailedPrecondition("the gantry Python package (with its __main__) is not on the path '" +
                              pythonpath +
                              "': set GANTRY_PYTHONPATH to the repository's python/ directory "
                              "and the build's python/ directory");
  }
  if (lacks("_gantry")) {
    return FailedPrecondition("the compiled module _gantry is not on the path '" + pythonpath +
                              "': build it (cmake --build build/default --target _gantry) or "
                              "set GANTRY_PYTHONPATH to where it is");
  }
  return Status::Ok();
}

// Replaces this process with `python -m gantry <args>`, so its output, exit status and signals
// are the command's own. Returns only on failure.
int ExecPython(CkptArgs& a, const std::string& what, std::vector<std::string> args) {
  if (a.root.empty()) {
    return Fail(what, InvalidArgument("no checkpoint root: pass --root URL (a path, file:///dir "
                                      "or s3://bucket/prefix) or set GANTRY_CKPT_ROOT"));
  }
  const std::string python = EnvOr("GANTRY_PYTHON", "/usr/bin/python3");
  std::string pythonpath = EnvOr("GANTRY_PYTHONPATH", GANTRY_PYTHONPATH);
  const std::string inherited = EnvOr("PYTHONPATH", "");
  if (!inherited.empty()) pythonpath += (pythonpath.empty() ? "" : ":") + inherited;
  setenv("PYTHONPATH", pythonpath.c_str(), 1);
  Status ready = CheckPython(python, pythonpath);
  if (!ready.ok()) {
    std::fprintf(stderr, "gantry ckpt %s: %s\n", what.c_str(), ready.ToString().c_str());
    return kExitFailure;
  }
  // The flags reach the engine in Python through the variables it reads by default.
  auto set = [](const char* name, const std::string& value) {
    if (!value.empty()) setenv(name, value.c_str(), 1);
  };
  set("AWS_ENDPOINT_URL_S3", a.store.endpoint);
  set("AWS_ENDPOINT_URL", a.store.endpoint);
  set("AWS_REGION", a.store.region);
  set("AWS_ACCESS_KEY_ID", a.store.access_key);
  set("AWS_SECRET_ACCESS_KEY", a.store.secret_key);
  set("AWS_PROFILE", a.store.profile);
  set("GANTRY_CKPT_LOCAL", a.local);
  set("GANTRY_CKPT_PEERS", Join(a.peers, ","));

  // args: the subcommand, its flags, then "--" and the file (which may start with '-').
  std::vector<std::string> argv = {python, "-m", "gantry", args.front()};
  if (!a.store.endpoint.empty()) argv.insert(argv.end(), {"--endpoint", a.store.endpoint});
  if (!a.store.region.empty()) argv.insert(argv.end(), {"--region", a.store.region});
  argv.insert(argv.end(), args.begin() + 1, args.end());
  std::vector<char*> cargs;
  for (std::string& s : argv) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execv(python.c_str(), cargs.data());
  return Fail(what, IoError("cannot run '" + python + "': " + std::strerror(errno)));
}

int Export(CkptArgs& a) {
  a.step = a.positionals.size() == 2 ? a.positionals[0] : "latest";
  a.file = a.positionals.back();
  if (a.step != "latest") {
    if (Result<int64_t> step = ParseStep(a.step); !step.ok()) return Fail("export", step.status());
  }
  return ExecPython(a, "export",
                    {"export", "--root", a.root, "--job", a.job, "--step", a.step, "--", a.file});
}

int Import(CkptArgs& a) {
  if (a.import_step < 0) return Fail("import", InvalidArgument("--step must not be negative"));
  std::vector<std::string> args = {
      "import", "--root", a.root, "--job", a.job, "--step", std::to_string(a.import_step)};
  for (const std::string& tag : a.tags) args.insert(args.end(), {"--tag", tag});
  args.insert(args.end(), {"--", a.file});
  return ExecPython(a, "import", std::move(args));
}

template <typename F>
void Run(CLI::App* cmd, std::shared_ptr<CkptArgs> a, F f) {
  cmd->callback([a, f] {
    ApplyEnvironment(*a);
    if (int rc = f(*a); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace

void RegisterCkptCommands(CLI::App& app) {
  auto args = std::make_shared<CkptArgs>();
  CkptArgs& a = *args;
  CLI::App* ckpt = app.add_subcommand(
      "ckpt", "List, inspect, verify, remove and garbage-collect checkpoints; export/import .pt.");
  ckpt->require_subcommand(1);
  // Family flags may also follow the subcommand (`gantry ckpt ls --root R`).
  ckpt->fallthrough();
  ckpt->footer(
      "Examples:\n"
      "  gantry ckpt --root /shared/ckpt --job llama-7b ls\n"
      "  gantry ckpt --root s3://bkt/ckpt --endpoint http://127.0.0.1:7480 show latest\n"
      "  gantry ckpt --root /shared/ckpt verify --all\n"
      "  gantry ckpt --root /shared/ckpt gc --keep-last 3 --keep-every 1000 --dry-run\n"
      "Defaults from the environment: GANTRY_CKPT_ROOT, GANTRY_CKPT_JOB, GANTRY_CKPT_LOCAL,\n"
      "GANTRY_CKPT_PEERS (as in Python); S3 credentials also from the AWS variables and files.\n"
      "Exit codes: 0 ok, 1 failure (or damage found by verify), 2 usage, 3 bad input or\n"
      "missing root, job or step, or a refused rm. Format: docs/formats/checkpoint.md.");
  ckpt->add_option("--root", a.root,
                   "Checkpoint root, the durable tier: a path, file:///dir or s3://bucket/prefix "
                   "(default: $GANTRY_CKPT_ROOT)");
  ckpt->add_option("--job", a.job,
                   "Job whose checkpoints to use (default: $GANTRY_CKPT_JOB or "
                   "'default')");
  ckpt->add_option("--local", a.local,
                   "Node-local tier (gc also cleans it; export restores from it first)");
  ckpt->add_option("--peer", a.peers, "Peer agent URL (http://node7:7070), for export; repeatable")
      ->allow_extra_args(false);
  ckpt->add_option("--endpoint", a.store.endpoint,
                   "S3 endpoint, e.g. http://127.0.0.1:7480 (default: $AWS_ENDPOINT_URL or AWS)");
  ckpt->add_option("--region", a.store.region, "S3 region (default: $AWS_REGION, ~/.aws/config)");
  ckpt->add_option("--access-key", a.store.access_key,
                   "S3 access key (default: $AWS_ACCESS_KEY_ID, ~/.aws/credentials)");
  ckpt->add_option("--secret-key", a.store.secret_key,
                   "S3 secret key (default: $AWS_SECRET_ACCESS_KEY)");
  ckpt->add_option("--profile", a.store.profile, "AWS profile (default: $AWS_PROFILE)");
  ckpt->add_option("--threads", a.threads, "Chunk reads in flight (verify, gc)")
      ->capture_default_str();

  CLI::App* ls = ckpt->add_subcommand("ls", "One line per step: status, world size, size, time.");
  ls->add_flag("--json", a.json,
               "JSON array of {step, committed, latest, parts, world_size, bytes, created_unix, "
               "created, tags}");
  ls->footer(
      "An incomplete step has parts from some ranks but no manifest: a save in flight, or one\n"
      "abandoned (gc removes those older than the grace period).\n"
      "Example:\n  gantry ckpt --root /shared/ckpt --job llama-7b ls --json");
  Run(ls, args, List);

  CLI::App* show = ckpt->add_subcommand("show", "Summarize a checkpoint's manifest.");
  show->add_option("step", a.step, "Step number or 'latest'")->capture_default_str();
  show->add_flag("--json", a.json, "Print the manifest JSON as stored");
  show->add_flag("--tensors", a.all_tensors, "List every tensor (default: the first 20)");
  show->footer(
      "Examples:\n  gantry ckpt --root /shared/ckpt show\n"
      "  gantry ckpt --root /shared/ckpt show 1200 --json | jq .metadata");
  Run(show, args, Show);

  CLI::App* verify = ckpt->add_subcommand(
      "verify", "Read every chunk of a checkpoint from the root and check its hash.");
  verify->add_option("step", a.step, "Step number or 'latest'")->capture_default_str();
  CLI::Option* all = verify->add_flag("--all", a.all, "Verify every committed checkpoint");
  verify->get_option("step")->excludes(all);
  verify->add_flag("--json", a.json,
                   "JSON {step, ok, chunks, bytes, missing, corrupt, errors}; an array with --all");
  verify->footer(
      "Exit status 0 only when every chunk is present and intact, 1 when any is missing or\n"
      "corrupt (each named on its own line).\n"
      "Examples:\n  gantry ckpt --root /shared/ckpt verify\n"
      "  gantry ckpt --root s3://bkt/ckpt verify --all --json");
  Run(verify, args, Verify);

  CLI::App* rm = ckpt->add_subcommand("rm", "Remove checkpoints (their chunks go at the next gc).");
  rm->add_option("steps", a.steps, "Step numbers ('latest' needs --force)")->required();
  rm->add_flag("--force", a.force, "Allow removing the latest checkpoint");
  rm->footer(
      "Every step is checked before any is removed. Removing the latest moves the latest pointer\n"
      "back to the newest remaining checkpoint.\n"
      "Example:\n  gantry ckpt --root /shared/ckpt --job llama-7b rm 1000 1100");
  Run(rm, args, Remove);

  CLI::App* gc = ckpt->add_subcommand(
      "gc", "Apply retention, drop stale unfinished saves, delete unreferenced chunks.");
  gc->add_option("--keep-last", a.keep_last,
                 "Keep the newest N checkpoints and remove older ones (0: no retention, only "
                 "stale saves and unreferenced chunks go)")
      ->capture_default_str();
  gc->add_option("--keep-every", a.keep_every, "With --keep-last: also keep steps divisible by K")
      ->capture_default_str();
  gc->add_flag("--no-keep-tagged", a.no_keep_tagged,
               "With --keep-last: tagged checkpoints are not kept for their tags");
  gc->add_option("--grace", a.grace_seconds,
                 "Never delete chunks or unfinished saves younger than this (seconds)")
      ->capture_default_str();
  gc->add_flag("--dry-run", a.dry_run, "Report what would be removed; change nothing");
  gc->add_flag("--json", a.json,
               "JSON {dry_run, removed_steps, deleted_chunks, deleted_bytes, referenced_chunks, "
               "kept_young}");
  gc->footer(
      "The newest committed checkpoint is always kept. Chunks are shared by every job under the\n"
      "root, so gc reads every job's manifests before deleting anything.\n"
      "Examples:\n  gantry ckpt --root /shared/ckpt --job llama-7b gc --keep-last 3 --dry-run\n"
      "  gantry ckpt --root s3://bkt/ckpt --local /nvme/gantry gc --grace 600");
  Run(gc, args, CollectGarbage);

  CLI::App* exp = ckpt->add_subcommand("export", "Write a checkpoint as a torch.save file.");
  // One list, not two positionals: CLI11 would give a lone OUT.pt to an optional STEP first.
  exp->add_option("step-and-file", a.positionals, "[STEP|latest] OUT.pt (default step: latest)")
      ->required()
      ->expected(1, 2);
  exp->footer(
      "Runs `python3 -m gantry export` (PyTorch needed; GANTRY_PYTHON overrides the Python,\n"
      "GANTRY_PYTHONPATH where the gantry package and its compiled module are).\n"
      "Examples:\n  gantry ckpt --root /shared/ckpt --job llama-7b export latest model.pt\n"
      "  gantry ckpt --root /shared/ckpt export 1200 step1200.pt");
  Run(exp, args, Export);

  CLI::App* imp = ckpt->add_subcommand("import", "Save a torch.save file as a checkpoint step.");
  imp->add_option("in", a.file, "Input .pt file")->required();
  imp->add_option("--step", a.import_step, "Step to save it as")->required();
  imp->add_option("--tag", a.tags, "Tag the checkpoint (kept by retention); repeatable")
      ->allow_extra_args(false);
  imp->footer(
      "Runs `python3 -m gantry import` (PyTorch needed; GANTRY_PYTHON and GANTRY_PYTHONPATH\n"
      "as for export).\n"
      "Example:\n  gantry ckpt --root /shared/ckpt --job finetune import base.pt --step 0");
  Run(imp, args, Import);
}

}  // namespace gantry::cli
