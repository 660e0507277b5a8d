// `gantry ckpt`: list, inspect, verify, remove and garbage-collect the checkpoints of a job under
// a checkpoint root, and convert them to and from plain torch.save files through the Python
// module (`python3 -m gantry export|import`). Listing goes through the catalog
// (gantry/ckpt/catalog.h), the rest through the engine (gantry/ckpt/checkpoint.h); this file
// only parses flags and prints.
//
//   gantry ckpt --root s3://bkt/ckpt --job llama-7b ls
//   gantry ckpt --root /shared/ckpt verify --all
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "gantry/agent/stage_client.h"
#include "gantry/ckpt/catalog.h"
#include "gantry/ckpt/checkpoint.h"
#include "gantry/ckpt/drain.h"
#include "gantry/ckpt/env_options.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/common/progress.h"
#include "gantry/common/subprocess.h"
#include "gantry/common/units.h"
#include "gantry/storage/dry_run_store.h"
#include "gantry/storage/object_store.h"
#include "gantry/storage/posix_store.h"

#ifndef GANTRY_PYTHONPATH
#define GANTRY_PYTHONPATH ""
#endif

namespace gantry::cli {
namespace {

using ckpt::CheckpointCatalog;
using ckpt::CheckpointEngine;
using ckpt::CheckpointManifest;
using ckpt::StepEntry;
using ckpt::StepState;

struct CkptArgs {
  std::string root;
  std::string job;
  std::string local;
  std::vector<std::string> peers;
  StoreOptions store;
  int threads = 8;
  bool json = false;
  bool bytes = false;
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
  int64_t min_age_seconds = 0;           // drain --min-age
};

int Fail(const std::string& what, const Status& s) { return ReportFailure("ckpt " + what, s); }

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

// Fills what the flags left empty from the environment the Python API reads too, so one
// environment serves both.
void ApplyEnvironment(CkptArgs& a) {
  const ckpt::CkptEnvDefaults env = ckpt::ReadCkptEnvDefaults();
  if (a.root.empty()) a.root = env.root;
  if (a.job.empty()) a.job = env.job;
  if (a.local.empty()) a.local = env.local;
  if (a.peers.empty()) a.peers = env.peers;
}

Status NoRoot() { return InvalidArgument(std::string(ckpt::kNoRootHint) + " (--root URL)"); }

// The checkpoint root, opened existing-only: an inspection must not invent an empty root out of
// a typo. Also checks --job.
Result<std::unique_ptr<ObjectStore>> OpenRoot(const CkptArgs& a) {
  if (a.root.empty()) return NoRoot();
  GANTRY_RETURN_IF_ERROR(ckpt::ValidateJobName(a.job).WithContext("--job"));
  StoreOptions o = a.store;
  o.create_root = false;
  Result<std::unique_ptr<ObjectStore>> root = OpenObjectStore(a.root, o);
  if (!root.ok()) return root.status().WithContext("checkpoint root '" + a.root + "'");
  return root;
}

struct OpenFlags {
  bool with_local = false;  // open the local tier (gc cleans it)
  bool dry_run = false;
};

Result<std::unique_ptr<CheckpointEngine>> OpenEngine(CkptArgs& a, OpenFlags flags = {}) {
  if (a.threads < 1) return InvalidArgument("--threads must be at least 1");
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> durable, OpenRoot(a));
  ckpt::EngineOptions o;
  o.durable_url = a.root;
  o.job = a.job;
  o.peers = a.peers;
  o.io_threads = a.threads;
  o.store_options = a.store;
  o.gc_grace_seconds = a.grace_seconds;  // an engine option, used only by gc
  // Only the garbage collector touches the local tier: reading commands leave it alone, and a
  // missing local directory is then no reason to fail.
  std::unique_ptr<ObjectStore> local;
  if (flags.with_local && !a.local.empty()) {
    StoreOptions lo = a.store;
    lo.create_root = false;
    Result<std::unique_ptr<ObjectStore>> opened = OpenObjectStore(a.local, lo);
    if (!opened.ok()) return opened.status().WithContext("local tier '" + a.local + "'");
    local = std::move(*opened);
    o.local_url = a.local;
  }
  if (flags.dry_run) {
    o.durable_store = std::make_shared<DryRunStore>(std::move(durable));
    if (local != nullptr) o.local_store = std::make_shared<DryRunStore>(std::move(local));
  } else {
    o.durable_store = std::move(durable);
    if (local != nullptr) o.local_store = std::move(local);
  }
  return CheckpointEngine::Open(std::move(o));
}

// The other jobs under the root, as a hint for an error about this one: a wrong or missing
// --job is the likeliest reason for "no checkpoint". Best effort: the first 10 pages of the
// listing at most, so a typo on a large S3 root costs a few requests, not a full scan.
std::string JobsHint(CheckpointCatalog& catalog, const std::string& job) {
  Result<std::vector<std::string>> listed = catalog.Jobs(/*max_pages=*/10);
  if (!listed.ok()) return "";
  std::vector<std::string> jobs;
  for (const std::string& j : *listed) {
    if (j != job) jobs.push_back(j);
  }
  if (jobs.empty()) return "";
  return " (other jobs under this root: " + Join(jobs, ", ") + "; pass --job)";
}

// A step number, or "latest" (the newest committed step).
Result<int64_t> ResolveStep(CheckpointCatalog& catalog, const std::string& job,
                            const std::string& text) {
  if (text == "latest") {
    Result<int64_t> latest = catalog.Latest(job);
    if (!latest.ok() && latest.status().code() == StatusCode::kNotFound) {
      return NotFound(latest.status().message() + JobsHint(catalog, job));
    }
    return latest;
  }
  Result<int64_t> step = ckpt::ParseStepNumber(text);
  if (!step.ok()) {
    return InvalidArgument("step '" + text + "' is neither a step number nor 'latest'");
  }
  return step;
}

std::string StatusText(const StepEntry& e) {
  switch (e.state) {
    case StepState::kCommitted:
      return e.latest ? "committed, latest" : "committed";
    case StepState::kDamaged:
      return "DAMAGED (manifest)";
    case StepState::kIncomplete:
      break;
  }
  return "incomplete (" + std::to_string(e.parts) + "/" +
         (e.world_size > 0 ? std::to_string(e.world_size) : std::string("?")) + " parts)";
}

int List(CkptArgs& a) {
  auto root = OpenRoot(a);
  if (!root.ok()) return Fail("ls", root.status());
  CheckpointCatalog catalog(**root);
  auto steps = catalog.Steps(a.job);
  if (!steps.ok()) return Fail("ls", steps.status());
  if (a.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const StepEntry& e : *steps) {
      nlohmann::ordered_json row = {{"step", e.step},
                                    {"committed", e.state == StepState::kCommitted},
                                    {"state", ckpt::StepStateName(e.state)},
                                    {"latest", e.latest},
                                    {"parts", e.parts},
                                    {"world_size", e.world_size},
                                    {"bytes", e.bytes},
                                    {"created_unix", e.created_unix},
                                    {"created", IsoTime(e.created_unix)},
                                    {"tags", e.tags}};
      if (!e.problem.empty()) row["problem"] = e.problem;
      out.push_back(std::move(row));
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (steps->empty()) {
    std::fprintf(stderr, "no checkpoints of job '%s' in %s%s\n", a.job.c_str(),
                 (*root)->url().c_str(), JobsHint(catalog, a.job).c_str());
    return kExitOk;
  }
  std::printf("%12s  %-24s %5s %11s  %-20s  %s\n", "STEP", "STATUS", "WORLD", "SIZE",
              "CREATED (UTC)", "TAGS");
  for (const StepEntry& e : *steps) {
    const std::string world = e.world_size > 0 ? std::to_string(e.world_size) : std::string("?");
    std::printf("%12lld  %-24s %5s %11s  %-20s  %s\n", static_cast<long long>(e.step),
                StatusText(e).c_str(), world.c_str(),
                a.bytes ? std::to_string(e.bytes).c_str() : FormatBytes(e.bytes).c_str(),
                IsoTime(e.created_unix).c_str(), e.tags.empty() ? "-" : Join(e.tags, ",").c_str());
  }
  for (const StepEntry& e : *steps) {
    if (e.state == StepState::kDamaged) {
      std::fprintf(stderr, "step %lld is damaged: %s\n", static_cast<long long>(e.step),
                   e.problem.c_str());
    }
  }
  return kExitOk;
}

uint64_t TensorBytes(const ckpt::TensorRecord& t) {
  uint64_t n = 0;
  for (const ckpt::SliceRecord& s : t.slices) n += s.nbytes;
  return n;
}

int Show(CkptArgs& a) {
  auto root = OpenRoot(a);
  if (!root.ok()) return Fail("show", root.status());
  CheckpointCatalog catalog(**root);
  auto step = ResolveStep(catalog, a.job, a.step);
  if (!step.ok()) return Fail("show", step.status());
  auto m = catalog.Manifest(a.job, *step);  // checks the checksum before anything is shown
  if (!m.ok()) return Fail("show", m.status());
  if (a.json) {
    auto text = (*root)->Get(ckpt::ManifestKey(a.job, *step));
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
  std::printf("root:        %s\n", (*root)->url().c_str());
  std::printf("created:     %s\n", IsoTime(m->created_unix).c_str());
  std::printf("world size:  %d\n", m->world_size);
  std::printf("chunk size:  %s\n", FormatBytes(m->chunk_size).c_str());
  std::printf("size:        %s in %zu tensors, %zu distinct chunks (%llu references)\n",
              FormatBytes(m->TotalBytes()).c_str(), m->tensors.size(), m->ChunkIds().size(),
              static_cast<unsigned long long>(chunks));
  std::printf("tags:        %s\n", m->tags.empty() ? "-" : Join(m->tags, ", ").c_str());
  std::printf("metadata:    %s\n", m->metadata_json.c_str());

  // Written vs total per rank: how much of this step the incremental save had to store.
  std::printf("\n%6s %11s %11s %8s %13s\n", "RANK", "BYTES", "WRITTEN", "WRITTEN%", "CHUNKS W/T");
  for (const ckpt::RankRecord& r : m->ranks) {
    const double pct = r.bytes_total == 0 ? 0.0 : 100.0 * r.bytes_written / r.bytes_total;
    const std::string chunk_text =
        std::to_string(r.chunks_written) + "/" + std::to_string(r.chunks_total);
    std::printf("%6d %11s %11s %7.1f%% %13s\n", r.rank, FormatBytes(r.bytes_total).c_str(),
                FormatBytes(r.bytes_written).c_str(), pct, chunk_text.c_str());
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
                t.slices.size(), FormatBytes(TensorBytes(t)).c_str());
  }
  if (shown < m->tensors.size()) {
    std::printf("... and %zu more tensors (--tensors lists all %zu)\n", m->tensors.size() - shown,
                m->tensors.size());
  }
  return kExitOk;
}

int Verify(CkptArgs& a) {
  auto root = OpenRoot(a);
  if (!root.ok()) return Fail("verify", root.status());
  CheckpointCatalog catalog(**root);
  // Steps to read, and damaged manifests found on the way (reported, never read).
  std::vector<int64_t> steps;
  std::vector<StepEntry> damaged;
  if (a.all) {
    auto listed = catalog.Steps(a.job);
    if (!listed.ok()) return Fail("verify", listed.status());
    for (StepEntry& e : *listed) {
      if (e.state == StepState::kCommitted) steps.push_back(e.step);
      if (e.state == StepState::kDamaged) damaged.push_back(std::move(e));
    }
    if (steps.empty() && damaged.empty()) {
      return Fail("verify", NotFound("no committed checkpoint of job '" + a.job + "' in " +
                                     (*root)->url() + JobsHint(catalog, a.job)));
    }
  } else {
    auto step = ResolveStep(catalog, a.job, a.step);
    if (!step.ok()) return Fail("verify", step.status());
    auto m = catalog.Manifest(a.job, *step);
    if (m.ok()) {
      steps.push_back(*step);
    } else if (m.status().code() == StatusCode::kDataLoss ||
               m.status().code() == StatusCode::kInvalidArgument) {
      StepEntry e;
      e.step = *step;
      e.state = StepState::kDamaged;
      e.problem = m.status().message();
      damaged.push_back(std::move(e));
    } else {
      return Fail("verify", m.status());
    }
  }
  std::unique_ptr<CheckpointEngine> engine;
  if (!steps.empty()) {
    auto opened = OpenEngine(a);
    if (!opened.ok()) return Fail("verify", opened.status());
    engine = std::move(*opened);
  }
  bool clean = damaged.empty();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t step : steps) {
    Result<ckpt::VerifyCkptReport> r = [&] {
      ProgressBar bar("verify step " + std::to_string(step), ProgressBar::StderrIsTerminal(),
                      ProgressBar::kBytes);
      return engine->Verify(step, bar.Callback());
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
                static_cast<unsigned long long>(r->chunks), FormatBytes(r->bytes).c_str(),
                engine->durable().url().c_str(), static_cast<unsigned long long>(r->missing),
                static_cast<unsigned long long>(r->corrupt));
    for (const std::string& err : r->errors) std::printf("  %s\n", err.c_str());
  }
  for (const StepEntry& e : damaged) {
    if (a.json) {
      out.push_back({{"step", e.step},
                     {"ok", false},
                     {"chunks", 0},
                     {"bytes", 0},
                     {"missing", 0},
                     {"corrupt", 0},
                     {"errors", {e.problem}}});
      continue;
    }
    std::printf("step %lld: DAMAGED: its manifest cannot be read: %s\n",
                static_cast<long long>(e.step), e.problem.c_str());
  }
  if (a.json) std::cout << (a.all ? out : out[0]).dump(2) << "\n";
  // A damaged checkpoint is a failure a script must notice.
  return clean ? kExitOk : kExitFailure;
}

int Remove(CkptArgs& a) {
  auto root = OpenRoot(a);
  if (!root.ok()) return Fail("rm", root.status());
  CheckpointCatalog catalog(**root);
  auto listed = catalog.Steps(a.job);
  if (!listed.ok()) return Fail("rm", listed.status());
  // Every step is checked before any is removed: a typo in the third argument must not leave
  // the first two gone. A step named twice is removed once.
  std::vector<int64_t> steps;
  std::set<int64_t> seen;
  for (const std::string& text : a.steps) {
    auto step = ResolveStep(catalog, a.job, text);
    if (!step.ok()) return Fail("rm", step.status());
    const StepEntry* entry = nullptr;
    for (const StepEntry& e : *listed) {
      if (e.step == *step) entry = &e;
    }
    if (entry == nullptr) {
      return Fail("rm", NotFound("no checkpoint at step " + std::to_string(*step) + " of job '" +
                                 a.job + "' in " + (*root)->url() + JobsHint(catalog, a.job) +
                                 " (nothing removed)"));
    }
    if (entry->latest && !a.force) {
      return Fail("rm", FailedPrecondition("step " + std::to_string(*step) +
                                           " is the latest checkpoint of job '" + a.job +
                                           "'; pass --force to remove it (nothing removed)"));
    }
    if (seen.insert(*step).second) steps.push_back(*step);
  }
  auto engine = OpenEngine(a);
  if (!engine.ok()) return Fail("rm", engine.status());
  for (int64_t step : steps) {
    Status s = (*engine)->Remove(step);
    if (!s.ok()) return Fail("rm", s);
    std::printf("removed step %lld\n", static_cast<long long>(step));
  }
  std::fprintf(stderr, "their chunks are deleted by the next `gantry ckpt gc`\n");
  return kExitOk;
}

int CollectGarbage(CkptArgs& a) {
  if (a.keep_last < 0 || a.keep_every < 0) {
    std::fprintf(stderr, "gantry ckpt gc: --keep-last and --keep-every must not be negative\n");
    return kExitUsage;
  }
  if (a.keep_last == 0 && (a.keep_every > 0 || a.no_keep_tagged)) {
    std::fprintf(stderr,
                 "gantry ckpt gc: --keep-every and --no-keep-tagged refine --keep-last N; without "
                 "it no checkpoint is removed by retention\n");
    return kExitUsage;
  }
  auto engine = OpenEngine(a, {.with_local = true, .dry_run = a.dry_run});
  if (!engine.ok()) return Fail("gc", engine.status());
  ckpt::Retention retention;
  retention.keep_last = a.keep_last;
  retention.keep_every = a.keep_every;
  retention.keep_tagged = !a.no_keep_tagged;
  auto r = (*engine)->CollectGarbage(retention);
  if (!r.ok()) return Fail("gc", r.status());
  // Damaged checkpoints are left in place; the collection itself succeeded.
  for (const std::string& w : r->warnings)
    std::fprintf(stderr, "gantry ckpt gc: warning: %s\n", w.c_str());
  if (a.json) {
    nlohmann::ordered_json j = {{"dry_run", a.dry_run},
                                {"removed_steps", r->removed_steps},
                                {"deleted_chunks", r->deleted_chunks},
                                {"deleted_bytes", r->deleted_bytes},
                                {"referenced_chunks", r->referenced_chunks},
                                {"kept_young", r->kept_young},
                                {"warnings", r->warnings}};
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
      "(younger than the %s grace period)\n",
      a.dry_run ? "would delete" : "deleted", static_cast<unsigned long long>(r->deleted_chunks),
      a.bytes ? (std::to_string(r->deleted_bytes) + " bytes").c_str()
              : FormatBytes(r->deleted_bytes).c_str(),
      static_cast<unsigned long long>(r->referenced_chunks),
      static_cast<unsigned long long>(r->kept_young),
      FormatDurationSeconds(a.grace_seconds).c_str());
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// export / import: the torch.save side lives in Python (python/gantry/__main__.py).

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
  GANTRY_ASSIGN_OR_RETURN(std::string missing, RunAndCapture({python, "-c", kModuleCheck}));
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
  if (a.root.empty()) return Fail(what, NoRoot());
  const std::string python = GetEnvOr("GANTRY_PYTHON", "/usr/bin/python3");
  std::string pythonpath = GetEnvOr("GANTRY_PYTHONPATH", GANTRY_PYTHONPATH);
  const std::string inherited = GetEnvOr("PYTHONPATH", "");
  if (!inherited.empty()) pythonpath += (pythonpath.empty() ? "" : ":") + inherited;
  setenv("PYTHONPATH", pythonpath.c_str(), 1);
  Status ready = CheckPython(python, pythonpath);
  if (!ready.ok()) {
    ReportFailure("ckpt " + what, ready);
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
  set(ckpt::kEnvLocal, a.local);
  set(ckpt::kEnvPeers, Join(a.peers, ","));

  // args: the subcommand, its flags, then "--" and the file (which may start with '-').
  std::vector<std::string> argv = {python, "-m", "gantry", args.front()};
  if (!a.store.endpoint.empty()) argv.insert(argv.end(), {"--endpoint", a.store.endpoint});
  if (!a.store.region.empty()) argv.insert(argv.end(), {"--region", a.store.region});
  argv.insert(argv.end(), args.begin() + 1, args.end());
  return Fail(what, ExecReplacingThisProcess(argv));
}

int Export(CkptArgs& a) {
  a.step = a.positionals.size() == 2 ? a.positionals[0] : "latest";
  a.file = a.positionals.back();
  if (a.step != "latest") {
    if (Result<int64_t> step = ckpt::ParseStepNumber(a.step); !step.ok()) {
      return Fail("export",
                  InvalidArgument("step '" + a.step + "' is neither a step number nor 'latest'"));
    }
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

// Finishes the saves in the node-local tier whose process ended before they were durable.
int Drain(CkptArgs& a) {
  if (a.local.empty()) {
    std::fprintf(stderr,
                 "gantry ckpt drain: name the node-local tier to drain with --local DIR (or "
                 "$GANTRY_CKPT_LOCAL)\n");
    return kExitUsage;
  }
  if (a.min_age_seconds < 0) {
    std::fprintf(stderr, "gantry ckpt drain: --min-age must not be negative\n");
    return kExitUsage;
  }
  const std::string path = a.local.starts_with("file://") ? a.local.substr(7) : a.local;
  if (path.find("://") != std::string::npos) {
    std::fprintf(stderr, "gantry ckpt drain: --local must be a directory on this node\n");
    return kExitUsage;
  }
  PosixStoreOptions po;
  po.create_root = false;  // a mistyped directory is an error, not an empty tier
  auto local = OpenPosixStore(path, po);
  if (!local.ok()) return Fail("drain", local.status());
  ckpt::DrainOptions o;
  o.store_options = a.store;
  o.threads = a.threads;
  o.min_age_seconds = a.min_age_seconds;
  auto r = ckpt::DrainLocalTier(std::shared_ptr<ObjectStore>(std::move(*local)), o);
  if (!r.ok()) return Fail("drain", r.status());
  for (const std::string& e : r->errors) std::fprintf(stderr, "gantry ckpt drain: %s\n", e.c_str());
  if (a.json) {
    std::cout << DrainReportToJson(*r).dump(2) << "\n";
  } else {
    std::printf("%d drain record%s: %d part%s written, %zu checkpoint%s committed%s%s%s\n",
                r->records, r->records == 1 ? "" : "s", r->parts_written,
                r->parts_written == 1 ? "" : "s", r->committed.size(),
                r->committed.size() == 1 ? "" : "s", r->committed.empty() ? "" : " (",
                Join(r->committed, ", ").c_str(), r->committed.empty() ? "" : ")");
    std::printf(
        "%llu chunks copied (%s); %d discarded, %d failed (left for the next drain), %d "
        "skipped\n",
        static_cast<unsigned long long>(r->chunks_copied), FormatBytes(r->bytes_copied).c_str(),
        r->discarded, r->failed, r->skipped);
  }
  return r->failed == 0 ? kExitOk : kExitFailure;
}

template <typename F>
void Run(CLI::App* cmd, std::shared_ptr<CkptArgs> a, F f) {
  cmd->callback([a, f] {
    ApplyEnvironment(*a);
    ExitWith(f(*a));
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
      "missing root, job or step, or a refused rm (docs/checkpoint.md, Exit codes).\n"
      "Format: docs/formats/checkpoint.md.");
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
               "JSON array of {step, committed, state, latest, parts, world_size, bytes, "
               "created_unix, created, tags[, problem]}");
  ls->add_flag("--bytes", a.bytes, "Sizes in bytes instead of KiB, MiB, ...");
  ls->footer(
      "An incomplete step has parts from some ranks but no manifest: a save in flight, or one\n"
      "abandoned (gc removes those older than the grace period). A damaged step has a manifest\n"
      "that cannot be read back (named on stderr; `verify` fails on it, `rm --force` removes it).\n"
      "Examples:\n  gantry ckpt --root /shared/ckpt --job llama-7b ls\n"
      "  gantry ckpt --root /shared/ckpt --job llama-7b ls --json | jq '.[] | select(.latest)'");
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
      "Every step is checked before any is removed, and a step named twice is removed once.\n"
      "Removing the latest moves the latest pointer back to the newest remaining checkpoint.\n"
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
  AddDurationOption(gc, "--grace", &a.grace_seconds,
                    "Never delete chunks or unfinished saves younger than this");
  gc->add_flag("--bytes", a.bytes, "Sizes in bytes instead of KiB, MiB, ...");
  gc->add_flag("--dry-run", a.dry_run, "Report what would be removed; change nothing");
  gc->add_flag("--json", a.json,
               "JSON {dry_run, removed_steps, deleted_chunks, deleted_bytes, referenced_chunks, "
               "kept_young}");
  gc->footer(
      "The newest committed checkpoint is always kept. Chunks are shared by every job under the\n"
      "root, so gc reads every job's manifests before deleting anything.\n"
      "Examples:\n  gantry ckpt --root /shared/ckpt --job llama-7b gc --keep-last 3 --dry-run\n"
      "  gantry ckpt --root s3://bkt/ckpt --local /nvme/gantry gc --grace 10m");
  Run(gc, args, CollectGarbage);

  CLI::App* drain = ckpt->add_subcommand(
      "drain", "Finish saves a process left in the node-local tier before they were durable.");
  AddDurationOption(drain, "--min-age", &a.min_age_seconds,
                    "Leave records younger than this (saves of processes still running)");
  drain->add_flag("--json", a.json,
                  "JSON {records, parts_written, committed, skipped, discarded, failed, "
                  "chunks_copied, bytes_copied, errors}");
  drain->footer(
      "Reads the drain records in --local (docs/formats/checkpoint.md, Drain records): each\n"
      "names its own root, so --root and --job are not used. For each, oldest step first: the\n"
      "chunks its root lacks are copied (verified), its part written, and the checkpoint\n"
      "committed once every rank of its run has a part. Records whose step was committed or\n"
      "superseded, or whose chunks are gone, are discarded (said on stderr). gantry-agent does\n"
      "the same on POST /v1/drain, which gantryd sends when a job ends.\n"
      "Exit status 1 when a record could not be drained now (the root unreachable; it stays).\n"
      "Examples:\n  gantry ckpt drain --local /nvme/gantry\n"
      "  gantry ckpt drain --local /nvme/gantry --min-age 10m --json   # beside running jobs");
  Run(drain, args, Drain);

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
