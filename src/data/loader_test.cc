// Reading datasets in the global order: every sample of an MDS or WebDataset dataset reaches
// exactly one reader, each reader gets its positions' samples, a resume fetches no shard of the
// prefix, memory holds one window's shards, and a shard that changed is DataLoss.
#include "gantry/data/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

#include "gantry/common/thread_annotations.h"
#include "gantry/data/mds.h"
#include "gantry/storage/memory_store.h"

namespace gantry::data {
namespace {

// Forwards to a store, counting whole-object and range reads per key.
class CountingStore final : public ObjectStore {
 public:
  CountingStore(std::unique_ptr<ObjectStore> inner,
                std::shared_ptr<std::map<std::string, int>> reads)
      : inner_(std::move(inner)), reads_(std::move(reads)) {}
  std::string_view backend() const override { return "counting"; }
  std::string url() const override { return inner_->url(); }
  bool SupportsCreateIfAbsent() const override { return inner_->SupportsCreateIfAbsent(); }
  Status Put(std::string_view key, std::string_view data, const PutOptions& options) override {
    return inner_->Put(key, data, options);
  }
  // Thread-safe, as every ObjectStore must be: the iterator's read-ahead fetches on its own
  // threads.
  Result<std::string> Get(std::string_view key) override {
    Count(key);
    return inner_->Get(key);
  }
  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override {
    Count(key);
    return inner_->GetRange(key, offset, length);
  }
  Result<ObjectInfo> Head(std::string_view key) override { return inner_->Head(key); }
  Result<ListPage> List(std::string_view prefix, std::string_view token, int max_keys) override {
    return inner_->List(prefix, token, max_keys);
  }
  Status Delete(std::string_view key) override { return inner_->Delete(key); }

 private:
  void Count(std::string_view key) {
    MutexLock lock(mu_);
    ++(*reads_)[std::string(key)];
  }
  std::unique_ptr<ObjectStore> inner_;
  Mutex mu_;
  std::shared_ptr<std::map<std::string, int>> reads_;
};

// Sample keys are "s<shard>-<index>"; the shard sizes vary, one is empty.
const std::vector<uint64_t> kSizes = {37, 5, 0, 61, 12, 44, 29, 50, 3, 18};

std::string KeyOf(uint64_t shard, uint64_t index) {
  return "s" + std::to_string(shard) + "-" + std::to_string(index);
}

std::string Uniq(const std::string& what) {
  static int n = 0;
  return "loader-test-" + what + "-" + std::to_string(++n);
}

// An MDS dataset with one shard per non-empty entry of kSizes: each shard written by its own
// MdsWriter (so shard sizes are exact), then one index.json over them all, as if one writer had
// cut the shards there.
DatasetLocation MakeMds(const std::string& name,
                        std::shared_ptr<std::map<std::string, int>> reads) {
  auto store = OpenMemoryStore(name);
  MdsIndex all;
  for (size_t shard = 0; shard < kSizes.size(); ++shard) {
    if (kSizes[shard] == 0) continue;  // an MDS writer writes no empty shard
    MdsWriterOptions o;
    o.prefix = "part" + std::to_string(shard) + "/";
    o.columns = {{"__key__", "str"}, {"v", "int"}};
    auto w = MdsWriter::Create(*store, o);
    EXPECT_TRUE(w.ok());
    for (uint64_t i = 0; i < kSizes[shard]; ++i) {
      std::string v(8, '\0');
      v[0] = static_cast<char>(i);
      EXPECT_TRUE((*w)->Write({{"__key__", KeyOf(shard, i)}, {"v", v}}).ok());
    }
    EXPECT_TRUE((*w)->Finish().ok());
    MdsShardInfo info = (*w)->index().shards.at(0);
    EXPECT_EQ((*w)->index().shards.size(), 1u);
    info.raw.basename = o.prefix + info.raw.basename;
    all.shards.push_back(info);
  }
  // One index.json over all parts, as if one writer had cut the shards there.
  std::string index = R"({"version": 2, "shards": [)";
  for (size_t i = 0; i < all.shards.size(); ++i) {
    const MdsShardInfo& s = all.shards[i];
    index += std::string(i ? "," : "") + R"({"column_encodings": ["str", "int"],)" +
             R"("column_names": ["__key__", "v"], "column_sizes": [null, 8],)" +
             R"("compression": null, "format": "mds", "hashes": [],)" +
             R"("raw_data": {"basename": ")" + s.raw.basename + R"(", "bytes": )" +
             std::to_string(s.raw.bytes) + R"(, "hashes": {}}, "samples": )" +
             std::to_string(s.samples) + R"(, "size_limit": 67108864, "version": 2,)" +
             R"("zip_data": null})";
  }
  index += "]}";
  EXPECT_TRUE(store->Put(kMdsIndexName, index).ok());
  DatasetLocation d;
  d.url = "mem://" + name;
  d.format = DatasetFormat::kMds;
  d.store = std::make_unique<CountingStore>(std::move(store), reads);
  return d;
}

DatasetLocation MakeWds(const std::string& name,
                        std::shared_ptr<std::map<std::string, int>> reads) {
  auto store = OpenMemoryStore(name);
  DatasetLocation d;
  d.url = "mem://" + name;
  d.format = DatasetFormat::kWebDataset;
  for (size_t shard = 0; shard < kSizes.size(); ++shard) {
    WdsWriterOptions o;
    o.pattern = "shard-" + std::to_string(100 + shard) + "-%d.tar";
    o.max_samples = 0;
    auto w = WdsWriter::Create(*store, o);
    EXPECT_TRUE(w.ok());
    for (uint64_t i = 0; i < kSizes[shard]; ++i) {
      EXPECT_TRUE((*w)->Write(KeyOf(shard, i), {{"txt", KeyOf(shard, i)}}).ok());
    }
    EXPECT_TRUE((*w)->Finish().ok());
    if (kSizes[shard] == 0) {
      // An empty shard still counts in the order: write an empty tar (two zero blocks).
      const std::string key = "shard-" + std::to_string(100 + shard) + "-0.tar";
      EXPECT_TRUE(store->Put(key, std::string(10240, '\0')).ok());
    }
  }
  auto listed = ListWdsShards(*store, "");
  EXPECT_TRUE(listed.ok());
  for (const ObjectInfo& o : *listed) d.wds_shards.push_back(o.key);
  EXPECT_EQ(d.wds_shards.size(), kSizes.size());
  d.store = std::make_unique<CountingStore>(std::move(store), reads);
  return d;
}

// Dataset shard number -> the shard's index in kSizes (MDS leaves the empty one out).
std::vector<uint64_t> SourceShards(DatasetFormat format) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    if (format == DatasetFormat::kWebDataset || kSizes[i] > 0) out.push_back(i);
  }
  return out;
}

class LoaderTest : public testing::TestWithParam<DatasetFormat> {
 protected:
  std::unique_ptr<ShardSource> Open() {
    reads_ = std::make_shared<std::map<std::string, int>>();
    DatasetLocation d = GetParam() == DatasetFormat::kMds ? MakeMds(Uniq("mds"), reads_)
                                                          : MakeWds(Uniq("wds"), reads_);
    auto source = OpenShardSource(std::move(d), {});
    EXPECT_TRUE(source.ok()) << source.status().ToString();
    reads_->clear();  // counting WebDataset samples at open is not the iterator's doing
    return std::move(*source);
  }
  std::string KeyAt(const SampleRef& ref) const {
    return KeyOf(SourceShards(GetParam())[ref.shard], ref.index);
  }
  std::shared_ptr<std::map<std::string, int>> reads_;
};

TEST_P(LoaderTest, EverySampleOnceInTheOrdersPlaces) {
  auto source = Open();
  auto order = EpochOrder::Create(source->shard_samples(), {.seed = 9, .window = 40}, 2);
  ASSERT_TRUE(order.ok());
  ASSERT_EQ(order->size(), 259u);
  for (uint32_t world : {1, 3, 4}) {
    for (uint32_t workers : {0, 2}) {
      std::set<std::string> seen;
      for (uint32_t rank = 0; rank < world; ++rank) {
        for (uint32_t worker = 0; worker < std::max<uint32_t>(workers, 1); ++worker) {
          auto it = SampleIterator::Create(*source, *order, {world, rank, workers, worker, 4}, 0);
          ASSERT_TRUE(it.ok()) << it.status().ToString();
          Sample s;
          while (true) {
            auto more = it->Next(s);
            ASSERT_TRUE(more.ok()) << more.status().ToString();
            if (!*more) break;
            EXPECT_EQ(s.ref, order->At(s.position));
            EXPECT_EQ(s.key, KeyAt(s.ref));
            const SampleField* f = s.Find(GetParam() == DatasetFormat::kMds ? "v" : "txt");
            ASSERT_NE(f, nullptr);
            if (GetParam() == DatasetFormat::kMds) {
              EXPECT_EQ(f->encoding, "int");
              EXPECT_EQ(static_cast<uint8_t>(f->bytes[0]), s.ref.index);
            } else {
              EXPECT_EQ(f->bytes, s.key);
            }
            EXPECT_TRUE(seen.insert(s.key).second) << s.key << " twice";
          }
          // One window's shards at most (a 40-sample window spans at most 4 of these shards,
          // plus the empty ones it skips over, which are never read).
          EXPECT_LE(it->max_shards_held(), 4u);
          EXPECT_EQ(it->shards_held(), 0u);  // all dropped at the end
        }
      }
      EXPECT_EQ(seen.size(), 259u) << world << "x" << workers;
    }
  }
}

TEST_P(LoaderTest, ResumeFetchesNothingBeforeItsWindow) {
  auto source = Open();
  auto order = EpochOrder::Create(source->shard_samples(), {.seed = 4, .window = 30}, 0);
  ASSERT_TRUE(order.ok());
  // The samples an uninterrupted single reader would get from position 200 on.
  std::vector<std::string> want;
  for (uint64_t p = 200; p < order->size(); ++p) want.push_back(KeyAt(order->At(p)));

  auto it = SampleIterator::Create(*source, *order, {}, 200);
  ASSERT_TRUE(it.ok());
  std::vector<std::string> got;
  Sample s;
  for (auto more = it->Next(s); more.ok() && *more; more = it->Next(s)) got.push_back(s.key);
  EXPECT_EQ(got, want);
  // Only shards whose shard-order range reaches past the start of 200's window were fetched,
  // each once.
  const uint64_t window_start = order->WindowStart(200);
  ASSERT_FALSE(reads_->empty());
  size_t reachable = 0;  // non-empty shards reaching past the window's start
  for (size_t k = 0; k < order->num_shards(); ++k) {
    reachable += order->ShardEnd(k) > window_start && order->ShardEnd(k) > order->ShardBegin(k);
  }
  EXPECT_LE(reads_->size(), reachable);
  EXPECT_LT(reachable, 9u);  // of 9 non-empty shards: the test does resume past some
  for (const auto& [key, n] : *reads_) {
    EXPECT_EQ(n, 1) << key;
    bool wanted = false;
    for (size_t k = 0; k < order->num_shards(); ++k) {
      if (source->ShardName(order->ShardAt(k)) == key) {
        wanted = order->ShardEnd(k) > window_start;
      }
    }
    EXPECT_TRUE(wanted) << key << " lies wholly before the resume window";
  }
}

// NextBatch gives what as many Nexts would, in the same order, short only at the end, and the
// loader's metrics count every sample although they are updated once per batch.
TEST_P(LoaderTest, NextBatchGivesWhatNextGivesAndCountsEverySample) {
  auto source = Open();
  auto order = EpochOrder::Create(source->shard_samples(), {.seed = 3, .window = 25}, 1);
  ASSERT_TRUE(order.ok());
  const uint64_t before = source->metrics()->Snapshot().samples;
  std::vector<std::string> one_by_one;
  {
    auto it = SampleIterator::Create(*source, *order, {2, 1, 0, 0, 3}, 0);
    ASSERT_TRUE(it.ok());
    Sample s;
    for (auto more = it->Next(s); more.ok() && *more; more = it->Next(s)) {
      one_by_one.push_back(s.key);
    }
  }
  ASSERT_FALSE(one_by_one.empty());
  EXPECT_EQ(source->metrics()->Snapshot().samples, before + one_by_one.size());
  for (const size_t batch : {1, 7, 1000}) {
    auto it = SampleIterator::Create(*source, *order, {2, 1, 0, 0, 3}, 0);
    ASSERT_TRUE(it.ok());
    std::vector<Sample> out(batch);
    std::vector<std::string> got;
    const uint64_t at = source->metrics()->Snapshot().samples;
    while (true) {
      uint64_t read = 0;
      ASSERT_TRUE(it->NextBatch(out, &read).ok());
      for (uint64_t i = 0; i < read; ++i) got.push_back(out[i].key);
      if (read < batch) {
        EXPECT_EQ(it->remaining(), 0u);
        break;
      }
    }
    EXPECT_EQ(got, one_by_one) << batch;
    EXPECT_EQ(source->metrics()->Snapshot().samples, at + one_by_one.size()) << batch;
  }
}

// The read-ahead's planner skips the rest of a window (or, unshuffled, of a shard) once every
// shard it overlaps is planned. Whatever it skips, each shard is still planned before the
// consumer needs it: with room for a window's shards, the consumer never fetches one itself.
TEST_P(LoaderTest, ReadAheadPlansEveryShardBeforeTheConsumerNeedsIt) {
  auto source = Open();
  for (const OrderOptions options :
       {OrderOptions{.seed = 5, .shuffle = false}, OrderOptions{.seed = 5, .window = 7},
        OrderOptions{.seed = 6, .window = 40}, OrderOptions{.seed = 7, .window = 1000}}) {
    auto order = EpochOrder::Create(source->shard_samples(), options, 1);
    ASSERT_TRUE(order.ok());
    for (const Slot slot : {Slot{1, 0, 0, 0, 1}, Slot{3, 1, 0, 0, 4}, Slot{2, 0, 2, 1, 3}}) {
      SCOPED_TRACE(testing::Message()
                   << "window " << order->window() << ", world " << slot.world << " rank "
                   << slot.rank << ", worker " << slot.worker << " of " << slot.workers);
      auto positions = SlotPositions::Create(slot, 0, order->size());
      ASSERT_TRUE(positions.ok());
      std::vector<std::string> want;
      for (uint64_t j = 0; j < positions->size(); ++j) {
        want.push_back(KeyAt(order->At((*positions)[j])));
      }
      auto it = SampleIterator::Create(*source, *order, slot, 0, {.max_shards = 16});
      ASSERT_TRUE(it.ok());
      std::vector<std::string> got;
      Sample s;
      for (auto more = it->Next(s); more.ok() && *more; more = it->Next(s)) {
        got.push_back(s.key);
      }
      EXPECT_EQ(got, want);
      EXPECT_EQ(it->read_ahead_misses(), 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LoaderTest,
                         testing::Values(DatasetFormat::kMds, DatasetFormat::kWebDataset),
                         [](const auto& info) {
                           return std::string(DatasetFormatName(info.param));
                         });

TEST(Loader, WebDatasetShardThatChangedIsDataLoss) {
  auto reads = std::make_shared<std::map<std::string, int>>();
  DatasetLocation d = MakeWds(Uniq("wds"), reads);
  ShardSourceOptions o;
  o.wds_shard_samples = kSizes;
  o.wds_shard_samples[3] += 1;  // a stale count: the shard no longer matches the order
  auto source = OpenShardSource(std::move(d), o);
  ASSERT_TRUE(source.ok());
  EXPECT_TRUE(reads->empty());  // counts given: nothing read at open
  auto order = EpochOrder::Create((*source)->shard_samples(), {.shuffle = false}, 0);
  ASSERT_TRUE(order.ok());
  auto it = SampleIterator::Create(**source, *order, {}, 37 + 5);  // shard 3's first sample
  ASSERT_TRUE(it.ok());
  Sample s;
  auto more = it->Next(s);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(more.status().message().find("shard-103-0.tar"), std::string::npos)
      << more.status().message();
  // Too few or too many counts is the caller's mistake.
  o.wds_shard_samples.pop_back();
  EXPECT_EQ(OpenShardSource(MakeWds(Uniq("wds"), reads), o).status().code(),
            StatusCode::kInvalidArgument);
}

// An unshuffled WebDataset read whose shard `missing` is gone from its store until Restore().
struct MissingShard {
  explicit MissingShard(size_t missing)
      : name(Uniq("wds")),
        source(Open(name)),
        order(
            std::move(EpochOrder::Create(source->shard_samples(), {.shuffle = false}, 0)).value()),
        store(OpenMemoryStore(name)) {
    victim = source->ShardName(static_cast<uint32_t>(missing));
    saved = std::move(store->Get(victim)).value();
    EXPECT_TRUE(store->Delete(victim).ok());
  }
  void Restore() { ASSERT_TRUE(store->Put(victim, saved).ok()); }
  static std::unique_ptr<ShardSource> Open(const std::string& name) {
    DatasetLocation d = MakeWds(name, std::make_shared<std::map<std::string, int>>());
    return std::move(OpenShardSource(std::move(d), {})).value();
  }
  std::string name, victim, saved;
  std::unique_ptr<ShardSource> source;
  EpochOrder order;
  std::unique_ptr<ObjectStore> store;
};

TEST(Loader, MissingShardIsNotFoundAndNextCanRetry) {
  MissingShard m(0);
  auto it = SampleIterator::Create(*m.source, m.order, {}, 0);
  ASSERT_TRUE(it.ok());
  Sample s;
  auto more = it->Next(s);
  EXPECT_EQ(more.status().code(), StatusCode::kNotFound);
  m.Restore();
  more = it->Next(s);
  ASSERT_TRUE(more.ok() && *more);
  EXPECT_EQ(s.key, KeyOf(0, 0));  // nothing was skipped
}

// A batch that reaches a missing shard keeps the samples before it; the next call goes on from
// the missing shard's first sample once it is back.
TEST(Loader, NextBatchKeepsTheSamplesBeforeAMissingShard) {
  MissingShard m(1);
  auto it = SampleIterator::Create(*m.source, m.order, {}, 0);
  ASSERT_TRUE(it.ok());
  std::vector<Sample> out(100);
  uint64_t read = 0;
  EXPECT_EQ(it->NextBatch(out, &read).code(), StatusCode::kNotFound);
  ASSERT_EQ(read, kSizes[0]);  // shard 0 whole, then shard 1 is missing
  EXPECT_EQ(out[kSizes[0] - 1].key, KeyOf(0, kSizes[0] - 1));
  m.Restore();
  ASSERT_TRUE(it->NextBatch(out, &read).ok());
  EXPECT_EQ(read, 100u);
  EXPECT_EQ(out[0].key, KeyOf(1, 0));  // nothing was skipped
}

// NextReadyBatch reads only from shards already here: held, or fetched by the read-ahead. It
// stops (no error) before a shard it would have to fetch or wait for, even a missing one, and
// NextBatch goes on from there.
TEST(Loader, NextReadyBatchNeverFetchesNorWaits) {
  MissingShard m(1);
  std::vector<Sample> out(100);
  uint64_t read = 7;
  {
    // No read-ahead: nothing is here before the first NextBatch fetches shard 0.
    auto it = SampleIterator::Create(*m.source, m.order, {}, 0, {.max_shards = 0});
    ASSERT_TRUE(it.ok());
    ASSERT_TRUE(it->NextReadyBatch(out, &read).ok());
    EXPECT_EQ(read, 0u);
    EXPECT_EQ(it->shards_read(), 0u);
    ASSERT_TRUE(it->NextBatch(std::span<Sample>(out.data(), 1), &read).ok());
    ASSERT_EQ(read, 1u);
    // The rest of shard 0, then shard 1 (missing) is not fetched: no NotFound.
    ASSERT_TRUE(it->NextReadyBatch(out, &read).ok());
    ASSERT_EQ(read, kSizes[0] - 1);
    EXPECT_EQ(out[0].key, KeyOf(0, 1));
    EXPECT_EQ(it->shards_read(), 1u);
    EXPECT_EQ(it->remaining(), m.order.size() - kSizes[0]);
    EXPECT_EQ(it->NextBatch(out, &read).code(), StatusCode::kNotFound);
    m.Restore();
    ASSERT_TRUE(it->NextBatch(std::span<Sample>(out.data(), 1), &read).ok());
    EXPECT_EQ(out[0].key, KeyOf(1, 0));  // nothing was skipped
  }
  {
    // With a read-ahead, what it has fetched is read without waiting.
    auto it = SampleIterator::Create(*m.source, m.order, {}, 0, {.max_shards = 2});
    ASSERT_TRUE(it.ok());
    ASSERT_TRUE(it->NextBatch(std::span<Sample>(out.data(), 1), &read).ok());
    std::vector<std::string> keys = {out[0].key};
    for (int tries = 0; tries < 5000 && keys.size() <= kSizes[0]; ++tries) {
      ASSERT_TRUE(it->NextReadyBatch(std::span<Sample>(out.data(), 1), &read).ok());
      if (read == 1) {
        keys.push_back(out[0].key);
      } else {
        usleep(1000);  // shard 1 on its way
      }
    }
    ASSERT_EQ(keys.size(), kSizes[0] + 1);  // into shard 1, fetched by the read-ahead
    EXPECT_EQ(keys[kSizes[0] - 1], KeyOf(0, kSizes[0] - 1));
    EXPECT_EQ(keys.back(), KeyOf(1, 0));
    EXPECT_EQ(it->read_ahead_misses(), 0u);
  }
}

// A Sample keeps its shard alive, names and encodings included, after the iterator and the
// source are gone (the MDS column names once pointed into the source's index: under ASan the
// old code read freed memory here).
TEST(Loader, SampleOutlivesItsSource) {
  auto reads = std::make_shared<std::map<std::string, int>>();
  Sample s;
  {
    auto source = OpenShardSource(MakeMds(Uniq("mds"), reads), {});
    ASSERT_TRUE(source.ok());
    auto order = EpochOrder::Create((*source)->shard_samples(), {.shuffle = false}, 0);
    auto it = SampleIterator::Create(**source, *order, {}, 0);
    ASSERT_TRUE(it.ok());
    auto more = it->Next(s);
    ASSERT_TRUE(more.ok() && *more);
  }
  ASSERT_EQ(s.fields.size(), 2u);
  EXPECT_EQ(std::string(s.fields[0].name), "__key__");
  EXPECT_EQ(std::string(s.fields[1].name), "v");
  EXPECT_EQ(std::string(s.fields[1].encoding), "int");
  EXPECT_EQ(std::string(s.fields[0].bytes), KeyOf(0, 0));
}

TEST(Loader, OrderForAnotherDatasetIsRefused) {
  auto reads = std::make_shared<std::map<std::string, int>>();
  auto source = OpenShardSource(MakeWds(Uniq("wds"), reads), {});
  ASSERT_TRUE(source.ok());
  auto order = EpochOrder::Create({1, 2}, {}, 0);
  EXPECT_EQ(SampleIterator::Create(**source, *order, {}, 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gantry::data
