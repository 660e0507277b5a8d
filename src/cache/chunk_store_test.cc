#include "gantry/cache/chunk_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/test_support.h"
#include "gantry/cache/roots.h"
#include "gantry/storage/faulty_store.h"
#include "storage/rgw_test_env.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

using test_support::RandomBytes;

// A fresh temp directory per test, removed afterwards.
class ChunkStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "gantry_cache_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    static std::atomic<int> counter{0};
    mem_url_ =
        "mem://chunk-store-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Dir(const std::string& name) {
    fs::create_directories(root_ + "/" + name);
    return "file://" + root_ + "/" + name;
  }
  std::string PathOf(const std::string& tier_dir, const ChunkId& id) {
    return root_ + "/" + tier_dir + "/" + ChunkKey(id);
  }

  // mem (capacity) -> local dir (capacity) -> "remote" dir (durable).
  ChunkStoreOptions ThreeTiers(uint64_t mem_cap = 0, uint64_t local_cap = 0) {
    ChunkStoreOptions o;
    TierOptions mem;
    mem.name = "mem";
    mem.url = mem_url_;
    mem.capacity_bytes = mem_cap;
    TierOptions local;
    local.name = "local";
    local.url = Dir("local");
    local.capacity_bytes = local_cap;
    TierOptions remote;
    remote.name = "remote";
    remote.url = Dir("remote");
    remote.durable = true;
    remote.codec = Codec::kZstd;
    o.tiers = {mem, local, remote};
    o.chunk_size = 1000;
    return o;
  }

  std::unique_ptr<ChunkStore> Open(ChunkStoreOptions o) {
    Result<std::unique_ptr<ChunkStore>> s = ChunkStore::Open(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string root_;
  std::string mem_url_;
};

TEST_F(ChunkStoreTest, WriteThroughReachesEveryTierAndReadsHitTheTop) {
  auto cs = Open(ThreeTiers());
  std::string data = RandomBytes(5000, 1);
  Result<ChunkId> id = cs->PutChunk(data);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(fs::exists(PathOf("local", *id)));
  EXPECT_TRUE(fs::exists(PathOf("remote", *id)));
  Result<std::string> back = cs->GetChunk(*id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, data);
  ChunkStoreStats st = cs->Stats();
  EXPECT_EQ(st.tiers[0].hits, 1u);
  EXPECT_EQ(st.tiers[1].hits, 0u);
  EXPECT_GT(st.tiers[2].bytes_written, 0u);
  // The durable tier compresses: random data does not shrink, so it is stored raw there.
  EXPECT_EQ(fs::file_size(PathOf("remote", *id)), data.size() + kChunkHeaderSize);
}

TEST_F(ChunkStoreTest, ReadThroughPromotesIntoFasterTiers) {
  auto cs = Open(ThreeTiers());
  std::string data = RandomBytes(3000, 2);
  ChunkId id = *cs->PutChunk(data);
  fs::remove(PathOf("local", id));
  auto mem = OpenObjectStore(mem_url_, {}).value();
  ASSERT_TRUE(mem->Delete(ChunkKey(id)).ok());

  Result<std::string> back = cs->GetChunk(id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, data);
  ChunkStoreStats st = cs->Stats();
  EXPECT_EQ(st.tiers[0].misses, 1u);
  EXPECT_EQ(st.tiers[1].misses, 1u);
  EXPECT_EQ(st.tiers[2].hits, 1u);
  EXPECT_EQ(st.promotions, 2u);
  EXPECT_TRUE(fs::exists(PathOf("local", id)));
  EXPECT_TRUE(mem->Head(ChunkKey(id)).ok());
}

TEST_F(ChunkStoreTest, FlippedBitInLocalTierIsDetectedAndRepaired) {
  ChunkStoreOptions o = ThreeTiers();
  o.tiers.erase(o.tiers.begin());  // local -> remote only, so the read hits the bad copy first
  auto cs = Open(std::move(o));
  std::string data = RandomBytes(4000, 3);
  ChunkId id = *cs->PutChunk(data);
  const std::string path = PathOf("local", id);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1234);
    char c;
    f.get(c);
    f.seekp(1234);
    f.put(static_cast<char>(c ^ 0x10));
  }
  Result<std::string> back = cs->GetChunk(id);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  ChunkStoreStats st = cs->Stats();
  EXPECT_EQ(st.tiers[0].corrupt, 1u);
  EXPECT_EQ(st.tiers[0].repaired, 1u);
  // The copy on disk is whole again.
  std::ifstream f(path, std::ios::binary);
  std::string stored((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(DecodeChunk(stored, id).ok());
  EXPECT_NE(cs->PrometheusText().find("gantry_cache_corrupt_chunks_total{tier=\"local\"} 1"),
            std::string::npos);
  EXPECT_NE(cs->PrometheusText().find("gantry_cache_repaired_chunks_total{tier=\"local\"} 1"),
            std::string::npos);
}

TEST_F(ChunkStoreTest, CorruptInEveryTierIsDataLossNamingTheTiers) {
  ChunkStoreOptions o = ThreeTiers();
  o.tiers.erase(o.tiers.begin());
  auto cs = Open(std::move(o));
  ChunkId id = *cs->PutChunk(RandomBytes(2000, 4));
  for (const char* dir : {"local", "remote"}) {
    std::fstream f(PathOf(dir, id), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x55');
    f.put('\xaa');
  }
  Result<std::string> back = cs->GetChunk(id);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(back.status().message().find("corrupt chunk " + id.ToHex() + " in tier local, remote"),
            std::string::npos)
      << back.status().message();
}

TEST_F(ChunkStoreTest, VerifyFindsAndRepairsRot) {
  auto cs = Open(ThreeTiers());
  ChunkId id = *cs->PutChunk(RandomBytes(2000, 5));
  {
    std::fstream f(PathOf("local", id), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x01');
  }
  Result<VerifyReport> dry = cs->Verify(/*repair=*/false);
  ASSERT_TRUE(dry.ok());
  EXPECT_EQ(dry->checked, 3u);
  EXPECT_EQ(dry->corrupt, 1u);
  EXPECT_EQ(dry->repaired, 0u);
  Result<VerifyReport> fixed = cs->Verify(/*repair=*/true);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->repaired, 1u);
  EXPECT_EQ(cs->Verify(false)->corrupt, 0u);
}

TEST_F(ChunkStoreTest, EvictionIsLeastRecentlyUsedDownToTheLowWatermark) {
  // Each stored chunk is 1000 + 32 bytes; the memory tier holds exactly four.
  ChunkStoreOptions o = ThreeTiers(/*mem_cap=*/4 * 1032);
  o.tiers[0].high_watermark = 1.0;
  o.tiers[0].low_watermark = 0.5;
  o.promote_on_read = false;
  auto cs = Open(std::move(o));
  std::vector<ChunkId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(*cs->PutChunk(RandomBytes(1000, 10 + i)));
  EXPECT_EQ(cs->Stats().tiers[0].evictions, 0u);
  ASSERT_TRUE(cs->GetChunk(ids[0]).ok());  // A is now the most recently used
  ChunkId e = *cs->PutChunk(RandomBytes(1000, 20));
  // Room for E down to half the tier: B, C, D go (least recently used), A and E stay.
  auto mem = OpenObjectStore(mem_url_, {}).value();
  EXPECT_TRUE(mem->Head(ChunkKey(ids[0])).ok());
  EXPECT_TRUE(mem->Head(ChunkKey(e)).ok());
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(mem->Head(ChunkKey(ids[i])).ok()) << i;
  ChunkStoreStats st = cs->Stats();
  EXPECT_EQ(st.tiers[0].evictions, 3u);
  EXPECT_EQ(st.tiers[0].used_bytes, 2u * 1032);
  // Evicted chunks are still readable from below.
  for (const ChunkId& id : ids) EXPECT_TRUE(cs->GetChunk(id).ok());
}

TEST_F(ChunkStoreTest, PinnedChunksAreNotEvictedAndAFullCacheTierIsSkipped) {
  ChunkStoreOptions o = ThreeTiers(/*mem_cap=*/2 * 1032);
  o.tiers[0].high_watermark = 1.0;
  o.tiers[0].low_watermark = 1.0;
  auto cs = Open(std::move(o));
  ChunkId a = *cs->PutChunk(RandomBytes(1000, 30));
  ChunkId b = *cs->PutChunk(RandomBytes(1000, 31));
  ChunkStore::PinGuard pa(*cs, a);
  ChunkStore::PinGuard pb(*cs, b);
  // Write-through: the durable copy is written, the full cache tier is skipped and counted.
  ChunkId c = *cs->PutChunk(RandomBytes(1000, 32));
  auto mem = OpenObjectStore(mem_url_, {}).value();
  EXPECT_TRUE(mem->Head(ChunkKey(a)).ok());
  EXPECT_TRUE(mem->Head(ChunkKey(b)).ok());
  EXPECT_FALSE(mem->Head(ChunkKey(c)).ok());
  EXPECT_NE(cs->PrometheusText().find("gantry_cache_full_skips_total{tier=\"mem\"} 1"),
            std::string::npos);
  Status s = cs->EnforceCapacity();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(ChunkStoreTest, FullDurableTierIsAClearError) {
  ChunkStoreOptions o;
  TierOptions d;
  d.name = "disk";
  d.url = Dir("disk");
  d.durable = true;
  d.capacity_bytes = 3000;
  o.tiers = {d};
  auto cs = Open(std::move(o));
  ASSERT_TRUE(cs->PutChunk(RandomBytes(1000, 40)).ok());
  ASSERT_TRUE(cs->PutChunk(RandomBytes(1000, 41)).ok());
  Result<ChunkId> third = cs->PutChunk(RandomBytes(1000, 42));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("tier 'disk' is full"), std::string::npos)
      << third.status().message();
  EXPECT_EQ(cs->Stats().tiers[0].evictions, 0u);  // the only copies were kept
}

// A durable tier behind a slow link (FaultyStore latency on puts).
std::shared_ptr<ObjectStore> SlowDurable(const std::string& url, int latency_ms) {
  FaultPlan plan;
  FaultRule slow;
  slow.op = FaultOp::kPut;
  slow.kind = FaultKind::kLatency;
  slow.probability = 1.0;
  slow.latency_ms = latency_ms;
  plan.rules.push_back(slow);
  return std::make_shared<FaultyStore>(OpenObjectStore(url, {}).value(), plan);
}

TEST_F(ChunkStoreTest, WriteBackBoundsTheBacklogAndNeverEvictsUndrainedChunks) {
  ChunkStoreOptions o;
  TierOptions mem;
  mem.name = "mem";
  mem.url = mem_url_;
  mem.capacity_bytes = 6 * 1032;
  TierOptions remote;
  remote.name = "remote";
  remote.durable = true;
  remote.store = SlowDurable(Dir("remote"), 20);
  o.tiers = {mem, remote};
  o.write_mode = WriteMode::kWriteBack;
  o.max_drain_backlog_bytes = 3000;  // three chunks
  o.chunk_size = 1000;
  auto cs = Open(std::move(o));
  std::vector<std::pair<ChunkId, std::string>> written;
  for (int i = 0; i < 12; ++i) {
    std::string data = RandomBytes(1000, 50 + i);
    Result<ChunkId> id = cs->PutChunk(data);
    ASSERT_TRUE(id.ok()) << i << ": " << id.status().ToString();
    EXPECT_LE(cs->Stats().drain_backlog_bytes, 3000u);
    written.emplace_back(*id, data);
  }
  ASSERT_TRUE(cs->Flush().ok());
  ChunkStoreStats st = cs->Stats();
  EXPECT_EQ(st.drain_backlog_bytes, 0u);
  EXPECT_EQ(st.drained_chunks, 12u);
  EXPECT_GT(st.tiers[0].evictions, 0u);
  EXPECT_LE(st.tiers[0].used_bytes, 6u * 1032);
  for (const auto& [id, data] : written) {
    EXPECT_TRUE(fs::exists(PathOf("remote", id)));
    Result<std::string> back = cs->GetChunk(id);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, data);
  }
}

TEST_F(ChunkStoreTest, WriteBackTopTierFullOfUndrainedChunksFallsBackToWriteThrough) {
  ChunkStoreOptions o;
  TierOptions mem;
  mem.name = "mem";
  mem.url = mem_url_;
  mem.capacity_bytes = 2 * 1032;
  TierOptions remote;
  remote.name = "remote";
  remote.durable = true;
  // Draining the first two chunks is slow; the others are written at once.
  FaultPlan plan;
  for (int i = 0; i < 2; ++i) {
    FaultRule slow;
    slow.op = FaultOp::kPut;
    slow.kind = FaultKind::kLatency;
    slow.probability = 1.0;
    slow.latency_ms = 800;
    slow.key_prefix = ChunkKey(HashChunk(RandomBytes(1000, 70 + i)));
    plan.rules.push_back(slow);
  }
  remote.store = std::make_shared<FaultyStore>(OpenObjectStore(Dir("remote"), {}).value(), plan);
  o.tiers = {mem, remote};
  o.write_mode = WriteMode::kWriteBack;
  o.max_drain_backlog_bytes = 100000;  // larger than the tier: the tier fills first
  auto cs = Open(std::move(o));
  std::vector<ChunkId> ids;
  for (int i = 0; i < 4; ++i) {
    Result<ChunkId> id = cs->PutChunk(RandomBytes(1000, 70 + i));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  // The first two chunks wait in the top tier for the slow drain; the tier is then full of
  // undrained chunks, so the next two went straight to the durable tier.
  auto mem_store = OpenObjectStore(mem_url_, {}).value();
  for (int i : {2, 3}) {
    EXPECT_FALSE(mem_store->Head(ChunkKey(ids[i])).ok()) << i;
    EXPECT_TRUE(fs::exists(PathOf("remote", ids[i]))) << i;
  }
  EXPECT_NE(cs->PrometheusText().find("gantry_cache_full_skips_total{tier=\"mem\"} 2"),
            std::string::npos)
      << cs->PrometheusText();
  EXPECT_TRUE(cs->Flush().ok());
  for (const ChunkId& id : ids) EXPECT_TRUE(fs::exists(PathOf("remote", id)));
}

TEST_F(ChunkStoreTest, BlobsRoundTripAndShareChunks) {
  auto cs = Open(ThreeTiers());
  std::string data = RandomBytes(4500, 80);
  Result<Manifest> m = cs->PutBlob("ckpt/step-1", data);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->size, 4500u);
  ASSERT_EQ(m->chunks.size(), 5u);
  EXPECT_EQ(m->chunks[4].size, 500u);
  ASSERT_TRUE(cs->PutBlob("ckpt/step-2", data.substr(0, 3000)).ok());
  EXPECT_EQ(*cs->GetBlob("ckpt/step-1"), data);
  EXPECT_EQ(*cs->GetBlob("ckpt/step-2"), data.substr(0, 3000));
  EXPECT_EQ(cs->GetManifest("ckpt/step-2")->chunks[2].id, m->chunks[2].id);  // deduplicated
  std::vector<std::string> names = *cs->ListBlobs();
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt/step-1", "ckpt/step-2"}));
  EXPECT_TRUE(fs::exists(root_ + "/remote/manifests/ckpt/step-1"));
  EXPECT_FALSE(cs->PutBlob("../escape", data).ok());
  EXPECT_EQ(cs->GetBlob("missing").status().code(), StatusCode::kNotFound);
  // Empty blobs have a manifest and no chunks.
  ASSERT_TRUE(cs->PutBlob("empty", "").ok());
  EXPECT_EQ(*cs->GetBlob("empty"), "");
}

// `gantry cache stats` counts what each tier holds through the store, which alone knows where
// chunks and blob manifests live; stray objects under chunks/ are not chunks.
TEST_F(ChunkStoreTest, ListTierContentsCountsChunksBytesAndBlobManifests) {
  auto cs = Open(ThreeTiers());
  ASSERT_TRUE(cs->PutBlob("data/a", RandomBytes(2500, 81)).ok());
  ASSERT_TRUE(cs->PutBlob("data/b", RandomBytes(1000, 82)).ok());
  std::ofstream(root_ + "/remote/chunks/stray.tmp") << "not a chunk";
  auto mem = cs->ListTierContents(0);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ(mem->chunks, 4u);
  EXPECT_GE(mem->chunk_bytes, 3500u);  // stored raw, with a small header each
  EXPECT_EQ(mem->blob_manifests, 0u);
  auto remote = cs->ListTierContents(2);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  EXPECT_EQ(remote->chunks, 4u);
  EXPECT_GT(remote->chunk_bytes, 0u);
  EXPECT_EQ(remote->blob_manifests, 2u);
  EXPECT_EQ(cs->ListTierContents(3).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ChunkStoreTest, StreamingWriterSplitsAcrossAppends) {
  auto cs = Open(ThreeTiers());
  std::string data = RandomBytes(3333, 81);
  auto w = cs->NewBlobWriter("stream").value();
  for (size_t off = 0; off < data.size(); off += 700)
    ASSERT_TRUE(w->Append(data.substr(off, 700)).ok());
  Result<Manifest> m = w->Commit();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->chunks.size(), 4u);
  EXPECT_EQ(*cs->GetBlob("stream"), data);
}

TEST(Manifest, JsonRoundTripAndFieldErrors) {
  Manifest m;
  m.name = "a/b";
  m.chunk_size = 4;
  m.chunks = {{HashChunk("abcd"), 4}, {HashChunk("e"), 1}};
  m.size = 5;
  Result<Manifest> back = Manifest::FromJson(m.ToJson(), "manifests/a/b");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->chunks[1].id, m.chunks[1].id);
  EXPECT_EQ(back->size, 5u);
  Result<Manifest> bad = Manifest::FromJson("{\"version\":1,\"name\":\"x\"}", "manifests/x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "manifest 'manifests/x': field 'size' missing or of the wrong type");
  std::string wrong_sum = m.ToJson();
  wrong_sum.replace(wrong_sum.find("\"size\":5"), 8, "\"size\":6");
  EXPECT_NE(Manifest::FromJson(wrong_sum, "m").status().message().find("add up to 5"),
            std::string::npos);
  EXPECT_FALSE(Manifest::FromJson("not json", "m").ok());
}

TEST_F(ChunkStoreTest, GcDeletesUnreferencedChunksOnly) {
  ChunkStoreOptions o = ThreeTiers();
  o.gc_grace_seconds = 0;
  auto cs = Open(std::move(o));
  std::string a = RandomBytes(2000, 90);
  std::string b = RandomBytes(2000, 91);
  Manifest ma = *cs->PutBlob("a", a);
  ASSERT_TRUE(cs->PutBlob("b", b).ok());
  ASSERT_TRUE(cs->DeleteBlob("a").ok());
  Result<GcReport> r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->manifests, 1u);
  EXPECT_EQ(r->referenced_chunks, 2u);
  EXPECT_EQ(r->deleted_chunks, 6u);  // a's two chunks in three tiers
  for (const ManifestChunk& c : ma.chunks) {
    EXPECT_FALSE(fs::exists(PathOf("local", c.id)));
    EXPECT_FALSE(fs::exists(PathOf("remote", c.id)));
  }
  EXPECT_EQ(*cs->GetBlob("b"), b);
}

TEST_F(ChunkStoreTest, GcStopsOnAnUnreadableManifestWithoutDeleting) {
  ChunkStoreOptions o = ThreeTiers();
  o.gc_grace_seconds = 0;
  auto cs = Open(std::move(o));
  ASSERT_TRUE(cs->PutBlob("good", RandomBytes(1500, 92)).ok());
  ASSERT_TRUE(cs->PutChunk(RandomBytes(100, 93)).ok());  // garbage
  std::ofstream(root_ + "/remote/manifests/broken") << "{\"version\":1";
  Result<GcReport> r = cs->CollectGarbage();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nothing deleted"), std::string::npos);
  EXPECT_NE(r.status().message().find("manifests/broken"), std::string::npos);
}

TEST_F(ChunkStoreTest, GcRefusesARootKindThisProcessCannotRead) {
  ChunkStoreOptions o = ThreeTiers();
  o.gc_grace_seconds = 0;
  auto cs = Open(std::move(o));
  Result<ChunkId> orphan = cs->PutChunk(RandomBytes(100, 95));  // referenced by no blob
  ASSERT_TRUE(orphan.ok());
  ASSERT_TRUE(cs->DeclareRootKind("no-provider-here").ok());
  ASSERT_TRUE(cs->DeclareRootKind("no-provider-here").ok());  // idempotent
  Result<GcReport> r = cs->CollectGarbage();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("'no-provider-here'"), std::string::npos);
  EXPECT_NE(r.status().message().find("nothing deleted"), std::string::npos);
  EXPECT_TRUE(fs::exists(PathOf("remote", *orphan)));
}

// A user of the namespace whose roots are plain text files "<prefix>/<name>" listing chunk ids.
class ListRoots : public RootProvider {
 public:
  Status MarkLive(ObjectStore& store, const std::function<void(const ChunkId&)>& mark) override {
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objs, store.ListAll("test-roots/"));
    for (const ObjectInfo& o : objs) {
      GANTRY_ASSIGN_OR_RETURN(std::string text, store.Get(o.key));
      for (size_t at = 0; at + 32 <= text.size(); at += 33) {
        GANTRY_ASSIGN_OR_RETURN(ChunkId id, ChunkId::FromHex(text.substr(at, 32)));
        mark(id);
      }
    }
    return Status::Ok();
  }
};

TEST_F(ChunkStoreTest, GcMarksFromEveryRegisteredRootKind) {
  RegisterRootProvider("test-list", std::make_shared<ListRoots>());
  ChunkStoreOptions o = ThreeTiers();
  o.gc_grace_seconds = 0;
  auto cs = Open(std::move(o));
  ASSERT_TRUE(cs->DeclareRootKind("test-list").ok());
  ChunkId kept = *cs->PutChunk(RandomBytes(300, 97));
  ChunkId gone = *cs->PutChunk(RandomBytes(300, 98));
  ASSERT_TRUE(cs->root_store().Put("test-roots/a", kept.ToHex() + "\n").ok());
  Result<GcReport> r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(std::find(r->kinds.begin(), r->kinds.end(), "test-list"), r->kinds.end());
  EXPECT_TRUE(fs::exists(PathOf("remote", kept)));
  EXPECT_FALSE(fs::exists(PathOf("remote", gone)));
  EXPECT_EQ(*cs->GetChunk(kept), RandomBytes(300, 97));
  // A root that cannot be read stops the GC before anything is deleted.
  ChunkId young = *cs->PutChunk(RandomBytes(300, 99));
  ASSERT_TRUE(cs->root_store().Put("test-roots/b", "not hex at all, 32 characters ok").ok());
  r = cs->CollectGarbage();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nothing deleted"), std::string::npos);
  EXPECT_TRUE(fs::exists(PathOf("remote", young)));
  ASSERT_TRUE(cs->root_store().Delete("test-roots/b").ok());
}

TEST_F(ChunkStoreTest, GcGracePeriodRunsOnTheInjectedClock) {
  SimulatedClock clock(RealClock().Now());
  ChunkStoreOptions o = ThreeTiers();
  o.gc_grace_seconds = 3600;
  o.clock = &clock;
  auto cs = Open(std::move(o));
  ChunkId orphan = *cs->PutChunk(RandomBytes(400, 100));
  Result<GcReport> r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->deleted_chunks, 0u);
  EXPECT_EQ(r->kept_young, 3u);
  clock.AdvanceMillis(3599 * 1000);  // still young, an hour of simulated time later (almost)
  r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deleted_chunks, 0u);
  clock.AdvanceMillis(5 * 1000);
  r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deleted_chunks, 3u);
  EXPECT_FALSE(fs::exists(PathOf("remote", orphan)));
}

TEST_F(ChunkStoreTest, OnlyAFullCacheTierIsSkippedEveryOtherErrorFailsTheWrite) {
  // What another backend says when it is full, forbidden, broken, or away: every chunk put to
  // the middle tier fails with that code.
  const std::pair<FaultKind, StatusCode> kinds[] = {
      {FaultKind::kResourceExhausted, StatusCode::kResourceExhausted},
      {FaultKind::kPermissionDenied, StatusCode::kPermissionDenied},
      {FaultKind::kIoError, StatusCode::kIoError},
      {FaultKind::kUnavailable, StatusCode::kUnavailable},
  };
  for (const auto& [kind, code] : kinds) {
    ChunkStoreOptions o = ThreeTiers();
    FaultPlan plan;
    FaultRule rule = FaultRule::Chance(FaultOp::kPut, kind, 1.0);
    rule.key_prefix = std::string(kChunkPrefix);
    plan.rules.push_back(rule);
    o.tiers[1].store =
        std::make_shared<FaultyStore>(OpenObjectStore(o.tiers[1].url, {}).value(), plan);
    auto cs = Open(std::move(o));
    const std::string data = RandomBytes(500, 110 + static_cast<int>(code));
    Result<ChunkId> id = cs->PutChunk(data);
    if (code == StatusCode::kResourceExhausted) {
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      EXPECT_EQ(*cs->GetChunk(*id), data);
      EXPECT_NE(cs->PrometheusText().find("gantry_cache_full_skips_total{tier=\"local\"} 1"),
                std::string::npos);
    } else {
      ASSERT_FALSE(id.ok()) << static_cast<int>(code);
      EXPECT_EQ(id.status().code(), code) << id.status().ToString();
    }
  }
}

TEST_F(ChunkStoreTest, OverlappingTiersAreRefusedHoweverSpelled) {
  fs::create_directories(root_ + "/x/sub");
  fs::create_symlink(root_ + "/x", root_ + "/link");
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"file://" + root_ + "/x", "file://" + root_ + "/x/"},
      {"file://" + root_ + "/x", "file://" + root_ + "/x/sub/../"},
      {"file://" + root_ + "/x", "file://" + root_ + "/link"},
      {"file://" + root_ + "/x/sub", "file://" + root_ + "/link"},
      {"file://" + root_ + "/x", "file://" + root_ + "/x/sub"},
  };
  for (const auto& [a, b] : pairs) {
    ChunkStoreOptions o;
    o.tiers.resize(2);
    o.tiers[0].name = "cache";
    o.tiers[0].url = a;
    o.tiers[0].capacity_bytes = 9 << 20;
    o.tiers[1].name = "disk";
    o.tiers[1].url = b;
    o.tiers[1].durable = true;
    Result<std::unique_ptr<ChunkStore>> cs = ChunkStore::Open(std::move(o));
    ASSERT_FALSE(cs.ok()) << a << " vs " << b;
    EXPECT_EQ(cs.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(cs.status().message().find("'cache'"), std::string::npos);
    EXPECT_NE(cs.status().message().find("'disk'"), std::string::npos);
  }
  ChunkStoreOptions ok;
  ok.tiers.resize(2);
  ok.tiers[0].name = "cache";
  ok.tiers[0].url = "file://" + root_ + "/x/sub";
  ok.tiers[1].name = "disk";
  ok.tiers[1].url = "file://" + root_ + "/y";
  ok.tiers[1].durable = true;
  EXPECT_TRUE(ChunkStore::Open(std::move(ok)).ok());
}

TEST_F(ChunkStoreTest, DropCopyNeedsProofOfADurableCopy) {
  auto cs = Open(ThreeTiers());
  ChunkId id = *cs->PutChunk(RandomBytes(700, 120));
  fs::remove(PathOf("remote", id));
  Status s = cs->DropCopy(1, id);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(fs::exists(PathOf("local", id)));
  ASSERT_TRUE(cs->PutChunk(RandomBytes(700, 120)).ok());
  EXPECT_TRUE(cs->DropCopy(1, id).ok());
  EXPECT_FALSE(fs::exists(PathOf("local", id)));
}

TEST_F(ChunkStoreTest, VerifyCountsAChunkMissingFromEveryTierAsDamage) {
  auto cs = Open(ThreeTiers());
  const std::string data = RandomBytes(2500, 121);
  Manifest m = *cs->PutBlob("three-chunks", data);
  const ChunkId lost = m.chunks[1].id;
  fs::remove(PathOf("local", lost));
  fs::remove(PathOf("remote", lost));
  auto mem = OpenObjectStore(mem_url_, {}).value();
  ASSERT_TRUE(mem->Delete(ChunkKey(lost)).ok());
  Result<VerifyReport> r = cs->Verify(/*repair=*/false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->corrupt, 0u);
  EXPECT_EQ(r->missing, 1u);
  ASSERT_EQ(r->errors.size(), 1u);
  EXPECT_NE(r->errors[0].find(lost.ToHex()), std::string::npos);
  EXPECT_NE(r->errors[0].find("three-chunks"), std::string::npos);
}

TEST_F(ChunkStoreTest, GcSparesChunksOfAWriterThatHasNotWrittenItsManifest) {
  auto writer_store = Open(ThreeTiers());
  std::string data = RandomBytes(3500, 94);
  auto w = writer_store->NewBlobWriter("in-progress").value();
  ASSERT_TRUE(w->Append(data).ok());
  ASSERT_EQ(w->chunks().size(), 3u);

  // Another process (a second store, no shared pins) with the default one-hour grace period:
  // the chunks are young, so they survive.
  ChunkStoreOptions other_opts = ThreeTiers();
  auto other = Open(std::move(other_opts));
  Result<GcReport> r = other->CollectGarbage();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->deleted_chunks, 0u);
  EXPECT_GE(r->kept_young, 9u);  // three chunks in three tiers
  for (const ManifestChunk& c : w->chunks()) EXPECT_TRUE(fs::exists(PathOf("remote", c.id)));

  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(*other->GetBlob("in-progress"), data);
}

TEST_F(ChunkStoreTest, GcWithoutGracePeriodSparesPinnedChunksOfThisProcess) {
  ChunkStoreOptions o = ThreeTiers();
  o.gc_grace_seconds = 0;
  auto cs = Open(std::move(o));
  std::string data = RandomBytes(2500, 95);
  auto w = cs->NewBlobWriter("pinned").value();
  ASSERT_TRUE(w->Append(data).ok());
  Result<GcReport> r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deleted_chunks, 0u);
  EXPECT_EQ(r->kept_pinned, 6u);  // two full chunks (the tail is not written yet) x 3 tiers
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(*cs->GetBlob("pinned"), data);
  // An abandoned writer's chunks are collected once nothing pins them.
  auto abandoned = cs->NewBlobWriter("abandoned").value();
  ASSERT_TRUE(abandoned->Append(RandomBytes(2000, 96)).ok());
  abandoned.reset();
  r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deleted_chunks, 6u);
  EXPECT_EQ(*cs->GetBlob("pinned"), data);
}

TEST_F(ChunkStoreTest, TwoProcessesShareAPosixTier) {
  // Tier "local" is shared by two forked processes, with room for about ten chunks; both
  // write, read each other's blobs and evict. The parent checks that nothing was lost.
  auto options = [&] {
    ChunkStoreOptions o = ThreeTiers();
    o.tiers.erase(o.tiers.begin());  // no per-process memory tier
    o.tiers[0].capacity_bytes = 10 * 1032;
    o.tiers[0].high_watermark = 0.8;
    o.tiers[0].low_watermark = 0.5;
    return o;
  };
  Dir("local");
  Dir("remote");
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      {
        auto cs = ChunkStore::Open(options());
        if (!cs.ok()) _exit(10);
        for (int i = 0; i < 8 && rc == 0; ++i) {
          std::string name = "p" + std::to_string(p) + "/blob" + std::to_string(i);
          std::string data = RandomBytes(2500, 1000 * (p + 1) + i);
          if (!(*cs)->PutBlob(name, data).ok()) rc = 11;
          if (rc == 0 && *(*cs)->GetBlob(name) != data) rc = 12;
          // Read whatever the other process has committed so far.
          std::string other = "p" + std::to_string(1 - p) + "/blob" + std::to_string(i / 2);
          Result<std::string> got = (*cs)->GetBlob(other);
          if (got.ok() && *got != RandomBytes(2500, 1000 * (2 - p) + i / 2)) rc = 13;
          if (!got.ok() && got.status().code() != StatusCode::kNotFound) rc = 14;
        }
        if (rc == 0 && !(*cs)->EnforceCapacity().ok()) rc = 15;
      }
      _exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  auto cs = Open(options());
  // The shared tier respects its capacity, with an overshoot of at most what the other process
  // wrote since this one's last pass (docs/storage.md).
  EXPECT_LE(cs->Stats().tiers[0].used_bytes, 10u * 1032 + 3 * 1032);
  ASSERT_TRUE(cs->EnforceCapacity().ok());
  EXPECT_LE(cs->Stats().tiers[0].used_bytes, 8u * 1032);
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 8; ++i) {
      std::string name = "p" + std::to_string(p) + "/blob" + std::to_string(i);
      Result<std::string> got = cs->GetBlob(name);
      ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
      EXPECT_EQ(*got, RandomBytes(2500, 1000 * (p + 1) + i));
    }
  }
  EXPECT_EQ(cs->Verify(false)->corrupt, 0u);
}

TEST_F(ChunkStoreTest, ConcurrentWritersAndReadersWithEvictionAndWriteBack) {
  for (WriteMode mode : {WriteMode::kWriteThrough, WriteMode::kWriteBack}) {
    ChunkStoreOptions o = ThreeTiers(/*mem_cap=*/8 * 1032, /*local_cap=*/16 * 1032);
    o.tiers[0].url = mem_url_ + (mode == WriteMode::kWriteBack ? "-wb" : "-wt");
    o.write_mode = mode;
    o.max_drain_backlog_bytes = 4000;
    auto cs = Open(std::move(o));
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 6; ++i) {
          std::string name = "t" + std::to_string(t) + "/" + std::to_string(i);
          std::string data = RandomBytes(2200, 500 + 10 * t + i);
          Result<Manifest> put = cs->PutBlob(name, data);
          if (!put.ok()) {
            ++failures;
            ADD_FAILURE() << name << ": " << put.status().ToString();
          }
          Result<std::string> back = cs->GetBlob(name);
          if (!back.ok() || *back != data) {
            ++failures;
            ADD_FAILURE() << name << ": " << (back.ok() ? "wrong bytes" : back.status().ToString());
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
    ASSERT_TRUE(cs->Flush().ok());
    ChunkStoreStats st = cs->Stats();
    EXPECT_LE(st.tiers[0].used_bytes, 8u * 1032);
    EXPECT_GT(st.tiers[0].evictions, 0u);
    EXPECT_EQ(cs->Verify(false)->corrupt, 0u);
  }
}

TEST_F(ChunkStoreTest, MetricsCoverEveryTier) {
  auto cs = Open(ThreeTiers());
  ChunkId id = *cs->PutChunk("x");
  ASSERT_TRUE(cs->GetChunk(id).ok());
  EXPECT_FALSE(cs->GetChunk(HashChunk("never written")).ok());
  std::string text = cs->PrometheusText();
  for (const char* tier : {"mem", "local", "remote"}) {
    std::string l = std::string("{tier=\"") + tier + "\"}";
    EXPECT_NE(text.find("gantry_cache_misses_total" + l), std::string::npos) << tier;
    EXPECT_NE(text.find("gantry_cache_put_seconds_count" + l + " 1"), std::string::npos) << tier;
  }
  EXPECT_NE(text.find("gantry_cache_hits_total{tier=\"mem\"} 1"), std::string::npos);
  EXPECT_NE(text.find("# TYPE gantry_cache_drain_backlog_bytes gauge"), std::string::npos);
  EXPECT_EQ(cs->GetChunk(HashChunk("never written")).status().code(), StatusCode::kNotFound);
}

TEST_F(ChunkStoreTest, OptionsAreValidated) {
  ChunkStoreOptions o = ThreeTiers();
  o.tiers[1].name = "mem";
  EXPECT_EQ(ChunkStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  o = ThreeTiers();
  o.tiers[0].low_watermark = 0.95;
  EXPECT_EQ(ChunkStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkStore::Open(ChunkStoreOptions{}).status().code(), StatusCode::kInvalidArgument);
}

// Against a real S3 endpoint (Ceph RGW from scripts/test): the durable tier is S3.
TEST_F(ChunkStoreTest, S3DurableTier) {
  GANTRY_REQUIRE_RGW(rgw);
  ChunkStoreOptions o = ThreeTiers();
  o.store_options = rgw->Options();
  o.tiers[2].url = rgw->UniqueUrl("chunk-store-test");
  o.gc_grace_seconds = 0;
  auto cs = Open(std::move(o));
  ASSERT_NE(cs, nullptr);
  std::string data = RandomBytes(2500, 97);
  Manifest m = *cs->PutBlob("s3blob", data);
  fs::remove_all(root_ + "/local/chunks");
  auto mem = OpenObjectStore(mem_url_, {}).value();
  for (const ManifestChunk& c : m.chunks) ASSERT_TRUE(mem->Delete(ChunkKey(c.id)).ok());
  EXPECT_EQ(*cs->GetBlob("s3blob"), data);  // read back from S3, promoted
  EXPECT_EQ(cs->Stats().tiers[2].hits, 3u);
  ASSERT_TRUE(cs->DeleteBlob("s3blob").ok());
  Result<GcReport> r = cs->CollectGarbage();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->deleted_chunks, 9u);
}

}  // namespace
}  // namespace gantry
