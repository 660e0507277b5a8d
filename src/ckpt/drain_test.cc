// Drain records and DrainLocalTier: saves cut off between `local` and `durable` are finished
// on the node, and committed when their run's parts are all there.
#include "gantry/ckpt/drain.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "ckpt/test_util.h"
#include "common/test_support.h"
#include "gantry/ckpt/catalog.h"
#include "gantry/ckpt/checkpoint.h"
#include "gantry/storage/faulty_store.h"

namespace gantry::ckpt {
namespace {

namespace fs = std::filesystem;
using test_util::MustOpen;
using test_util::OpenDir;
using test_util::Values;

SaveTensor Tensor(const std::string& name, const std::vector<float>& v, int64_t rows,
                  int64_t row_offset = 0, int64_t global_rows = -1) {
  SaveTensor t;
  t.name = name;
  t.global_shape = {global_rows < 0 ? rows : global_rows};
  t.row_offset = row_offset;
  t.rows = rows;
  t.data = v.data();
  return t;
}

SaveOptions At(int64_t step) {
  SaveOptions o;
  o.step = step;
  return o;
}

// A durable root whose chunk writes fail: the save reaches `local` and never `durable`, as
// one whose process ended between the two.
struct Root {
  explicit Root(const std::string& path)
      : faulty(std::make_shared<FaultyStore>(OpenObjectStore(path, {}).value(), FaultPlan{})) {}
  void FailChunkWrites() {
    FaultPlan p;
    p.rules.push_back(FaultRule::Chance(FaultOp::kPut, FaultKind::kIoError, 1.0));
    p.rules.back().key_prefix = "chunks/";
    faulty->SetPlan(p);
  }
  std::shared_ptr<FaultyStore> faulty;
};

EngineOptions Options(const test_support::TempDir& dir, const Root& root,
                      const std::string& local = "local") {
  EngineOptions o;
  o.durable_store = root.faulty;
  o.durable_url = dir.sub("durable");
  o.local_url = dir.sub(local);
  o.chunk_size = 64 << 10;
  o.host_buffer_bytes = 1 << 20;
  o.job = "test";
  o.run_id = "run-1";
  return o;
}

// One save of `n` floats at `step` whose chunks never reach the root (its writes still fail
// after); its engine is gone when this returns.
// The values are Values(n, step).
void SaveCutOff(const test_support::TempDir& dir, Root& root, size_t n, int64_t step) {
  root.FailChunkWrites();
  std::vector<float> a = Values(n, static_cast<float>(step));
  auto e = MustOpen(Options(dir, root));
  auto h = e->Save(std::vector<SaveTensor>{Tensor("a", a, static_cast<int64_t>(n))}, At(step));
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->WaitFor(Durability::kLocal).ok());
  EXPECT_FALSE((*h)->Wait().ok());
}

size_t Records(ObjectStore& local) {
  auto all = local.ListAll(kDrainRecordPrefix);
  EXPECT_TRUE(all.ok());
  return all.ok() ? all->size() : 0;
}

Result<DrainReport> Drain(const test_support::TempDir& dir, const std::string& local = "local",
                          DrainOptions o = {}) {
  return DrainLocalTier(OpenDir(dir.sub(local)), o);
}

TEST(DrainTest, ACommittedSaveLeavesNoRecord) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  auto e = MustOpen(Options(dir, root));
  std::vector<float> a = Values(100000, 1);
  ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, 100000)}, At(1)))->Wait().ok());
  EXPECT_EQ(Records(*OpenDir(dir.sub("local"))), 0u);
  auto r = Drain(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->records, 0);
}

TEST(DrainTest, ASaveCutOffAfterLocalIsFinishedAndCommittedByADrain) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  std::vector<float> a = Values(100000, 1);
  {
    auto e = MustOpen(Options(dir, root));
    ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, 100000)}, At(1)))->Wait().ok());
    a[5] = -1;
    a[90000] = -2;
    root.FailChunkWrites();
    auto h = e->Save(std::vector<SaveTensor>{Tensor("a", a, 100000)}, At(2));
    ASSERT_TRUE(h.ok());
    EXPECT_TRUE((*h)->WaitFor(Durability::kLocal).ok());
    EXPECT_FALSE((*h)->Wait().ok());
  }
  root.faulty->SetPlan(FaultPlan{});
  ASSERT_EQ(Records(*OpenDir(dir.sub("local"))), 1u);
  {
    // The root as an absolute URL, whatever the engine was given: a drain runs elsewhere.
    auto local = OpenDir(dir.sub("local"));
    auto rec =
        DrainRecord::FromJson(*local->Get(local->ListAll(kDrainRecordPrefix)->at(0).key), "record");
    ASSERT_TRUE(rec.ok()) << rec.status().message();
    EXPECT_EQ(rec->durable_url, "file://" + fs::canonical(dir.sub("durable")).string());
  }
  CheckpointCatalog before(*root.faulty);
  EXPECT_EQ(*before.Latest("test"), 1);

  auto r = Drain(dir);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->records, 1);
  EXPECT_EQ(r->parts_written, 1);
  EXPECT_EQ(r->failed, 0);
  EXPECT_TRUE(r->errors.empty()) << r->errors.front();
  EXPECT_EQ(r->committed, std::vector<std::string>{"test@2"});
  // Only the two changed chunks (of 7) had not reached the root.
  EXPECT_EQ(r->chunks_copied, 2u);
  EXPECT_EQ(Records(*OpenDir(dir.sub("local"))), 0u);

  auto e = MustOpen(Options(dir, root));
  EXPECT_EQ(*e->LatestStep(), 2);
  auto m = e->ReadManifest(2);
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::vector<float> back(100000);
  RestoreTarget t{"a", DType::kFloat32, {100000}, 0, -1, back.data()};
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{t}).ok());
  EXPECT_EQ(back, a);
  // A second drain finds nothing.
  auto again = Drain(dir);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->records, 0);
}

// Rank 1's process ended before its chunks were durable; rank 0 gave up waiting for its part.
// The drain on rank 1's node writes the part and, finding every part of the run, commits.
TEST(DrainTest, TheLastPartDrainedCommitsForEveryRank) {
  test_support::TempDir dir("gantry-drain-test");
  Root root0(dir.sub("durable"));
  Root root1(dir.sub("durable"));
  root1.FailChunkWrites();
  SimulatedClock clock(RealClock().Now());
  std::vector<float> w = Values(2 * 50000, 4);
  std::vector<Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      EngineOptions o = Options(dir, r == 0 ? root0 : root1, "local" + std::to_string(r));
      o.rank = r;
      o.world_size = 2;
      o.clock = &clock;
      o.commit_timeout_ms = 60 * 1000;
      auto e = MustOpen(o);
      if (e == nullptr) return;
      auto h =
          e->Save(std::vector<SaveTensor>{Tensor(
                      "w", std::vector<float>(w.begin() + r * 50000, w.begin() + (r + 1) * 50000),
                      50000, r * 50000, 100000)},
                  At(7));
      results[r] = h.ok() ? (*h)->Wait() : h.status();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_FALSE(results[0].ok());
  EXPECT_NE(results[0].message().find("only 1 of 2 ranks"), std::string::npos)
      << results[0].message();
  EXPECT_FALSE(results[1].ok());
  EXPECT_EQ(Records(*OpenDir(dir.sub("local0"))), 0u);  // its part is durable
  ASSERT_EQ(Records(*OpenDir(dir.sub("local1"))), 1u);

  auto r = Drain(dir, "local1");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->parts_written, 1);
  EXPECT_EQ(r->committed, std::vector<std::string>{"test@7"});
  auto e = MustOpen(Options(dir, root0, "local0"));
  auto m = e->ReadManifest(7);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->world_size, 2);
  EXPECT_EQ(m->run_id, "run-1");
  std::vector<float> back(100000);
  RestoreTarget t{"w", DType::kFloat32, {100000}, 0, -1, back.data()};
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{t}).ok());
  EXPECT_EQ(back, w);
}

// One rank of two drained: its part is written but nothing is committed until the other's.
TEST(DrainTest, APartAloneIsWrittenButNotCommitted) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  root.FailChunkWrites();
  SimulatedClock clock(RealClock().Now());
  {
    EngineOptions o = Options(dir, root);
    o.rank = 1;
    o.world_size = 2;
    o.clock = &clock;
    auto e = MustOpen(o);
    std::vector<float> w = Values(50000, 1);
    EXPECT_FALSE((*e->Save(std::vector<SaveTensor>{Tensor("w", w, 50000, 50000, 100000)}, At(3)))
                     ->Wait()
                     .ok());
  }
  root.faulty->SetPlan(FaultPlan{});
  auto r = Drain(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->parts_written, 1);
  EXPECT_TRUE(r->committed.empty());
  EXPECT_TRUE(root.faulty->Head(PartKey("test", 3, 1)).ok());
  EXPECT_EQ(root.faulty->Head(ManifestKey("test", 3)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Records(*OpenDir(dir.sub("local"))), 0u);
}

TEST(DrainTest, ARecordANewerCheckpointSupersedesIsDiscardedUnwritten) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  std::vector<float> a = Values(100000, 1);
  {
    auto e = MustOpen(Options(dir, root));
    root.FailChunkWrites();
    EXPECT_FALSE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, 100000)}, At(1)))->Wait().ok());
    root.faulty->SetPlan(FaultPlan{});
    a[0] = 3;
    ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, 100000)}, At(2)))->Wait().ok());
  }
  ASSERT_EQ(Records(*OpenDir(dir.sub("local"))), 1u);
  auto r = Drain(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->discarded, 1);
  EXPECT_EQ(r->parts_written, 0);
  ASSERT_EQ(r->errors.size(), 1u);
  EXPECT_NE(r->errors[0].find("a later save of its job (step 2)"), std::string::npos)
      << r->errors[0];
  EXPECT_EQ(root.faulty->Head(PartKey("test", 1, 0)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Records(*OpenDir(dir.sub("local"))), 0u);
}

// A chunk GC, with the local tier, keeps the chunks of a save not yet durable however old:
// its record in the local tier is a root.
TEST(DrainTest, GcKeepsTheLocalChunksOfASaveNotYetDurable) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  SaveCutOff(dir, root, 100000, 1);
  root.faulty->SetPlan(FaultPlan{});
  EngineOptions o = Options(dir, root);
  o.gc_grace_seconds = 0;  // no grace: only the mark keeps a chunk
  auto e = MustOpen(o);
  auto gc = e->CollectGarbage(Retention{});
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  e.reset();
  auto r = Drain(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->discarded, 0) << r->errors.front();
  EXPECT_EQ(r->committed, std::vector<std::string>{"test@1"});
}

// A chunk gone from the node that never reached the root: nothing can finish the save; the
// record goes, naming the chunk.
TEST(DrainTest, ARecordWhoseChunkIsNowhereIsDiscardedNamingIt) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  SaveCutOff(dir, root, 100000, 1);
  root.faulty->SetPlan(FaultPlan{});
  auto local = OpenDir(dir.sub("local"));
  auto chunks = local->ListAll("chunks/");
  ASSERT_TRUE(chunks.ok());
  ASSERT_FALSE(chunks->empty());
  ASSERT_TRUE(local->Delete(chunks->front().key).ok());
  auto r = Drain(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->discarded, 1);
  EXPECT_EQ(r->parts_written, 0);
  ASSERT_EQ(r->errors.size(), 1u);
  EXPECT_NE(r->errors[0].find("discarded: "), std::string::npos) << r->errors[0];
  EXPECT_NE(r->errors[0].find("chunk "), std::string::npos) << r->errors[0];
  EXPECT_EQ(Records(*local), 0u);
}

// The root unreachable: the record stays, and the next drain finishes it. Records not allowed
// or too young are left alone.
TEST(DrainTest, FailuresAndRefusalsLeaveTheRecord) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  SaveCutOff(dir, root, 100000, 1);
  std::shared_ptr<ObjectStore> local = OpenDir(dir.sub("local"));
  DrainOptions o;
  o.open = [&](const std::string&) -> Result<std::shared_ptr<ObjectStore>> {
    return std::shared_ptr<ObjectStore>(root.faulty);
  };
  auto failed = DrainLocalTier(local, o);  // chunk writes still fail
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->failed, 1);
  EXPECT_EQ(failed->parts_written, 0);
  EXPECT_EQ(Records(*local), 1u);

  root.faulty->SetPlan(FaultPlan{});
  DrainOptions refuse = o;
  refuse.allow = [](const std::string& url) { return PermissionDenied(url + " not allowed"); };
  auto refused = DrainLocalTier(local, refuse);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->skipped, 1);
  ASSERT_EQ(refused->errors.size(), 1u);
  EXPECT_NE(refused->errors[0].find("not allowed"), std::string::npos);
  DrainOptions young = o;
  young.min_age_seconds = 3600;
  auto skipped = DrainLocalTier(local, young);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(skipped->skipped, 1);
  EXPECT_EQ(Records(*local), 1u);

  std::atomic<bool> stop{true};  // cancelled before the first record: nothing is touched
  DrainOptions cancelled = o;
  cancelled.cancel = &stop;
  auto stopped = DrainLocalTier(local, cancelled);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->parts_written, 0);
  EXPECT_EQ(Records(*local), 1u);

  auto done = DrainLocalTier(local, o);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->committed, std::vector<std::string>{"test@1"});
  EXPECT_EQ(Records(*local), 0u);
}

// A record anyone on the node could write: one that does not parse, or that sits under
// another save's key (claiming another job), is removed unread; nothing reaches the root.
TEST(DrainTest, ADamagedOrMisplacedRecordIsDiscarded) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  SaveCutOff(dir, root, 1000, 1);
  root.faulty->SetPlan(FaultPlan{});
  auto local = OpenDir(dir.sub("local"));
  auto records = local->ListAll(kDrainRecordPrefix);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  const std::string text = *local->Get(records->front().key);
  ASSERT_TRUE(local->Delete(records->front().key).ok());
  ASSERT_TRUE(local->Put(DrainRecordKey("file://" + dir.sub("durable"), "other", 1, 0), text).ok());
  ASSERT_TRUE(
      local->Put(DrainRecordKey("file://" + dir.sub("durable"), "test", 2, 0), "{\"kind\":").ok());
  // At its own key, but naming a job that is not one key segment (it would write elsewhere).
  auto planted = DrainRecord::FromJson(text, "planted");
  ASSERT_TRUE(planted.ok()) << planted.status().message();
  planted->part.job = "a/b";
  ASSERT_TRUE(
      local->Put(DrainRecordKey(planted->durable_url, "a/b", 1, 0), planted->ToJson()).ok());
  auto r = Drain(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->records, 3);
  EXPECT_EQ(r->discarded, 3);
  EXPECT_EQ(r->parts_written, 0);
  EXPECT_EQ(Records(*local), 0u);
  auto listed = root.faulty->ListAll("ckpt/");
  ASSERT_TRUE(listed.ok());
  for (const ObjectInfo& info : *listed) {
    EXPECT_EQ(info.key.find("rank-"), std::string::npos) << info.key;
  }
}

// Two drains of one tier at once (gantry-agent and an epilog's `gantry ckpt drain`): both
// succeed, the checkpoint is committed once and restores.
TEST(DrainTest, TwoDrainsAtOnceAgree) {
  test_support::TempDir dir("gantry-drain-test");
  Root root(dir.sub("durable"));
  for (int64_t step : {1, 2, 3}) {
    SaveCutOff(dir, root, 200000, step);
    root.faulty->SetPlan(FaultPlan{});
    // Drained before the next save, which would otherwise supersede it.
    std::vector<Result<DrainReport>> reports(2, Result<DrainReport>(Internal("not run")));
    std::vector<std::thread> drains;
    for (int i = 0; i < 2; ++i) drains.emplace_back([&, i] { reports[i] = Drain(dir); });
    for (auto& t : drains) t.join();
    for (const auto& r : reports) {
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->failed, 0) << r->errors.front();
    }
    auto e = MustOpen(Options(dir, root));
    EXPECT_EQ(*e->LatestStep(), step);
    auto m = e->ReadManifest(step);
    ASSERT_TRUE(m.ok()) << m.status().message();
    std::vector<float> back(200000);
    RestoreTarget t{"a", DType::kFloat32, {200000}, 0, -1, back.data()};
    ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{t}).ok());
    EXPECT_EQ(back, Values(200000, static_cast<float>(step)));
  }
  EXPECT_EQ(Records(*OpenDir(dir.sub("local"))), 0u);
}

TEST(DrainTest, RecordRoundTripsAndRejectsWhatItCannotRead) {
  DrainRecord r;
  r.durable_url = "s3://b/ckpt";
  r.durable_codec = Codec::kZstd;
  r.part.kind = CheckpointManifest::Kind::kPart;
  r.part.job = "j";
  r.part.step = 4;
  r.part.ranks.push_back({});
  auto back = DrainRecord::FromJson(r.ToJson(), "x");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->durable_url, "s3://b/ckpt");
  EXPECT_EQ(back->durable_codec, Codec::kZstd);
  EXPECT_EQ(back->part.step, 4);
  std::string json = r.ToJson();
  EXPECT_FALSE(DrainRecord::FromJson(json.substr(0, json.size() / 2), "x").ok());
  std::string v2 = json;
  v2.replace(v2.find("\"version\":1"), 11, "\"version\":2");
  EXPECT_NE(DrainRecord::FromJson(v2, "x").status().message().find("unknown version"),
            std::string::npos);
  r.part.kind = CheckpointManifest::Kind::kCheckpoint;
  EXPECT_FALSE(DrainRecord::FromJson(r.ToJson(), "x").ok());
}

}  // namespace
}  // namespace gantry::ckpt
