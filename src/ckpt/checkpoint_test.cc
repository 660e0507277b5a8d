#include "gantry/ckpt/checkpoint.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <thread>

#include "ckpt/test_util.h"
#include "common/test_support.h"
#include "gantry/cache/chunk_store.h"
#include "gantry/ckpt/drain.h"
#include "gantry/storage/faulty_store.h"
#include "gantry/storage/memory_store.h"
#include "storage/rgw_test_env.h"

namespace gantry::ckpt {
namespace {

namespace fs = std::filesystem;
using test_util::MustOpen;
using test_util::OpenDir;
using test_util::Values;

SaveTensor Tensor(const std::string& name, const std::vector<float>& v,
                  std::vector<int64_t> shape) {
  SaveTensor t;
  t.name = name;
  t.dtype = DType::kFloat32;
  t.global_shape = std::move(shape);
  t.data = v.data();
  return t;
}

RestoreTarget Target(const std::string& name, std::vector<float>& v, std::vector<int64_t> shape,
                     int64_t row_offset = 0, int64_t rows = -1) {
  RestoreTarget t;
  t.name = name;
  t.dtype = DType::kFloat32;
  t.global_shape = std::move(shape);
  t.row_offset = row_offset;
  t.rows = rows;
  t.data = v.data();
  return t;
}

SaveOptions At(int64_t step, std::vector<std::string> tags = {}, std::string metadata = "{}",
               std::string structure = "null") {
  SaveOptions o;
  o.step = step;
  o.tags = std::move(tags);
  o.metadata_json = std::move(metadata);
  o.structure_json = std::move(structure);
  return o;
}

EngineOptions Options(const test_support::TempDir& dir) {
  EngineOptions o;
  o.durable_url = dir.sub("durable");
  o.local_url = dir.sub("local");
  o.chunk_size = 64 << 10;
  o.host_buffer_bytes = 1 << 20;  // smaller than the states below: Save pipelines
  o.job = "test";
  return o;
}

// ---------------------------------------------------------------------------------------------
// Manifest

CheckpointManifest SmallManifest() {
  CheckpointManifest m;
  m.job = "j";
  m.step = 7;
  m.world_size = 1;
  m.chunk_size = 8;
  m.created_unix = 1700000000;
  m.tags = {"best"};
  m.metadata_json = R"({"lr":0.001})";
  m.ranks.push_back({0, R"({"k":[1,2]})", 12, 12, 2, 2});
  TensorRecord t;
  t.name = "w";
  t.dtype = DType::kInt32;
  t.global_shape = {3};
  t.slices.push_back({0, 0, 3, 12, {{HashChunk("12345678"), 8}, {HashChunk("abcd"), 4}}});
  m.tensors.push_back(t);
  return m;
}

TEST(ManifestTest, RoundTripsEveryField) {
  CheckpointManifest m = SmallManifest();
  auto back = CheckpointManifest::FromJson(m.ToJson(), "m");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->step, 7);
  EXPECT_EQ(back->tags, std::vector<std::string>{"best"});
  EXPECT_EQ(back->metadata_json, R"({"lr":0.001})");
  EXPECT_EQ(back->ranks[0].structure_json, R"({"k":[1,2]})");
  ASSERT_EQ(back->tensors.size(), 1u);
  EXPECT_EQ(back->tensors[0].dtype, DType::kInt32);
  EXPECT_EQ(back->tensors[0].slices[0].chunks[1].id, HashChunk("abcd"));
  EXPECT_EQ(back->ToJson(), m.ToJson());
}

TEST(ManifestTest, TamperedTruncatedAndUnknownAreRejected) {
  std::string json = SmallManifest().ToJson();
  std::string tampered = json;
  tampered.replace(tampered.find("\"step\": 7"), 9, "\"step\": 8");
  auto t = CheckpointManifest::FromJson(tampered, "m");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("checksum: does not match"), std::string::npos)
      << t.status().message();

  auto cut = CheckpointManifest::FromJson(json.substr(0, json.size() / 2), "m");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("not valid JSON"), std::string::npos);

  // An unknown dtype with a valid checksum (a newer writer) is named, not misread.
  CheckpointManifest m = SmallManifest();
  std::string doc = m.ToJson();
  doc.replace(doc.find("\"int32\""), 7, "\"int4x\"");
  auto j = nlohmann::json::parse(doc);
  j.erase("checksum");
  j["checksum"] = HashChunk(j.dump()).ToHex();
  auto u = CheckpointManifest::FromJson(j.dump(), "m");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("unknown dtype 'int4x'"), std::string::npos)
      << u.status().message();
}

TEST(ManifestTest, MergeRejectsGapsAndOverlaps) {
  auto part = [](int rank, int64_t off, int64_t rows) {
    CheckpointManifest p;
    p.kind = CheckpointManifest::Kind::kPart;
    p.job = "j";
    p.world_size = 2;
    p.ranks.push_back({rank, "null", 0, 0, 0, 0});
    TensorRecord t;
    t.name = "w";
    t.global_shape = {4};
    t.slices.push_back({rank, off, rows, static_cast<uint64_t>(rows) * 4, {}});
    p.tensors.push_back(t);
    return p;
  };
  EXPECT_TRUE(MergeParts({part(0, 0, 2), part(1, 2, 2)}).ok());
  auto gap = MergeParts({part(0, 0, 1), part(1, 2, 2)});
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.status().message().find("cover rows [0, 1) of 4"), std::string::npos);
  auto overlap = MergeParts({part(0, 0, 3), part(1, 2, 2)});
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("overlapping rows"), std::string::npos);
  // A rank holding no rows overlaps nothing.
  EXPECT_TRUE(MergeParts({part(0, 0, 4), part(1, 0, 0)}).ok());
  // Parts of different runs (a crashed attempt's leftovers) never merge.
  auto p1 = part(1, 2, 2);
  p1.run_id = "other";
  auto runs = MergeParts({part(0, 0, 2), p1});
  ASSERT_FALSE(runs.ok());
  EXPECT_NE(runs.status().message().find("from run 'other'"), std::string::npos);
  // The same rows on every rank (a replicated tensor) keep one copy.
  auto replicated = MergeParts({part(0, 0, 4), part(1, 0, 4)});
  ASSERT_TRUE(replicated.ok());
  EXPECT_EQ(replicated->tensors[0].slices.size(), 1u);
}

TEST(ManifestTest, DTypeNamesAndErrors) {
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBFloat16);
  EXPECT_EQ(DTypeSize(DType::kComplex128), 16u);
  auto bad = ParseDType("qint8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown dtype 'qint8' (known: float32"),
            std::string::npos);
  EXPECT_FALSE(ValidateJobName("a/b").ok());
  EXPECT_TRUE(ValidateJobName("run-7.b_2").ok());
}

// ---------------------------------------------------------------------------------------------
// Save and restore

TEST(CheckpointTest, SaveIsAsynchronousAndRestoresExactly) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto e = MustOpen(Options(dir));
  std::vector<float> a = Values(100000, 1);  // 400 KB: several chunks, more than... the pool
  std::vector<float> b = Values(7, 2);
  std::vector<int64_t> ints = {-1, 0, 1LL << 40};
  std::vector<float> scalar = {3.5f};
  SaveTensor ti;
  ti.name = "ints";
  ti.dtype = DType::kInt64;
  ti.global_shape = {3};
  ti.data = ints.data();
  SaveTensor empty;
  empty.name = "empty";
  empty.global_shape = {0, 4};
  std::vector<SaveTensor> ts = {Tensor("a", a, {1000, 100}), Tensor("b", b, {7}), ti, empty,
                                Tensor("scalar", scalar, {})};
  auto h = e->Save(ts, At(10, {}, R"({"epoch":3})"));
  ASSERT_TRUE(h.ok()) << h.status().message();
  // The caller may change its tensors once Save returns: the snapshot holds the old values.
  std::fill(a.begin(), a.end(), -1.0f);
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_TRUE((*h)->done());
  SaveStats st = (*h)->stats();
  EXPECT_EQ(st.bytes_total, 400000u + 28 + 24 + 4);
  EXPECT_EQ(st.bytes_written, st.bytes_total);
  EXPECT_GT(st.committed_seconds, 0);

  auto latest = e->LatestStep();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 10);
  auto m = e->ReadManifest(10);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->metadata_json, R"({"epoch":3})");
  std::vector<float> a2(100000), b2(7), s2(1);
  std::vector<int64_t> i2(3);
  RestoreTarget ri;
  ri.name = "ints";
  ri.dtype = DType::kInt64;
  ri.global_shape = {3};
  ri.data = i2.data();
  std::vector<RestoreTarget> rs = {Target("a", a2, {1000, 100}), Target("b", b2, {7}), ri,
                                   Target("scalar", s2, {})};
  RestoreStats stats;
  Status s = e->Restore(*m, rs, &stats);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a2, Values(100000, 1));
  EXPECT_EQ(b2, Values(7, 2));
  EXPECT_EQ(i2, ints);
  EXPECT_EQ(s2[0], 3.5f);
  EXPECT_EQ(stats.from_local, stats.chunks);  // everything came from the local tier
  EXPECT_EQ(stats.from_durable, 0u);
}

TEST(CheckpointTest, SecondSaveWritesOnlyChangedChunks) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto e = MustOpen(Options(dir));
  std::vector<std::vector<float>> ws;
  for (int i = 0; i < 10; ++i) ws.push_back(Values(65536, static_cast<float>(i)));  // 4 chunks each
  auto save = [&](int64_t step) {
    std::vector<SaveTensor> ts;
    for (int i = 0; i < 10; ++i) ts.push_back(Tensor("w" + std::to_string(i), ws[i], {65536}));
    auto h = e->Save(ts, At(step));
    EXPECT_TRUE(h.ok());
    EXPECT_TRUE((*h)->Wait().ok());
    return (*h)->stats();
  };
  EXPECT_DOUBLE_EQ(save(1).written_fraction(), 1.0);
  ws[3][5] += 1;  // one tensor of ten changes, in one of its chunks
  SaveStats second = save(2);
  EXPECT_EQ(second.chunks_written, 1u);
  EXPECT_NEAR(second.written_fraction(), 0.025, 1e-9);
  // A restarted process is incremental against the newest checkpoint too.
  e.reset();
  e = MustOpen(Options(dir));
  ws[7][0] += 1;
  EXPECT_EQ(save(3).chunks_written, 1u);
  auto m = e->ReadManifest(3);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->ranks[0].chunks_written, 1u);
  EXPECT_EQ(m->ranks[0].chunks_total, 40u);
}

TEST(CheckpointTest, StepsMustIncreaseAndBadInputIsNamed) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto e = MustOpen(Options(dir));
  std::vector<float> a = Values(10, 1);
  std::vector<SaveTensor> ts = {Tensor("a", a, {10})};
  ASSERT_TRUE((*e->Save(ts, At(5)))->Wait().ok());
  auto again = e->Save(ts, At(5));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("not above step 5"), std::string::npos);
  std::vector<SaveTensor> dup = {Tensor("a", a, {10}), Tensor("a", a, {10})};
  EXPECT_FALSE(e->Save(dup, At(6)).ok());
  std::vector<SaveTensor> outside = {Tensor("a", a, {10})};
  outside[0].row_offset = 5;
  outside[0].rows = 6;
  auto o = e->Save(outside, At(6));
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("outside the global shape [10]"), std::string::npos);

  auto m = e->ReadManifest(5);
  ASSERT_TRUE(m.ok());
  std::vector<float> wrong(11);
  auto shape = e->Restore(*m, std::vector<RestoreTarget>{Target("a", wrong, {11})});
  EXPECT_NE(shape.message().find("tensor 'a': the checkpoint's shape is [10], the target's [11]"),
            std::string::npos)
      << shape.message();
  std::vector<float> ok(10);
  auto dtype_target = Target("a", ok, {10});
  dtype_target.dtype = DType::kInt32;
  auto dt = e->Restore(*m, std::vector<RestoreTarget>{dtype_target});
  EXPECT_NE(dt.message().find("holds float32, the target is int32"), std::string::npos);
  auto missing = e->Restore(*m, std::vector<RestoreTarget>{Target("nope", ok, {10})});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(e->ReadManifest(99).status().code(), StatusCode::kNotFound);
}

TEST(CheckpointTest, RestoreFallsBackPastMissingAndCorruptCopies) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto e = MustOpen(Options(dir));
  std::vector<float> a = Values(50000, 4);
  ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, {50000})}, At(1)))->Wait().ok());
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok());
  const auto& chunks = m->tensors[0].slices[0].chunks;
  ASSERT_GE(chunks.size(), 3u);
  // Chunk 0: gone from the local tier. Chunk 1: a flipped byte in the local copy.
  fs::remove(dir.sub("local/" + ChunkKey(chunks[0].id)));
  {
    std::fstream f(dir.sub("local/" + ChunkKey(chunks[1].id)),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  std::vector<float> back(50000);
  RestoreStats st;
  Status s = e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {50000})}, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back, a);
  EXPECT_EQ(st.from_durable, 2u);
  EXPECT_EQ(st.corrupt, 1u);
  // Missing everywhere: an error naming the tensor and every source tried.
  fs::remove(dir.sub("durable/" + ChunkKey(chunks[0].id)));
  s = e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {50000})});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor 'a'"), std::string::npos);
  EXPECT_NE(s.message().find("missing or corrupt in every source"), std::string::npos);
  auto v = e->Verify(1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->missing, 1u);
  EXPECT_EQ(v->corrupt, 0u);
}

TEST(CheckpointTest, DamagedManifestOnDiskIsRefusedAndOlderStepsStillLoad) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto e = MustOpen(Options(dir));
  std::vector<float> a = Values(1000, 1);
  ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, {1000})}, At(1)))->Wait().ok());
  a[0] = 7;
  ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, {1000})}, At(2)))->Wait().ok());
  const std::string path = dir.sub("durable/" + ManifestKey("test", 2));
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Tampered: one digit of a chunk size changed.
  std::string tampered = text;
  tampered.replace(tampered.find("\"size\": 4000"), 13, "\"size\": 4001");
  std::ofstream(path, std::ios::trunc) << tampered;
  auto m = e->ReadManifest(2);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("checksum: does not match"), std::string::npos)
      << m.status().message();
  // Truncated.
  std::ofstream(path, std::ios::trunc) << text.substr(0, text.size() / 3);
  m = e->ReadManifest(2);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(m.status().message().find(ManifestKey("test", 2)), std::string::npos);
  // The previous checkpoint is untouched.
  auto m1 = e->ReadManifest(1);
  ASSERT_TRUE(m1.ok());
  std::vector<float> back(1000);
  ASSERT_TRUE(e->Restore(*m1, std::vector<RestoreTarget>{Target("a", back, {1000})}).ok());
  EXPECT_EQ(back, Values(1000, 1));
}

// Four ranks save row slices of the same tensors; they load onto 2 and 8 ranks.
TEST(CheckpointTest, FourRanksCommitTogetherAndReshard) {
  test_support::TempDir dir("gantry-ckpt-test");
  const int64_t rows = 96, cols = 1000;
  std::vector<float> full = Values(rows * cols, 9);
  std::vector<float> bias = Values(cols, 3);  // replicated on every rank
  std::vector<std::thread> ranks;
  std::vector<Status> results(4);
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      EngineOptions o = Options(dir);
      o.local_url = dir.sub("local" + std::to_string(r));
      o.rank = r;
      o.world_size = 4;
      auto e = CheckpointEngine::Open(o);
      if (!e.ok()) {
        results[r] = e.status();
        return;
      }
      SaveTensor t = Tensor("w", full, {rows, cols});
      t.row_offset = r * rows / 4;
      t.rows = rows / 4;
      t.data = full.data() + t.row_offset * cols;
      std::vector<SaveTensor> ts = {t, Tensor("bias", bias, {cols})};
      auto h = (*e)->Save(ts, At(100, {}, "{}", std::to_string(r)));
      results[r] = h.ok() ? (*h)->Wait() : h.status();
    });
  }
  for (auto& t : ranks) t.join();
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.message();

  auto e = MustOpen(Options(dir));
  auto m = e->ReadManifest(100);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->world_size, 4);
  EXPECT_EQ(m->ranks[3].structure_json, "3");
  ASSERT_EQ(m->FindTensor("w")->slices.size(), 4u);
  EXPECT_EQ(m->FindTensor("bias")->slices.size(), 1u);
  for (int new_world : {2, 8}) {
    std::vector<float> assembled(rows * cols);
    for (int r = 0; r < new_world; ++r) {
      const int64_t off = r * rows / new_world, n = rows / new_world;
      std::vector<float> mine(n * cols);
      Status s =
          e->Restore(*m, std::vector<RestoreTarget>{Target("w", mine, {rows, cols}, off, n)});
      ASSERT_TRUE(s.ok()) << s.message();
      std::copy(mine.begin(), mine.end(), assembled.begin() + off * cols);
    }
    EXPECT_EQ(assembled, full) << "world " << new_world;
  }
}

// A crashed attempt left rank 1's part of step 1; the relaunched run (a new run id) must not
// merge it with its own rank 0's part.
TEST(CheckpointTest, PartsOfACrashedEarlierRunAreNotMerged) {
  test_support::TempDir dir("gantry-ckpt-test");
  const int64_t rows = 8, cols = 1000;
  auto open_rank = [&](int rank, const std::string& run, int64_t timeout_ms) {
    EngineOptions o = Options(dir);
    o.local_url = dir.sub("local" + std::to_string(rank) + run);
    o.rank = rank;
    o.world_size = 2;
    o.run_id = run;
    o.commit_timeout_ms = timeout_ms;
    return MustOpen(o);
  };
  auto save_rows = [&](CheckpointEngine& e, int rank, const std::vector<float>& full) {
    SaveTensor t = Tensor("w", full, {rows, cols});
    t.row_offset = rank * rows / 2;
    t.rows = rows / 2;
    t.data = full.data() + t.row_offset * cols;
    auto h = e.Save(std::vector<SaveTensor>{t}, At(1));
    EXPECT_TRUE(h.ok());
    return *h;
  };
  std::vector<float> old_data = Values(rows * cols, 1), new_data = Values(rows * cols, 2);
  {
    auto stale = open_rank(1, "attempt-1", 100);
    EXPECT_FALSE(save_rows(*stale, 1, old_data)->Wait().ok());  // rank 0 never came
  }
  auto r0 = open_rank(0, "attempt-2", 10000);
  auto h0 = save_rows(*r0, 0, new_data);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(h0->done());  // the stale part does not complete the set
  EXPECT_EQ(r0->LatestStep().status().code(), StatusCode::kNotFound);
  auto r1 = open_rank(1, "attempt-2", 10000);
  auto h1 = save_rows(*r1, 1, new_data);
  ASSERT_TRUE(h0->Wait().ok());
  ASSERT_TRUE(h1->Wait().ok());
  auto m = r0->ReadManifest(1);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->run_id, "attempt-2");
  std::vector<float> back(rows * cols);
  ASSERT_TRUE(r0->Restore(*m, std::vector<RestoreTarget>{Target("w", back, {rows, cols})}).ok());
  EXPECT_EQ(back, new_data);
}

TEST(CheckpointTest, MissingRankNeverCommits) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.world_size = 2;
  // Ten minutes of simulated time: rank 0's polls advance the clock instead of sleeping.
  SimulatedClock clock(RealClock().Now());
  const int64_t started_ms = clock.NowMillis();
  o.clock = &clock;
  o.commit_timeout_ms = 10 * 60 * 1000;
  const auto wall = std::chrono::steady_clock::now();
  auto e = MustOpen(o);
  std::vector<float> a = Values(10, 1);
  auto h = e->Save(std::vector<SaveTensor>{Tensor("a", a, {10})}, At(1));
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->WaitFor(Durability::kDurable).ok());  // its own part is durable
  Status s = (*h)->Wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("only 1 of 2 ranks wrote their part"), std::string::npos)
      << s.message();
  EXPECT_EQ(e->LatestStep().status().code(), StatusCode::kNotFound);
  EXPECT_GE(clock.NowMillis() - started_ms, o.commit_timeout_ms);
  EXPECT_LT(std::chrono::steady_clock::now() - wall, std::chrono::seconds(60));
}

// The grace rule on simulated time: an unfinished save (a part without a manifest) and its
// chunks survive GC until they are older than the grace period, then go.
TEST(CheckpointTest, GcGracePeriodOnASimulatedClock) {
  test_support::TempDir dir("gantry-ckpt-test");
  SimulatedClock clock(RealClock().Now());
  EngineOptions o = Options(dir);
  o.clock = &clock;
  o.gc_grace_seconds = 3600;
  std::vector<float> a = Values(20000, 1);
  {
    auto e = MustOpen(o);
    ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, {20000})}, At(1)))->Wait().ok());
  }
  // A second rank-of-two save that never commits (the other rank is missing): its part and
  // chunks stay behind.
  EngineOptions two = o;
  two.world_size = 2;
  two.local_url = dir.sub("local-two");
  two.commit_timeout_ms = 1000;
  std::vector<float> b = Values(20000, 2);
  {
    auto e = MustOpen(two);
    EXPECT_FALSE((*e->Save(std::vector<SaveTensor>{Tensor("b", b, {20000})}, At(2)))->Wait().ok());
  }
  auto e = MustOpen(o);
  auto gc = e->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  EXPECT_TRUE(gc->removed_steps.empty());
  EXPECT_EQ(gc->deleted_chunks, 0u);
  auto unfinished = [&] {
    auto list = e->List();
    EXPECT_TRUE(list.ok());
    return list.ok() && list->size() == 2 && !(*list)[1].committed && (*list)[1].step == 2;
  };
  EXPECT_TRUE(unfinished());
  clock.AdvanceMillis(3599 * 1000);
  gc = e->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  EXPECT_TRUE(gc->removed_steps.empty());
  EXPECT_EQ(gc->deleted_chunks, 0u);
  EXPECT_TRUE(unfinished());
  clock.AdvanceMillis(10 * 1000);
  gc = e->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  EXPECT_EQ(gc->removed_steps, (std::vector<int64_t>{2}));
  EXPECT_GT(gc->deleted_chunks, 0u);
  std::vector<float> back(20000);
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {20000})}).ok());
  EXPECT_EQ(back, a);
}

// Two processes saving the same step of the same job (here two engines, each with its own local
// tier) were both told "saved" while one's data was dropped. The manifest is now created, never
// replaced: exactly one save succeeds, the other fails with AlreadyExists, and the step holds
// the winner's data. The same data saved twice is no conflict (a relaunch redoing a commit).
TEST(CheckpointTest, TwoWritersOfTheSameStepAreNeverBothToldSaved) {
  for (int round = 0; round < 5; ++round) {
    test_support::TempDir dir("gantry-ckpt-test");
    EngineOptions o = Options(dir);
    EngineOptions o2 = o;
    o2.local_url = dir.sub("local2");
    auto a = MustOpen(o);
    auto b = MustOpen(o2);
    const int64_t n = 50000;
    std::vector<float> va = Values(n, 1), vb = Values(n, 2), v5 = Values(n, 5);
    ASSERT_TRUE((*a->Save(std::vector<SaveTensor>{Tensor("w", v5, {n})}, At(5)))->Wait().ok());
    auto ha = a->Save(std::vector<SaveTensor>{Tensor("w", va, {n})}, At(7));
    auto hb = b->Save(std::vector<SaveTensor>{Tensor("w", vb, {n})}, At(7));
    ASSERT_TRUE(ha.ok() && hb.ok());
    Status sa = (*ha)->Wait(), sb = (*hb)->Wait();
    ASSERT_NE(sa.ok(), sb.ok()) << "round " << round << ": " << sa.ToString() << " / "
                                << sb.ToString();
    const Status& lost = sa.ok() ? sb : sa;
    EXPECT_EQ(lost.code(), StatusCode::kAlreadyExists) << lost.ToString();
    EXPECT_NE(lost.message().find("with different data"), std::string::npos) << lost.message();
    auto m = a->ReadManifest(7);
    ASSERT_TRUE(m.ok()) << m.status().message();
    std::vector<float> back(n);
    ASSERT_TRUE(a->Restore(*m, std::vector<RestoreTarget>{Target("w", back, {n})}).ok());
    EXPECT_EQ(back, sa.ok() ? va : vb);

    // A relaunch that finds the pointer older than the newest commit (its writer died between
    // manifest and `latest`) and saves the winner's data again: the same commit, no error.
    ASSERT_TRUE(a->durable().Put(LatestKey("test"), "5\n").ok());
    EngineOptions o3 = o;
    o3.local_url = dir.sub("local3");
    auto c = MustOpen(o3);
    std::vector<float> same = sa.ok() ? va : vb;
    Status sc = (*c->Save(std::vector<SaveTensor>{Tensor("w", same, {n})}, At(7)))->Wait();
    EXPECT_TRUE(sc.ok()) << sc.ToString();
  }
}

// Hostile testing found Checkpointer(root, local=root) silently losing older steps: keep_local
// cleanup deleted chunks whose only copy was the root's. Overlapping tiers are refused.
TEST(CheckpointTest, ALocalTierOverlappingTheRootIsRefused) {
  test_support::TempDir dir("gantry-ckpt-test");
  const std::string root = dir.sub("root");
  fs::create_directories(root + "/nested");
  fs::create_symlink(root, dir.sub("alias"));
  for (const std::string& local : {root, root + "/", root + "/nested/..", "file://" + root,
                                   root + "/nested", dir.sub("alias")}) {
    EngineOptions o = Options(dir);
    o.durable_url = root;
    o.local_url = local;
    auto e = CheckpointEngine::Open(o);
    ASSERT_FALSE(e.ok()) << local;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << e.status().message();
    EXPECT_NE(e.status().message().find("overlap"), std::string::npos) << e.status().message();
    EXPECT_NE(e.status().message().find(root), std::string::npos) << e.status().message();
  }
}

// After restarts (or crashes) the local tier kept the chunks of every process's last
// keep_local saves: about ten times what keep_local=2 should keep. Each restart's first commit
// now sweeps the leftovers older than the grace period, after proof of a durable copy.
TEST(CheckpointTest, LeftoversOfEarlierProcessesAreSweptFromTheLocalTier) {
  test_support::TempDir dir("gantry-ckpt-test");
  SimulatedClock clock(RealClock().Now());
  EngineOptions o = Options(dir);
  o.keep_local = 2;
  o.clock = &clock;
  const int64_t n = 64 * 1024;  // four chunks per save, all changing every step
  int64_t step = 0;
  for (int restart = 0; restart < 5; ++restart) {
    auto e = MustOpen(o);
    for (int i = 0; i < 2; ++i) {
      ++step;
      std::vector<float> v = Values(n, static_cast<float>(step));
      ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", v, {n})}, At(step)))->Wait().ok());
    }
    clock.AdvanceMillis(2 * 3600 * 1000);  // the next process starts well past the grace period
  }
  size_t local_chunks = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir.sub("local") + "/chunks")) {
    if (entry.is_regular_file()) ++local_chunks;
  }
  EXPECT_EQ(local_chunks, 2u * 4u);  // the newest two saves' chunks, nothing else
  auto e = MustOpen(o);
  for (int64_t s = 1; s <= step; ++s) {
    auto m = e->ReadManifest(s);
    ASSERT_TRUE(m.ok()) << s;
    std::vector<float> back(n);
    ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {n})}).ok()) << s;
    EXPECT_EQ(back, Values(n, static_cast<float>(s))) << s;
  }
}

TEST(CheckpointTest, WorksWithoutLocalTierAndOnMemoryStore) {
  EngineOptions o;
  static int runs = 0;  // a store of its own per run (--gtest_repeat): named ones outlive tests
  o.durable_url = "mem://ckpt-test-no-local-" + std::to_string(++runs);
  o.chunk_size = 4096;
  o.host_buffer_bytes = 8192;
  o.durable_codec = Codec::kZstd;
  auto e = MustOpen(o);
  std::vector<float> a = Values(10000, 5);
  ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, {10000})}, At(1)))->Wait().ok());
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok());
  std::vector<float> back(10000);
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {10000})}).ok());
  EXPECT_EQ(back, a);
}

TEST(CheckpointTest, FailingDurableTierFailsTheSaveAndKeepsThePrevious) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto faulty = std::make_shared<FaultyStore>(OpenDir(dir.sub("durable")), FaultPlan{});
  EngineOptions o = Options(dir);
  o.durable_store = faulty;
  auto e = MustOpen(o);
  std::vector<float> a = Values(40000, 1);
  std::vector<SaveTensor> ts = {Tensor("a", a, {40000})};
  ASSERT_TRUE((*e->Save(ts, At(1)))->Wait().ok());
  FaultPlan full;
  full.rules.push_back(FaultRule::Chance(FaultOp::kPut, FaultKind::kIoError, 1.0));
  full.rules.back().key_prefix = "chunks/";
  faulty->SetPlan(full);
  a[0] = 42;
  auto h = e->Save(ts, At(2));
  ASSERT_TRUE(h.ok());
  Status s = (*h)->Wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("checkpoint step 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("injected"), std::string::npos) << s.message();
  EXPECT_FALSE(e->WaitAll().ok());  // the failed save's error, once
  EXPECT_TRUE(e->WaitAll().ok());
  faulty->SetPlan(FaultPlan{});
  EXPECT_EQ(*e->LatestStep(), 1);
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok());
  std::vector<float> back(40000);
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {40000})}).ok());
  EXPECT_EQ(back, Values(40000, 1));
  // The next save works again, and writes what the failed one did not.
  auto h3 = e->Save(ts, At(3));
  ASSERT_TRUE(h3.ok());
  EXPECT_TRUE((*h3)->Wait().ok());
}

TEST(CheckpointTest, FullLocalDiskFallsBackToTheDurableTier) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto faulty = std::make_shared<FaultyStore>(OpenDir(dir.sub("local")), FaultPlan{});
  FaultPlan full;
  full.rules.push_back(FaultRule::Chance(FaultOp::kPut, FaultKind::kIoError, 1.0));
  faulty->SetPlan(full);
  EngineOptions o = Options(dir);
  o.local_store = faulty;
  auto e = MustOpen(o);
  std::vector<float> a = Values(40000, 1);
  auto h = e->Save(std::vector<SaveTensor>{Tensor("a", a, {40000})}, At(1));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().ok());
  std::vector<float> back(40000);
  auto m = e->ReadManifest(1);
  RestoreStats st;
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {40000})}, &st).ok());
  EXPECT_EQ(back, a);
  EXPECT_EQ(st.from_durable, st.chunks);
}

// 20 tensors of 40 KiB: 800 KiB fits a 1 MiB pool by bytes, but with 64 KiB buffers each
// holds one tensor, so the snapshot needs 20 buffers of 16 and must hand pieces to the
// background as it copies instead of waiting for buffers forever.
TEST(CheckpointTest, ManySmallTensorsNeedMoreBuffersThanTheirBytesSuggest) {
  test_support::TempDir dir("gantry-ckpt-test");
  auto e = MustOpen(Options(dir));  // 64 KiB chunks, 1 MiB pool
  std::vector<std::vector<float>> ws;
  std::vector<SaveTensor> ts;
  for (int i = 0; i < 20; ++i) ws.push_back(Values(10240, static_cast<float>(i)));
  for (int i = 0; i < 20; ++i) ts.push_back(Tensor("t" + std::to_string(100 + i), ws[i], {10240}));
  auto done = std::async(std::launch::async, [&] {
    auto h = e->Save(ts, At(1));
    return h.ok() ? (*h)->Wait() : h.status();
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "save hung";
  EXPECT_TRUE(done.get().ok());
}

// A local copy that rots between the local write and the drain must not become the copy of
// record.
TEST(CheckpointTest, ACorruptLocalCopyIsNotDrainedToTheDurableTier) {
  test_support::TempDir dir("gantry-ckpt-test");
  FaultPlan rot;
  rot.rules.push_back(FaultRule::Nth(FaultOp::kGet, FaultKind::kBitFlip, 1));
  auto local = std::make_shared<FaultyStore>(OpenDir(dir.sub("local")), rot);
  EngineOptions o = Options(dir);
  o.local_store = local;
  auto e = MustOpen(o);
  std::vector<float> a = Values(40000, 1);
  auto h = e->Save(std::vector<SaveTensor>{Tensor("a", a, {40000})}, At(1));
  ASSERT_TRUE(h.ok());
  Status s = (*h)->Wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is corrupt"), std::string::npos) << s.message();
  EXPECT_EQ(e->LatestStep().status().code(), StatusCode::kNotFound);
}

// A real full disk (a 1 MiB tmpfs in a private mount namespace) under the durable tier: the
// save fails naming the cause, the previous checkpoint stays latest and restorable.
TEST(CheckpointTest, FullDurableDiskFailsTheSaveAndKeepsThePrevious) {
  test_support::TempDir dir("gantry-ckpt-test");
  const std::string mnt = dir.sub("small");
  fs::create_directories(mnt);
  std::string msg;
  const int code = test_support::InSmallTmpfs(
      mnt,
      [&](int* code) -> std::string {
        EngineOptions o = Options(dir);
        o.durable_url = mnt + "/durable";
        auto e = CheckpointEngine::Open(o);
        if (!e.ok()) return *code = 2, e.status().ToString();
        std::vector<float> small = Values(50000, 1);  // 200 KB
        auto h1 = (*e)->Save(std::vector<SaveTensor>{Tensor("a", small, {50000})}, At(1));
        if (!h1.ok() || !(*h1)->Wait().ok()) return *code = 3, "first save failed";
        std::vector<float> big = Values(500000, 2);  // 2 MB: does not fit
        auto h2 = (*e)->Save(std::vector<SaveTensor>{Tensor("a", big, {500000})}, At(2));
        if (!h2.ok()) return *code = 4, h2.status().ToString();
        Status full = (*h2)->Wait();
        if (full.ok()) return *code = 5, "the save into a full disk succeeded";
        Result<int64_t> latest = (*e)->LatestStep();
        if (!latest.ok() || *latest != 1) return *code = 6, "latest moved";
        auto m = (*e)->ReadManifest(1);
        std::vector<float> back(50000);
        if (!m.ok() ||
            !(*e)->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {50000})}).ok() ||
            back != small) {
          return *code = 7, "previous checkpoint unreadable";
        }
        return full.ToString();
      },
      &msg);
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs here";
  ASSERT_EQ(code, 0) << msg;
  EXPECT_NE(msg.find("disk full"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checkpoint step 2"), std::string::npos) << msg;
}

// A real full local disk: chunks that do not fit go straight to the durable tier and the save
// commits.
TEST(CheckpointTest, FullLocalDiskStillCommitsThroughTheDurableTier) {
  test_support::TempDir dir("gantry-ckpt-test");
  const std::string mnt = dir.sub("small");
  fs::create_directories(mnt);
  std::string msg;
  const int code = test_support::InSmallTmpfs(
      mnt,
      [&](int* code) -> std::string {
        EngineOptions o = Options(dir);
        o.local_url = mnt + "/local";
        auto e = CheckpointEngine::Open(o);
        if (!e.ok()) return *code = 2, e.status().ToString();
        std::vector<float> big = Values(500000, 2);  // 2 MB in a 1 MiB local tier
        auto h = (*e)->Save(std::vector<SaveTensor>{Tensor("a", big, {500000})}, At(1));
        if (!h.ok()) return *code = 3, h.status().ToString();
        if (Status s = (*h)->Wait(); !s.ok()) return *code = 4, s.ToString();
        auto m = (*e)->ReadManifest(1);
        std::vector<float> back(500000);
        RestoreStats st;
        if (!m.ok() ||
            !(*e)->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {500000})}, &st).ok() ||
            back != big) {
          return *code = 5, "restore failed";
        }
        if (st.from_local == 0 || st.from_durable == 0) return *code = 6, "expected both tiers";
        return "";
      },
      &msg);
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs here";
  ASSERT_EQ(code, 0) << msg;
}

TEST(CheckpointTest, RetentionKeepsLastEveryKthAndTaggedThenGcFreesChunks) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.retention.keep_last = 2;
  o.retention.keep_every = 10;
  o.gc_grace_seconds = 0;
  auto e = MustOpen(o);
  std::vector<float> a(20000);
  for (int64_t step : {5, 10, 15, 20, 25, 30}) {
    a = Values(20000, static_cast<float>(step));
    std::vector<std::string> tags;
    if (step == 5) tags = {"best"};
    ASSERT_TRUE(
        (*e->Save(std::vector<SaveTensor>{Tensor("a", a, {20000})}, At(step, tags)))->Wait().ok());
  }
  auto list = e->List();
  ASSERT_TRUE(list.ok());
  std::vector<int64_t> steps;
  for (const auto& c : *list) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 10, 20, 25, 30}));  // 15 went: not last 2, not %10
  auto gc = e->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  EXPECT_GT(gc->deleted_chunks, 0u);  // step 15's chunks
  for (int64_t step : steps) {
    auto v = e->Verify(step);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->missing + v->corrupt, 0u) << "step " << step;
  }
  ASSERT_TRUE(e->Remove(30).ok());
  EXPECT_EQ(*e->LatestStep(), 25);
}

// Regression: one truncated manifest made List() fail, and with it retention after every commit
// (silently: the disk filled), GC, and opening an engine when no `latest` pointer existed. The
// damaged checkpoint is now listed as damaged, left in place by retention and GC with a
// warning, its chunks kept while its rank part can name them, and removable.
TEST(CheckpointTest, ADamagedManifestIsListedSkippedByRetentionAndGcAndRemovable) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.gc_grace_seconds = 0;
  std::vector<std::vector<float>> data;
  for (int i = 1; i <= 4; ++i) data.push_back(Values(20000, static_cast<float>(i)));
  std::vector<ChunkId> step1_chunks;
  {
    auto e = MustOpen(o);
    for (int64_t step : {1, 2, 3}) {
      ASSERT_TRUE(
          (*e->Save(std::vector<SaveTensor>{Tensor("a", data[step - 1], {20000})}, At(step)))
              ->Wait()
              .ok());
    }
    step1_chunks = e->ReadManifest(1)->ChunkIds();
  }
  ASSERT_FALSE(step1_chunks.empty());
  const fs::path durable = dir.sub("durable");
  fs::resize_file(durable / ManifestKey("test", 1), 100);
  fs::remove(durable / LatestKey("test"));

  // Opening reads the newest checkpoint from the listing (no latest pointer).
  o.retention.keep_last = 1;
  auto e = MustOpen(o);
  ASSERT_NE(e, nullptr);
  auto list = e->List();
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_TRUE((*list)[0].damaged);
  EXPECT_FALSE((*list)[0].committed);
  EXPECT_NE((*list)[0].problem.find(ManifestKey("test", 1)), std::string::npos)
      << (*list)[0].problem;
  EXPECT_TRUE((*list)[1].committed && !(*list)[1].damaged);
  EXPECT_EQ(*e->LatestStep(), 3);
  auto m = e->ReadManifest(1);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(m.status().code() == StatusCode::kDataLoss ||
              m.status().code() == StatusCode::kInvalidArgument)
      << m.status().ToString();
  EXPECT_FALSE(e->Verify(1).ok());

  // Retention after the commit of step 4 goes on: 2 and 3 go, the damaged 1 stays.
  ASSERT_TRUE(
      (*e->Save(std::vector<SaveTensor>{Tensor("a", data[3], {20000})}, At(4)))->Wait().ok());
  auto listed_steps = [&] {
    std::vector<int64_t> steps;
    auto listed = e->List();
    EXPECT_TRUE(listed.ok()) << listed.status().message();
    if (listed.ok()) {
      for (const auto& c : *listed) steps.push_back(c.step);
    }
    return steps;
  };
  EXPECT_EQ(listed_steps(), (std::vector<int64_t>{1, 4}));

  // GC works, warns about step 1 and keeps it; its chunks stay, named by its rank part.
  auto gc = e->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  EXPECT_TRUE(gc->removed_steps.empty());
  EXPECT_GT(gc->deleted_chunks, 0u);  // steps 2 and 3
  ASSERT_EQ(gc->warnings.size(), 1u);
  EXPECT_NE(gc->warnings[0].find("step 1 "), std::string::npos) << gc->warnings[0];
  EXPECT_NE(gc->warnings[0].find("rm --force 1"), std::string::npos) << gc->warnings[0];
  for (const ChunkId& id : step1_chunks) EXPECT_TRUE(fs::exists(durable / ChunkKey(id)));
  // With the part damaged too nothing names those chunks: GC still runs and they go.
  fs::resize_file(durable / PartKey("test", 1, 0), 50);
  gc = e->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  EXPECT_EQ(gc->deleted_chunks, step1_chunks.size());
  for (const ChunkId& id : step1_chunks) EXPECT_FALSE(fs::exists(durable / ChunkKey(id)));

  // Step 4 is whole; the damaged step can be removed.
  auto v = e->Verify(4);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->missing + v->corrupt, 0u);
  ASSERT_TRUE(e->Remove(1).ok());
  EXPECT_EQ(listed_steps(), (std::vector<int64_t>{4}));
}

// Runs fn in a child process that sees `dir` read-only: a read-only bind mount in a mount
// namespace of its own (writes fail with EROFS, even as root), or, where mounting is not
// allowed, `chmod -R a-w` as a user who is not root (EACCES). Returns the child's exit code
// (fn's verdict: 0 passed) and appends fn's message to *msg; 77: neither is possible here.
int WithDirReadOnly(const std::string& dir, const std::function<std::string(int*)>& fn,
                    std::string* msg) {
  bool chmodded = false;
  const auto prepare = [&] {
    const bool mounted =
        ::unshare(CLONE_NEWNS) == 0 &&
        ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        ::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0 &&
        ::mount("none", dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) == 0;
    chmodded =
        !mounted && ::geteuid() != 0 && std::system(("chmod -R a-w '" + dir + "'").c_str()) == 0;
    return mounted || chmodded;
  };
  const auto run = [&](int* code) {
    const std::string m = fn(code);
    if (chmodded) (void)!std::system(("chmod -R u+w '" + dir + "'").c_str());
    return m;
  };
  return test_support::InChild(prepare, run, msg);
}

// Regression: opening an engine on a root the process may only read failed ("open lock file
// .../.gantry-lock: Read-only file system"): the chunk store created its lock file on open.
// Readers now open without it; what needs it (GC) and writes fail with PermissionDenied.
TEST(CheckpointTest, AReadOnlyRootCanBeListedRestoredAndVerified) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.local_url.clear();
  const std::vector<float> a = Values(20000, 3.0f);
  {
    auto e = MustOpen(o);
    ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, {20000})}, At(1)))->Wait().ok());
  }
  const fs::path root = dir.sub("durable");
  fs::remove(root / ".gantry-lock");  // as on a root another user wrote, or one never GC'd
  std::string msg;
  const int code = WithDirReadOnly(
      root.string(),
      [&](int* failed) -> std::string {
        std::string why;
        auto check = [&](bool ok, const std::string& what) {
          if (!ok) {
            why += what + "; ";
            *failed = 1;
          }
        };
        auto e = CheckpointEngine::Open(o);
        if (!e.ok()) {
          *failed = 1;
          return "open: " + e.status().ToString();
        }
        auto list = (*e)->List();
        check(list.ok() && list->size() == 1 && (*list)[0].committed, "list");
        auto latest = (*e)->LatestStep();
        check(latest.ok() && *latest == 1, "latest");
        auto m = (*e)->ReadManifest(1);
        check(m.ok(), "read manifest");
        if (m.ok()) {
          std::vector<float> back(20000);
          Status r = (*e)->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {20000})});
          check(r.ok() && back == a, "restore: " + r.ToString());
          auto v = (*e)->Verify(1);
          check(v.ok() && v->missing + v->corrupt == 0, "verify");
        }
        // Writers fail, with the code that says why.
        auto gc = (*e)->CollectGarbage();
        check(gc.status().code() == StatusCode::kPermissionDenied, "gc: " + gc.status().ToString());
        auto h = (*e)->Save(std::vector<SaveTensor>{Tensor("a", a, {20000})}, At(2));
        const Status saved = h.ok() ? (*h)->Wait() : h.status();
        check(saved.code() == StatusCode::kPermissionDenied, "save: " + saved.ToString());
        return why;
      },
      &msg);
  if (code == 77) GTEST_SKIP() << "cannot make a directory read-only here (root without mounts)";
  EXPECT_EQ(code, 0) << msg;
  EXPECT_FALSE(fs::exists(root / ".gantry-lock"));
}

// Regression: LatestStep trusted `latest` as long as the manifest it names existed, so a
// damaged newest checkpoint made every "restore the latest" fail while older steps were fine.
// It now falls back to the newest undamaged step and says which one it passed over.
TEST(CheckpointTest, LatestStepPassesOverADamagedLatestWithAWarning) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  const std::vector<float> a = Values(20000, 1.0f), b = Values(20000, 2.0f);
  {
    auto e = MustOpen(o);
    ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", a, {20000})}, At(1)))->Wait().ok());
    ASSERT_TRUE((*e->Save(std::vector<SaveTensor>{Tensor("a", b, {20000})}, At(2)))->Wait().ok());
  }
  const fs::path durable = dir.sub("durable");
  fs::resize_file(durable / ManifestKey("test", 2), 100);  // `latest` still says 2
  auto e = MustOpen(o);
  ASSERT_NE(e, nullptr);
  std::vector<std::string> warnings;
  auto latest = e->LatestStep(&warnings);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("step 2"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("damaged"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(ManifestKey("test", 2)), std::string::npos) << warnings[0];
  // The step it returns restores.
  auto m = e->ReadManifest(*latest);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<float> back(20000);
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{Target("a", back, {20000})}).ok());
  EXPECT_EQ(back, a);
  // Without a sink the warning goes to stderr.
  testing::internal::CaptureStderr();
  EXPECT_EQ(*e->LatestStep(), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("warning: the latest pointer"),
            std::string::npos);
  // Every step damaged: NotFound, saying so.
  fs::resize_file(durable / ManifestKey("test", 1), 100);
  warnings.clear();
  auto none = e->LatestStep(&warnings);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().ToString();
  EXPECT_NE(none.status().message().find("damaged"), std::string::npos);
}

// Regression: after Remove(newest) the engine still refused that step ("not above the previous
// checkpoint's step"), so "remove the bad newest checkpoint and save it again" needed a new
// process. Removing the newest save lowers the bar; an older step under a newer checkpoint is
// still refused, with the way out in the message.
TEST(CheckpointTest, RemovingTheNewestLetsTheSameEngineSaveThatStepAgain) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.gc_grace_seconds = 0;
  auto e = MustOpen(o);
  for (int64_t step : {1, 2, 3}) {
    std::vector<float> a = Values(20000, static_cast<float>(step));
    ASSERT_TRUE(
        (*e->Save(std::vector<SaveTensor>{Tensor("a", a, {20000})}, At(step)))->Wait().ok());
  }
  ASSERT_TRUE(e->Remove(3).ok());
  // What only step 3 referenced is collected, so a save that pointed at it would be broken.
  ASSERT_TRUE(e->CollectGarbage().ok());
  std::vector<float> again = Values(20000, 3);
  auto h = e->Save(std::vector<SaveTensor>{Tensor("a", again, {20000})}, At(3));
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(*e->LatestStep(), 3);
  std::vector<float> back(20000);
  ASSERT_TRUE(
      e->Restore(*e->ReadManifest(3), std::vector<RestoreTarget>{Target("a", back, {20000})}).ok());
  EXPECT_EQ(back, again);
  auto v = e->Verify(3);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->missing + v->corrupt, 0u);

  // Step 2 removed but 3 still there: saving 2 is refused, saying what to do.
  ASSERT_TRUE(e->Remove(2).ok());
  h = e->Save(std::vector<SaveTensor>{Tensor("a", again, {20000})}, At(2));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("not above step 3"), std::string::npos)
      << h.status().message();
  EXPECT_NE(h.status().message().find("remove every checkpoint from step 2 on"), std::string::npos)
      << h.status().message();
  // Removing 3 too lowers the bar to 1.
  ASSERT_TRUE(e->Remove(3).ok());
  h = e->Save(std::vector<SaveTensor>{Tensor("a", again, {20000})}, At(2));
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(*e->LatestStep(), 2);
}

// ---------------------------------------------------------------------------------------------
// One chunk namespace, two users at once: a `gantry cache gc`-style chunk store GC in another
// process loops over the same tiers while this one saves (with retention), and no committed
// checkpoint ever loses a chunk.

TEST(CheckpointConcurrencyTest, ChunkGcInAnotherProcessNeverTakesACommittedCheckpointsChunk) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.retention.keep_last = 2;
  o.gc_grace_seconds = 2;
  (void)CheckpointEngine::Open(o);  // creates both tiers
  const std::string stop = dir.sub("stop"), deleted_file = dir.sub("deleted");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ChunkStoreOptions co;
    co.tiers.resize(2);
    co.tiers[0].name = "local";
    co.tiers[0].url = "file://" + dir.sub("local");
    co.tiers[1].name = "durable";
    co.tiers[1].url = "file://" + dir.sub("durable");
    co.tiers[1].durable = true;
    co.gc_grace_seconds = 2;
    auto cs = ChunkStore::Open(std::move(co));
    if (!cs.ok()) _exit(3);
    uint64_t deleted = 0;
    while (!fs::exists(stop)) {
      Result<GcReport> r = (*cs)->CollectGarbage();
      if (!r.ok()) {
        std::cerr << "gc: " << r.status().ToString() << "\n";
        _exit(4);
      }
      deleted += r->deleted_chunks;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ofstream(deleted_file) << deleted;
    _exit(0);
  }
  const int64_t n = 64 * 1024;                       // four chunks per tensor
  const std::vector<float> fixed = Values(n, 0.5f);  // reused by every save after the first
  auto e = MustOpen(o);
  for (int64_t step = 1; step <= 24; ++step) {
    std::vector<float> moving = Values(n, static_cast<float>(step));
    auto h =
        e->Save(std::vector<SaveTensor>{Tensor("fixed", fixed, {n}), Tensor("moving", moving, {n})},
                At(step));
    ASSERT_TRUE(h.ok());
    Status s = (*h)->Wait();
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s.message();
    for (int64_t back = std::max<int64_t>(1, step - 1); back <= step; ++back) {
      auto v = e->Verify(back);
      ASSERT_TRUE(v.ok()) << v.status().message();
      ASSERT_EQ(v->missing + v->corrupt, 0u) << "step " << back << " after saving " << step;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::ofstream(stop) << "";
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  uint64_t deleted = 0;
  std::ifstream(deleted_file) >> deleted;
  EXPECT_GT(deleted, 0u) << "the other process's GC never collected anything";
  auto list = e->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  for (const CheckpointInfo& c : *list) {
    ASSERT_TRUE(c.committed);
    auto m = e->ReadManifest(c.step);
    ASSERT_TRUE(m.ok());
    std::vector<float> f(n), mv(n);
    Status s = e->Restore(
        *m, std::vector<RestoreTarget>{Target("fixed", f, {n}), Target("moving", mv, {n})});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(f, fixed);
    EXPECT_EQ(mv, Values(n, static_cast<float>(c.step)));
  }
}

// ---------------------------------------------------------------------------------------------
// Crash safety: kill -9 the saver at random instants; the latest checkpoint always restores to
// exactly what was saved at its step.

constexpr int64_t kKillRows = 64, kKillCols = 4096;  // 1 MiB per tensor

std::vector<float> KillValues(int64_t step, int tensor) {
  // Tensor 0 changes every step; the others only every fourth (incremental saves).
  const int64_t version = tensor == 0 ? step : step / 4;
  return Values(kKillRows * kKillCols, static_cast<float>(version * 10 + tensor));
}

// Saves step after step until killed; writes a byte to `committed_fd` after each commit.
[[noreturn]] void SaverChild(EngineOptions o, int committed_fd) {
  auto e = CheckpointEngine::Open(o);
  if (!e.ok()) _exit(3);
  Result<int64_t> latest = (*e)->LatestStep();
  int64_t step = latest.ok() ? *latest + 1 : 1;
  for (;; ++step) {
    std::vector<std::vector<float>> data;
    std::vector<SaveTensor> ts;
    for (int t = 0; t < 4; ++t) data.push_back(KillValues(step, t));
    for (int t = 0; t < 4; ++t)
      ts.push_back(Tensor("t" + std::to_string(t), data[t], {kKillRows, kKillCols}));
    auto h = (*e)->Save(ts, At(step));
    if (!h.ok() || !(*h)->WaitFor(Durability::kCommitted).ok()) _exit(4);
    (void)!write(committed_fd, "c", 1);
  }
}

// With `drain`, each kill is followed by a drain of the local tier (drain.h), as gantry-agent
// does when a job ends: it must never fail, and what it commits must restore exactly too.
void KillAtRandomPoints(const EngineOptions& o, int rounds, uint64_t seed, int max_sleep_ms,
                        bool drain = false) {
  std::mt19937_64 rng(seed);
  int64_t previous = -1;
  int drained = 0;   // checkpoints the drains committed
  std::string seen;  // the latest step after each kill, for the log
  for (int round = 0; round < rounds; ++round) {
    int committed[2];
    ASSERT_EQ(pipe2(committed, O_CLOEXEC | O_NONBLOCK), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(committed[0]);
      SaverChild(o, committed[1]);
    }
    close(committed[1]);
    // On a loaded machine (sanitizers, tests in parallel) every random instant can fall before
    // the first commit, and the run would check no restore at all: the last round, if nothing
    // was committed yet, first waits for the saver's first commit.
    bool waited = true;
    if (round == rounds - 1 && previous == -1) {
      pollfd p{committed[0], POLLIN, 0};
      waited = poll(&p, 1, 120'000) == 1;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % (max_sleep_ms * 1000)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(committed[0]);
    ASSERT_TRUE(waited) << "the saver committed nothing in 120 s";
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saver exited by itself: " << status;
    if (drain) {
      Result<DrainReport> r = DrainLocalTier(OpenDir(o.local_url), {});
      ASSERT_TRUE(r.ok()) << r.status().message();
      ASSERT_EQ(r->failed, 0) << r->errors.front();
      drained += static_cast<int>(r->committed.size());
    }

    auto e = MustOpen(o);
    Result<int64_t> latest = e->LatestStep();
    if (!latest.ok()) {
      ASSERT_EQ(latest.status().code(), StatusCode::kNotFound) << latest.status().message();
      ASSERT_EQ(previous, -1) << "a committed checkpoint disappeared";
      continue;
    }
    ASSERT_GE(*latest, previous) << "latest went backwards";
    seen += " " + std::to_string(*latest);
    previous = *latest;
    auto m = e->ReadManifest(*latest);
    ASSERT_TRUE(m.ok()) << m.status().message();
    for (int t = 0; t < 4; ++t) {
      std::vector<float> back(kKillRows * kKillCols);
      Status s = e->Restore(*m, std::vector<RestoreTarget>{
                                    Target("t" + std::to_string(t), back, {kKillRows, kKillCols})});
      ASSERT_TRUE(s.ok()) << "round " << round << " step " << *latest << ": " << s.message();
      ASSERT_EQ(back, KillValues(*latest, t)) << "round " << round << " step " << *latest;
    }
  }
  std::cout << "latest committed step after each kill:" << seen << "\n";
  if (drain) std::cout << "checkpoints committed by drains after the kills: " << drained << "\n";
  EXPECT_GT(previous, 0) << "no checkpoint ever committed: the kills came too early";
}

TEST(CheckpointCrashTest, KillNineAtRandomPointsPosix) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.chunk_size = 256 << 10;
  o.host_buffer_bytes = 2 << 20;
  KillAtRandomPoints(o, 12, 42, 400);
}

TEST(CheckpointCrashTest, KillNineAtRandomPointsThenDrainTheLocalTier) {
  test_support::TempDir dir("gantry-ckpt-test");
  EngineOptions o = Options(dir);
  o.chunk_size = 256 << 10;
  o.host_buffer_bytes = 2 << 20;
  KillAtRandomPoints(o, 12, 43, 400, /*drain=*/true);
}

TEST(CheckpointCrashTest, KillNineAtRandomPointsS3) {
  GANTRY_REQUIRE_RGW(rgw);
  EngineOptions o;
  o.store_options = rgw->Options();
  o.durable_url = rgw->UniqueUrl("ckpt-kill");
  o.chunk_size = 256 << 10;
  o.host_buffer_bytes = 2 << 20;
  o.job = "kill";
  KillAtRandomPoints(o, 8, 7, 1200);
}

}  // namespace
}  // namespace gantry::ckpt
