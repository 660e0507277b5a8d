// Tests of gantry-agent's staging routes (POST/GET /v1/stage) through their client
// (stage_client.h): staging with the token and polling to done, the token required, a second
// request fetching nothing, a missing shard failing as NotFound and retried, URLs refused,
// the list route, an agent without a cache, Stop during a slow staging, and a dataset staged for
// a job pinned against eviction until the job releases it or its lease ends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "common/test_support.h"
#include "data/test_util.h"
#include "gantry/agent/agent.h"
#include "gantry/agent/stage_client.h"
#include "gantry/common/time.h"
#include "gantry/data/stage.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "st4ge-t0ken";

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

using data::test::ShardBytesIn;
using data::test::ShardFiles;

class AgentStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(tmp_.path() + "/root");
    data_ = tmp_.path() + "/data";
    cache_ = tmp_.path() + "/cache";
    data::test::WriteMds(data_, 3, 4);
    dataset_ = "file://" + data_;
    Start([](AgentOptions&) {});
  }
  void Start(const std::function<void(AgentOptions&)>& adjust) {
    if (agent_) agent_->Stop();
    agent_.reset();
    AgentOptions o;
    o.root = tmp_.path() + "/root";
    o.token = kToken;
    o.data_cache_dir = cache_;
    adjust(o);
    auto agent = AgentServer::Start(o);
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    agent_ = std::move(agent).value();
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
  }
  // Polls until the dataset's staging has ended (done or failed), for at most 20 s.
  StageState WaitEnded(const std::string& dataset) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    StageState s;
    while (Clock::now() < deadline) {
      Result<StageState> got = GetStage(agent_->url(), kToken, dataset);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
      if (!got.ok()) return s;
      s = *got;
      if (s.terminal()) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << dataset << " still " << s.state << " after 20 s";
    return s;
  }
  std::string Metrics() { return agent_->metrics().PrometheusText(); }

  TempDir tmp_;
  std::string data_, cache_, dataset_;
  // The pins' lease clock of tests that set one: declared before agent_, so it outlives the
  // stager thread that reads it every second until the agent is gone.
  SimulatedClock clock_{1000};
  std::unique_ptr<AgentServer> agent_;
};

TEST_F(AgentStageTest, StagesWithTheTokenAndReportsProgressToDone) {
  const int64_t before = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  Result<StageState> asked = RequestStage(agent_->url(), kToken, dataset_, "123");
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_EQ(asked->dataset, dataset_);
  EXPECT_THAT(asked->state, ::testing::AnyOf("queued", "staging", "done"));
  EXPECT_EQ(asked->jobs, std::vector<std::string>{"123"});

  const StageState s = WaitEnded(dataset_);
  const uint64_t bytes = ShardBytesIn(data_);
  EXPECT_EQ(s.state, "done") << s.error;
  EXPECT_TRUE(s.status().ok());
  EXPECT_EQ(s.shards_total, 3u);
  EXPECT_EQ(s.shards_done, 3u);
  EXPECT_EQ(s.bytes_total, bytes);
  EXPECT_EQ(s.bytes_done, bytes);
  EXPECT_EQ(s.bytes_fetched, bytes);
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.code, "");
  EXPECT_GE(s.started, before);
  EXPECT_GE(s.finished, s.started);
  // The shards are in the cache, one folder for the dataset.
  int cached = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache_)) {
    if (e.path().filename().string().find(".shard.") != std::string::npos) ++cached;
  }
  EXPECT_EQ(cached, 3);
  const std::string m = Metrics();
  EXPECT_THAT(m, HasSubstr("gantry_agent_stage_bytes_fetched_total{dataset=\"" + dataset_ + "\"} " +
                           std::to_string(bytes)));
  EXPECT_THAT(m, HasSubstr("gantry_agent_datasets_staging 0"));
  EXPECT_THAT(m, HasSubstr("gantry_agent_requests_total{code=\"202\",route=\"stage\"} 1"));
}

TEST_F(AgentStageTest, TheTokenIsRequired) {
  for (const std::string token : {"", "wrong"}) {
    SCOPED_TRACE(token);
    EXPECT_EQ(RequestStage(agent_->url(), token, dataset_, "").status().code(),
              StatusCode::kPermissionDenied);
    EXPECT_EQ(GetStage(agent_->url(), token, dataset_).status().code(),
              StatusCode::kPermissionDenied);
    EXPECT_EQ(ListStages(agent_->url(), token).status().code(), StatusCode::kPermissionDenied);
  }
  // Nothing was started by the refused requests.
  Result<std::vector<StageState>> all = ListStages(agent_->url(), kToken);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

TEST_F(AgentStageTest, AskingAgainFetchesNothing) {
  ASSERT_TRUE(RequestStage(agent_->url(), kToken, dataset_, "1").ok());
  ASSERT_EQ(WaitEnded(dataset_).state, "done");
  // The same agent answers its state, recording the new job.
  Result<StageState> again = RequestStage(agent_->url(), kToken, dataset_, "2");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state, "done");
  EXPECT_EQ(again->jobs, (std::vector<std::string>{"1", "2"}));
  // An agent restarted on the same cache stages it again without fetching a byte.
  Start([](AgentOptions&) {});
  ASSERT_TRUE(RequestStage(agent_->url(), kToken, dataset_, "3").ok());
  const StageState s = WaitEnded(dataset_);
  EXPECT_EQ(s.state, "done");
  EXPECT_EQ(s.shards_done, 3u);
  EXPECT_EQ(s.bytes_done, ShardBytesIn(data_));
  EXPECT_EQ(s.bytes_fetched, 0u);
  EXPECT_THAT(Metrics(),
              HasSubstr("gantry_agent_stage_bytes_fetched_total{dataset=\"" + dataset_ + "\"} 0"));
}

TEST_F(AgentStageTest, AMissingShardFailsAsNotFoundAndIsRetried) {
  const std::string victim = ShardFiles(data_)[1];
  const std::string saved = tmp_.path() + "/saved";
  fs::rename(victim, saved);
  ASSERT_TRUE(RequestStage(agent_->url(), kToken, dataset_, "7").ok());
  StageState s = WaitEnded(dataset_);
  EXPECT_EQ(s.state, "failed");
  EXPECT_EQ(s.code, "NotFound");
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.error, HasSubstr(fs::path(victim).filename().string()));
  EXPECT_EQ(s.shards_done, 1u);
  EXPECT_GT(s.finished, 0);
  EXPECT_THAT(Metrics(), HasSubstr("gantry_agent_stage_failures_total{code=\"NotFound\"} 1"));
  // Asked again once the shard is back: retried, and the shard already staged is not fetched
  // again.
  fs::rename(saved, victim);
  Result<StageState> retry = RequestStage(agent_->url(), kToken, dataset_, "7");
  ASSERT_TRUE(retry.ok());
  EXPECT_NE(retry->state, "failed");
  EXPECT_EQ(retry->jobs, std::vector<std::string>{"7"});
  s = WaitEnded(dataset_);
  EXPECT_EQ(s.state, "done") << s.error;
  EXPECT_EQ(s.code, "");
  EXPECT_EQ(s.bytes_fetched, ShardBytesIn(data_) - fs::file_size(ShardFiles(data_)[0]));
}

TEST_F(AgentStageTest, OtherSchemesAreRefused) {
  for (const std::string url : {"mem://x", "/plain/path", "ftp://host/x", "file://", ""}) {
    SCOPED_TRACE(url);
    Result<StageState> s = RequestStage(agent_->url(), kToken, url, "");
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
  }
  Result<std::vector<StageState>> all = ListStages(agent_->url(), kToken);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

TEST_F(AgentStageTest, ListsEveryDatasetAskedAndNotFoundForOthers) {
  const std::string other = tmp_.path() + "/other";
  data::test::WriteWds(other, 2, 3);
  ASSERT_TRUE(RequestStage(agent_->url(), kToken, dataset_, "1").ok());
  ASSERT_TRUE(RequestStage(agent_->url(), kToken, "file://" + other, "2").ok());
  EXPECT_EQ(WaitEnded(dataset_).state, "done");
  EXPECT_EQ(WaitEnded("file://" + other).state, "done");
  Result<std::vector<StageState>> all = ListStages(agent_->url(), kToken);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  std::set<std::string> urls;
  for (const StageState& s : *all) urls.insert(s.dataset);
  EXPECT_EQ(urls, (std::set<std::string>{dataset_, "file://" + other}));
  EXPECT_EQ(GetStage(agent_->url(), kToken, "file:///never/asked").status().code(),
            StatusCode::kNotFound);
}

// --stage-allow: only datasets under the allowed prefixes are staged; "..", a symlink or a
// sibling folder sharing the prefix's spelling cannot reach past it.
TEST_F(AgentStageTest, OnlyAllowedPrefixesAreStaged) {
  fs::create_directories(tmp_.path() + "/allowed");
  data::test::WriteMds(tmp_.path() + "/allowed/ds", 2, 2);
  fs::create_directory_symlink(data_, tmp_.path() + "/allowed/link");
  fs::create_directories(tmp_.path() + "/allowed-not");
  data::test::WriteMds(tmp_.path() + "/allowed-not/ds", 2, 2);
  Start([&](AgentOptions& o) { o.stage_allow = {"file://" + tmp_.path() + "/allowed/"}; });
  const std::string ok = "file://" + tmp_.path() + "/allowed/ds";
  Result<StageState> s = RequestStage(agent_->url(), kToken, ok, "1");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(WaitEnded(ok).state, "done");
  for (const std::string& bad :
       {dataset_, "file://" + tmp_.path() + "/allowed/../data",
        "file://" + tmp_.path() + "/allowed/link", "file://" + tmp_.path() + "/allowed-not/ds",
        std::string("s3://bucket/x")}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(RequestStage(agent_->url(), kToken, bad, "1").status().code(),
              StatusCode::kPermissionDenied);
  }
  Result<std::vector<StageState>> all = ListStages(agent_->url(), kToken);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);  // refused ones are not queued
}

// A cache with room for the staged dataset and one shard of another: staging the other (by any
// process on the node; here the test's own) churns through that one free slot while the
// dataset is pinned for its job, and evicts the dataset's shards once the job released it, or
// once its lease ended.
TEST_F(AgentStageTest, StagedForAJobStaysPinnedUntilReleasedOrItsLeaseEnds) {
  const std::string other = tmp_.path() + "/other";
  data::test::WriteMds(other, 3, 4, /*salt=*/1);
  const uint64_t capacity = ShardBytesIn(data_) + 3 * data::ShardCache::kTrailerBytes +
                            fs::file_size(ShardFiles(other)[0]) + data::ShardCache::kTrailerBytes +
                            10;
  Start([&](AgentOptions& o) {
    o.data_cache_bytes = capacity;
    o.stage_pin_seconds = 600;
    o.clock = &clock_;
  });
  data::StageOptions direct;
  direct.cache = {cache_, capacity};
  // Stages the other dataset, then ours again: the bytes ours had to fetch back.
  const auto evicted_by_other = [&]() -> uint64_t {
    EXPECT_TRUE(data::StageDataset("file://" + other, direct).ok());
    Result<data::StageProgress> again = data::StageDataset(dataset_, direct);
    EXPECT_TRUE(again.ok()) << again.status().ToString();
    return again.ok() ? again->bytes_fetched : 0;
  };

  ASSERT_TRUE(RequestStage(agent_->url(), kToken, dataset_, "1").ok());
  StageState s = WaitEnded(dataset_);
  EXPECT_EQ(s.state, "done") << s.error;
  EXPECT_EQ(s.pinned_until, 1600);
  EXPECT_EQ(evicted_by_other(), 0u);

  Result<StageState> released = ReleaseStage(agent_->url(), kToken, dataset_, "1");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->pinned_until, 0);
  EXPECT_GT(evicted_by_other(), 0u);

  // Asked again for job 2: staged again to take the pins; then job 2 never releases it.
  ASSERT_TRUE(RequestStage(agent_->url(), kToken, dataset_, "2").ok());
  s = WaitEnded(dataset_);
  EXPECT_EQ(s.state, "done") << s.error;
  EXPECT_EQ(s.pinned_until, 1600);
  EXPECT_EQ(evicted_by_other(), 0u);
  clock_.AdvanceTo(1600);  // the lease is over
  Result<StageState> expired = GetStage(agent_->url(), kToken, dataset_);
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(expired->pinned_until, 0);
  EXPECT_GT(evicted_by_other(), 0u);

  EXPECT_EQ(ReleaseStage(agent_->url(), kToken, "file:///never", "1").status().code(),
            StatusCode::kNotFound);
}

TEST_F(AgentStageTest, WithoutACacheTheRoutesAreUnimplemented) {
  Start([](AgentOptions& o) { o.data_cache_dir.clear(); });
  EXPECT_EQ(RequestStage(agent_->url(), kToken, dataset_, "").status().code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(GetStage(agent_->url(), kToken, dataset_).status().code(), StatusCode::kUnimplemented);
}

TEST(StageStateTest, JsonRoundTripsAndIsChecked) {
  StageState s;
  s.dataset = "s3://b/d";
  s.state = "failed";
  s.shards_total = 5;
  s.shards_done = 2;
  s.bytes_total = 500;
  s.bytes_done = 200;
  s.bytes_fetched = 100;
  s.error = "stage s3://b/d: shard 'x': gone";
  s.code = "NotFound";
  s.jobs = {"1", "2"};
  s.started = 10;
  s.finished = 12;
  Result<StageState> back = StageStateFromJson(StageStateToJson(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(StageStateToJson(*back), StageStateToJson(s));
  EXPECT_EQ(back->status().code(), StatusCode::kNotFound);
  nlohmann::json bad = StageStateToJson(s);
  bad["state"] = "sleeping";
  EXPECT_EQ(StageStateFromJson(bad).status().code(), StatusCode::kInvalidArgument);
  bad = StageStateToJson(s);
  bad.erase("bytes_done");
  EXPECT_EQ(StageStateFromJson(bad).status().code(), StatusCode::kInvalidArgument);
}

// A source that answers each shard read after a delay: stagings take a while, and Stop must not
// wait for them to finish, only for the shard in flight.
TEST_F(AgentStageTest, StopDuringASlowStagingReturnsPromptly) {
  const std::string slow = tmp_.path() + "/slow";
  data::test::WriteMds(slow, 12, 2);
  httplib::Server source;
  source.Get(R"(/v1/objects/(.+))", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string key = req.matches[1];
    std::ifstream in(slow + "/" + key, std::ios::binary);
    if (!in) {
      res.status = 404;
      return;
    }
    if (req.method == "GET" && key.rfind("shard", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    res.set_content(std::string(std::istreambuf_iterator<char>(in), {}),
                    "application/octet-stream");
  });
  const int port = source.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { source.listen_after_bind(); });
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  ASSERT_TRUE(RequestStage(agent_->url(), kToken, url, "9").ok());
  // Under way: at least one shard staged, most of them not.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  StageState s;
  while (Clock::now() < deadline) {
    Result<StageState> got = GetStage(agent_->url(), kToken, url);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    s = *got;
    if (s.shards_done >= 1 || s.terminal()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(s.state, "staging") << s.error;
  const auto start = Clock::now();
  agent_->Stop();
  const int64_t ms = MsSince(start);
  EXPECT_LT(ms, 2000) << "Stop waited for the staging";  // 12 shards take 3 s at least
  source.stop();
  serving.join();
  int cached = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache_)) {
    if (e.path().filename().string().find(".shard.") != std::string::npos) ++cached;
  }
  EXPECT_GE(cached, 1);
  EXPECT_LT(cached, 12);
}

}  // namespace
}  // namespace gantry
