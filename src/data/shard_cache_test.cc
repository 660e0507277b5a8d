// The node-local shard cache and what the loader does with it: one download per shard per node
// across processes, pins that keep a reader's window while LRU evicts the rest, a damaged cached
// copy fetched again, a damaged or missing source shard failing loudly by name (or served from a
// fallback source), read-ahead, and the loader's metrics on a small deterministic run.
#include "gantry/data/shard_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "common/test_support.h"
#include "data/test_util.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/data/loader.h"
#include "gantry/data/mds.h"

namespace gantry::data {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

using test::ShardBytesIn;
using test::WriteMds;
using test::WriteWds;

struct EpochRun {
  Status status;
  std::vector<std::string> keys;  // in the order read
};

// Reads one slot's epoch through a fresh source.
EpochRun ReadEpoch(const std::string& url, const ShardSourceOptions& o, uint64_t epoch = 0,
                   ReadAheadOptions ahead = {}, bool shuffle = true) {
  EpochRun r;
  auto d = LocateDataset(url, {});
  if (!d.ok()) return {d.status(), {}};
  auto source = OpenShardSource(std::move(*d), o);
  if (!source.ok()) return {source.status(), {}};
  auto order = EpochOrder::Create((*source)->shard_samples(),
                                  {.seed = 3, .shuffle = shuffle, .window = 8}, epoch);
  auto it = SampleIterator::Create(**source, *order, {}, 0, ahead);
  if (!it.ok()) return {it.status(), {}};
  Sample s;
  while (true) {
    auto more = it->Next(s);
    if (!more.ok()) return {more.status(), r.keys};
    if (!*more) break;
    r.keys.push_back(s.key);
  }
  return r;
}

ShardSourceOptions Options(MetricsRegistry& registry, const std::string& cache_dir,
                           uint64_t capacity = 0) {
  ShardSourceOptions o;
  o.metrics = &registry;
  o.job = "test-job";
  o.cache.dir = cache_dir;
  o.cache.capacity_bytes = capacity;
  return o;
}

DataStats StatsOf(MetricsRegistry& registry, const std::string& url) {
  return LoaderMetrics::For(registry, url, "test-job")->Snapshot();
}

std::set<std::string> Sorted(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

std::set<std::string> AllKeys(int n) {
  std::set<std::string> out;
  for (int i = 0; i < n; ++i) out.insert("k" + std::to_string(i));
  return out;
}

// The cached shard files of a cache directory.
std::vector<fs::path> CachedFiles(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name[0] >= '0' && name[0] <= '9') out.push_back(e.path());
  }
  return out;
}

uint64_t FileBytes(const std::vector<fs::path>& files) {
  uint64_t n = 0;
  for (const fs::path& f : files) n += fs::file_size(f);
  return n;
}

void FlipByte(const fs::path& file, uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

// --- ShardCache itself ------------------------------------------------------------------------

TEST(ShardCache, PutGetAndDamagedCopyIsDeleted) {
  TempDir tmp;
  auto cache = ShardCache::Open({tmp.path() + "/c", 0}, "file:///data/a");
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_EQ((*cache)->Get(0, "x/s0.tar").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE((*cache)->Put(0, "x/s0.tar", "hello shard").ok());
  auto got = (*cache)->Get(0, "x/s0.tar");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "hello shard");
  FlipByte((*cache)->PathOf(0, "x/s0.tar"), 3);
  auto bad = (*cache)->Get(0, "x/s0.tar");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ((*cache)->counters().damaged, 1u);
  EXPECT_FALSE(fs::exists((*cache)->PathOf(0, "x/s0.tar")));  // deleted, so it is refetched
  // A truncated copy is damage too.
  ASSERT_TRUE((*cache)->Put(1, "s1", std::string(100, 'z')).ok());
  fs::resize_file((*cache)->PathOf(1, "s1"), 50);
  EXPECT_EQ((*cache)->Get(1, "s1").status().code(), StatusCode::kDataLoss);
}

// A node's cache folder is often configured before it exists (gantry-agent --data-cache
// /nvme/gantry/data-cache on a fresh disk): its parents are made; a file in the way is an error.
TEST(ShardCache, MakesTheFolderWithItsParents) {
  TempDir tmp;
  auto cache = ShardCache::Open({tmp.path() + "/a/b/c", 0}, "file:///data/a");
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  ASSERT_TRUE((*cache)->Put(0, "s0", "bytes").ok());
  EXPECT_TRUE(fs::exists((*cache)->PathOf(0, "s0")));
  std::ofstream(tmp.path() + "/file") << "x";
  EXPECT_FALSE(ShardCache::Open({tmp.path() + "/file/c", 0}, "file:///data/a").ok());
}

TEST(ShardCache, EvictsLeastRecentlyUsedButNeverAPinnedShard) {
  TempDir tmp;
  const uint64_t kShard = 1000, kFile = kShard + 16;  // 16: the trailer
  const ShardCacheOptions o{tmp.path(), 3 * kFile};
  auto reader = ShardCache::Open(o, "file:///d");  // one process's view ...
  auto other = ShardCache::Open(o, "file:///d");   // ... and another's (its own lock files)
  ASSERT_TRUE(reader.ok() && other.ok());
  auto pin0 = (*reader)->PinShard(0);
  ASSERT_TRUE(pin0.ok());
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE((*other)->Put(i, "s" + std::to_string(i), std::string(kShard, 'a' + i)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct mtimes
  }
  // Full: shard 0 is the least recently used, but pinned; shard 1 goes.
  ASSERT_TRUE((*other)->Put(3, "s3", std::string(kShard, 'd')).ok());
  EXPECT_TRUE((*other)->Get(0, "s0").ok());
  EXPECT_EQ((*other)->Get(1, "s1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*other)->counters().evictions, 1u);
  EXPECT_LE(*(*other)->UsedBytes(), o.capacity_bytes);
  // Every shard pinned: nothing can go, and the new one does not fit.
  auto pin2 = (*reader)->PinShard(2);
  auto pin3 = (*reader)->PinShard(3);
  ASSERT_TRUE(pin2.ok() && pin3.ok());
  EXPECT_EQ((*other)->Put(4, "s4", std::string(kShard, 'e')).code(),
            StatusCode::kResourceExhausted);
  EXPECT_LE(*(*other)->UsedBytes(), o.capacity_bytes);
  // Unpinned, the least recently used of them goes (0 was read last by Get above, so 2).
  *pin2 = ShardCache::Pin();
  ASSERT_TRUE((*other)->Put(4, "s4", std::string(kShard, 'e')).ok());
  EXPECT_EQ((*other)->Get(2, "s2").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE((*other)->Get(0, "s0").ok());
  // Larger than the whole cache: refused before anything is evicted.
  EXPECT_EQ((*other)->Put(9, "s9", std::string(4 * kShard, 'x')).code(),
            StatusCode::kResourceExhausted);
}

// A cache pointed at a folder already in use (a data disk's root, say) counts and evicts only
// the dataset folders it made: before, a user's "0.jpg" under it looked like shard 0 of a
// cached dataset and was deleted to make room.
TEST(ShardCache, NeverCountsOrEvictsFilesItDidNotMake) {
  TempDir tmp;
  const uint64_t kShard = 1000, kFile = kShard + 16;
  const std::string photos = tmp.path() + "/photos";
  const std::string lookalike = tmp.path() + "/0123456789abcdef";  // a cache-like name, no lock
  fs::create_directories(photos);
  fs::create_directories(lookalike);
  for (const std::string& f : {photos + "/0.jpg", photos + "/1.jpg", lookalike + "/2.x"}) {
    std::ofstream(f) << std::string(kShard, 'u');
  }
  const ShardCacheOptions o{tmp.path(), 2 * kFile};
  auto cache = ShardCache::Open(o, "file:///d");
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(*(*cache)->UsedBytes(), 0u);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE((*cache)->Put(i, "s" + std::to_string(i), std::string(kShard, 'a')).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct mtimes
  }
  EXPECT_EQ((*cache)->counters().evictions, 2u);
  EXPECT_EQ(*(*cache)->UsedBytes(), 2 * kFile);
  for (const std::string& f : {photos + "/0.jpg", photos + "/1.jpg", lookalike + "/2.x"}) {
    EXPECT_TRUE(fs::exists(f)) << f;
    EXPECT_EQ(fs::file_size(f), kShard) << f;
  }
}

// A pin held in another process (a child that pins and waits) keeps the shard.
TEST(ShardCache, PinInAnotherProcessIsHonoured) {
  TempDir tmp;
  const ShardCacheOptions o{tmp.path(), 2 * 116};
  auto cache = ShardCache::Open(o, "u");
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Put(0, "s0", std::string(100, 'a')).ok());
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  std::fflush(nullptr);  // nothing buffered is written twice, by a child too
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto mine = ShardCache::Open(o, "u");
    auto pin = mine.ok() ? (*mine)->PinShard(0) : Result<ShardCache::Pin>(Internal("open"));
    char c = pin.ok() ? 'p' : 'x';
    (void)!write(to_parent[1], &c, 1);
    (void)!read(to_child[0], &c, 1);  // hold the pin until the parent is done
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  ASSERT_EQ(c, 'p');
  ASSERT_TRUE((*cache)->Put(1, "s1", std::string(100, 'b')).ok());
  // A third shard needs room; 0 is older but pinned by the child, so 1 goes.
  ASSERT_TRUE((*cache)->Put(2, "s2", std::string(100, 'c')).ok());
  EXPECT_TRUE((*cache)->Get(0, "s0").ok());
  EXPECT_EQ((*cache)->Get(1, "s1").status().code(), StatusCode::kNotFound);
  (void)!write(to_child[1], "x", 1);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The child is gone, and so is its pin.
  ASSERT_TRUE((*cache)->Put(3, "s3", std::string(100, 'd')).ok());
  EXPECT_EQ((*cache)->Get(0, "s0").ok() + (*cache)->Get(2, "s2").ok(), 1);
}

// --- The loader through the cache ---------------------------------------------------------------

// Several processes reading one dataset through one cache at the same moment: each reads every
// sample, and each shard is downloaded once on the node (the durable bytes of all the processes
// add up to the dataset's size).
TEST(LoaderCache, ProcessesShareOneCachedCopy) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 6, 5);
  uint64_t dataset_bytes = 0;
  for (const auto& e : fs::directory_iterator(data)) {
    if (e.path().filename().string().rfind("shard", 0) == 0) {
      dataset_bytes += fs::file_size(e.path());
    }
  }
  const int kProcs = 4;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    std::fflush(nullptr);  // nothing buffered is written twice, by a child too
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char c;
      (void)!read(go[0], &c, 1);  // all start together: EOF when the parent closes it
      MetricsRegistry registry;
      EpochRun r = ReadEpoch("file://" + data, Options(registry, cache), 0, {4, 2});
      const DataStats s = StatsOf(registry, "file://" + data);
      std::ofstream out(tmp.path() + "/result-" + std::to_string(p));
      out << (r.status.ok() && Sorted(r.keys) == AllKeys(30) && r.keys.size() == 30) << " "
          << s.bytes_durable << " " << s.bytes_cache << " " << s.shards_durable << " "
          << s.shards_cache << "\n";
      out.close();
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  uint64_t durable = 0, cached = 0, shards_durable = 0, shards_cached = 0;
  for (int p = 0; p < kProcs; ++p) {
    std::ifstream in(tmp.path() + "/result-" + std::to_string(p));
    int ok = 0;
    uint64_t d, c, sd, sc;
    ASSERT_TRUE(in >> ok >> d >> c >> sd >> sc) << "process " << p << " wrote no result";
    EXPECT_EQ(ok, 1) << "process " << p << " read the wrong samples";
    durable += d;
    cached += c;
    shards_durable += sd;
    shards_cached += sc;
  }
  EXPECT_EQ(shards_durable, 6u);  // each shard downloaded once on the node
  EXPECT_EQ(durable, dataset_bytes);
  EXPECT_EQ(shards_cached, 6u * (kProcs - 1));  // everyone else read the cached copy
  EXPECT_EQ(cached, dataset_bytes * (kProcs - 1));
  EXPECT_EQ(CachedFiles(cache).size(), 6u);
}

// A cache that holds a third of the dataset: every epoch still downloads each shard exactly
// once (read-ahead shards are pinned, so none is evicted before it is read), the cache never
// passes its budget, and LRU evicts what the epoch has finished with.
TEST(LoaderCache, SmallCachePinsTheWindowAndNeverThrashes) {
  for (DatasetFormat format : {DatasetFormat::kMds, DatasetFormat::kWebDataset}) {
    SCOPED_TRACE(DatasetFormatName(format));
    TempDir tmp;
    const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
    if (format == DatasetFormat::kMds) {
      WriteMds(data, 9, 4);
    } else {
      WriteWds(data, 9, 4);
    }
    uint64_t largest = 0, total = 0;
    for (const auto& e : fs::directory_iterator(data)) {
      if (e.path().filename().string().rfind("shard", 0) != 0) continue;
      largest = std::max<uint64_t>(largest, fs::file_size(e.path()));
      total += fs::file_size(e.path());
    }
    const uint64_t capacity = 3 * (largest + 16);
    ASSERT_LT(capacity, total);
    MetricsRegistry registry;
    const std::string url = "file://" + data;
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      const DataStats before = StatsOf(registry, url);
      // Window 8 samples = 2 shards held, plus up to 1 read ahead: 3 pinned at most.
      ShardSourceOptions o = Options(registry, cache, capacity);
      // Counted shards are read at open too (through the cache, and counted in the metrics):
      // given the counts, the epoch's own reads are all there is.
      if (format == DatasetFormat::kWebDataset) o.wds_shard_samples.assign(9, 4);
      EpochRun r = ReadEpoch(url, o, epoch, {1, 1});
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_EQ(Sorted(r.keys), AllKeys(36));
      const DataStats after = StatsOf(registry, url);
      EXPECT_EQ(
          after.shards_durable + after.shards_cache - (before.shards_durable + before.shards_cache),
          9u)
          << "each shard read exactly once in epoch " << epoch;
      EXPECT_EQ(after.uncached, 0u) << "the pinned window always fit";
      EXPECT_LE(FileBytes(CachedFiles(cache)), capacity);
    }
    const DataStats s = StatsOf(registry, url);
    EXPECT_GT(s.evictions, 0u);
    EXPECT_GE(s.shards_durable, 9u);
  }
}

TEST(LoaderCache, DamagedCachedShardIsFetchedAgain) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 4, 5);
  MetricsRegistry registry;
  const std::string url = "file://" + data;
  EpochRun first = ReadEpoch(url, Options(registry, cache));
  ASSERT_TRUE(first.status.ok());
  std::vector<fs::path> files = CachedFiles(cache);
  ASSERT_EQ(files.size(), 4u);
  FlipByte(files[1], 40);
  EpochRun second = ReadEpoch(url, Options(registry, cache));
  ASSERT_TRUE(second.status.ok()) << second.status.ToString();
  EXPECT_EQ(second.keys, first.keys);  // same order, same samples: nothing skipped
  const DataStats s = StatsOf(registry, url);
  EXPECT_EQ(s.cache_damaged, 1u);
  EXPECT_EQ(s.shards_durable, 4u + 1u);  // the first epoch's four, and the damaged one again
  EXPECT_EQ(s.shards_cache, 3u);
  EXPECT_EQ(CachedFiles(cache).size(), 4u);  // cached again, intact
}

TEST(LoaderCache, DamagedSourceShardIsDataLossNamingItOrComesFromTheFallback) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", mirror = tmp.path() + "/mirror";
  WriteMds(data, 3, 5);
  fs::copy(data, mirror);
  // Same size, one byte changed: only the index's hash can tell.
  FlipByte(data + "/shard.00001.mds", 60);
  MetricsRegistry registry;
  const std::string url = "file://" + data;
  for (const std::string& cache : {std::string(), tmp.path() + "/cache"}) {
    SCOPED_TRACE(cache.empty() ? "no cache" : "cache");
    EpochRun r = ReadEpoch(url, Options(registry, cache), 0, {}, /*shuffle=*/false);
    EXPECT_EQ(r.status.code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status.message().find("shard.00001.mds"), std::string::npos) << r.status.ToString();
    EXPECT_NE(r.status.message().find("hash mismatch"), std::string::npos) << r.status.ToString();
    EXPECT_EQ(r.keys.size(), 5u);  // the first shard's samples, then the loud stop
  }
  // With a second source holding a good copy, the epoch completes from it.
  ShardSourceOptions o = Options(registry, tmp.path() + "/cache");
  o.fallback_urls = {"file://" + mirror};
  const DataStats before = StatsOf(registry, url);
  EpochRun r = ReadEpoch(url, o);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(Sorted(r.keys), AllKeys(15));
  const DataStats after = StatsOf(registry, url);
  EXPECT_EQ(after.source_damaged - before.source_damaged, 1u);
  // A shorter copy is caught by its size before it is fetched.
  fs::copy_file(mirror + "/shard.00001.mds", data + "/shard.00001.mds",
                fs::copy_options::overwrite_existing);
  fs::resize_file(data + "/shard.00002.mds", 100);
  EpochRun cut = ReadEpoch(url, Options(registry, ""), 0, {}, false);
  EXPECT_EQ(cut.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(cut.status.message().find("shard.00002.mds"), std::string::npos);
}

TEST(LoaderCache, MissingShardIsNotFoundNamingIt) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", mirror = tmp.path() + "/mirror";
  WriteWds(data, 3, 4);
  fs::create_directories(mirror);
  auto d = LocateDataset("file://" + data, {});
  ASSERT_TRUE(d.ok());
  const std::string victim = d->wds_shards[2];
  MetricsRegistry registry;
  ShardSourceOptions o = Options(registry, tmp.path() + "/cache");
  o.wds_shard_samples = {4, 4, 4};
  o.fallback_urls = {"file://" + mirror};  // tried too, and lacks it as well
  auto source = OpenShardSource(std::move(*d), o);
  ASSERT_TRUE(source.ok());
  fs::remove(data + "/" + victim);
  auto order = EpochOrder::Create((*source)->shard_samples(), {.shuffle = false}, 0);
  auto it = SampleIterator::Create(**source, *order, {}, 0);
  ASSERT_TRUE(it.ok());
  Sample s;
  Status last;
  int n = 0;
  while (true) {
    auto more = it->Next(s);
    if (!more.ok()) {
      last = more.status();
      break;
    }
    ASSERT_TRUE(*more) << "the epoch ended without the missing shard";
    ++n;
  }
  EXPECT_EQ(n, 8);
  EXPECT_EQ(last.code(), StatusCode::kNotFound);
  EXPECT_NE(last.message().find(victim), std::string::npos) << last.ToString();
  EXPECT_NE(last.message().find(mirror), std::string::npos) << last.ToString();
}

// A dataset rewritten in place (same URL, same shard names and sizes, other bytes) is read
// anew, never served from the old version's cached copies. Only an MDS index's hashes told the
// versions apart: a WebDataset (a tar has no hash, and its size moves in 512-byte steps, so a
// label fixed keeps it) or an MDS dataset written without hashes (MDSWriter's default; a corpus
// tokenized again into fixed-length rows keeps every size) was served stale.
TEST(LoaderCache, DatasetRewrittenInPlaceIsNotServedStale) {
  struct Case {
    const char* name;
    std::function<void(const std::string&, int salt)> write;
    const char* field;
    std::function<char(int i, int salt)> first_byte;
    uint64_t cache_hits;  // a WebDataset reads its epoch from the copy its sample count cached
  };
  const std::vector<Case> cases = {
      {"mds hashed", [](const std::string& p, int salt) { WriteMds(p, 3, 4, salt); }, "v",
       [](int i, int salt) { return static_cast<char>(i + salt); }, 0},
      {"mds without hashes",
       [](const std::string& p, int salt) { WriteMds(p, 3, 4, salt, /*hashed=*/false); }, "v",
       [](int i, int salt) { return static_cast<char>(i + salt); }, 0},
      {"wds", [](const std::string& p, int salt) { WriteWds(p, 3, 4, salt); }, "txt",
       [](int i, int salt) { return static_cast<char>('a' + (i + salt) % 26); }, 6},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir tmp;
    const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
    c.write(data, 0);
    const uint64_t bytes = ShardBytesIn(data);
    MetricsRegistry registry;
    const std::string url = "file://" + data;
    ASSERT_TRUE(ReadEpoch(url, Options(registry, cache)).status.ok());
    fs::remove_all(data);
    c.write(data, 1);
    ASSERT_EQ(ShardBytesIn(data), bytes);
    auto d = LocateDataset(url, {});
    ASSERT_TRUE(d.ok());
    auto source = OpenShardSource(std::move(*d), Options(registry, cache));
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    auto order = EpochOrder::Create((*source)->shard_samples(), {.shuffle = false}, 0);
    auto it = SampleIterator::Create(**source, *order, {}, 0);
    ASSERT_TRUE(it.ok());
    Sample s;
    for (int i = 0; i < 12; ++i) {
      auto more = it->Next(s);
      ASSERT_TRUE(more.ok() && *more);
      const SampleField* f = s.Find(c.field);
      ASSERT_NE(f, nullptr);
      EXPECT_EQ(f->bytes[0], c.first_byte(i, 1)) << s.key;
    }
    EXPECT_EQ(StatsOf(registry, url).shards_durable, 6u);  // both versions fetched once each
    EXPECT_EQ(StatsOf(registry, url).shards_cache, c.cache_hits);
    // Unchanged, it is the cache's: opening it again is not another version.
    ASSERT_TRUE(ReadEpoch(url, Options(registry, cache)).status.ok());
    EXPECT_EQ(StatsOf(registry, url).shards_durable, 6u);
  }
}

// A location built by hand with sizes or versions for other shards than it lists would key the
// cache on the wrong shards: refused, naming the counts.
TEST(LoaderCache, ShardSizesOrVersionsForOtherShardsAreRefused) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 3, 4);
  MetricsRegistry registry;
  for (bool versions : {false, true}) {
    SCOPED_TRACE(versions ? "versions" : "sizes");
    auto d = LocateDataset("file://" + data, {});
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->wds_shard_versions.size(), 3u);
    if (versions) {
      d->wds_shard_versions.pop_back();
    } else {
      d->wds_shard_bytes.pop_back();
    }
    auto source = OpenShardSource(std::move(*d), Options(registry, tmp.path() + "/cache"));
    ASSERT_FALSE(source.ok());
    EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument);
    const char* says = versions ? "2 shard versions for 3" : "2 shard sizes for 3";
    EXPECT_NE(source.status().message().find(says), std::string::npos)
        << source.status().ToString();
  }
}

// A cache inside the dataset's own folder put its copies among the shards: the next open
// listed them too, and every sample came twice (then more with each new fingerprint). However
// the cache folder is named, that is refused before anything is written; a sibling is fine.
TEST(LoaderCache, NeverInsideTheDatasetFolder) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 3, 4);
  fs::create_directory_symlink(data, tmp.path() + "/link");
  MetricsRegistry registry;
  for (const std::string& cache : {data, data + "/", data + "/cache", data + "/a/b",
                                   tmp.path() + "/link/cache", data + "/../data/cache"}) {
    SCOPED_TRACE(cache);
    EpochRun r = ReadEpoch("file://" + data, Options(registry, cache));
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(r.keys.empty());
  }
  EXPECT_EQ(
      ReadEpoch("file://" + tmp.path() + "/link", Options(registry, data + "/c")).status.code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(data + "/cache"));
  EXPECT_FALSE(fs::exists(data + "/a"));
  for (const auto& e : fs::directory_iterator(data)) {  // nothing but what the writer left
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(e.path().extension() == ".tar" || name == ".gantry-tmp") << name;
  }
  for (int pass = 0; pass < 2; ++pass) {
    EpochRun r = ReadEpoch("file://" + data, Options(registry, tmp.path() + "/data-cache"));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(Sorted(r.keys), AllKeys(12));
    EXPECT_EQ(r.keys.size(), 12u);
  }
}

// One dataset named several ways (a trailing slash, "." and "//", file:// or a plain path, a
// link to its folder) is one cached copy: each spelling had a folder of its own, so a job whose
// URL differed by a slash from the one staged (or from another job's) fetched every shard again.
TEST(LoaderCache, OneDatasetNamedManyWaysIsCachedOnce) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteWds(data, 3, 4);
  fs::create_directory_symlink(data, tmp.path() + "/link");
  MetricsRegistry registry;
  const std::vector<std::string> urls = {"file://" + data, data + "/", tmp.path() + "/./data",
                                         "file://" + tmp.path() + "//data/", tmp.path() + "/link"};
  for (size_t i = 0; i < urls.size(); ++i) {
    SCOPED_TRACE(urls[i]);
    EpochRun r = ReadEpoch(urls[i], Options(registry, cache));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(Sorted(r.keys), AllKeys(12));
    const DataStats st = StatsOf(registry, urls[i]);
    EXPECT_EQ(st.shards_durable, i == 0 ? 3u : 0u);  // fetched once, by the first spelling
    if (i > 0) {
      EXPECT_GT(st.shards_cache, 0u);
    }
  }
  int folders = 0;
  for (const auto& e : fs::directory_iterator(cache)) folders += e.is_directory();
  EXPECT_EQ(folders, 1);
}

// Read-ahead fetches the next shards before the consumer needs them; without it, nothing is
// fetched early.
TEST(LoaderCache, ReadAheadFetchesTheNextShards) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteMds(data, 6, 5);
  for (uint32_t depth : {0u, 3u}) {
    SCOPED_TRACE(depth);
    MetricsRegistry registry;
    const std::string url = "file://" + data;
    auto d = LocateDataset(url, {});
    ASSERT_TRUE(d.ok());
    auto source = OpenShardSource(std::move(*d), Options(registry, ""));
    ASSERT_TRUE(source.ok());
    auto order = EpochOrder::Create((*source)->shard_samples(), {.shuffle = false}, 0);
    auto it = SampleIterator::Create(**source, *order, {}, 0, {depth, 2});
    ASSERT_TRUE(it.ok());
    Sample s;
    ASSERT_TRUE(*it->Next(s));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    uint64_t fetched = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      fetched = StatsOf(registry, url).shards_durable;
      if (depth == 0 || fetched >= 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (depth == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_EQ(StatsOf(registry, url).shards_durable, 1u);
    } else {
      EXPECT_GE(fetched, 2u);
      EXPECT_LE(fetched, 3u);  // no deeper than max_shards (one consumed, depth ahead)
    }
    uint64_t n = 1;
    while (*it->Next(s)) ++n;
    EXPECT_EQ(n, 30u);
    EXPECT_EQ(StatsOf(registry, url).shards_durable, 6u);
  }
}

TEST(ReadAhead, DepthFollowsTheRule) {
  EXPECT_EQ(ReadAheadDepth(0.0, 1.0, 4), 1u);  // free fetches: one shard ahead
  EXPECT_EQ(ReadAheadDepth(0.1, 1.0, 4), 2u);  // ceil(0.1) + 1: one in flight, one spare
  EXPECT_EQ(ReadAheadDepth(1.0, 1.0, 4), 2u);
  EXPECT_EQ(ReadAheadDepth(2.5, 1.0, 8), 4u);   // ceil(2.5) + 1
  EXPECT_EQ(ReadAheadDepth(30.0, 1.0, 8), 8u);  // capped
  EXPECT_EQ(ReadAheadDepth(1.0, 0.0, 3), 3u);   // an instant consumer: as deep as allowed
  EXPECT_EQ(ReadAheadDepth(1.0, 1.0, 0), 1u);
}

// A store whose reads take a while: the loader measures it and reads ahead as deep as allowed.
class SlowStore final : public ObjectStore {
 public:
  SlowStore(std::unique_ptr<ObjectStore> inner, int delay_ms)
      : inner_(std::move(inner)), delay_ms_(delay_ms) {}
  std::string_view backend() const override { return "slow"; }
  std::string url() const override { return inner_->url(); }
  bool SupportsCreateIfAbsent() const override { return false; }
  Status Put(std::string_view, std::string_view, const PutOptions&) override {
    return Unimplemented("read-only");
  }
  Result<std::string> Get(std::string_view key) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    return inner_->Get(key);
  }
  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override {
    return inner_->GetRange(key, offset, length);
  }
  Result<ObjectInfo> Head(std::string_view key) override { return inner_->Head(key); }
  Result<ListPage> List(std::string_view prefix, std::string_view token, int max_keys) override {
    return inner_->List(prefix, token, max_keys);
  }
  Status Delete(std::string_view) override { return Unimplemented("read-only"); }

 private:
  std::unique_ptr<ObjectStore> inner_;
  int delay_ms_;
};

TEST(ReadAhead, DepthGrowsForASlowStoreAndStaysSmallForASlowConsumer) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteMds(data, 8, 5);
  for (bool slow_store : {true, false}) {
    SCOPED_TRACE(slow_store ? "slow store" : "slow consumer");
    MetricsRegistry registry;
    auto d = LocateDataset("file://" + data, {});
    ASSERT_TRUE(d.ok());
    if (slow_store) d->store = std::make_unique<SlowStore>(std::move(d->store), 60);
    auto source = OpenShardSource(std::move(*d), Options(registry, ""));
    ASSERT_TRUE(source.ok());
    auto order = EpochOrder::Create((*source)->shard_samples(), {.shuffle = false}, 0);
    auto it = SampleIterator::Create(**source, *order, {}, 0, {4, 4});
    ASSERT_TRUE(it.ok());
    Sample s;
    int n = 0;
    while (*it->Next(s)) {
      ++n;
      if (!slow_store) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    EXPECT_EQ(n, 40);
    const DataStats st = StatsOf(registry, "file://" + data);
    // 60 ms a fetch against microseconds of consuming: capped at 4. 150 ms of consuming per
    // shard against about a millisecond of fetching: ceil(ratio < 1) + 1 = 2.
    EXPECT_EQ(st.read_ahead_depth, slow_store ? 4u : 2u);
    if (!slow_store) {
      // Only the first shard was waited for (it cannot be read ahead of the first sample).
      EXPECT_LT(st.stall_seconds, 0.5 * st.active_seconds);
    }
  }
}

// Metrics on a small deterministic run: exact bytes and shards by source, hit ratio and
// samples, in the registry's Prometheus text and in the snapshot.
TEST(LoaderCache, MetricsOfASmallRun) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 4, 5);
  uint64_t dataset_bytes = 0;
  for (const auto& e : fs::directory_iterator(data)) {
    if (e.path().filename().string().rfind("shard", 0) == 0) {
      dataset_bytes += fs::file_size(e.path());
    }
  }
  MetricsRegistry registry;
  const std::string url = "file://" + data;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(ReadEpoch(url, Options(registry, cache), 0).status.ok());
  DataStats s = StatsOf(registry, url);
  EXPECT_EQ(s.bytes_durable, dataset_bytes);
  EXPECT_EQ(s.bytes_cache, 0u);
  EXPECT_EQ(s.bytes_peer, 0u);
  EXPECT_EQ(s.shards_durable, 4u);
  EXPECT_EQ(s.samples, 20u);
  EXPECT_EQ(s.hit_ratio, 0.0);
  ASSERT_TRUE(ReadEpoch(url, Options(registry, cache), 1).status.ok());
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s = StatsOf(registry, url);
  EXPECT_EQ(s.bytes_cache, dataset_bytes);
  EXPECT_EQ(s.shards_cache, 4u);
  EXPECT_EQ(s.samples, 40u);
  EXPECT_DOUBLE_EQ(s.hit_ratio, 0.5);
  EXPECT_GT(s.stall_seconds, 0.0);
  EXPECT_LE(s.stall_seconds, s.active_seconds);
  EXPECT_LE(s.active_seconds, wall);
  EXPECT_DOUBLE_EQ(s.samples_per_second, 40.0 / s.active_seconds);
  const std::string text = registry.PrometheusText();
  const std::string labels = "dataset=\"" + url + "\",job=\"test-job\"";
  EXPECT_NE(text.find("gantry_data_bytes_total{" + labels + ",source=\"cache\"} " +
                      std::to_string(dataset_bytes)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gantry_data_bytes_total{" + labels + ",source=\"durable\"} " +
                      std::to_string(dataset_bytes)),
            std::string::npos);
  EXPECT_NE(text.find("gantry_data_samples_total{" + labels + "} 40"), std::string::npos);
  EXPECT_NE(text.find("gantry_data_cache_hit_ratio{" + labels + "} 0.5"), std::string::npos);
  EXPECT_NE(text.find("gantry_data_stall_seconds_count{" + labels + "}"), std::string::npos);
}

// DataLoader workers' counts, folded into the training process's registry, are series of their
// own: the process's own stay as they were, and each family sums to both.
TEST(LoaderCache, FoldedWorkerCountsAreSeriesOfTheirOwn) {
  MetricsRegistry registry;
  const std::string url = "file:///data/train";
  auto own = LoaderMetrics::For(registry, url, "j");
  own->AddFetch(FetchSource::kCache, 100);
  own->AddSamples(10, 2.0);
  own->AddStall(0.003);
  auto workers = LoaderMetrics::For(registry, url, "j", "workers");
  ASSERT_NE(own, workers);
  DataStats added;
  added.bytes_durable = 300;
  added.shards_durable = 3;
  added.source_damaged = 1;
  added.samples = 30;
  added.active_seconds = 4.0;
  added.stall_seconds = 0.75;
  added.stall_buckets.assign(LoaderMetrics::StallBounds().size() + 1, 0);
  added.stall_buckets[0] = 2;      // two short waits
  added.stall_buckets.back() = 1;  // and one past the last bound
  EXPECT_TRUE(workers->Fold(added, 15.0).ok());
  DataStats half = added;
  half.samples = 6;
  half.stall_seconds = 0;
  half.stall_buckets.assign(added.stall_buckets.size(), 0);
  half.bytes_durable = half.shards_durable = half.source_damaged = 0;
  half.active_seconds = 1.0;
  EXPECT_TRUE(workers->Fold(half, 12.0).ok());
  DataStats misshapen = added;
  misshapen.stall_buckets.pop_back();
  EXPECT_EQ(workers->Fold(misshapen, 1.0).code(), StatusCode::kInvalidArgument);

  const DataStats w = workers->Snapshot();
  EXPECT_EQ(w.bytes_durable, 300u);
  EXPECT_EQ(w.shards_durable, 3u);
  EXPECT_EQ(w.source_damaged, 1u);
  EXPECT_EQ(w.samples, 36u);
  EXPECT_DOUBLE_EQ(w.active_seconds, 5.0);
  EXPECT_DOUBLE_EQ(w.stall_seconds, 0.75);
  EXPECT_EQ(w.stall_buckets, added.stall_buckets);  // half added no waits
  EXPECT_EQ(w.hit_ratio, 0.0);
  const DataStats o = own->Snapshot();
  EXPECT_EQ(o.samples, 10u);
  EXPECT_EQ(o.bytes_cache, 100u);
  EXPECT_EQ(o.bytes_durable, 0u);
  EXPECT_DOUBLE_EQ(o.stall_seconds, 0.003);

  const std::string text = registry.PrometheusText();
  const std::string labels = "dataset=\"" + url + "\",job=\"j\"";
  for (const std::string& want : {
           "gantry_data_samples_total{" + labels + "} 10\n",
           "gantry_data_samples_total{" + labels + ",process=\"workers\"} 36\n",
           "gantry_data_bytes_total{" + labels + ",process=\"workers\",source=\"durable\"} 300\n",
           "gantry_data_samples_per_second{" + labels + ",process=\"workers\"} 12\n",
           "gantry_data_stall_seconds_count{" + labels + ",process=\"workers\"} 3\n",
           "gantry_data_stall_seconds_bucket{" + labels + ",process=\"workers\",le=\"1e-05\"} 2\n",
           "gantry_data_stall_seconds_bucket{" + labels + ",process=\"workers\",le=\"10\"} 2\n",
           "gantry_data_stall_seconds_bucket{" + labels + ",process=\"workers\",le=\"+Inf\"} 3\n",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
}

}  // namespace
}  // namespace gantry::data
