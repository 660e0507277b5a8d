// `gantry cache`: inspect and maintain a tiered chunk store from the shell — usage per tier,
// verification (with repair), garbage collection, and putting or getting blobs by hand.
//
// Tiers are given fastest first, each as `--tier URL[,name=N][,capacity=SIZE][,durable]
// [,codec=none|lz4|zstd]`, e.g.
//   gantry cache --tier file:///nvme/cache,capacity=100G --tier s3://bkt/cache,durable stats
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "gantry/cache/chunk_store.h"

namespace gantry::cli {
namespace {

struct CacheArgs {
  std::vector<std::string> tiers;
  StoreOptions store;
  std::string mode = "write-through";
  int64_t grace_seconds = 3600;
  bool json = false;
  bool prometheus = false;
  bool repair = false;
  std::string name;
  std::string file;
};

int Fail(const std::string& what, const Status& s) { return ReportFailure("cache " + what, s); }

// "100G", "512M", "4096" -> bytes.
Result<uint64_t> ParseSize(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return InvalidArgument("size '" + text + "' is not a number (e.g. 512M, 100G)");
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "K" || unit == "KiB")
    scale = 1024.0;
  else if (unit == "M" || unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    return InvalidArgument("size '" + text + "': unknown unit '" + unit + "'");
  if (v < 0) return InvalidArgument("size '" + text + "' is negative");
  return static_cast<uint64_t>(v * scale);
}

Result<TierOptions> ParseTier(const std::string& spec, size_t index) {
  TierOptions t;
  std::stringstream ss(spec);
  std::string part;
  bool first = true;
  while (std::getline(ss, part, ',')) {
    if (first) {
      t.url = part;
      first = false;
      continue;
    }
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
    if (key == "durable" && eq == std::string::npos) {
      t.durable = true;
    } else if (key == "name") {
      t.name = value;
    } else if (key == "capacity") {
      GANTRY_ASSIGN_OR_RETURN(t.capacity_bytes, ParseSize(value));
    } else if (key == "codec") {
      GANTRY_ASSIGN_OR_RETURN(t.codec, ParseCodec(value));
    } else {
      return InvalidArgument("--tier '" + spec + "': unknown setting '" + part +
                             "' (known: name=, capacity=, durable, codec=)");
    }
  }
  if (t.url.empty()) return InvalidArgument("--tier '" + spec + "' has no URL");
  if (t.name.empty()) t.name = "tier" + std::to_string(index);
  return t;
}

Result<std::unique_ptr<ChunkStore>> Open(CacheArgs& a) {
  if (a.tiers.empty()) {
    return InvalidArgument(
        "no tiers: pass --tier URL[,capacity=SIZE][,durable] once per tier, "
        "fastest first");
  }
  ChunkStoreOptions o;
  for (size_t i = 0; i < a.tiers.size(); ++i) {
    GANTRY_ASSIGN_OR_RETURN(TierOptions t, ParseTier(a.tiers[i], i));
    o.tiers.push_back(std::move(t));
  }
  if (a.mode == "write-back") {
    o.write_mode = WriteMode::kWriteBack;
  } else if (a.mode != "write-through") {
    return InvalidArgument("--mode '" + a.mode + "' (known: write-through, write-back)");
  }
  o.gc_grace_seconds = a.grace_seconds;
  o.store_options = a.store;
  return ChunkStore::Open(std::move(o));
}

// What each tier holds, from listing it (a fresh process has no counters of its own).
struct TierUsage {
  uint64_t chunks = 0, chunk_bytes = 0, manifests = 0;
};

int Stats(CacheArgs& a) {
  auto cs = Open(a);
  if (!cs.ok()) return Fail("stats", cs.status());
  if (a.prometheus) {
    std::cout << (*cs)->PrometheusText();
    return kExitOk;
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const ChunkStoreStats stats = (*cs)->Stats();
  for (size_t i = 0; i < a.tiers.size(); ++i) {
    auto t = ParseTier(a.tiers[i], i);
    auto store = OpenObjectStore(t->url, a.store);
    if (!store.ok()) return Fail("stats", store.status());
    TierUsage u;
    auto chunks = (*store)->ListAll("chunks/");
    if (!chunks.ok()) return Fail("stats", chunks.status());
    for (const auto& o : *chunks) {
      ++u.chunks;
      u.chunk_bytes += o.size;
    }
    auto manifests = (*store)->ListAll("manifests/");
    if (!manifests.ok()) return Fail("stats", manifests.status());
    u.manifests = manifests->size();
    out.push_back({{"tier", stats.tiers[i].name},
                   {"url", t->url},
                   {"durable", stats.tiers[i].durable},
                   {"capacity_bytes", stats.tiers[i].capacity_bytes},
                   {"chunks", u.chunks},
                   {"chunk_bytes", u.chunk_bytes},
                   {"manifests", u.manifests}});
  }
  if (a.json) {
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("%-10s %-8s %12s %14s %10s  %s\n", "tier", "durable", "chunks", "bytes", "manifests",
              "url");
  for (const auto& t : out) {
    std::printf("%-10s %-8s %12llu %14llu %10llu  %s\n", t["tier"].get<std::string>().c_str(),
                t["durable"].get<bool>() ? "yes" : "no",
                static_cast<unsigned long long>(t["chunks"].get<uint64_t>()),
                static_cast<unsigned long long>(t["chunk_bytes"].get<uint64_t>()),
                static_cast<unsigned long long>(t["manifests"].get<uint64_t>()),
                t["url"].get<std::string>().c_str());
  }
  return kExitOk;
}

int Verify(CacheArgs& a) {
  auto cs = Open(a);
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
    std::printf("checked %llu copies: %llu corrupt, %llu missing, %llu repaired\n",
                static_cast<unsigned long long>(r->checked),
                static_cast<unsigned long long>(r->corrupt),
                static_cast<unsigned long long>(r->missing),
                static_cast<unsigned long long>(r->repaired));
    for (const auto& e : r->errors) std::printf("  %s\n", e.c_str());
  }
  // Damage left behind is a failure a script must notice.
  return r->errors.empty() && r->missing == 0 ? kExitOk : kExitFailure;
}

int Gc(CacheArgs& a) {
  auto cs = Open(a);
  if (!cs.ok()) return Fail("gc", cs.status());
  auto r = (*cs)->CollectGarbage();
  if (!r.ok()) return Fail("gc", r.status());
  if (a.json) {
    nlohmann::ordered_json j = {
        {"manifests", r->manifests},           {"referenced_chunks", r->referenced_chunks},
        {"deleted_chunks", r->deleted_chunks}, {"deleted_bytes", r->deleted_bytes},
        {"kept_young", r->kept_young},         {"kept_pinned", r->kept_pinned}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "%llu manifests reference %llu chunks; deleted %llu chunk copies (%llu bytes); "
        "kept %llu unreferenced inside the %lld s grace period\n",
        static_cast<unsigned long long>(r->manifests),
        static_cast<unsigned long long>(r->referenced_chunks),
        static_cast<unsigned long long>(r->deleted_chunks),
        static_cast<unsigned long long>(r->deleted_bytes),
        static_cast<unsigned long long>(r->kept_young), static_cast<long long>(a.grace_seconds));
  }
  return kExitOk;
}

int PutBlob(CacheArgs& a) {
  auto cs = Open(a);
  if (!cs.ok()) return Fail("put", cs.status());
  std::string data;
  if (a.file.empty() || a.file == "-") {
    data.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) return Fail("put", NotFound("cannot read '" + a.file + "'"));
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto m = (*cs)->PutBlob(a.name, data);
  if (!m.ok()) return Fail("put", m.status());
  Status f = (*cs)->Flush();
  if (!f.ok()) return Fail("put", f);
  std::fprintf(stderr, "%s: %llu bytes in %zu chunks\n", a.name.c_str(),
               static_cast<unsigned long long>(m->size), m->chunks.size());
  return kExitOk;
}

int GetBlob(CacheArgs& a) {
  auto cs = Open(a);
  if (!cs.ok()) return Fail("get", cs.status());
  auto data = (*cs)->GetBlob(a.name);
  if (!data.ok()) return Fail("get", data.status());
  if (a.file.empty() || a.file == "-") {
    std::cout.write(data->data(), static_cast<std::streamsize>(data->size()));
    return std::cout.good() ? kExitOk : kExitFailure;
  }
  std::ofstream out(a.file, std::ios::binary | std::ios::trunc);
  out.write(data->data(), static_cast<std::streamsize>(data->size()));
  out.close();
  return out ? kExitOk : Fail("get", IoError("cannot write '" + a.file + "'"));
}

int ListBlobs(CacheArgs& a) {
  auto cs = Open(a);
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
  cmd->callback([f] {
    if (int rc = f(); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace

void RegisterCacheCommands(CLI::App& app) {
  auto a = std::make_shared<CacheArgs>();
  CLI::App* cache = app.add_subcommand("cache", "Inspect and maintain a tiered chunk store.");
  cache->require_subcommand(1);
  cache->footer(
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
  stats->add_flag("--json", a->json, "JSON output");
  stats->add_flag("--prometheus", a->prometheus, "This process's metrics, Prometheus text format");
  Run(stats, [a] { return Stats(*a); });

  CLI::App* verify =
      cache->add_subcommand("verify", "Check every stored chunk copy against its id.");
  verify->add_flag("--repair", a->repair, "Rewrite corrupt copies from a good one");
  verify->add_flag("--json", a->json, "JSON output");
  Run(verify, [a] { return Verify(*a); });

  CLI::App* gc = cache->add_subcommand("gc", "Delete chunks no manifest references.");
  gc->add_option("--grace", a->grace_seconds, "Never delete chunks younger than this (seconds)")
      ->capture_default_str();
  gc->add_flag("--json", a->json, "JSON output");
  Run(gc, [a] { return Gc(*a); });

  CLI::App* put = cache->add_subcommand("put", "Store FILE (or stdin) as blob NAME.");
  put->add_option("name", a->name, "Blob name")->required();
  put->add_option("file", a->file, "Local file ('-' or absent: stdin)");
  Run(put, [a] { return PutBlob(*a); });

  CLI::App* get = cache->add_subcommand("get", "Read blob NAME into FILE (or stdout).");
  get->add_option("name", a->name, "Blob name")->required();
  get->add_option("file", a->file, "Local file ('-' or absent: stdout)");
  Run(get, [a] { return GetBlob(*a); });

  CLI::App* ls = cache->add_subcommand("ls", "List blobs.");
  ls->add_flag("--json", a->json, "JSON output");
  Run(ls, [a] { return ListBlobs(*a); });
}

}  // namespace gantry::cli
