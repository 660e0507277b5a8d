// Tests of gantry-agent's GET /v1/checkpoint through its client (LocateCheckpoint): how much of
// a job's newest committed checkpoint the agent's local tier holds, chunk by chunk; the token
// and the --stage-allow prefixes required; a job without checkpoints NotFound. And of POST
// /v1/drain (RequestDrain, GetDrain): a save cut off before it was durable finished by the agent.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/test_support.h"
#include "gantry/agent/agent.h"
#include "gantry/agent/stage_client.h"
#include "gantry/cache/chunk.h"
#include "gantry/ckpt/catalog.h"
#include "gantry/ckpt/checkpoint.h"
#include "gantry/storage/faulty_store.h"
#include "gantry/storage/object_store.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;

constexpr char kToken[] = "ckpt-t0ken";

class AgentCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    local_ = tmp_.path() + "/local";
    durable_ = tmp_.path() + "/durable";
    fs::create_directories(local_);
    fs::create_directories(durable_);
    url_ = "file://" + durable_ + "/ckpt/train";
    // Steps 1 and 2 of a 12,000-byte tensor in 4 KiB chunks (4096, 4096, 3808): step 2 changes
    // the first chunk only. The local tier is the directory the agent serves, as on a node.
    auto engine = ckpt::CheckpointEngine::Open(EngineOptions());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<float> data(3000, 0.5f);
    for (int64_t step : {1, 2}) {
      ckpt::SaveTensor t;
      t.name = "w";
      t.global_shape = {3000};
      t.data = data.data();
      ckpt::SaveOptions so;
      so.step = step;
      auto handle = (*engine)->Save(std::span<const ckpt::SaveTensor>(&t, 1), so);
      ASSERT_TRUE(handle.ok()) << handle.status().ToString();
      ASSERT_TRUE((*handle)->Wait().ok());
      data[0] += 1;
    }
    Start({});
  }
  void Start(std::vector<std::string> allow, const std::function<void(AgentOptions&)>& more = {}) {
    if (agent_) agent_->Stop();
    AgentOptions o;
    o.root = local_;
    o.token = kToken;
    o.stage_allow = std::move(allow);
    if (more) more(o);
    auto agent = AgentServer::Start(o);
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    agent_ = std::move(agent).value();
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
  }

  // Job "train" saving to durable_ in 4 KiB chunks through the local tier the agent serves.
  ckpt::EngineOptions EngineOptions() const {
    ckpt::EngineOptions o;
    o.durable_url = "file://" + durable_;
    o.local_url = local_;
    o.job = "train";
    o.chunk_size = 4096;
    return o;
  }

  // Step 3 is saved by a process whose writes to the root fail: it reaches `local` only and
  // ends, leaving its drain record on the node.
  void LeaveASaveShortOfItsRoot() {
    auto faulty = std::make_shared<FaultyStore>(OpenObjectStore(durable_, {}).value(), FaultPlan{});
    FaultPlan fail;
    fail.rules.push_back(FaultRule::Chance(FaultOp::kPut, FaultKind::kIoError, 1.0));
    fail.rules.back().key_prefix = "chunks/";
    faulty->SetPlan(fail);
    ckpt::EngineOptions o = EngineOptions();
    o.durable_store = faulty;
    auto engine = ckpt::CheckpointEngine::Open(o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<float> data(3000, 7.0f);
    ckpt::SaveTensor t;
    t.name = "w";
    t.global_shape = {3000};
    t.data = data.data();
    ckpt::SaveOptions so;
    so.step = 3;
    auto handle = (*engine)->Save(std::span<const ckpt::SaveTensor>(&t, 1), so);
    ASSERT_TRUE(handle.ok());
    EXPECT_TRUE((*handle)->WaitFor(ckpt::Durability::kLocal).ok());
    EXPECT_FALSE((*handle)->Wait().ok());
  }

  // The agent's drain state once it has finished a drain after `runs` of them.
  DrainStatus DrainAfter(int64_t runs) {
    for (int i = 0; i < 3000; ++i) {
      Result<DrainStatus> s = GetDrain(agent_->url(), kToken);
      if (s.ok() && s->state == "idle" && s->runs > runs) return *s;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no drain finished in 30 s";
    return {};
  }

  TempDir tmp_;
  std::string local_, durable_, url_;
  std::unique_ptr<AgentServer> agent_;
};

TEST_F(AgentCheckpointTest, AnswersHowMuchOfTheNewestCheckpointTheTierHolds) {
  Result<ckpt::TierCopy> c = LocateCheckpoint(agent_->url(), kToken, url_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, (ckpt::TierCopy{2, 3, 3, 12000, 12000}));

  // One of step 2's chunks leaves the tier (evicted, or the node's disk was replaced).
  auto root = OpenObjectStore("file://" + durable_, {});
  ASSERT_TRUE(root.ok());
  ckpt::CheckpointCatalog catalog(**root);
  Result<ckpt::CheckpointManifest> m = catalog.Manifest("train", 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::vector<ckpt::PackRecord> chunks = m->StoredChunks();
  ASSERT_EQ(chunks.size(), 3u);
  ASSERT_TRUE(fs::remove(local_ + "/" + ChunkKey(chunks[0].id)));
  c = LocateCheckpoint(agent_->url(), kToken, url_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, (ckpt::TierCopy{2, 3, 2, 12000, 12000 - chunks[0].size}));

  // A job with no checkpoint there, and a root with none at all.
  EXPECT_EQ(
      LocateCheckpoint(agent_->url(), kToken, "file://" + durable_ + "/ckpt/other").status().code(),
      StatusCode::kNotFound);
  EXPECT_EQ(LocateCheckpoint(agent_->url(), kToken, "file://" + durable_).status().code(),
            StatusCode::kNotFound);
  const std::string m_text = agent_->metrics().PrometheusText();
  EXPECT_NE(m_text.find("gantry_agent_requests_total{code=\"200\",route=\"checkpoint\"} 2"),
            std::string::npos)
      << m_text;
  EXPECT_NE(m_text.find("gantry_agent_requests_total{code=\"404\",route=\"checkpoint\"} 2"),
            std::string::npos)
      << m_text;
}

// The agent reads the durable root as its own user: only with the cluster token, only under
// its --stage-allow prefixes (resolved, so ".." cannot walk out), only URLs.
TEST_F(AgentCheckpointTest, TheTokenAndTheAllowedPrefixesAreRequired) {
  EXPECT_EQ(LocateCheckpoint(agent_->url(), "", url_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(LocateCheckpoint(agent_->url(), "wrong", url_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(LocateCheckpoint(agent_->url(), kToken, durable_ + "/ckpt/train").status().code(),
            StatusCode::kInvalidArgument);  // a path, not a URL

  fs::create_directories(tmp_.path() + "/allowed");
  Start({"file://" + tmp_.path() + "/allowed"});
  EXPECT_EQ(LocateCheckpoint(agent_->url(), kToken, url_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(LocateCheckpoint(agent_->url(), kToken,
                             "file://" + tmp_.path() + "/allowed/../durable/ckpt/train")
                .status()
                .code(),
            StatusCode::kPermissionDenied);
  Start({"file://" + durable_});
  Result<ckpt::TierCopy> c = LocateCheckpoint(agent_->url(), kToken, url_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->chunks_held, 3u);
}

// The agent drains a save left short of its root on request, only into a root under its
// --stage-allow prefixes.
TEST_F(AgentCheckpointTest, ADrainFinishesASaveWhoseProcessEndedBeforeItWasDurable) {
  LeaveASaveShortOfItsRoot();
  auto root = OpenObjectStore(durable_, {});
  ASSERT_TRUE(root.ok());
  ckpt::CheckpointCatalog catalog(**root);
  EXPECT_EQ(*catalog.Latest("train"), 2);
  const auto drain = [&]() -> DrainStatus {
    Result<DrainStatus> asked = RequestDrain(agent_->url(), kToken);
    EXPECT_TRUE(asked.ok()) << asked.status().ToString();
    EXPECT_EQ(asked.ok() ? asked->state : "", "draining");
    return DrainAfter(asked.ok() ? asked->runs : 0);
  };
  EXPECT_EQ(RequestDrain(agent_->url(), "wrong").status().code(), StatusCode::kPermissionDenied);

  fs::create_directories(tmp_.path() + "/allowed");
  Start({"file://" + tmp_.path() + "/allowed"});
  DrainStatus refused = drain();
  EXPECT_EQ(refused.last.records, 1);
  EXPECT_EQ(refused.last.skipped, 1);
  EXPECT_EQ(refused.last.parts_written, 0);
  EXPECT_EQ(*catalog.Latest("train"), 2);

  Start({"file://" + durable_});
  DrainStatus done = drain();
  EXPECT_EQ(done.error, "");
  EXPECT_EQ(done.last.parts_written, 1);
  EXPECT_EQ(done.last.committed, std::vector<std::string>{"train@3"});
  EXPECT_GT(done.last.bytes_copied, 0u);
  EXPECT_EQ(*catalog.Latest("train"), 3);
  EXPECT_NE(agent_->metrics().PrometheusText().find("gantry_agent_drain_commits_total 1"),
            std::string::npos);
  // Nothing is left: a second drain finds no record.
  EXPECT_EQ(drain().last.records, 0);
}

// Nobody asks (the job ran and ended while gantryd was away, and Slurm forgot it before
// gantryd came back): the agent's own sweep leaves the save alone while it is younger than the
// minimum age -- its process might still be draining it -- and finishes it once it is older.
TEST_F(AgentCheckpointTest, TheAgentsOwnSweepFinishesAnOldLeftSaveButNotAYoungOne) {
  LeaveASaveShortOfItsRoot();
  SimulatedClock clock(std::time(nullptr));  // record ages compare file times with it
  Start({"file://" + durable_}, [&](AgentOptions& o) {
    o.drain_every_seconds = 1;
    o.drain_min_age_seconds = 3600;
    o.clock = &clock;
  });
  auto root = OpenObjectStore(durable_, {});
  ASSERT_TRUE(root.ok());
  ckpt::CheckpointCatalog catalog(**root);
  DrainStatus young = DrainAfter(0);
  EXPECT_EQ(young.error, "");
  EXPECT_EQ(young.last.records, 1);
  EXPECT_EQ(young.last.skipped, 1);
  EXPECT_EQ(young.last.parts_written, 0);
  EXPECT_EQ(*catalog.Latest("train"), 2);

  clock.AdvanceMillis(3601 * 1000);
  DrainStatus old = DrainAfter(young.runs);
  EXPECT_EQ(old.error, "");
  EXPECT_EQ(old.last.parts_written, 1);
  EXPECT_EQ(old.last.committed, std::vector<std::string>{"train@3"});
  EXPECT_EQ(*catalog.Latest("train"), 3);
  EXPECT_NE(agent_->metrics().PrometheusText().find("gantry_agent_drain_sweeps_total"),
            std::string::npos);
}

}  // namespace
}  // namespace gantry
