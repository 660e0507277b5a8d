// `gantry cache`: inspect and maintain a tiered chunk store from the shell — usage per tier,
// verification (with repair), garbage collection, and putting or getting blobs by hand.
//
// Tiers are given fastest first as tier specs (include/gantry/cache/tier_spec.h), e.g.
//   gantry cache --tier file:///nvme/cache,capacity=100G --tier s3://bkt/cache,durable stats
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gantry/cache/chunk_store.h"
#include "gantry/cache/tier_spec.h"
#include "gantry/common/units.h"

namespace gantry::cli {
namespace {

struct CacheArgs {
  std::vector<std::string> tiers;
  StoreOptions store;
  std::string mode = "write-through";
  int64_t grace_seconds = 3600;
  bool json = false;
  bool bytes = false;
  bool prometheus = false;
  bool repair = false;
  std::string name;
  std::string file;
};

int Fail(const std::string& what, const Status& s) { return ReportFailure("cache " + what, s); }

// `writes`: put may create a file:// tier's directory; the other commands open existing tiers
// only, so a mistyped path is an error naming it instead of a new, empty tier.
Result<std::unique_ptr<ChunkStore>> Open(CacheArgs& a, bool writes) {
  ChunkStoreOptions o;
  GANTRY_ASSIGN_OR_RETURN(o.tiers, ParseTierSpecs(a.tiers));
  if (a.mode == "write-back") {
    o.write_mode = WriteMode::kWriteBack;
  } else if (a.mode != "write-through") {
    return InvalidArgument("--mode '" + a.mode + "' (known: write-through, write-back)");
  }
  o.gc_grace_seconds = a.grace_seconds;
  o.store_options = a.store;
  o.store_options.create_root = writes;
  for (TierOptions& t : o.tiers) {
    GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> store,
                            OpenObjectStore(t.url, o.store_options));
    t.store = std::move(store);
  }
  return ChunkStore::Open(std::move(o));
}

Result<nlohmann::ordered_json> TierUsage(ChunkStore& cs, int tier, const TierStats& stats) {
  // What each tier holds, listed by the chunk store (which owns the namespace's layout).
  GANTRY_ASSIGN_OR_RETURN(ChunkStore::TierContents held, cs.ListTierContents(tier));
  const TierOptions& t = cs.options().tiers[tier];
  return nlohmann::ordered_json{{"tier", stats.name},
                                {"url", t.url},
                                {"durable", stats.durable},
                                {"capacity_bytes", stats.capacity_bytes},
                                {"chunks", held.chunks},
                                {"chunk_bytes", held.chunk_bytes},
                                {"manifests", held.blob_manifests}};
}

int Stats(CacheArgs& a) {
  auto cs = Open(a, /*writes=*/false);
  if (!cs.ok()) return Fail("stats", cs.status());
  if (a.prometheus) {
    std::cout << (*cs)->PrometheusText();
    return kExitOk;
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const ChunkStoreStats stats = (*cs)->Stats();
  const std::vector<TierOptions>& tiers = (*cs)->options().tiers;
  for (size_t i = 0; i < tiers.size(); ++i) {
    Result<nlohmann::ordered_json> usage = TierUsage(**cs, static_cast<int>(i), stats.tiers[i]);
    if (!usage.ok()) return Fail("stats", usage.status());
    out.push_back(std::move(*usage));
  }
  if (a.json) {
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  auto size = [&a](uint64_t b) { return a.bytes ? std::to_string(b) : FormatBytes(b); };
  std::printf("%-10s %-8s %12s %14s %14s %10s  %s\n", "TIER", "DURABLE", "CHUNKS", "BYTES",
              "CAPACITY", "MANIFESTS", "URL");
  for (const auto& t : out) {
    const uint64_t capacity = t["capacity_bytes"].get<uint64_t>();
    std::printf("%-10s %-8s %12llu %14s %14s %10llu  %s\n", t["tier"].get<std::string>().c_str(),
                t["durable"].get<bool>() ? "yes" : "no",
                static_cast<unsigned long long>(t["chunks"].get<uint64_t>()),
                size(t["chunk_bytes"].get<uint64_t>()).c_str(),
                capacity == 0 ? "unlimited" : size(capacity).c_str(),
                static_cast<unsigned long long>(t["manifests"].get<uint64_t>()),
                t["url"].get<std::string>().c_str());
  }
  return kExitOk;
}

int Verify(CacheArgs& a) {
  auto cs = Open(a, /*writes=*/false);
  if (!cs.ok()) return Fail("verify", cs.status());
  auto r = (*cs)->Verify(a.repair);
  if (!r.ok()) return Fail("verify", r.status());
  if (a.json) {
    nlohmann::ordered_json j = {{"checked", r->checked},
                                {"corrupt", r->corrupt},
                                {"missing", r->missing},
                                {"repaired", r->repaired},
                                {"errors", r->errors}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "checked %llu copies: %llu corrupt, %llu missing, %llu repaired\n",
        static_cast<unsigned long long>(r->checked), static_cast<unsigned long long>(r->corrupt),
        static_cast<unsigned long long>(r->missing), static_cast<unsigned long long>(r->repaired));
    for (const auto& e : r->errors) std::printf("  %s\n", e.c_str());
  }
  // Damage left behind is a failure a script must notice.
  return r->errors.empty() && r->missing == 0 ? kExitOk : kExitFailure;
}

int Gc(CacheArgs& a) {
  auto cs = Open(a, /*writes=*/false);
  if (!cs.ok()) return Fail("gc", cs.status());
  auto r = (*cs)->CollectGarbage();
  if (!r.ok()) return Fail("gc", r.status());
  // Damaged roots were gone around; the collection itself succeeded (exit 0, as `ckpt gc`):
  // `gantry ckpt verify` and `ls` are where damage fails a command.
  for (const std::string& w : r->warnings) {
    std::fprintf(stderr, "gantry cache gc: warning: %s\n", w.c_str());
  }
  if (a.json) {
    nlohmann::ordered_json j = {{"manifests", r->manifests},
                                {"referenced_chunks", r->referenced_chunks},
                                {"deleted_chunks", r->deleted_chunks},
                                {"deleted_bytes", r->deleted_bytes},
                                {"kept_young", r->kept_young},
                                {"kept_pinned", r->kept_pinned},
                                {"warnings", r->warnings}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "%llu manifests reference %llu chunks; deleted %llu chunk copies (%s); "
        "kept %llu unreferenced inside the %s grace period\n",
        static_cast<unsigned long long>(r->manifests),
        static_cast<unsigned long long>(r->referenced_chunks),
        static_cast<unsigned long long>(r->deleted_chunks),
        a.bytes ? (std::to_string(r->deleted_bytes) + " bytes").c_str()
                : FormatBytes(r->deleted_bytes).c_str(),
        static_cast<unsigned long long>(r->kept_young),
        FormatDurationSeconds(a.grace_seconds).c_str());
  }
  return kExitOk;
}

// Reads `fd` a megabyte at a time into the blob writer: the chunk store cuts and stores chunks
// as they fill, so memory stays small whatever the input's size.
Status AppendFrom(int fd, const std::string& what, ChunkStore::BlobWriter& writer) {
  std::string buf(1 << 20, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) return Status::Ok();
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("reading " + what + ": " + std::strerror(errno));
    }
    GANTRY_RETURN_IF_ERROR(writer.Append(std::string_view(buf.data(), static_cast<size_t>(n))));
  }
}

int PutBlob(CacheArgs& a) {
  auto cs = Open(a, /*writes=*/true);
  if (!cs.ok()) return Fail("put", cs.status());
  const bool from_stdin = a.file.empty() || a.file == "-";
  int fd = STDIN_FILENO;
  if (!from_stdin) {
    fd = ::open(a.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      const std::string what = "cannot read '" + a.file + "': " + std::strerror(err);
      return Fail("put", err == ENOENT   ? NotFound(what)
                         : err == EACCES ? PermissionDenied(what)
                                         : IoError(what));
    }
  }
  Result<Manifest> m = [&]() -> Result<Manifest> {
    GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ChunkStore::BlobWriter> writer,
                            (*cs)->NewBlobWriter(a.name));
    GANTRY_RETURN_IF_ERROR(AppendFrom(fd, from_stdin ? "stdin" : "'" + a.file + "'", *writer));
    return writer->Commit();
  }();
  if (!from_stdin) ::close(fd);
  if (!m.ok()) return Fail("put", m.status());
  Status f = (*cs)->Flush();
  if (!f.ok()) return Fail("put", f);
  std::fprintf(stderr, "%s: %s in %zu chunks\n", a.name.c_str(), FormatBytes(m->size).c_str(),
               m->chunks.size());
  return kExitOk;
}

// Writes the blob chunk by chunk (each verified by the store), holding one chunk at a time.
Status WriteBlob(ChunkStore& cs, const std::string& name, std::ostream& out) {
  GANTRY_ASSIGN_OR_RETURN(Manifest m, cs.GetManifest(name));
  for (const ManifestChunk& c : m.chunks) {
    GANTRY_ASSIGN_OR_RETURN(std::string data, cs.GetChunk(c.id));
    if (data.size() != c.size) {
      return DataLoss("blob '" + name + "': chunk " + c.id.ToHex() + " holds " +
                      std::to_string(data.size()) + " bytes, its manifest says " +
                      std::to_string(c.size));
    }
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return IoError("blob '" + name + "': writing the output failed");
  }
  out.flush();
  if (!out) return IoError("blob '" + name + "': writing the output failed");
  return Status::Ok();
}

int GetBlob(CacheArgs& a) {
  auto cs = Open(a, /*writes=*/false);
  if (!cs.ok()) return Fail("get", cs.status());
  if (a.file.empty() || a.file == "-") {
    Status s = WriteBlob(**cs, a.name, std::cout);
    return s.ok() ? kExitOk : Fail("get", s);
  }
  std::ofstream out(a.file, std::ios::binary | std::ios::trunc);
  if (!out) return Fail("get", IoError("cannot write '" + a.file + "'"));
  Status s = WriteBlob(**cs, a.name, out);
  return s.ok() ? kExitOk : Fail("get", s);
}

int ListBlobs(CacheArgs& a) {
  auto cs = Open(a, /*writes=*/false);
  if (!cs.ok()) return Fail("ls", cs.status());
  auto names = (*cs)->ListBlobs();
  if (!names.ok()) return Fail("ls", names.status());
  if (a.json) {
    std::cout << nlohmann::json(*names).dump(2) << "\n";
  } else {
    for (const auto& n : *names) std::printf("%s\n", n.c_str());
  }
  return kExitOk;
}

template <typename F>
void Run(CLI::App* cmd, F f) {
  cmd->callback([f] { ExitWith(f()); });
}

}  // namespace

void RegisterCacheCommands(CLI::App& app) {
  auto a = std::make_shared<CacheArgs>();
  CLI::App* cache = app.add_subcommand("cache", "Inspect and maintain a tiered chunk store.");
  cache->require_subcommand(1);
  cache->fallthrough();
  cache->footer(
      "A tier is URL[,name=N][,capacity=SIZE][,durable][,codec=none|lz4|zstd], fastest first;\n"
      "SIZE takes units (9M, 100G). Only put creates a missing file:// tier; the other\n"
      "commands fail on one (exit 3).\n"
      "Example:\n  gantry cache --tier file:///nvme/cache,capacity=100G "
      "--tier s3://bkt/cache,durable --endpoint http://127.0.0.1:7480 verify --repair\n"
      "Format and mechanisms: docs/storage.md (Chunk store).");
  cache
      ->add_option("--tier", a->tiers,
                   "Tier, fastest first: URL[,name=N][,capacity=SIZE][,durable][,codec=C]")
      ->take_all();
  cache->add_option("--mode", a->mode, "write-through or write-back")->capture_default_str();
  cache->add_option("--endpoint", a->store.endpoint, "S3 endpoint for s3:// tiers");
  cache->add_option("--region", a->store.region, "S3 region");
  cache->add_option("--profile", a->store.profile, "AWS profile");

  CLI::App* stats = cache->add_subcommand("stats", "Chunks, bytes and manifests per tier.");
  stats->add_flag("--json", a->json, "JSON output (sizes in bytes)");
  stats->add_flag("--bytes", a->bytes, "Sizes in bytes instead of KiB, MiB, ...");
  stats->add_flag("--prometheus", a->prometheus, "This process's metrics, Prometheus text format");
  stats->footer(
      "Examples:\n"
      "  gantry cache --tier file:///nvme/cache,capacity=100G --tier /shared/cache,durable stats\n"
      "  gantry cache --tier s3://bkt/cache,durable --endpoint http://127.0.0.1:7480 stats --json");
  Run(stats, [a] { return Stats(*a); });

  CLI::App* verify =
      cache->add_subcommand("verify", "Check every stored chunk copy against its id.");
  verify->add_flag("--repair", a->repair, "Rewrite corrupt copies from a good one");
  verify->add_flag("--json", a->json, "JSON output");
  verify->footer(
      "Exit status 1 when damage is left (corrupt copies without --repair, or unrepairable).\n"
      "Examples:\n"
      "  gantry cache --tier /nvme/cache --tier /shared/cache,durable verify\n"
      "  gantry cache --tier /nvme/cache --tier /shared/cache,durable verify --repair --json");
  Run(verify, [a] { return Verify(*a); });

  CLI::App* gc = cache->add_subcommand("gc", "Delete chunks no manifest references.");
  AddDurationOption(gc, "--grace", &a->grace_seconds, "Never delete chunks younger than this");
  gc->add_flag("--json", a->json, "JSON output");
  gc->add_flag("--bytes", a->bytes, "Sizes in bytes instead of KiB, MiB, ...");
  gc->footer(
      "Examples:\n"
      "  gantry cache --tier /nvme/cache --tier /shared/cache,durable gc\n"
      "  gantry cache --tier /nvme/cache --tier /shared/cache,durable gc --grace 10m --json");
  Run(gc, [a] { return Gc(*a); });

  CLI::App* put = cache->add_subcommand("put", "Store FILE (or stdin) as blob NAME.");
  put->add_option("name", a->name, "Blob name")->required();
  put->add_option("file", a->file, "Local file ('-' or absent: stdin)");
  put->footer(
      "Examples:\n"
      "  gantry cache --tier /nvme/cache,capacity=10G --tier /shared/cache,durable put shard-0 "
      "./shard-0\n"
      "  some-producer | gantry cache --tier /nvme/cache --tier /shared/cache,durable put s -");
  Run(put, [a] { return PutBlob(*a); });

  CLI::App* get = cache->add_subcommand("get", "Read blob NAME into FILE (or stdout).");
  get->add_option("name", a->name, "Blob name")->required();
  get->add_option("file", a->file, "Local file ('-' or absent: stdout)");
  get->footer(
      "Example:\n"
      "  gantry cache --tier /nvme/cache --tier /shared/cache,durable get shard-0 ./shard-0");
  Run(get, [a] { return GetBlob(*a); });

  CLI::App* ls = cache->add_subcommand("ls", "List blobs.");
  ls->add_flag("--json", a->json, "JSON output");
  ls->footer("Example:\n  gantry cache --tier /nvme/cache --tier /shared/cache,durable ls");
  Run(ls, [a] { return ListBlobs(*a); });
}

}  // namespace gantry::cli
