// StageDataset: a staged dataset is read by the loader from the node-local cache alone (its
// source can even be gone), staging is idempotent, racing stagers fetch each shard once, and a
// missing, damaged, too big or cancelled staging fails with its code, naming the shard.
#include "gantry/data/stage.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/test_support.h"
#include "data/test_util.h"
#include "gantry/data/loader.h"
#include "gantry/data/mds.h"

namespace gantry::data {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

using test::WriteMds;
using test::WriteWds;

using test::ShardBytesIn;
using test::ShardFiles;

StageOptions Stage(const std::string& cache, uint64_t capacity = 0) {
  StageOptions o;
  o.cache.dir = cache;
  o.cache.capacity_bytes = capacity;
  return o;
}

struct Epoch {
  Status status;
  std::set<std::string> keys;
  size_t samples = 0;
  DataStats stats;
};

// Reads a whole epoch the way a training job on the node would: the loader over the URL and
// the cache directory, with its metrics in a registry of its own.
Epoch ReadAll(const std::string& url, const std::string& cache) {
  Epoch r;
  MetricsRegistry registry;
  auto d = LocateDataset(url, {});
  if (!d.ok()) {
    r.status = d.status();
    return r;
  }
  ShardSourceOptions o;
  o.metrics = &registry;
  o.job = "train";
  o.cache.dir = cache;
  auto source = OpenShardSource(std::move(*d), o);
  if (!source.ok()) {
    r.status = source.status();
    return r;
  }
  auto order = EpochOrder::Create((*source)->shard_samples(), {.seed = 1, .window = 8}, 0);
  auto it = SampleIterator::Create(**source, *order, {}, 0);
  if (!it.ok()) {
    r.status = it.status();
    return r;
  }
  Sample s;
  while (true) {
    auto more = it->Next(s);
    if (!more.ok()) {
      r.status = more.status();
      break;
    }
    if (!*more) break;
    r.keys.insert(s.key);
    ++r.samples;
  }
  r.stats = (*source)->metrics()->Snapshot();
  return r;
}

std::set<std::string> AllKeys(int n) {
  std::set<std::string> out;
  for (int i = 0; i < n; ++i) out.insert("k" + std::to_string(i));
  return out;
}

// The point of staging: afterwards the job's loader reads every byte from the node's cache. The
// shard files are even deleted from the source (its index stays, which the loader opens), so
// a read that went to the source would fail.
TEST(StageDataset, MdsStagedIsReadFromTheCacheAlone) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 4, 5);
  const uint64_t bytes = ShardBytesIn(data);
  std::vector<StageProgress> seen;
  StageOptions o = Stage(cache);
  o.progress = [&](const StageProgress& p) { seen.push_back(p); };
  Result<StageProgress> staged = StageDataset("file://" + data, o);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_EQ(staged->shards_total, 4u);
  EXPECT_EQ(staged->shards_done, 4u);
  EXPECT_EQ(staged->bytes_total, bytes);
  EXPECT_EQ(staged->bytes_done, bytes);
  EXPECT_EQ(staged->bytes_fetched, bytes);
  // Listed first (nothing done), then one report per shard, never going backwards.
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen.front().shards_done, 0u);
  EXPECT_EQ(seen.front().bytes_total, bytes);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].shards_done, i);
    EXPECT_GT(seen[i].bytes_done, seen[i - 1].bytes_done);
  }

  for (const std::string& f : ShardFiles(data)) fs::remove(f);
  Epoch e = ReadAll("file://" + data, cache);
  ASSERT_TRUE(e.status.ok()) << e.status.ToString();
  EXPECT_EQ(e.samples, 20u);
  EXPECT_EQ(e.keys, AllKeys(20));
  EXPECT_EQ(e.stats.bytes_cache, bytes);
  EXPECT_EQ(e.stats.shards_cache, 4u);
  EXPECT_EQ(e.stats.bytes_durable, 0u);
  EXPECT_EQ(e.stats.bytes_peer, 0u);

  // Without the staging the same read fails: the source is really gone.
  EXPECT_EQ(ReadAll("file://" + data, tmp.path() + "/other-cache").status.code(),
            StatusCode::kNotFound);
}

// A WebDataset has no index: the loader counts each shard's samples at open, and with a cache
// it does so through the cache, so a staged dataset's open reads nothing from the source either.
TEST(StageDataset, WebDatasetStagedIsReadFromTheCacheAlone) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteWds(data, 3, 4);
  const uint64_t bytes = ShardBytesIn(data);
  Result<StageProgress> staged = StageDataset("file://" + data, Stage(cache));
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_EQ(staged->shards_total, 3u);
  EXPECT_EQ(staged->shards_done, 3u);
  EXPECT_EQ(staged->bytes_total, bytes);
  EXPECT_EQ(staged->bytes_fetched, bytes);  // each shard once, though the open counted them

  Epoch e = ReadAll("file://" + data, cache);
  ASSERT_TRUE(e.status.ok()) << e.status.ToString();
  EXPECT_EQ(e.keys, AllKeys(12));
  EXPECT_EQ(e.stats.bytes_durable, 0u);
  EXPECT_EQ(e.stats.shards_durable, 0u);
  // Counted at open, then read by the epoch: both from the cache.
  EXPECT_EQ(e.stats.bytes_cache, 2 * bytes);
}

TEST(StageDataset, StagingAgainFetchesNothing) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 3, 4);
  ASSERT_TRUE(StageDataset("file://" + data, Stage(cache)).ok());
  Result<StageProgress> again = StageDataset("file://" + data, Stage(cache));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->shards_done, 3u);
  EXPECT_EQ(again->bytes_done, ShardBytesIn(data));
  EXPECT_EQ(again->bytes_fetched, 0u);
}

// Stagers racing on one dataset (threads here; the fetch lock is per open file, so the same
// holds between processes, as the loader's ProcessesShareOneCachedCopy shows) fetch each shard
// once between them.
TEST(StageDataset, RacingStagersFetchEachShardOnce) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 8, 3);
  constexpr int kStagers = 4;
  std::atomic<bool> go{false};
  std::vector<Result<StageProgress>> results(kStagers, Status::Ok());
  std::vector<std::thread> threads;
  for (int i = 0; i < kStagers; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      results[i] = StageDataset("file://" + data, Stage(cache));
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  uint64_t fetched = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->shards_done, 8u);
    fetched += r->bytes_fetched;
  }
  EXPECT_EQ(fetched, ShardBytesIn(data));
}

TEST(StageDataset, MissingShardIsNotFoundNamingIt) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 3, 4);
  const std::string victim = ShardFiles(data)[1];
  fs::remove(victim);
  StageProgress last;
  StageOptions o = Stage(cache);
  o.progress = [&](const StageProgress& p) { last = p; };
  Result<StageProgress> r = StageDataset("file://" + data, o);
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fs::path(victim).filename().string()), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("file://" + data), std::string::npos);
  EXPECT_EQ(last.shards_done, 1u);  // the shard before it is staged
}

TEST(StageDataset, DamagedShardIsDataLossNamingIt) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 3, 4);
  const std::string victim = ShardFiles(data)[2];
  {
    // Same size, one byte changed: only the index's hash can tell.
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  Result<StageProgress> r = StageDataset("file://" + data, Stage(cache));
  ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fs::path(victim).filename().string()), std::string::npos)
      << r.status().message();
}

// A cache smaller than the dataset takes the shards that fit, in order, and says so.
TEST(StageDataset, TooSmallCacheStagesWhatFitsAndIsResourceExhausted) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 4, 5);
  const std::vector<std::string> files = ShardFiles(data);
  const uint64_t two =
      fs::file_size(files[0]) + fs::file_size(files[1]) + 2 * ShardCache::kTrailerBytes;
  StageProgress last;
  StageOptions o = Stage(cache, two + 100);  // room for two shards, not three
  o.progress = [&](const StageProgress& p) { last = p; };
  Result<StageProgress> r = StageDataset("file://" + data, o);
  ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fs::path(files[2]).filename().string()), std::string::npos)
      << r.status().message();
  EXPECT_EQ(last.shards_done, 2u);
  EXPECT_EQ(last.bytes_fetched, two - 2 * ShardCache::kTrailerBytes);
  // Those two are really there: staging again fetches nothing and stops at the same place.
  last = {};
  r = StageDataset("file://" + data, o);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(last.shards_done, 2u);
  EXPECT_EQ(last.bytes_fetched, 0u);
}

// Staged and kept pinned (keep_pinned): staging another dataset that needs the room cannot
// evict it (without the pins LRU retires its shards first: they are the oldest); once the pins
// are dropped it can.
TEST(StageDataset, KeptPinsHoldAStagedDatasetAgainstEviction) {
  TempDir tmp;
  const std::string a = tmp.path() + "/a", b = tmp.path() + "/b", cache = tmp.path() + "/cache";
  WriteMds(a, 3, 4);
  WriteMds(b, 3, 4, /*salt=*/1);
  // Room for all of a and one shard of b (every cached shard has a trailer).
  const uint64_t capacity = ShardBytesIn(a) + 3 * ShardCache::kTrailerBytes +
                            fs::file_size(ShardFiles(b)[0]) + ShardCache::kTrailerBytes + 10;
  std::vector<std::shared_ptr<const void>> pins;
  StageOptions keep = Stage(cache, capacity);
  keep.keep_pinned = &pins;
  ASSERT_TRUE(StageDataset("file://" + a, keep).ok());
  EXPECT_EQ(pins.size(), 3u);
  // b's shards churn through the one free slot; a stays whole.
  ASSERT_TRUE(StageDataset("file://" + b, Stage(cache, capacity)).ok());
  Result<StageProgress> again = StageDataset("file://" + a, Stage(cache, capacity));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_fetched, 0u);
  // Released: staging b now evicts a's least recently used shards.
  pins.clear();
  ASSERT_TRUE(StageDataset("file://" + b, Stage(cache, capacity)).ok());
  again = StageDataset("file://" + a, Stage(cache, capacity));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GT(again->bytes_fetched, 0u);
}

TEST(StageDataset, CancelStopsBetweenShards) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", cache = tmp.path() + "/cache";
  WriteMds(data, 4, 2);
  std::atomic<bool> cancel{false};
  StageOptions o = Stage(cache);
  o.cancel = &cancel;
  uint64_t done = 0;
  o.progress = [&](const StageProgress& p) {
    done = p.shards_done;
    if (p.shards_done == 1) cancel = true;
  };
  Result<StageProgress> r = StageDataset("file://" + data, o);
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_EQ(done, 1u);

  // A WebDataset is cancelled while its open counts (and stages) the shards.
  WriteWds(tmp.path() + "/wds", 4, 2);
  cancel = false;
  r = StageDataset("file://" + tmp.path() + "/wds", o);
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_EQ(done, 1u);
}

TEST(StageDataset, NeedsACacheAndAnExistingDataset) {
  TempDir tmp;
  EXPECT_EQ(StageDataset("file://" + tmp.path(), StageOptions{}).status().code(),
            StatusCode::kInvalidArgument);
  const std::string nowhere = tmp.path() + "/nowhere";
  EXPECT_EQ(StageDataset("file://" + nowhere, Stage(tmp.path() + "/cache")).status().code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(nowhere));  // not created by looking for it
}

}  // namespace
}  // namespace gantry::data
