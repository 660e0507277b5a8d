// End-to-end tests of `gantry ckpt`: checkpoints written by the C++ engine into a temp root, then
// listed, shown, verified, damaged, removed and garbage-collected through the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.h"
#include "gantry/cache/chunk.h"
#include "gantry/ckpt/checkpoint.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/storage/faulty_store.h"

namespace {

namespace fs = std::filesystem;
using namespace gantry;
using namespace gantry::ckpt;

using cli_test::CliRun;
using cli_test::Quote;
using cli_test::ReadFile;
using cli_test::RunShell;

class CliCkpt : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gantry-cli-ckpt-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ / "root";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `gantry ckpt --root ROOT --job test ARGS`.
  CliRun Ckpt(const std::string& args, const std::string& job = "test") {
    return RunShell(std::string(GANTRY_CLI) + " ckpt --root " + Quote(root_.string()) + " --job " +
                        job + " " + args,
                    dir_ / "stderr");
  }

  EngineOptions Options() const {
    EngineOptions o;
    o.durable_url = root_.string();
    o.job = "test";
    o.chunk_size = 64 << 10;
    o.host_buffer_bytes = 1 << 20;
    return o;
  }

  // Steps 10 (tagged "best"), 20 and 30. Tensor "a" is the same at every step (its chunks are
  // shared); "b" changes every step (its chunks belong to one step); step 30 also holds 23 tiny
  // tensors, 25 in all.
  void WriteThreeSteps() {
    auto e = CheckpointEngine::Open(Options());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    std::vector<float> a(40000), b(40000);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
    std::vector<std::vector<float>> tiny(23, std::vector<float>(4, 1.0f));
    for (int64_t step : {10, 20, 30}) {
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(step * 100000 + i);
      std::vector<SaveTensor> ts = {Tensor("a", a), Tensor("b", b)};
      if (step == 30) {
        for (size_t i = 0; i < tiny.size(); ++i) {
          ts.push_back(Tensor((i < 10 ? "t0" : "t") + std::to_string(i), tiny[i]));
        }
      }
      SaveOptions so;
      so.step = step;
      if (step == 10) so.tags = {"best"};
      so.metadata_json = R"({"epoch":)" + std::to_string(step / 10) + "}";
      auto h = (*e)->Save(ts, so);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      ASSERT_TRUE((*h)->Wait().ok());
    }
  }

  static SaveTensor Tensor(const std::string& name, const std::vector<float>& v) {
    SaveTensor t;
    t.name = name;
    t.dtype = DType::kFloat32;
    t.global_shape = {static_cast<int64_t>(v.size())};
    t.data = v.data();
    return t;
  }

  CheckpointManifest Manifest(int64_t step) {
    auto e = CheckpointEngine::Open(Options());
    EXPECT_TRUE(e.ok());
    auto m = (*e)->ReadManifest(step);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : CheckpointManifest{};
  }

  // The durable file of the first chunk of tensor `name` at `step`.
  fs::path ChunkFile(int64_t step, const std::string& name, size_t index = 0) {
    const CheckpointManifest m = Manifest(step);
    const TensorRecord* t = m.FindTensor(name);
    EXPECT_NE(t, nullptr);
    if (t == nullptr) return {};
    return root_ / ChunkKey(t->slices.at(0).chunks.at(index).id);
  }

  size_t ChunkFiles() {
    size_t n = 0;
    for (const auto& f : fs::recursive_directory_iterator(root_ / "chunks")) {
      n += f.is_regular_file() ? 1 : 0;
    }
    return n;
  }

  std::vector<int64_t> ListedSteps() {
    CliRun r = Ckpt("ls --json");
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<int64_t> steps;
    for (const auto& row : nlohmann::json::parse(r.out)) steps.push_back(row["step"]);
    return steps;
  }

  fs::path dir_;
  fs::path root_;
};

TEST_F(CliCkpt, LsListsStepsAsTextAndJson) {
  WriteThreeSteps();
  CliRun r = Ckpt("ls");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 4u) << r.out;  // header and three steps
  EXPECT_NE(rows[0].find("STEP"), std::string::npos);
  EXPECT_NE(rows[1].find("10  committed "), std::string::npos) << rows[1];
  EXPECT_NE(rows[1].find("best"), std::string::npos) << rows[1];
  EXPECT_EQ(rows[2].find("latest"), std::string::npos) << rows[2];
  EXPECT_NE(rows[3].find("30  committed, latest"), std::string::npos) << rows[3];
  EXPECT_NE(rows[3].find("Z "), std::string::npos) << "no ISO-8601 UTC time: " << rows[3];

  r = Ckpt("ls --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  const int64_t expected_steps[] = {10, 20, 30};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j[i]["step"], expected_steps[i]);
    EXPECT_EQ(j[i]["committed"], true);
    EXPECT_EQ(j[i]["latest"], i == 2);
    EXPECT_EQ(j[i]["world_size"], 1);
    EXPECT_GE(j[i]["bytes"].get<uint64_t>(), 2 * 40000 * sizeof(float));
    EXPECT_GT(j[i]["created_unix"].get<int64_t>(), 0);
  }
  EXPECT_EQ(j[0]["tags"], nlohmann::json::array({"best"}));
  EXPECT_EQ(j[2]["tags"], nlohmann::json::array());
}

TEST_F(CliCkpt, LsShowsAnUnfinishedSaveAsIncomplete) {
  WriteThreeSteps();
  // Rank 1 of a two-rank save writes its part; rank 0 never does, so step 40 never commits.
  EngineOptions o = Options();
  o.world_size = 2;
  o.rank = 1;
  o.commit_timeout_ms = 100;  // rank 1 waits in the background for a commit that never comes
  auto e = CheckpointEngine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::vector<float> half(1000, 2.0f);
  SaveTensor t = Tensor("c", half);
  t.global_shape = {2000};
  t.row_offset = 1000;
  t.rows = 1000;
  SaveOptions so;
  so.step = 40;
  so.durability = Durability::kDurable;
  auto h = (*e)->Save(std::vector<SaveTensor>{t}, so);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Wait().ok());

  CliRun r = Ckpt("ls");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("40  incomplete (1/2 parts)"), std::string::npos) << r.out;
  r = Ckpt("ls --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[3]["step"], 40);
  EXPECT_EQ(j[3]["committed"], false);
  EXPECT_EQ(j[3]["parts"], 1);
  EXPECT_EQ(j[3]["world_size"], 2);
  EXPECT_EQ(j[2]["latest"], true);  // 30 stays the latest
}

// Step 40 reaches the node-local tier only (its writes to the root fail, as when its process
// ends between `local` and `durable`); `ckpt drain` finishes and commits it.
TEST_F(CliCkpt, DrainFinishesASaveLeftInTheLocalTier) {
  WriteThreeSteps();
  const std::string local = (dir_ / "local").string();
  {
    auto faulty =
        std::make_shared<FaultyStore>(OpenObjectStore(root_.string(), {}).value(), FaultPlan{});
    FaultPlan fail;
    fail.rules.push_back(FaultRule::Chance(FaultOp::kPut, FaultKind::kIoError, 1.0));
    fail.rules.back().key_prefix = "chunks/";
    faulty->SetPlan(fail);
    EngineOptions o = Options();
    o.durable_store = faulty;
    o.local_url = local;
    auto e = CheckpointEngine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    std::vector<float> b(40000, 4.0f);
    SaveOptions so;
    so.step = 40;
    auto h = (*e)->Save(std::vector<SaveTensor>{Tensor("b", b)}, so);
    ASSERT_TRUE(h.ok());
    EXPECT_FALSE((*h)->Wait().ok());
  }
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{10, 20, 30}));
  const std::string drain = std::string(GANTRY_CLI) + " ckpt drain --local " + Quote(local);
  CliRun r = RunShell(drain + " --json", dir_ / "stderr");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["records"], 1);
  EXPECT_EQ(j["parts_written"], 1);
  EXPECT_EQ(j["committed"], nlohmann::json::array({"test@40"}));
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(Ckpt("verify 40").code, 0);
  r = RunShell(drain, dir_ / "stderr");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("0 drain records"), std::string::npos) << r.out;
  EXPECT_EQ(RunShell(std::string(GANTRY_CLI) + " ckpt drain", dir_ / "stderr").code, 2);
  r = RunShell(drain + "/missing", dir_ / "stderr");
  EXPECT_EQ(r.code, 3) << r.err;
}

TEST_F(CliCkpt, ShowSummarizesAndPrintsTheStoredManifest) {
  WriteThreeSteps();
  CliRun r = Ckpt("show");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step:        30\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("job:         test\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("metadata:    {\"epoch\":3}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("float32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[40000]"), std::string::npos) << r.out;
  // 25 tensors: the first 20 are shown, then a count.
  EXPECT_NE(r.out.find("... and 5 more tensors"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("t22"), std::string::npos) << r.out;
  r = Ckpt("show latest --tensors");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("t22"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("more tensors"), std::string::npos) << r.out;

  r = Ckpt("show 10");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tags:        best\n"), std::string::npos) << r.out;

  r = Ckpt("show 20 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string stored = ReadFile(root_ / ManifestKey("test", 20));
  if (!stored.ends_with('\n')) stored += '\n';  // show ends its output with a newline
  EXPECT_EQ(r.out, stored);
  auto m = CheckpointManifest::FromJson(r.out, "show --json");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 20);
  EXPECT_EQ(m->kind, CheckpointManifest::Kind::kCheckpoint);
  EXPECT_EQ(nlohmann::json::parse(r.out)["metadata"]["epoch"], 2);
}

TEST_F(CliCkpt, VerifyFindsMissingAndCorruptChunks) {
  WriteThreeSteps();
  CliRun r = Ckpt("verify");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("step 30: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 missing, 0 corrupt"), std::string::npos) << r.out;

  // "b" changes every step, so its chunks at step 30 belong to step 30 alone.
  const fs::path gone = ChunkFile(30, "b", 0);
  ASSERT_TRUE(fs::remove(gone)) << gone;
  r = Ckpt("verify 30");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 missing, 0 corrupt"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("missing"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(gone.filename().string()), std::string::npos)
      << "the missing chunk is not named: " << r.out;

  const fs::path bad = ChunkFile(30, "b", 1);
  std::string bytes = ReadFile(bad);
  ASSERT_GT(bytes.size(), kChunkHeaderSize + 100);
  bytes[kChunkHeaderSize + 100] ^= 0x01;
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes;
  r = Ckpt("verify 30 --json");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["step"], 30);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["missing"], 1);
  EXPECT_EQ(j["corrupt"], 1);
  EXPECT_EQ(j["errors"].size(), 2u);
  EXPECT_GE(j["chunks"].get<uint64_t>(), 3u);

  // The other steps are intact; --all reports each and fails for the one damaged.
  r = Ckpt("verify 20");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Ckpt("verify --all --json");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const auto all = nlohmann::json::parse(r.out);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]["ok"], true);
  EXPECT_EQ(all[1]["ok"], true);
  EXPECT_EQ(all[2]["ok"], false);
}

TEST_F(CliCkpt, RmRefusesTheLatestWithoutForce) {
  WriteThreeSteps();
  CliRun r = Ckpt("rm 30");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{10, 20, 30}));

  // Every step is checked first: a bad one leaves the good ones in place.
  r = Ckpt("rm 10 99");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("no checkpoint at step 99"), std::string::npos) << r.err;
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{10, 20, 30}));

  r = Ckpt("rm 10");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("removed step 10"), std::string::npos) << r.out;
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{20, 30}));

  r = Ckpt("rm latest --force");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{20}));
  r = Ckpt("ls --json");
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["latest"], true);
}

TEST_F(CliCkpt, GcAppliesRetentionAndDeletesUnreferencedChunks) {
  WriteThreeSteps();
  const size_t chunks_before = ChunkFiles();

  // A dry run reports and changes nothing. Step 10 is tagged, so it is kept.
  CliRun r = Ckpt("gc --keep-last 1 --grace 0 --dry-run --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["dry_run"], true);
  EXPECT_EQ(j["removed_steps"], nlohmann::json::array({20}));
  EXPECT_GT(j["deleted_chunks"].get<uint64_t>(), 0u);
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(ChunkFiles(), chunks_before);

  r = Ckpt("gc --keep-last 1 --no-keep-tagged --grace 0 --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["dry_run"], false);
  EXPECT_EQ(j["removed_steps"], nlohmann::json::array({10, 20}));
  const uint64_t deleted = j["deleted_chunks"];
  EXPECT_GT(deleted, 0u);
  EXPECT_GT(j["deleted_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(ChunkFiles(), chunks_before - deleted);
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{30}));
  r = Ckpt("verify");
  EXPECT_EQ(r.code, 0) << r.out << r.err;

  // Nothing left to collect; the text form says so.
  r = Ckpt("gc --grace 0");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("removed 0 checkpoints"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("deleted 0 chunk copies"), std::string::npos) << r.out;

  // Retention refinements without --keep-last are a usage error, not a silent no-op.
  r = Ckpt("gc --keep-every 10");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
}

TEST_F(CliCkpt, BadRootJobOrStepIsExitThreeWithAClearMessage) {
  const fs::path missing = dir_ / "no-such-root";
  CliRun r = RunShell(std::string(GANTRY_CLI) + " ckpt --root " + Quote(missing.string()) + " ls",
                      dir_ / "stderr");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("gantry ckpt ls: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(missing)) << "inspecting a root must not create it";

  r = RunShell("env -u GANTRY_CKPT_ROOT " + std::string(GANTRY_CLI) + " ckpt ls", dir_ / "stderr");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("no checkpoint root"), std::string::npos) << r.err;

  WriteThreeSteps();
  r = Ckpt("show 99");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("no committed checkpoint at step 99"), std::string::npos) << r.err;
  r = Ckpt("verify twelve");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("step 'twelve'"), std::string::npos) << r.err;

  // A job with nothing saved: the error names the jobs that do exist.
  r = Ckpt("show", "other");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("job 'other'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("other jobs under this root: test"), std::string::npos) << r.err;
  r = Ckpt("ls", "other");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("no checkpoints of job 'other'"), std::string::npos) << r.err;
  r = Ckpt("ls", "bad/job");
  EXPECT_EQ(r.code, 3) << r.err;
}

// Regression: `rm 10 10 20` removed step 10, then failed on the second 10 and left step 20.
TEST_F(CliCkpt, RmOfAStepNamedTwiceRemovesEveryStepOnce) {
  WriteThreeSteps();
  CliRun r = Ckpt("rm 10 10 20");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "removed step 10\nremoved step 20\n");
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{30}));
}

// Regression: one truncated manifest made ls, verify --all and rm --force of it exit 3.
TEST_F(CliCkpt, ADamagedManifestIsListedVerifiedAsDamagedAndRemovable) {
  WriteThreeSteps();
  const fs::path manifest = root_ / ManifestKey("test", 10);
  fs::resize_file(manifest, 100);

  CliRun r = Ckpt("ls");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("DAMAGED"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("step 10 is damaged"), std::string::npos) << r.err;
  r = Ckpt("ls --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["state"], "damaged");
  EXPECT_EQ(rows[0]["committed"], false);
  EXPECT_NE(rows[0]["problem"].get<std::string>().find("manifest.json"), std::string::npos);
  EXPECT_EQ(rows[2]["latest"], true);

  // verify --all checks the good ones and fails naming the damaged one.
  r = Ckpt("verify --all");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("step 10: DAMAGED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 20: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 30: ok"), std::string::npos) << r.out;
  r = Ckpt("verify 10");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  r = Ckpt("show 10");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(manifest.filename().string()), std::string::npos) << r.err;

  r = Ckpt("rm 10 --force");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{20, 30}));
}

// Regression: with one truncated manifest `gantry ckpt gc` failed outright (the engine's listing
// failed), so nothing of the job was ever collected again. It now collects around the damaged
// step, leaves it in place, and warns naming it.
TEST_F(CliCkpt, GcWorksAroundADamagedManifestAndWarnsAboutIt) {
  WriteThreeSteps();
  fs::resize_file(root_ / ManifestKey("test", 20), 100);
  CliRun r = Ckpt("gc --keep-last 1 --no-keep-tagged --grace 0 --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["removed_steps"], nlohmann::json::array({10}));
  EXPECT_GT(j["deleted_chunks"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["warnings"].size(), 1u);
  EXPECT_NE(j["warnings"][0].get<std::string>().find("step 20 "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: step 20 "), std::string::npos) << r.err;
  EXPECT_EQ(ListedSteps(), (std::vector<int64_t>{20, 30}));
  r = Ckpt("verify 30");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Ckpt("verify --all");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("step 20: DAMAGED"), std::string::npos) << r.out;
}

// Regression: `gantry cache gc` over a checkpoint root went around a damaged manifest without a
// word (the checkpoint kind's GC roots skipped it silently). It now warns naming each damaged
// root, on stderr and in --json, and exits 0 like `ckpt gc`: the collection succeeded.
TEST_F(CliCkpt, CacheGcWarnsAboutEachDamagedRootItSkips) {
  WriteThreeSteps();
  fs::resize_file(root_ / ManifestKey("test", 20), 100);
  const std::string tier = " --tier " + Quote(root_.string() + ",durable");
  CliRun r =
      RunShell(std::string(GANTRY_CLI) + " cache" + tier + " gc --grace 0 --json", dir_ / "stderr");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["warnings"].size(), 1u) << r.out;
  const std::string w = j["warnings"][0];
  EXPECT_NE(w.find(ManifestKey("test", 20)), std::string::npos) << w;
  EXPECT_NE(w.find("step 20"), std::string::npos) << w;
  EXPECT_NE(r.err.find("gantry cache gc: warning: damaged checkpoint manifest"), std::string::npos)
      << r.err;
  // Text output warns the same way; the other steps are whole.
  r = RunShell(std::string(GANTRY_CLI) + " cache" + tier + " gc --grace 0", dir_ / "stderr");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find(ManifestKey("test", 20)), std::string::npos) << r.err;
  EXPECT_EQ(Ckpt("verify 10").code, 0);
  EXPECT_EQ(Ckpt("verify 30").code, 0);
}

// export and import run `python3 -m gantry`; they need PyTorch and the built _gantry module.
TEST_F(CliCkpt, ExportImportRoundTripThroughTorchSave) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  }
  bool built = false;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(fs::path(GANTRY_BINARY_DIR) / "python", ec)) {
    built = built || f.path().filename().string().starts_with("_gantry");
  }
  if (!built || !fs::exists(fs::path(GANTRY_SOURCE_DIR) / "python/gantry/__main__.py")) {
    GTEST_SKIP() << "the Python module is not built (cmake --build <build> --target _gantry) or "
                    "has no __main__";
  }
  const fs::path in = dir_ / "in.pt", out = dir_ / "out.pt";
  const std::string make =
      "/usr/bin/python3 -c \"import torch; torch.save({'model': {'w': torch.arange(6000, "
      "dtype=torch.float32).reshape(60, 100), 'b': torch.ones(7, dtype=torch.int64)}}, '" +
      in.string() + "')\"";
  ASSERT_EQ(std::system(make.c_str()), 0);

  CliRun r = Ckpt("import " + Quote(in.string()) + " --step 7", "imp");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  r = Ckpt("ls --json", "imp");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["step"], 7);
  EXPECT_EQ(j[0]["committed"], true);
  r = Ckpt("verify 7", "imp");
  EXPECT_EQ(r.code, 0) << r.out << r.err;

  r = Ckpt("export 7 " + Quote(out.string()), "imp");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string compare =
      "/usr/bin/python3 -c \"import torch, sys; a = torch.load('" + in.string() +
      "'); b = torch.load('" + out.string() +
      "'); sys.exit(0 if a.keys() == b.keys() and a['model'].keys() == b['model'].keys() and "
      "all(torch.equal(a['model'][k], b['model'][k]) for k in a['model']) else 1)\"";
  EXPECT_EQ(std::system(compare.c_str()), 0) << "the exported file differs from the imported one";
}

}  // namespace
