// Packing of small slices into shared chunks (manifest version 2): few chunks for many tiny
// tensors, exact restores (mixed sizes, empty tensors, resharding), version 1 manifests still
// read, damage and bad refs reported, identical saves deduplicated.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <thread>

#include "common/test_support.h"
#include "gantry/cache/chunk_store.h"
#include "gantry/ckpt/checkpoint.h"

namespace gantry::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kChunk = 64 << 10;  // default threshold: 4 KiB

EngineOptions PackOptions(const test_support::TempDir& dir) {
  EngineOptions o;
  o.durable_url = dir.sub("durable");
  o.local_url = dir.sub("local");
  o.chunk_size = kChunk;
  o.job = "pack";
  return o;
}

std::unique_ptr<CheckpointEngine> Open(EngineOptions o) {
  auto e = CheckpointEngine::Open(std::move(o));
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(*e) : nullptr;
}

// n tensors "t000000".. of `elems` floats each, every value distinct per (seed, tensor, index).
struct SmallState {
  std::vector<std::vector<float>> values;
  std::vector<std::string> names;
  SmallState(int n, int elems, float seed) {
    for (int i = 0; i < n; ++i) {
      char name[16];
      std::snprintf(name, sizeof name, "t%06d", i);
      names.push_back(name);
      std::vector<float> v(elems);
      for (int k = 0; k < elems; ++k) v[k] = seed * 1e6f + static_cast<float>(i * elems + k);
      values.push_back(std::move(v));
    }
  }
  std::vector<SaveTensor> Tensors() const {
    std::vector<SaveTensor> ts;
    for (size_t i = 0; i < values.size(); ++i) {
      SaveTensor t;
      t.name = names[i];
      t.global_shape = {static_cast<int64_t>(values[i].size())};
      t.data = values[i].data();
      ts.push_back(t);
    }
    return ts;
  }
  // Restores every tensor into fresh memory; the restored values.
  std::vector<std::vector<float>> Restore(CheckpointEngine& e, const CheckpointManifest& m,
                                          Status* status, RestoreStats* stats = nullptr) const {
    std::vector<std::vector<float>> back(values.size());
    std::vector<RestoreTarget> rs;
    for (size_t i = 0; i < values.size(); ++i) {
      back[i].assign(values[i].size(), -1.0f);
      RestoreTarget r;
      r.name = names[i];
      r.global_shape = {static_cast<int64_t>(values[i].size())};
      r.data = back[i].data();
      rs.push_back(r);
    }
    *status = e.Restore(m, rs, stats);
    return back;
  }
};

SaveOptions Step(int64_t step) {
  SaveOptions o;
  o.step = step;
  return o;
}

Status SaveAndWait(CheckpointEngine& e, std::span<const SaveTensor> ts, int64_t step,
                   SaveStats* stats = nullptr) {
  auto h = e.Save(ts, Step(step));
  if (!h.ok()) return h.status();
  Status s = (*h)->Wait();
  if (stats != nullptr) *stats = (*h)->stats();
  return s;
}

size_t ChunkFiles(const std::string& root) {
  size_t n = 0;
  if (!fs::exists(root + "/chunks")) return 0;
  for (const auto& f : fs::recursive_directory_iterator(root + "/chunks")) {
    if (f.is_regular_file()) ++n;
  }
  return n;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(PackTest, TenThousandTinyTensorsShareAFewChunksAndRestoreExactly) {
  test_support::TempDir dir("gantry-pack-test");
  auto e = Open(PackOptions(dir));
  SmallState state(10000, 4, 1);  // 16 bytes each: 160,000 bytes
  SaveStats st;
  ASSERT_TRUE(SaveAndWait(*e, state.Tensors(), 1, &st).ok());
  const uint64_t bound = (160000 + kChunk - 1) / kChunk;  // 3
  EXPECT_LE(st.chunks_total, bound);
  EXPECT_LE(ChunkFiles(dir.sub("durable")), bound);
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_LE(m->ChunkIds().size(), bound);
  EXPECT_EQ(m->packs.size(), m->ChunkIds().size());
  EXPECT_EQ(m->ranks[0].chunks_total, st.chunks_total);
  // Slices fill their packs back to back in name order.
  const ChunkRef& second = m->FindTensor("t000001")->slices[0].chunks[0];
  EXPECT_EQ(second.offset, 16u);
  EXPECT_EQ(second.size, 16u);
  const std::string text = ReadFile(dir.sub("durable/" + ManifestKey("pack", 1)));
  EXPECT_EQ(nlohmann::json::parse(text)["version"], 2);
  // 10k tensors: written compact (indentation would double the manifest).
  EXPECT_EQ(text.find("\n "), std::string::npos);

  Status s;
  RestoreStats rst;
  auto back = state.Restore(*e, *m, &s, &rst);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back, state.values);
  // One fetch per pack, not one per tensor.
  EXPECT_EQ(rst.chunks, m->packs.size());
  auto v = e->Verify(1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->chunks, m->packs.size());
  EXPECT_EQ(v->corrupt + v->missing, 0u);
}

TEST(PackTest, MixedSmallLargeEmptyAndScalarTensorsRestoreBitExact) {
  test_support::TempDir dir("gantry-pack-test");
  auto e = Open(PackOptions(dir));
  std::vector<float> big(50000);  // 200,000 bytes: 4 chunks, not packed
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  std::vector<float> below(1023, 2.5f);  // 4,092 bytes: packed
  std::vector<float> at(1024, 3.5f);     // 4,096 bytes: the threshold, not packed
  std::vector<int64_t> ints = {-1, 0, 1LL << 40};
  std::vector<uint8_t> bytes = {1, 2, 3};  // 3 bytes: the next slice starts unaligned
  std::vector<double> scalar = {3.25};
  auto tensor = [](std::string name, DType dtype, std::vector<int64_t> shape, const void* data) {
    SaveTensor t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.global_shape = std::move(shape);
    t.data = data;
    return t;
  };
  std::vector<SaveTensor> ts = {
      tensor("a.big", DType::kFloat32, {500, 100}, big.data()),
      tensor("b.below", DType::kFloat32, {1023}, below.data()),
      tensor("c.at", DType::kFloat32, {1024}, at.data()),
      tensor("d.bytes", DType::kUInt8, {3}, bytes.data()),
      tensor("e.empty", DType::kFloat32, {0, 4}, nullptr),
      tensor("f.ints", DType::kInt64, {3}, ints.data()),
      tensor("g.scalar", DType::kFloat64, {}, scalar.data()),
  };
  ASSERT_TRUE(SaveAndWait(*e, ts, 1).ok());
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->FindTensor("a.big")->slices[0].chunks.size(), 4u);
  EXPECT_EQ(m->FindPack(m->FindTensor("a.big")->slices[0].chunks[0].id), nullptr);
  EXPECT_EQ(m->FindPack(m->FindTensor("c.at")->slices[0].chunks[0].id), nullptr);
  EXPECT_TRUE(m->FindTensor("e.empty")->slices[0].chunks.empty());
  const ChunkRef& f = m->FindTensor("f.ints")->slices[0].chunks[0];
  ASSERT_NE(m->FindPack(f.id), nullptr);
  EXPECT_EQ(f.offset, 4092u + 3u);  // after b.below and d.bytes
  EXPECT_EQ(m->FindTensor("g.scalar")->slices[0].chunks[0].id, f.id);
  EXPECT_EQ(m->packs.size(), 1u);

  std::vector<float> big2(big.size()), below2(below.size()), at2(at.size());
  std::vector<int64_t> ints2(3);
  std::vector<uint8_t> bytes2(3);
  std::vector<double> scalar2(1);
  auto target = [](std::string name, DType dtype, std::vector<int64_t> shape, void* data) {
    RestoreTarget t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.global_shape = std::move(shape);
    t.data = data;
    return t;
  };
  std::vector<RestoreTarget> rs = {
      target("a.big", DType::kFloat32, {500, 100}, big2.data()),
      target("b.below", DType::kFloat32, {1023}, below2.data()),
      target("c.at", DType::kFloat32, {1024}, at2.data()),
      target("d.bytes", DType::kUInt8, {3}, bytes2.data()),
      target("e.empty", DType::kFloat32, {0, 4}, nullptr),
      target("f.ints", DType::kInt64, {3}, ints2.data()),
      target("g.scalar", DType::kFloat64, {}, scalar2.data()),
  };
  Status s = e->Restore(*m, rs);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(big2, big);
  EXPECT_EQ(below2, below);
  EXPECT_EQ(at2, at);
  EXPECT_EQ(bytes2, bytes);
  EXPECT_EQ(ints2, ints);
  EXPECT_EQ(scalar2, scalar);
}

// What builds before packing wrote (pack_below_bytes = 0 is that code path, and the literal
// below is such a manifest): version 1 with no offsets and no packs, read and restored by an
// engine that packs.
TEST(PackTest, AVersionOneManifestStillRestores) {
  test_support::TempDir dir("gantry-pack-test");
  SmallState state(50, 4, 2);
  {
    EngineOptions o = PackOptions(dir);
    o.pack_below_bytes = 0;
    auto old = Open(o);
    ASSERT_TRUE(SaveAndWait(*old, state.Tensors(), 1).ok());
  }
  EXPECT_EQ(ChunkFiles(dir.sub("durable")), 50u);
  const std::string text = ReadFile(dir.sub("durable/" + ManifestKey("pack", 1)));
  EXPECT_NE(text.find("\"version\": 1"), std::string::npos);
  EXPECT_EQ(text.find("\"offset\""), std::string::npos);
  EXPECT_EQ(text.find("packs"), std::string::npos);
  auto e = Open(PackOptions(dir));
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m->packs.empty());
  Status s;
  auto back = state.Restore(*e, *m, &s);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back, state.values);

  // A literal version 1 document, as an older build wrote it (checksum computed as it did).
  const ChunkId id = HashChunk("0123456789abcdef");
  nlohmann::json doc = nlohmann::json::parse(R"({
    "format": "gantry-checkpoint", "version": 1, "kind": "checkpoint", "job": "old",
    "step": 3, "world_size": 1, "chunk_size": 4194304, "created_unix": 1700000000,
    "tags": [], "metadata": {}, "run": "",
    "ranks": [{"rank": 0, "structure": null, "bytes_total": 16, "bytes_written": 16,
               "chunks_total": 1, "chunks_written": 1}],
    "tensors": [{"name": "w", "dtype": "float32", "global_shape": [4], "slices": [
      {"rank": 0, "row_offset": 0, "rows": 4, "nbytes": 16, "chunks": [{"size": 16}]}]}]})");
  doc["tensors"][0]["slices"][0]["chunks"][0]["id"] = id.ToHex();
  doc["checksum"] = HashChunk(doc.dump()).ToHex();
  auto old = CheckpointManifest::FromJson(doc.dump(1), "v1");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->tensors[0].slices[0].chunks[0].id, id);
  EXPECT_EQ(old->tensors[0].slices[0].chunks[0].offset, 0u);
  // Written back unchanged: still version 1, byte for byte what was read.
  EXPECT_EQ(old->ToJson(), doc.dump(1) + "\n");

  // Packs are not part of version 1.
  doc.erase("checksum");
  doc["packs"] = nlohmann::json::array({{{"id", id.ToHex()}, {"size", 16}}});
  doc["checksum"] = HashChunk(doc.dump()).ToHex();
  auto bad = CheckpointManifest::FromJson(doc.dump(), "v1+packs");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("packs: not part of version 1"), std::string::npos)
      << bad.status().message();
  // A version this build does not know.
  doc.erase("checksum");
  doc["version"] = 3;
  doc["checksum"] = HashChunk(doc.dump()).ToHex();
  auto future = CheckpointManifest::FromJson(doc.dump(), "v3");
  ASSERT_FALSE(future.ok());
  EXPECT_NE(future.status().message().find("reads versions 1 to 2"), std::string::npos)
      << future.status().message();
}

TEST(PackTest, ADamagedPackIsDataLossNamingATensor) {
  test_support::TempDir dir("gantry-pack-test");
  EngineOptions o = PackOptions(dir);
  o.local_url.clear();  // the durable copy is the only one
  auto e = Open(o);
  SmallState state(100, 4, 3);
  ASSERT_TRUE(SaveAndWait(*e, state.Tensors(), 1).ok());
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->packs.size(), 1u);
  {
    std::fstream f(dir.sub("durable/" + ChunkKey(m->packs[0].id)),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x5a');
  }
  Status s;
  state.Restore(*e, *m, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
  EXPECT_NE(s.message().find("tensor 't000000'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("and 99 more tensors packed in that chunk"), std::string::npos)
      << s.message();
  auto v = e->Verify(1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->chunks, 1u);
  EXPECT_EQ(v->corrupt, 1u);
}

// A manifest whose ref reaches outside its pack, or that gives a non-pack ref an offset, is
// refused when read; a pack whose stored chunk is not the size the manifest says is damage.
TEST(PackTest, RefsOutsideTheirChunkAreRejected) {
  CheckpointManifest m;
  m.job = "j";
  m.step = 1;
  m.chunk_size = 64;
  m.ranks.push_back({0, "null", 24, 24, 1, 1});
  const ChunkId pack = HashChunk(std::string(24, 'p'));
  m.packs.push_back({pack, 24});
  for (int i = 0; i < 3; ++i) {
    TensorRecord t;
    t.name = "t" + std::to_string(i);
    t.dtype = DType::kUInt8;
    t.global_shape = {8};
    t.slices.push_back({0, 0, 8, 8, {{pack, 8, static_cast<uint64_t>(8 * i)}}});
    m.tensors.push_back(t);
  }
  auto good = CheckpointManifest::FromJson(m.ToJson(), "good");
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_EQ(good->tensors[2].slices[0].chunks[0].offset, 16u);

  CheckpointManifest outside = m;
  outside.tensors[2].slices[0].chunks[0].offset = 17;  // 17 + 8 > 24
  auto r = CheckpointManifest::FromJson(outside.ToJson(), "outside");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tensors[2].slices[0].chunks[0].offset: bytes 17+8 reach "
                                      "outside chunk " +
                                      pack.ToHex() + " of 24 bytes (a pack)"),
            std::string::npos)
      << r.status().message();

  CheckpointManifest huge = m;  // offset + size overflows 64 bits
  huge.tensors[0].slices[0].chunks[0].offset = ~uint64_t{0} - 3;
  EXPECT_FALSE(CheckpointManifest::FromJson(huge.ToJson(), "huge").ok());

  CheckpointManifest not_a_pack = m;
  not_a_pack.packs.clear();
  auto n = CheckpointManifest::FromJson(not_a_pack.ToJson(), "not a pack");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("not a pack: offset must be 0"), std::string::npos)
      << n.status().message();

  CheckpointManifest big_pack = m;
  big_pack.packs[0].size = 65;  // more than chunk_size
  auto b = CheckpointManifest::FromJson(big_pack.ToJson(), "big pack");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("packs[0].size: bad pack size 65"), std::string::npos)
      << b.status().message();

  // On disk, a pack chunk shorter than the manifest says: Verify and Restore call it damage.
  test_support::TempDir dir("gantry-pack-test");
  EngineOptions o = PackOptions(dir);
  o.local_url.clear();
  auto e = Open(o);
  SmallState state(3, 2, 4);
  ASSERT_TRUE(SaveAndWait(*e, state.Tensors(), 1).ok());
  auto saved = e->ReadManifest(1);
  ASSERT_TRUE(saved.ok());
  ASSERT_EQ(saved->packs.size(), 1u);
  // Restore checks refs too (a manifest built in memory never went through FromJson).
  CheckpointManifest beyond = *saved;
  beyond.tensors[2].slices[0].chunks[0].offset = 17;  // 17 + 8 > 24
  Status r2;
  state.Restore(*e, beyond, &r2);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.code(), StatusCode::kInvalidArgument) << r2.message();
  EXPECT_NE(r2.message().find("tensor 't000002': bytes 17+8 reach outside chunk"),
            std::string::npos)
      << r2.message();

  CheckpointManifest lying = *saved;
  lying.packs[0].size += 8;  // the refs still fit: FromJson cannot know
  ASSERT_TRUE(CheckpointManifest::FromJson(lying.ToJson(), "lying").ok());
  Status s;
  state.Restore(*e, lying, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
  EXPECT_NE(s.message().find("size differs from the manifest"), std::string::npos) << s.message();
}

// The merge takes the union of the ranks' packs, less a pack whose every slice was a replica
// that a lower rank's copy replaced; one pack id with two sizes is a damaged part.
TEST(PackTest, MergeUnitesPacksAndDropsOnesNoKeptSliceUses) {
  auto part = [](int rank, std::vector<TensorRecord> tensors, std::vector<PackRecord> packs) {
    CheckpointManifest p;
    p.kind = CheckpointManifest::Kind::kPart;
    p.job = "j";
    p.step = 1;
    p.world_size = 2;
    p.chunk_size = 64;
    p.ranks.push_back({rank, "null", 0, 0, 0, 0});
    p.tensors = std::move(tensors);
    p.packs = std::move(packs);
    return p;
  };
  auto tensor = [](std::string name, int64_t global_rows, int rank, int64_t row_offset,
                   int64_t rows, ChunkRef ref) {
    TensorRecord t;
    t.name = std::move(name);
    t.dtype = DType::kUInt8;
    t.global_shape = {global_rows};
    t.slices.push_back({rank, row_offset, rows, static_cast<uint64_t>(rows), {ref}});
    return t;
  };
  const ChunkId p0 = HashChunk("pack of rank 0"), p1 = HashChunk("pack of rank 1");
  const ChunkId only_bias = HashChunk("rank 1's bias alone");
  // Rank 0: w rows 0-7 and the bias in one pack; rank 1: w rows 8-15 in its pack, its copy of
  // the bias alone in another.
  std::vector<CheckpointManifest> parts = {
      part(0, {tensor("bias", 8, 0, 0, 8, {p0, 8, 8}), tensor("w", 16, 0, 0, 8, {p0, 8, 0})},
           {{p0, 16}}),
      part(1, {tensor("bias", 8, 1, 0, 8, {only_bias, 8, 0}), tensor("w", 16, 1, 8, 8, {p1, 8, 0})},
           {{p1, 8}, {only_bias, 8}}),
  };
  auto m = MergeParts(parts);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->packs.size(), 2u);
  EXPECT_NE(m->FindPack(p0), nullptr);
  EXPECT_NE(m->FindPack(p1), nullptr);
  EXPECT_EQ(m->FindPack(only_bias), nullptr);
  auto back = CheckpointManifest::FromJson(m->ToJson(), "merged");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->FindTensor("bias")->slices[0].chunks[0].offset, 8u);

  parts[1].packs[0] = {p0, 8};  // rank 1 claims rank 0's pack at another size
  parts[1].tensors[1].slices[0].chunks[0].id = p0;
  auto bad = MergeParts(parts);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("rank 1 lists pack " + p0.ToHex() + " with a different size"),
      std::string::npos)
      << bad.status().message();
}

// Four ranks save row slices small enough to pack (each rank its own packs); they restore onto
// other row ranges, which cut across the ranks' slices.
TEST(PackTest, PackedSlicesReshard) {
  test_support::TempDir dir("gantry-pack-test");
  const int64_t rows = 16, cols = 3;
  std::vector<float> full(rows * cols);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i) + 0.25f;
  std::vector<int32_t> bias = {7, 8, 9};  // replicated on every rank
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions o = PackOptions(dir);
      o.local_url = dir.sub("local" + std::to_string(r));
      o.rank = r;
      o.world_size = 4;
      auto e = CheckpointEngine::Open(o);
      if (!e.ok()) {
        results[r] = e.status();
        return;
      }
      SaveTensor w;
      w.name = "w";
      w.global_shape = {rows, cols};
      w.row_offset = r * rows / 4;
      w.rows = rows / 4;
      w.data = full.data() + w.row_offset * cols;
      SaveTensor b;
      b.name = "bias";
      b.dtype = DType::kInt32;
      b.global_shape = {3};
      b.data = bias.data();
      std::vector<SaveTensor> ts = {w, b};
      results[r] = SaveAndWait(**e, ts, 5);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.message();

  auto e = Open(PackOptions(dir));
  auto m = e->ReadManifest(5);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->FindTensor("w")->slices.size(), 4u);
  std::set<ChunkId> packs_of_w;
  for (const SliceRecord& s : m->FindTensor("w")->slices) {
    ASSERT_EQ(s.chunks.size(), 1u);
    ASSERT_NE(m->FindPack(s.chunks[0].id), nullptr);
    packs_of_w.insert(s.chunks[0].id);
  }
  EXPECT_EQ(packs_of_w.size(), 4u);  // one pack per rank
  EXPECT_EQ(m->packs.size(), 4u);    // rank 0's holds the kept bias; the others' too (their w)
  for (int new_world : {1, 3, 8}) {
    std::vector<float> assembled(rows * cols, -1.0f);
    for (int r = 0; r < new_world; ++r) {
      const int64_t off = r * rows / new_world, n = (r + 1) * rows / new_world - off;
      std::vector<float> mine(n * cols);
      RestoreTarget t;
      t.name = "w";
      t.global_shape = {rows, cols};
      t.row_offset = off;
      t.rows = n;
      t.data = mine.data();
      std::vector<int32_t> b(3);
      RestoreTarget tb;
      tb.name = "bias";
      tb.dtype = DType::kInt32;
      tb.global_shape = {3};
      tb.data = b.data();
      Status s = e->Restore(*m, std::vector<RestoreTarget>{t, tb});
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(b, bias);
      std::copy(mine.begin(), mine.end(), assembled.begin() + off * cols);
    }
    EXPECT_EQ(assembled, full) << "world " << new_world;
  }
}

TEST(PackTest, IdenticalSavesWriteNoNewChunksAndOneChangeRewritesOnePack) {
  test_support::TempDir dir("gantry-pack-test");
  EngineOptions o = PackOptions(dir);
  o.retention.keep_last = 1;
  o.gc_grace_seconds = 0;
  auto e = Open(o);
  SmallState state(20000, 4, 5);  // 320,000 bytes: 5 packs
  SaveStats first, second, third;
  ASSERT_TRUE(SaveAndWait(*e, state.Tensors(), 1, &first).ok());
  const size_t files = ChunkFiles(dir.sub("durable"));
  EXPECT_EQ(first.chunks_written, first.chunks_total);
  EXPECT_EQ(files, first.chunks_total);
  ASSERT_TRUE(SaveAndWait(*e, state.Tensors(), 2, &second).ok());
  EXPECT_EQ(second.chunks_written, 0u);
  EXPECT_EQ(second.bytes_written, 0u);
  EXPECT_EQ(ChunkFiles(dir.sub("durable")), files);
  // A restarted engine packs the same way and still deduplicates.
  e.reset();
  e = Open(o);
  state.values[12345][2] += 1.0f;
  ASSERT_TRUE(SaveAndWait(*e, state.Tensors(), 3, &third).ok());
  EXPECT_EQ(third.chunks_written, 1u);
  // Retention keeps step 3; GC drops the one pack only the older steps used, and step 3 still
  // restores exactly.
  auto gc = e->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  EXPECT_GE(gc->deleted_chunks, 1u);  // the old pack (in the local tier too, if still there)
  EXPECT_EQ(ChunkFiles(dir.sub("durable")), files);  // four unchanged packs and the new one
  auto m = e->ReadManifest(3);
  ASSERT_TRUE(m.ok());
  Status s;
  auto back = state.Restore(*e, *m, &s);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back, state.values);
}

// Zeros pack into identical packs (one chunk, listed once), and a big zero tensor's chunks are
// byte for byte a full pack: the same id, read at the same size either way.
TEST(PackTest, IdenticalPacksAndChunksThatEqualAPackAreOneChunk) {
  test_support::TempDir dir("gantry-pack-test");
  auto e = Open(PackOptions(dir));
  SmallState state(3 * 4096 + 10, 4, 0);  // 16 bytes each: three full packs and a short one
  for (auto& v : state.values) std::fill(v.begin(), v.end(), 0.0f);
  std::vector<float> zeros(2 * kChunk / 4, 0.0f);  // two full chunks of zeros
  std::vector<SaveTensor> ts = state.Tensors();
  SaveTensor big;
  big.name = "z.big";
  big.global_shape = {static_cast<int64_t>(zeros.size())};
  big.data = zeros.data();
  ts.push_back(big);
  SaveStats st;
  ASSERT_TRUE(SaveAndWait(*e, ts, 1, &st).ok());
  EXPECT_EQ(st.chunks_total, 6u);    // four packs, two chunks of z.big
  EXPECT_EQ(st.chunks_written, 2u);  // the full zero pack and the short one
  EXPECT_EQ(ChunkFiles(dir.sub("durable")), 2u);
  auto m = e->ReadManifest(1);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->packs.size(), 2u);
  const ChunkId full = m->FindTensor("z.big")->slices[0].chunks[0].id;
  ASSERT_NE(m->FindPack(full), nullptr);
  EXPECT_EQ(m->FindPack(full)->size, kChunk);
  EXPECT_EQ(m->FindTensor("t000000")->slices[0].chunks[0].id, full);

  std::vector<float> big_back(zeros.size(), 1.0f);
  RestoreTarget rb;
  rb.name = "z.big";
  rb.global_shape = big.global_shape;
  rb.data = big_back.data();
  ASSERT_TRUE(e->Restore(*m, std::vector<RestoreTarget>{rb}).ok());
  EXPECT_EQ(big_back, zeros);
  Status s;
  auto back = state.Restore(*e, *m, &s);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back, state.values);
  auto v = e->Verify(1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->chunks, 2u);
  EXPECT_EQ(v->corrupt + v->missing, 0u);
}

}  // namespace
}  // namespace gantry::ckpt
