// Mapped shards (shard_bytes.h and the loader's use of them): local and cached shards are
// mapped, not read; a file cut short under a mapping reads zeros instead of killing the
// process and the reader fails naming the shard; a SIGBUS outside Gantry's mappings still ends
// the process; mapped bytes outlive eviction; read-ahead keeps the order; and memory stays
// bounded by the window's pages, not by copies of its shards.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "common/test_support.h"
#include "gantry/data/loader.h"
#include "gantry/data/mds.h"
#include "gantry/data/shard_bytes.h"
#include "gantry/data/shard_cache.h"
#include "gantry/data/tar.h"
#include "gantry/data/webdataset.h"
#include "gantry/storage/memory_store.h"

namespace gantry::data {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 23);
  return s;
}

// A WebDataset of `shards` tar shards of `per_shard` samples, each one field of `bytes` bytes.
void WriteWds(const std::string& dir, int shards, int per_shard, size_t bytes) {
  auto store = OpenObjectStore("file://" + dir, {});
  ASSERT_TRUE(store.ok());
  WdsWriterOptions o;
  o.max_samples = per_shard;
  o.max_bytes = 0;
  auto w = WdsWriter::Create(**store, o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < shards * per_shard; ++i) {
    std::string v(bytes, static_cast<char>('A' + i % 26));
    ASSERT_TRUE((*w)->Write("k" + std::to_string(i), {{"bin", v}}).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

std::unique_ptr<ShardSource> Open(const std::string& url, ShardSourceOptions o = {}) {
  static MetricsRegistry registry;  // outlives every source; kept out of the default registry
  o.metrics = &registry;
  auto d = LocateDataset(url, {});
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  auto s = OpenShardSource(std::move(*d), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

// This process's anonymous resident memory (heap and the like, not file pages), in bytes.
uint64_t RssAnon() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  }
  return 0;
}

TEST(ShardBytes, MapsAFileReadOnlyAndUnmapsWhenLastHolderGoes) {
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  const std::string bytes = Pattern(100000);
  WriteFile(path, bytes);
  const uint64_t live = ShardBytes::LiveMappings();
  {
    auto b = ShardBytes::MapFile(path, {});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_TRUE((*b)->mapped());
    EXPECT_EQ((*b)->view(), bytes);
    EXPECT_EQ(ShardBytes::LiveMappings(), live + 1);
    (*b)->Truncate(10);
    EXPECT_EQ((*b)->view(), bytes.substr(0, 10));
  }
  EXPECT_EQ(ShardBytes::LiveMappings(), live);
  EXPECT_EQ(ShardBytes::MapFile(tmp.path() + "/none", {}).status().code(), StatusCode::kNotFound);
  WriteFile(tmp.path() + "/empty", "");
  auto empty = ShardBytes::MapFile(tmp.path() + "/empty", {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
  EXPECT_FALSE(ShardBytes::FromString("x")->mapped());
  EXPECT_FALSE(ShardBytes::FromString("x")->damaged());
}

// Mappings of `path` in this process, per the kernel.
int MappingsOf(const std::string& path) {
  std::ifstream f("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0) {
      ++n;
    }
  }
  return n;
}

// Mappings are given back to a thread that unmaps them (shard_bytes.cc, Unmapper). A DataLoader
// forks its workers at any moment, also while that thread is unmapping: the child must be able
// to give back what it inherited, without a thread of its own yet, with its count of live
// mappings true to the kernel's, and without hanging.
TEST(ShardBytes, AForkWhileMappingsAreGivenBackLeavesTheChildsCountTrue) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support starting threads after a multi-threaded fork";
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  GTEST_SKIP() << "ThreadSanitizer does not support starting threads after a multi-threaded fork";
#endif
#endif
  TempDir tmp;
  const std::string path = tmp.path() + "/shard";
  WriteFile(path, Pattern(1 << 20));
  const uint64_t base = ShardBytes::LiveMappings();
  constexpr int kMappings = 400;
  std::vector<std::shared_ptr<ShardBytes>> held(kMappings);
  for (auto& h : held) {
    auto b = ShardBytes::MapFile(path, {});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    h = std::move(*b);
  }
  ASSERT_EQ(MappingsOf(path), kMappings);
  // The giver gives back kBatch mappings, then the test forks at once, while the thread is
  // still unmapping them; the giver waits for the fork before the next batch.
  constexpr int kBatch = 10;
  std::atomic<int> given{0};
  std::atomic<int> forked{0};
  std::thread giver([&] {
    for (int i = 0; i < kMappings; ++i) {
      held[i].reset();
      if ((i + 1) % kBatch == 0) {
        given.store(i + 1, std::memory_order_release);
        while (forked.load(std::memory_order_acquire) < (i + 1) / kBatch) std::this_thread::yield();
      }
    }
  });
  for (int f = 1; f <= kMappings / kBatch; ++f) {
    while (given.load(std::memory_order_acquire) < f * kBatch) std::this_thread::yield();
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);  // a hang ends the child, and the test fails
      for (int i = f * kBatch; i < kMappings; ++i) held[i].reset();
      const uint64_t live = ShardBytes::LiveMappings() - base;
      const int mapped = MappingsOf(path);
      if (live != 0) _exit(std::min<int>(100, 1 + static_cast<int>(live)));
      _exit(mapped == 0 ? 0 : 101);  // counted none, but the kernel has some
    }
    forked.store(f, std::memory_order_release);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
      ADD_FAILURE() << "fork or wait: " << strerror(errno);
      forked.store(kMappings, std::memory_order_release);  // let the giver finish
      break;
    }
    if (!WIFEXITED(status)) {
      ADD_FAILURE() << "child " << f << " ended by signal " << WTERMSIG(status);
    } else {
      EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << f << ": exit 1 + the mappings it counted "
                                        << "still live, or 101: none but the kernel had some";
    }
  }
  giver.join();
  EXPECT_EQ(ShardBytes::LiveMappings(), base);
  EXPECT_EQ(MappingsOf(path), 0);
}

// A process may end (exit, running static destructors) while the unmapping thread still works
// through what was given back last, as Python does when its finalisation drops the last
// batches: what that thread touches must outlive the exit handlers. Under ASan the thread's
// use of a destroyed free-slot list was a heap-use-after-free report and a non-zero exit.
TEST(ShardBytes, TheProcessMayExitWhileMappingsAreBeingUnmapped) {
  TempDir tmp;
  const std::string path = tmp.path() + "/shard";
  WriteFile(path, Pattern(4 << 20));
  const std::string report = tmp.path() + "/stderr";
  for (int round = 0; round < 5; ++round) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // A sanitizer's report may lose the race to exit(0) for the exit status: the test reads it.
      const int err = open(report.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (err < 0 || dup2(err, 2) < 0) _exit(4);
      {
        std::vector<std::shared_ptr<ShardBytes>> held;
        for (int i = 0; i < 60; ++i) {
          auto b = ShardBytes::MapFile(path, {});
          if (!b.ok()) _exit(3);
          held.push_back(std::move(*b));
        }
      }  // all given back at once: the thread has ~60 unmaps to do
      std::exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "round " << round << ": signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "round " << round;
    std::ifstream in(report);
    const std::string printed((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    ASSERT_TRUE(printed.empty()) << "round " << round << ":\n" << printed.substr(0, 600);
  }
}

TEST(ShardBytes, FileCutShortUnderTheMappingReadsZerosAndIsDamagedNotACrash) {
  TempDir tmp;
  for (bool populate : {false, true}) {
    SCOPED_TRACE(populate ? "populated" : "lazy");
    const std::string path = tmp.path() + "/f";
    const std::string bytes = Pattern(256 * 1024);
    WriteFile(path, bytes);
    auto b = ShardBytes::MapFile(path, MapOptions{populate});
    ASSERT_TRUE(b.ok());
    const uint64_t damaged_before = ShardBytes::DamagedMappings();
    ASSERT_EQ(truncate(path.c_str(), 5000), 0);
    EXPECT_FALSE((*b)->damaged());  // nothing touched past the cut yet
    // Without the guard this read raises SIGBUS and ends the process.
    const volatile char* p = (*b)->data();
    EXPECT_EQ(p[200000], 0);
    EXPECT_TRUE((*b)->damaged());
    EXPECT_EQ(ShardBytes::DamagedMappings(), damaged_before + 1);
    EXPECT_EQ(p[100], bytes[100]);  // before the cut: the file's bytes
    EXPECT_EQ(p[255 * 1024], 0);    // every page after it: zeros, no second fault
  }
}

// A sanitizer's own SIGBUS handler sits under ours: when the guard chains to it, it reports the
// fault and exits non-zero instead of letting the signal kill the process.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GANTRY_SANITIZER_HANDLES_SIGBUS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GANTRY_SANITIZER_HANDLES_SIGBUS 1
#endif
#endif

bool DiedOfSigbus(int status) {
#ifdef GANTRY_SANITIZER_HANDLES_SIGBUS
  return WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3;
#else
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#endif
}

#ifdef GANTRY_SANITIZER_HANDLES_SIGBUS
constexpr char kSigbusReport[] = "Sanitizer: BUS";
#else
constexpr char kSigbusReport[] = "";
#endif

TEST(ShardBytesDeathTest, SigbusOutsideGantrysMappingsStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  WriteFile(path, Pattern(64 * 1024));
  auto keep = ShardBytes::MapFile(path, {});  // the guard is installed
  ASSERT_TRUE(keep.ok());
  EXPECT_EXIT(
      {
        const std::string other = tmp.path() + "/g";
        WriteFile(other, Pattern(64 * 1024));
        const int fd = open(other.c_str(), O_RDONLY);
        auto* p = static_cast<const volatile char*>(
            mmap(nullptr, 64 * 1024, PROT_READ, MAP_SHARED, fd, 0));
        if (ftruncate(open(other.c_str(), O_RDWR), 0) != 0) _exit(3);
        (void)p[32 * 1024];  // not Gantry's: the guard leaves it to the default action
        _exit(0);
      },
      DiedOfSigbus, kSigbusReport);
}

// ReadFile: the file's bytes in memory of the pool; a dropped shard's buffer serves the next
// read instead of new memory; the limit and a missing file are errors of their own.
TEST(ShardBytes, ReadFileReusesTheMemoryOfDroppedShards) {
  TempDir tmp;
  const std::string a = tmp.path() + "/a", b = tmp.path() + "/b", big = tmp.path() + "/big";
  WriteFile(a, Pattern(3 << 20));
  WriteFile(b, Pattern(1 << 20).substr(7));
  WriteFile(big, Pattern(9 << 20));
  WriteFile(tmp.path() + "/empty", "");
  const uint64_t idle_before = ShardBytes::IdleReadBufferBytes();
  if (idle_before != 0) {  // which idle buffer serves a read would depend on earlier tests
    GTEST_SKIP() << "needs a process whose pool is empty (ctest runs each test alone)";
  }
  const char* first = nullptr;
  {
    auto got = ShardBytes::ReadFile(a, 1 << 30);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_FALSE((*got)->mapped());
    EXPECT_EQ((*got)->view(), Pattern(3 << 20));
    first = (*got)->data();
  }
  // Dropped: its 4 MiB (two 2 MiB units) wait for the next shard of up to twice their size.
  EXPECT_EQ(ShardBytes::IdleReadBufferBytes(), idle_before + (4 << 20));
  {
    auto got = ShardBytes::ReadFile(b, 1 << 30);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ((*got)->view(), Pattern(1 << 20).substr(7));
    EXPECT_EQ((*got)->data(), first);  // the same memory, not new
    EXPECT_EQ(ShardBytes::IdleReadBufferBytes(), idle_before);
    // Held: a second read gets memory of its own.
    auto other = ShardBytes::ReadFile(a, 1 << 30);
    ASSERT_TRUE(other.ok());
    EXPECT_NE((*other)->data(), first);
    EXPECT_EQ((*other)->view(), Pattern(3 << 20));
  }
  auto empty = ShardBytes::ReadFile(tmp.path() + "/empty", 1 << 30);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
  EXPECT_EQ(ShardBytes::ReadFile(big, 8 << 20).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ShardBytes::ReadFile(tmp.path() + "/none", 1 << 30).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ShardBytes::ReadFile(tmp.path(), 1 << 30).status().code(),
            StatusCode::kFailedPrecondition);  // a folder
}

TEST(MappedShards, LocalShardsAreMappedAndReadTheSameAsReadOnes) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 3, 10, 5000);
  ShardSourceOptions m;
  m.map_files = true;  // the default maps only where a first touch is cheap
  auto mapped = Open("file://" + data, m);
  ShardSourceOptions o;
  o.map_files = false;
  auto read = Open("file://" + data, o);
  for (uint32_t shard = 0; shard < 3; ++shard) {
    auto a = mapped->Read(shard);
    auto b = read->Read(shard);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE((*a)->bytes()->mapped());
    EXPECT_FALSE((*b)->bytes()->mapped());
    EXPECT_EQ((*a)->bytes()->view(), (*b)->bytes()->view());
    EXPECT_EQ((*b)->bytes()->size(), fs::file_size(data + "/" + read->ShardName(shard)));
    std::string ka, kb;
    std::vector<SampleField> fa, fb;
    for (uint64_t i = 0; i < (*a)->size(); ++i) {
      ASSERT_TRUE((*a)->Get(i, ka, fa).ok());
      ASSERT_TRUE((*b)->Get(i, kb, fb).ok());
      EXPECT_EQ(ka, kb);
      ASSERT_EQ(fa.size(), 1u);
      EXPECT_EQ(fa[0].bytes, fb[0].bytes);
      // The field points into the mapping itself: no copy.
      const std::string_view whole = (*a)->bytes()->view();
      EXPECT_GE(fa[0].bytes.data(), whole.data());
      EXPECT_LE(fa[0].bytes.data() + fa[0].bytes.size(), whole.data() + whole.size());
    }
  }
}

// Unset, map_files maps a local dataset's shards where a page's first touch is cheap and reads
// them where it is not; cached copies are mapped either way.
TEST(MappedShards, TheDefaultMapsLocalShardsWhereAFirstTouchIsCheap) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 2, 4, 3000);
  EXPECT_GT(ShardBytes::FirstTouchMicros(), 0.0);
  EXPECT_EQ(ShardBytes::FirstTouchIsCheap(), ShardBytes::FirstTouchMicros() < 0.5);
  auto local = Open("file://" + data)->Read(0);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*local)->bytes()->mapped(), ShardBytes::FirstTouchIsCheap())
      << ShardBytes::FirstTouchMicros() << " us per first touch";
  ShardSourceOptions o;
  o.cache.dir = tmp.path() + "/cache";
  auto cached = Open("file://" + data, o);
  ASSERT_TRUE(cached->Read(1).ok());  // fetched into the cache
  auto again = cached->Read(1);       // a cache hit
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->bytes()->mapped());
}

TEST(MappedShards, CachedShardsAreMappedAndOutliveTheirEviction) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 2, 4, 3000);
  ShardSourceOptions o;
  o.cache.dir = tmp.path() + "/cache";
  auto source = Open("file://" + data, o);
  auto first = source->Read(0);  // fetched, cached, then served from the cached file
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE((*first)->bytes()->mapped());
  auto again = source->Read(0);  // a hit
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->bytes()->mapped());
  const std::string copy((*again)->bytes()->view());
  // Evicted (deleted) under the mapping: the bytes stay what they were.
  for (const auto& e : fs::recursive_directory_iterator(tmp.path() + "/cache")) {
    if (e.is_regular_file() && e.path().filename().string().rfind("0.", 0) == 0) {
      fs::remove(e.path());
    }
  }
  EXPECT_EQ((*again)->bytes()->view(), copy);
  EXPECT_FALSE((*again)->bytes()->damaged());
}

// A remote shard (here: an in-memory store, which is not mapped) is fetched into memory,
// published to the cache and then served from the cached file, mapped; the next read is a hit.
TEST(MappedShards, RemoteShardIsServedFromItsCachedFileOncePublished) {
  TempDir tmp;
  auto mem = OpenMemoryStore("mmap-test-remote");
  WdsWriterOptions wo;
  wo.max_samples = 4;
  auto w = WdsWriter::Create(*mem, wo);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE((*w)->Write("k" + std::to_string(i), {{"bin", Pattern(1000 + i)}}).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  for (bool cached : {true, false}) {
    SCOPED_TRACE(cached ? "cache" : "no cache");
    DatasetLocation d;
    d.url = "mem://mmap-test-remote";
    d.store = OpenMemoryStore("mmap-test-remote");
    d.format = DatasetFormat::kWebDataset;
    d.wds_shards = (*w)->shards_written();
    ShardSourceOptions o;
    if (cached) o.cache.dir = tmp.path() + "/cache";
    auto source = OpenShardSource(std::move(d), o);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    auto first = (*source)->Read(1);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ((*first)->bytes()->mapped(), cached);
    std::string key;
    std::vector<SampleField> fields;
    ASSERT_TRUE((*first)->Get(0, key, fields).ok());
    EXPECT_EQ(key, "k4");
    EXPECT_EQ(fields[0].bytes, Pattern(1004));
    auto again = (*source)->Read(1);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ((*again)->bytes()->mapped(), cached);
    EXPECT_EQ((*again)->bytes()->view(), (*first)->bytes()->view());
  }
}

TEST(MappedShards, CachedCopyCutShortIsDeletedAndFetchedAgain) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 1, 4, 3000);
  ShardCacheOptions co{tmp.path() + "/cache", 0};
  auto cache = ShardCache::Open(co, "file://x");
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Put(0, "s", Pattern(20000)).ok());
  auto ok = (*cache)->Map(0, "s");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->view(), Pattern(20000));
  fs::resize_file((*cache)->PathOf(0, "s"), 9000);
  EXPECT_EQ((*cache)->Map(0, "s").status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists((*cache)->PathOf(0, "s")));
  EXPECT_EQ((*cache)->Map(0, "s").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*ok)->view().substr(0, 100), Pattern(100));  // the old mapping: still readable
}

// A shard file truncated while the iterator holds it mapped: the bytes read past the cut are
// zeros (no crash), and the next sample from it is DataLoss naming the shard; it stays so (the
// shard is fetched again and is now the wrong size), never skipped.
TEST(MappedShards, ShardCutShortWhileReadFailsLoudlyNamingIt) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 2, 8, 20000);
  ShardSourceOptions mapped;
  mapped.map_files = true;  // what a VM whose first touches are slow would read instead
  for (uint32_t ahead : {0u, 4u}) {
    SCOPED_TRACE(ahead);
    auto source = Open("file://" + data, mapped);
    auto order = EpochOrder::Create(source->shard_samples(), {.seed = 1, .shuffle = false}, 0);
    ASSERT_TRUE(order.ok());
    auto it = SampleIterator::Create(*source, *order, {}, 0, {ahead, 2});
    ASSERT_TRUE(it.ok());
    Sample s;
    ASSERT_TRUE(*it->Next(s));
    const std::string name = source->ShardName(s.ref.shard);
    fs::resize_file(data + "/" + name, 30000);
    // The last sample's bytes lie past the cut.
    Sample last = s;
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(*it->Next(last));
    const SampleField* f = last.Find("bin");
    ASSERT_NE(f, nullptr);
    const volatile char* p = f->bytes.data();
    EXPECT_EQ(p[f->bytes.size() - 1], 0);  // zeros, not SIGBUS
    auto next = it->Next(s);
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(next.status().message().find(name), std::string::npos) << next.status().ToString();
    auto retry = it->Next(s);  // fetched again: the file is now the wrong size
    ASSERT_FALSE(retry.ok());
    EXPECT_EQ(retry.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(retry.status().message().find(name), std::string::npos);
    // Put back for the next round.
    fs::remove_all(data);
    WriteWds(data, 2, 8, 20000);
  }
}

// Bytes of `n` from a seeded generator: a piece copied from the wrong offset shows.
std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// `part` of `b` as a copy would give it: from memory where read, from the file where not.
std::string CopiedOut(const ShardBytes& b, std::string_view part, int helpers = 1) {
  std::string out(part.size(), '\0');
  std::vector<CopyPiece> pieces;
  b.AppendCopyPieces(part, out.data(), pieces);
  EXPECT_TRUE(ParallelCopy(helpers).Run(pieces, 1 << 16));
  return out;
}

// A file "f" of `want` in `tmp`, opened unread (gaps of 64 KiB and more are left in it).
std::shared_ptr<const ShardBytes> OpenUnread(const TempDir& tmp, const std::string& want) {
  WriteFile(tmp.path() + "/f", want);
  auto opened = ShardBytes::OpenFile(tmp.path() + "/f", 1 << 30, 64 << 10);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(*opened) : nullptr;
}

TEST(ShardBytes, OpenFileReadsOnlyWhatIsAskedAndCopiesTheRestFromTheFile) {
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  const std::string want = RandomBytes(3 << 20, 3);
  std::shared_ptr<const ShardBytes> opened = OpenUnread(tmp, want);
  ASSERT_NE(opened, nullptr);
  const ShardBytes& b = *opened;
  EXPECT_FALSE(b.mapped());
  EXPECT_FALSE(b.complete());
  EXPECT_EQ(b.size(), want.size());
  EXPECT_EQ(b.unread_bytes(), want.size());
  // A small read brings in a page's worth, no more.
  ASSERT_TRUE(b.Fill(1 << 20, 10).ok());
  EXPECT_EQ(b.view().substr(1 << 20, 10), want.substr(1 << 20, 10));
  EXPECT_EQ(b.unread_bytes(), want.size() - 4096);
  // Copied out, every byte is the file's, whichever side it came from; copying reads nothing in.
  for (int helpers : {0, 1, 3}) EXPECT_EQ(CopiedOut(b, b.view(), helpers), want);
  EXPECT_EQ(CopiedOut(b, b.view().substr((1 << 20) - 7, 4096 + 14)),
            want.substr((1 << 20) - 7, 4096 + 14));
  EXPECT_EQ(b.unread_bytes(), want.size() - 4096);
  // Both gaps are larger than min_gap: FillGapsBelow leaves them.
  ASSERT_TRUE(b.FillGapsBelow().ok());
  EXPECT_FALSE(b.complete());
  ASSERT_TRUE(b.Fill(0, b.size()).ok());
  EXPECT_TRUE(b.complete());
  EXPECT_EQ(b.unread_bytes(), 0u);
  EXPECT_EQ(b.view(), want);
  // Errors as ReadFile's.
  EXPECT_EQ(ShardBytes::OpenFile(path, 1 << 20, 0).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ShardBytes::OpenFile(tmp.path() + "/none", 1 << 30, 0).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ShardBytes::OpenFile(tmp.path(), 1 << 30, 0).status().code(),
            StatusCode::kFailedPrecondition);
  WriteFile(tmp.path() + "/empty", "");
  auto empty = ShardBytes::OpenFile(tmp.path() + "/empty", 1 << 30, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)->complete());
}

// A tar of small and large members (long names through pax headers, an empty member), parsed
// from a file not read yet: the same samples as the file read whole, with only the large
// members' bytes left in the file.
TEST(ShardBytes, ATarParsedUnreadLeavesOnlyItsLargeMembersInTheFile) {
  TempDir tmp;
  TarWriter w;
  std::vector<std::pair<std::string, std::string>> members;
  uint64_t large = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string key = i % 4 == 1 ? std::string(150, 'p') + std::to_string(i)  // pax name
                                       : "k" + std::to_string(i);
    const size_t big = i % 3 == 0 ? (300 << 10) + 17 * static_cast<size_t>(i) : 0;
    members.emplace_back(key + ".cls", std::to_string(i));
    members.emplace_back(key + ".bin", RandomBytes(big != 0 ? big : 900 + 3 * i, i));
    if (i == 7) members.emplace_back(key + ".txt", "");
    large += big;
  }
  for (const auto& [name, bytes] : members) ASSERT_TRUE(w.Add(name, bytes).ok());
  const std::string path = tmp.path() + "/s.tar";
  WriteFile(path, w.Finish());
  auto whole = ShardBytes::ReadFile(path, 1 << 30);
  auto unread = ShardBytes::OpenFile(path, 1 << 30, 64 << 10);
  ASSERT_TRUE(whole.ok() && unread.ok());
  auto a = WdsShard::Parse(std::shared_ptr<const ShardBytes>(*whole), "s.tar", {});
  auto b = WdsShard::Parse(std::shared_ptr<const ShardBytes>(*unread), "s.tar", {});
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  const ShardBytes& bytes = *b->bytes();
  EXPECT_FALSE(bytes.complete());
  // Each large member's bytes but the few read with its header stay in the file.
  EXPECT_GT(bytes.unread_bytes(), large - 4 * 4096);
  EXPECT_LE(bytes.unread_bytes(), large);
  ASSERT_EQ(a->samples().size(), b->samples().size());
  for (size_t i = 0; i < a->samples().size(); ++i) {
    const WdsSample& x = a->samples()[i];
    const WdsSample& y = b->samples()[i];
    EXPECT_EQ(x.key, y.key);
    ASSERT_EQ(x.fields.size(), y.fields.size());
    for (size_t f = 0; f < x.fields.size(); ++f) {
      EXPECT_EQ(x.fields[f].name, y.fields[f].name);
      EXPECT_EQ(x.fields[f].member, y.fields[f].member);
      EXPECT_EQ(CopiedOut(bytes, y.fields[f].bytes), x.fields[f].bytes) << y.fields[f].member;
      if (y.fields[f].bytes.size() < (64 << 10)) {
        EXPECT_EQ(y.fields[f].bytes, x.fields[f].bytes);  // small: read with the headers
      }
    }
  }
  // Filled, a large field reads in place.
  const WdsField& big = b->samples()[0].fields[1];
  ASSERT_TRUE(bytes.Fill(big.bytes).ok());
  EXPECT_EQ(big.bytes, a->samples()[0].fields[1].bytes);
}

// Bytes left in the file would come from disk on the consumer's thread: a file not wholly in
// the page cache is read whole when opened, as ReadFile reads it.
TEST(ShardBytes, OpenFileReadsAFileNotInThePageCacheWhole) {
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  const std::string want = RandomBytes(2 << 20, 8);
  WriteFile(path, want);
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  void* p = mmap(nullptr, want.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::vector<unsigned char> resident(want.size() / 4096);
  ASSERT_EQ(mincore(p, want.size(), resident.data()), 0);
  munmap(p, want.size());
  close(fd);
  if (resident[resident.size() / 2] & 1) GTEST_SKIP() << "this file system kept the pages";
  auto opened = ShardBytes::OpenFile(path, 1 << 30, 64 << 10);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_TRUE((*opened)->complete());
  EXPECT_EQ((*opened)->view(), want);
  // Once in the page cache, it is left there.
  auto again = ShardBytes::OpenFile(path, 1 << 30, 64 << 10);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)->complete());
}

// cachestat and mincore tell the same: a file dropped from the page cache, read back whole, then
// with one page in its middle dropped again.
TEST(ShardBytes, CachestatAndMincoreAgreeOnWhatIsCached) {
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  WriteFile(path, RandomBytes(2 << 20, 9));
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  const uint64_t len = 2 << 20;
  const bool dropped = !WhollyInPageCache(fd, len, /*cachestat=*/false);
  EXPECT_EQ(WhollyInPageCache(fd, len), !dropped);
  if (!PageCacheCheckUsesCachestat()) {
    close(fd);
    GTEST_SKIP() << "this kernel has no cachestat (or refuses it): mincore is all there is";
  }
  std::string back(len, '\0');
  ASSERT_EQ(pread(fd, back.data(), len, 0), static_cast<ssize_t>(len));
  EXPECT_TRUE(WhollyInPageCache(fd, len, false));
  EXPECT_TRUE(WhollyInPageCache(fd, len));
  // A range shorter than the file asks about that range only.
  ASSERT_EQ(posix_fadvise(fd, len / 2, 4096, POSIX_FADV_DONTNEED), 0);
  if (!WhollyInPageCache(fd, len, false)) {
    EXPECT_FALSE(WhollyInPageCache(fd, len));
    EXPECT_TRUE(WhollyInPageCache(fd, len / 2, false));
    EXPECT_TRUE(WhollyInPageCache(fd, len / 2));
  }
  close(fd);
  if (!dropped) GTEST_SKIP() << "this file system kept the pages";
}

size_t OpenDescriptors() {
  return static_cast<size_t>(
      std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator()));
}

// Each shard with bytes left in its file holds the file open: at most 256 such in a process,
// shards opened beyond that are read whole, and a shard complete once parsed holds none.
TEST(ShardBytes, UnreadShardsHoldAtMost256FilesOpenAndCompleteOnesNone) {
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  WriteFile(path, RandomBytes(256 << 10, 2));
  const size_t before = OpenDescriptors();
  std::vector<std::shared_ptr<ShardBytes>> held;
  size_t unread = 0;
  for (int i = 0; i < 300; ++i) {
    auto opened = ShardBytes::OpenFile(path, 1 << 30, 64 << 10);
    ASSERT_TRUE(opened.ok()) << i << ": " << opened.status().ToString();
    unread += (*opened)->complete() ? 0 : 1;
    held.push_back(std::move(*opened));
  }
  EXPECT_GE(unread, 1u);
  EXPECT_LE(unread, 256u);
  EXPECT_LE(OpenDescriptors(), before + 256);
  const std::string want = RandomBytes(256 << 10, 2);
  for (const auto& b : held) {
    if (b->complete()) {
      EXPECT_EQ(b->view(), want);
    }
  }
  held.clear();
  EXPECT_EQ(OpenDescriptors(), before);
  // Small gaps only: complete once its gaps are filled, and the file is closed then.
  auto small = ShardBytes::OpenFile(path, 1 << 30, 1 << 20);
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE((*small)->Fill(0, 10).ok());
  EXPECT_EQ(OpenDescriptors(), before + 1);
  ASSERT_TRUE((*small)->FillGapsBelow().ok());
  EXPECT_TRUE((*small)->complete());
  EXPECT_EQ(OpenDescriptors(), before);
  EXPECT_EQ((*small)->view(), RandomBytes(256 << 10, 2));
}

TEST(ShardBytes, AFileCutShortBeforeItsBytesAreReadFailsTheirReadAndCopy) {
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  std::shared_ptr<const ShardBytes> opened = OpenUnread(tmp, RandomBytes(1 << 20, 5));
  ASSERT_NE(opened, nullptr);
  const ShardBytes& b = *opened;
  ASSERT_TRUE(b.Fill(0, 100).ok());
  fs::resize_file(path, 300000);
  std::string out(b.size(), '\0');
  std::vector<CopyPiece> pieces;
  b.AppendCopyPieces(b.view(), out.data(), pieces);
  EXPECT_FALSE(ParallelCopy(1).Run(pieces, 1 << 16));
  EXPECT_FALSE(b.damaged());  // a copy reports to its caller; the shard learns at its next read
  Status s = b.Fill(500000, 10);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  EXPECT_TRUE(b.damaged());
  EXPECT_TRUE(b.Fill(200000, 10).ok());  // before the cut: still there
}

// Threads filling fields and copying others out of one shard at once (ThreadSanitizer's case).
TEST(ShardBytes, FillsAndCopiesOfOneUnreadShardFromManyThreads) {
  TempDir tmp;
  const std::string want = RandomBytes(4 << 20, 9);
  std::shared_ptr<const ShardBytes> b = OpenUnread(tmp, want);
  ASSERT_NE(b, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t k = 0; k < 64; ++k) {
        const uint64_t at = ((k * 7 + static_cast<uint64_t>(t) * 13) % 64) * (64 << 10);
        const std::string_view part = b->view().substr(at, 64 << 10);
        if (t % 2 == 0) {
          if (!b->Fill(part).ok() || part != std::string_view(want).substr(at, 64 << 10)) ++wrong;
        } else if (CopiedOut(*b, part, 0) != want.substr(at, 64 << 10)) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Through a shard source and the iterator: local shards read without their large members give
// the same samples as shards read whole, with the fields read in (kRead) or left for a copy
// straight from the file (kLeave); a file cut short meanwhile fails loudly naming its shard.
// An MDS dataset without hashes of `shards` shards of `per_shard` samples: a key, a `bytes`
// column of `bytes` random bytes, and an int.
void WriteLargeMds(const std::string& dir, int shards, int per_shard, size_t bytes) {
  auto store = OpenObjectStore("file://" + dir, {});
  ASSERT_TRUE(store.ok());
  MdsWriterOptions o;
  o.columns = {{"__key__", "str"}, {"bin", "bytes"}, {"n", "int"}};
  o.size_limit = static_cast<uint64_t>(per_shard) * (bytes + 100) + 1000;
  auto w = MdsWriter::Create(**store, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < shards * per_shard; ++i) {
    const std::string n(8, static_cast<char>(i));
    ASSERT_TRUE((*w)->Write({{"__key__", "k" + std::to_string(i)},
                             {"bin", RandomBytes(bytes, static_cast<uint32_t>(i))},
                             {"n", n}})
                    .ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  ASSERT_EQ((*w)->index().shards.size(), static_cast<size_t>(shards));
}

class LargeMembers : public ::testing::TestWithParam<bool> {};  // MDS, or WebDataset

TEST_P(LargeMembers, LeftInTheirFilesTheyGiveTheSameSamples) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  const bool mds = GetParam();
  if (mds) {
    WriteLargeMds(data, 3, 5, 200 << 10);
  } else {
    WriteWds(data, 3, 5, 200 << 10);
  }
  ShardSourceOptions whole_options;
  whole_options.map_files = false;
  whole_options.large_member_bytes = 0;
  ShardSourceOptions partial_options;
  partial_options.map_files = false;
  auto whole = Open("file://" + data, whole_options);
  auto partial = Open("file://" + data, partial_options);
  auto order = EpochOrder::Create(whole->shard_samples(), {.seed = 4, .window = 15}, 0);
  ASSERT_TRUE(order.ok());
  for (UnreadFields unread : {UnreadFields::kRead, UnreadFields::kLeave}) {
    auto a = SampleIterator::Create(*whole, *order, {}, 0, {2, 2});
    auto b = SampleIterator::Create(*partial, *order, {}, 0, {2, 2});
    ASSERT_TRUE(a.ok() && b.ok());
    uint64_t n = 0, left = 0;
    std::vector<Sample> x(4), y(4);
    while (true) {
      uint64_t got_a = 0, got_b = 0;
      ASSERT_TRUE(a->NextBatch(x, &got_a).ok());
      ASSERT_TRUE(b->NextBatch(y, &got_b, unread).ok());
      ASSERT_EQ(got_a, got_b);
      if (got_a == 0) break;
      for (uint64_t i = 0; i < got_a; ++i) {
        EXPECT_TRUE(x[i].shard->bytes()->complete());
        EXPECT_EQ(x[i].position, y[i].position);
        EXPECT_EQ(x[i].key, y[i].key);
        ASSERT_EQ(x[i].fields.size(), y[i].fields.size());
        for (size_t f = 0; f < x[i].fields.size(); ++f) {
          const std::string_view field = y[i].fields[f].bytes;
          if (unread == UnreadFields::kRead) {
            EXPECT_EQ(field, x[i].fields[f].bytes);
          } else {
            EXPECT_EQ(CopiedOut(*y[i].shard->bytes(), field), x[i].fields[f].bytes);
          }
        }
        left += y[i].shard->bytes()->unread_bytes() > 0 ? 1 : 0;
        ++n;
      }
    }
    EXPECT_EQ(n, 15u);
    EXPECT_GT(left, 0u);  // the partial source did leave members in their files
  }
  // Cut short after its shard was opened: the next sample whose bytes lie past the cut.
  auto order_plain = EpochOrder::Create(partial->shard_samples(), {.shuffle = false}, 0);
  auto it = SampleIterator::Create(*partial, *order_plain, {}, 0, {0, 1});
  ASSERT_TRUE(it.ok());
  Sample s;
  ASSERT_TRUE(*it->Next(s));
  const std::string name = partial->ShardName(s.ref.shard);
  fs::resize_file(data + "/" + name, (450 << 10) + (mds ? 1000 : 0));
  auto one = it->Next(s);  // sample 1 ends before the cut
  ASSERT_TRUE(one.ok() && *one) << one.status().ToString();
  auto next = it->Next(s);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(next.status().message().find(name), std::string::npos) << next.status().ToString();
}

// Mapping is the default where a page's first touch is cheap, but for packed batches a dataset
// whose samples average at least large_member_bytes is read without its large members there
// too: a packed batch reads them straight from the file, which beat mapping on such a machine.
// Samples handed out one by one, and small samples, keep the machine's default; map_files=true
// maps either.
TEST_P(LargeMembers, ForPackedBatchesLargeSamplesAreLeftInTheirFilesOnAnyMachine) {
  TempDir tmp;
  const bool mds = GetParam();
  const auto write = [&](const std::string& dir, size_t bytes) {
    if (mds) {
      WriteLargeMds(dir, 2, 4, bytes);
    } else {
      WriteWds(dir, 2, 4, bytes);
    }
  };
  write(tmp.path() + "/large", 100 << 10);
  write(tmp.path() + "/small", 3000);
  const auto first_shard = [](const std::string& url, ShardSourceOptions o) {
    auto shard = Open(url, o)->Read(0);
    EXPECT_TRUE(shard.ok()) << shard.status().ToString();
    return shard.ok() ? *shard : nullptr;
  };
  ShardSourceOptions packed;
  packed.packed_batches = true;
  auto large = first_shard("file://" + tmp.path() + "/large", packed);
  ASSERT_NE(large, nullptr);
  EXPECT_FALSE(large->bytes()->mapped());
  EXPECT_GT(large->bytes()->unread_bytes(), 0u);
  auto one_by_one = first_shard("file://" + tmp.path() + "/large", {});
  ASSERT_NE(one_by_one, nullptr);
  EXPECT_EQ(one_by_one->bytes()->mapped(), ShardBytes::FirstTouchIsCheap());
  auto small = first_shard("file://" + tmp.path() + "/small", packed);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->bytes()->mapped(), ShardBytes::FirstTouchIsCheap());
  ShardSourceOptions map = packed;
  map.map_files = true;
  auto mapped = first_shard("file://" + tmp.path() + "/large", map);
  ASSERT_NE(mapped, nullptr);
  EXPECT_TRUE(mapped->bytes()->mapped());
  // Members under the threshold: the samples are not large, so the machine's default holds.
  ShardSourceOptions high = packed;
  high.large_member_bytes = 1 << 20;
  auto under = first_shard("file://" + tmp.path() + "/large", high);
  ASSERT_NE(under, nullptr);
  EXPECT_EQ(under->bytes()->mapped(), ShardBytes::FirstTouchIsCheap());
}

INSTANTIATE_TEST_SUITE_P(Formats, LargeMembers, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Mds" : "WebDataset"; });

// The same global order with and without read-ahead, mapped or read, for several slots.
TEST(MappedShards, ReadAheadAndMappingKeepTheOrder) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 9, 7, 100);
  auto run = [&](bool map, uint32_t ahead, Slot slot) {
    ShardSourceOptions o;
    o.map_files = map;
    auto source = Open("file://" + data, o);
    auto order = EpochOrder::Create(source->shard_samples(), {.seed = 4, .window = 20}, 2);
    auto it = SampleIterator::Create(*source, *order, slot, 0, {ahead, 2});
    std::vector<std::pair<uint64_t, std::string>> got;
    Sample s;
    while (*it->Next(s)) got.emplace_back(s.position, s.key);
    return got;
  };
  for (Slot slot : {Slot{}, Slot{2, 1, 3, 2, 4}}) {
    const auto want = run(false, 0, slot);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(run(true, 0, slot), want);
    EXPECT_EQ(run(true, 4, slot), want);
    EXPECT_EQ(run(true, 1, slot), want);
  }
}

// A shuffled window needs all its shards right after its boundary: the read-ahead goes at least
// as deep as one window's shards, where the rate rule alone (a slow consumer) gives 2.
TEST(MappedShards, ReadAheadCoversAShuffledWindowsShards) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  WriteWds(data, 12, 10, 100);
  for (bool shuffle : {true, false}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "in order");
    MetricsRegistry registry;
    ShardSourceOptions o;
    o.metrics = &registry;
    o.job = "ahead";
    auto d = LocateDataset("file://" + data, {});
    ASSERT_TRUE(d.ok());
    auto source = OpenShardSource(std::move(*d), o);
    ASSERT_TRUE(source.ok());
    // Windows of 40 samples: 4 shards each.
    auto order = EpochOrder::Create((*source)->shard_samples(),
                                    {.seed = 9, .shuffle = shuffle, .window = 40}, 0);
    auto it = SampleIterator::Create(**source, *order, {}, 0, {6, 2});
    ASSERT_TRUE(it.ok());
    Sample s;
    uint64_t n = 0;
    while (*it->Next(s)) {
      ++n;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow consumer
    }
    EXPECT_EQ(n, 120u);
    const DataStats st = LoaderMetrics::For(registry, "file://" + data, "ahead")->Snapshot();
    EXPECT_EQ(st.read_ahead_depth, shuffle ? 4u : 2u);
  }
}

// A window covering the whole dataset holds every shard at once: mapped, that costs address
// space and shared page cache, not this process's anonymous memory; read, it costs the
// dataset's size.
TEST(MappedShards, MemoryStaysBoundedWhenTheWindowIsLarge) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  const int shards = 16, per = 16;
  const size_t bytes = 256 * 1024;  // 64 MiB in all
  WriteWds(data, shards, per, bytes);
  auto peak_growth = [&](bool map) {
    ShardSourceOptions o;
    o.map_files = map;
    auto source = Open("file://" + data, o);
    auto order = EpochOrder::Create(source->shard_samples(),
                                    {.seed = 2, .window = uint64_t{shards} * per}, 0);
    auto it = SampleIterator::Create(*source, *order, {}, 0, {4, 2});
    const uint64_t base = RssAnon();
    uint64_t peak = base, n = 0;
    Sample s;
    while (*it->Next(s)) {
      // One byte of each sample is read (the empty asm consumes it, so the read stays), so
      // that its page is faulted in as a consumer's would be.
      const unsigned char byte = static_cast<unsigned char>(s.fields[0].bytes[bytes / 2]);
      asm volatile("" : : "r"(byte));
      ++n;
      peak = std::max(peak, RssAnon());
    }
    EXPECT_EQ(n, uint64_t{shards} * per);
    EXPECT_GT(it->max_shards_held(), size_t{shards} / 2);  // the window holds (nearly) all
    return peak - base;
  };
  const uint64_t mapped = peak_growth(true);
  const uint64_t read = peak_growth(false);
  EXPECT_LT(mapped, uint64_t{8} << 20) << "mapped: " << mapped << ", read: " << read;
  EXPECT_GT(read, uint64_t{32} << 20) << "the comparison measures what it claims";
}

// The default reads local shards where a first touch is slow, but a window of many shards must
// not hold them all in the process's memory: beyond read_budget_bytes of held read shards the
// rest are mapped, and the process grows by about the budget, not the window.
TEST(MappedShards, TheDefaultReadsOnlyWithinItsBudget) {
  if (ShardBytes::FirstTouchIsCheap()) {
    GTEST_SKIP() << "the default maps every local shard here (" << ShardBytes::FirstTouchMicros()
                 << " us per first touch)";
  }
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  const int shards = 16, per = 16;
  const size_t bytes = 256 * 1024;  // 64 MiB in all, 4 MiB a shard (6 MiB of buffer each)
  WriteWds(data, shards, per, bytes);
  ShardSourceOptions o;
  o.read_budget_bytes = 16 << 20;
  auto source = Open("file://" + data, o);
  auto order =
      EpochOrder::Create(source->shard_samples(), {.seed = 2, .window = uint64_t{shards} * per}, 0);
  auto it = SampleIterator::Create(*source, *order, {}, 0, {4, 2});
  const uint64_t base = RssAnon();
  uint64_t peak = base, n = 0, in_use = 0;
  std::set<const ShardBytes*> read, mapped;
  Sample s;
  while (*it->Next(s)) {
    const unsigned char byte = static_cast<unsigned char>(s.fields[0].bytes[bytes / 2]);
    asm volatile("" : : "r"(byte));
    ++n;
    (s.shard->bytes()->mapped() ? mapped : read).insert(s.shard->bytes().get());
    peak = std::max(peak, RssAnon());
    in_use = std::max(in_use, ShardBytes::ReadBufferBytesInUse());
  }
  EXPECT_EQ(n, uint64_t{shards} * per);
  EXPECT_GE(read.size(), 2u);
  EXPECT_GE(mapped.size(), 8u);
  // Read-ahead threads may each pass the check at once: one shard over, per thread.
  EXPECT_LE(in_use, (uint64_t{16} << 20) + 2 * (uint64_t{6} << 20));
  EXPECT_LT(peak - base, uint64_t{40} << 20)
      << "read: " << read.size() << ", mapped: " << mapped.size();
}

}  // namespace
}  // namespace gantry::data
