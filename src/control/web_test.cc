// The web page's data (OverviewTracker, GET /v1/overview) and the page itself as served.

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/test_support.h"
#include "gantry/cluster/cluster.h"
#include "gantry/control/api.h"
#include "gantry/control/controller.h"
#include "gantry/control/overview.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/profile.h"

namespace gantry::control {
namespace {

using test_support::TempDir;

// Four nodes of eight GPUs in two NVLink domains; two teams, one with a quota.
constexpr const char* kSpec = R"(
name: web
levels: [nvlink]
gpu_types:
  - {name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}
topology:
  - name: "nv-{n}"
    level: nvlink
    repeat: 2
    nodes:
      - {count: 2, gpu_type: H100, gpus: 8}
teams:
  - {name: vision, quota_gpus: 24}
  - {name: nlp}
)";

class OverviewTrackerTest : public testing::Test {
 protected:
  void SetUp() override {
    Result<Cluster> c = ParseClusterSpec(kSpec, "test");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value();
    auto s = StateStore::Open(dir_.sub("state.db"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    teams_ = cluster_.teams();
    teams_.push_back(Team{"(other)", kNoQuota, 1.0});
  }

  JobRecord Job(const std::string& id, const std::string& team, int gpus) {
    JobRecord r;
    r.id = id;
    r.user = "u";
    r.team = team;
    r.queue = "gpu";
    r.gpus = gpus;
    return r;
  }

  std::vector<std::shared_ptr<const JobRecord>> Active() {
    auto a = store_->ActiveJobRefs();
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : std::vector<std::shared_ptr<const JobRecord>>();
  }

  TempDir dir_{"gantry-web"};
  Cluster cluster_;
  std::vector<Team> teams_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(OverviewTrackerTest, OccupancyPerDomainAndUsagePerTeam) {
  FreeIndex free(cluster_);
  free.Allocate(0, 8);  // nv-0: 8 of 16 busy
  free.Allocate(3, 2);  // nv-1: 2 of 16 busy
  ASSERT_TRUE(store_->AddJob(Job("1", "vision", 8), 0).ok());
  ASSERT_TRUE(store_->AddJob(Job("2", "vision", 16), 0).ok());
  ASSERT_TRUE(store_->AddJob(Job("3", "stranger", 2), 0).ok());  // not in the spec: "(other)"
  ASSERT_TRUE(store_->Decide("1", {{cluster_.nodes()[0].name, 8}}, 1).ok());
  ASSERT_TRUE(store_->Decide("3", {{cluster_.nodes()[3].name, 2}}, 1).ok());
  ASSERT_TRUE(store_->Started("3", 2).ok());
  OverviewTracker tracker(teams_, 2);
  ASSERT_TRUE(tracker.Update(5, cluster_, free, Active(), *store_).ok());
  const Overview o = tracker.Current();
  ASSERT_EQ(o.occupancy.size(), 2u);
  EXPECT_EQ(o.occupancy[0].domain, "nv-0");
  EXPECT_EQ(o.occupancy[0].level, "nvlink");
  EXPECT_EQ(o.occupancy[0].total_gpus, 16);
  EXPECT_EQ(o.occupancy[0].busy_gpus, 8);
  EXPECT_EQ(o.occupancy[1].domain, "nv-1");
  EXPECT_EQ(o.occupancy[1].busy_gpus, 2);
  ASSERT_EQ(o.teams.size(), 3u);
  EXPECT_EQ(o.teams[0].team, "vision");
  EXPECT_EQ(o.teams[0].quota_gpus, 24);
  EXPECT_EQ(o.teams[0].running_gpus, 8);  // starting counts: its GPUs are booked
  EXPECT_EQ(o.teams[0].pending_gpus, 16);
  EXPECT_EQ(o.teams[0].pending_jobs, 1);
  EXPECT_EQ(o.teams[1].quota_gpus, kNoQuota);
  EXPECT_EQ(o.teams[2].team, "(other)");
  EXPECT_EQ(o.teams[2].running_gpus, 2);
  ASSERT_EQ(o.history.size(), 1u);
  EXPECT_EQ(o.history[0]->running_gpus, (std::vector<int>{8, 0, 2}));
  // decide 1, decide 3, start 3 (submits are not decisions), each with its team and size.
  ASSERT_EQ(o.decisions.size(), 3u);
  EXPECT_EQ(o.decisions[0].kind, "decide");
  EXPECT_EQ(o.decisions[0].job, "1");
  EXPECT_EQ(o.decisions[0].team, "vision");
  EXPECT_EQ(o.decisions[0].gpus, 8);
  EXPECT_EQ(o.decisions[2].kind, "start");
  EXPECT_EQ(o.decisions[2].team, "stranger");
}

TEST_F(OverviewTrackerTest, HistoryIsSampledEveryTenSecondsAndBounded) {
  FreeIndex free(cluster_);
  OverviewTracker tracker(teams_, 2);
  // One cycle a second for a minute: one sample per kUsageSampleInterval.
  for (Time t = 0; t < 60; ++t) ASSERT_TRUE(tracker.Update(t, cluster_, free, {}, *store_).ok());
  EXPECT_EQ(tracker.Current().history.size(), 6u);
  // Far longer than the window: the ring keeps the newest kUsageHistorySamples.
  Time t = 60;
  for (int i = 0; i < 1000; ++i, t += kUsageSampleInterval) {
    ASSERT_TRUE(tracker.Update(t, cluster_, free, {}, *store_).ok());
  }
  const Overview o = tracker.Current();
  ASSERT_EQ(o.history.size(), kUsageHistorySamples);
  EXPECT_EQ(o.history.back()->time, t - kUsageSampleInterval);
  EXPECT_EQ(o.history.front()->time,
            t - static_cast<Time>(kUsageHistorySamples) * kUsageSampleInterval);
}

TEST_F(OverviewTrackerTest, KeepsTheLastFiftyDecisionsAcrossABacklog) {
  FreeIndex free(cluster_);
  for (int i = 0; i < 80; ++i) {
    const std::string id = std::to_string(100 + i);
    ASSERT_TRUE(store_->AddJob(Job(id, i % 2 ? "nlp" : "vision", 1 + i % 4), i).ok());
    ASSERT_TRUE(store_->Decide(id, {{cluster_.nodes()[0].name, 1}}, i).ok());
    ASSERT_TRUE(store_->Finish(id, i, "completed").ok());
  }
  OverviewTracker tracker(teams_, 2);
  ASSERT_TRUE(tracker.Update(100, cluster_, free, Active(), *store_).ok());
  Overview o = tracker.Current();
  ASSERT_EQ(o.decisions.size(), kRecentDecisions);
  EXPECT_EQ(o.decisions.back().job, "179");
  EXPECT_EQ(o.decisions.back().kind, "finish");
  EXPECT_EQ(o.decisions.back().detail, "completed");
  EXPECT_EQ(o.decisions.back().team, "nlp");  // looked up in the store: the job has ended
  EXPECT_EQ(o.decisions.back().gpus, 4);
  EXPECT_EQ(o.decisions.front().job, "155");  // 80 jobs x 2 decisions, newest 50
  for (size_t i = 1; i < o.decisions.size(); ++i) {
    EXPECT_LT(o.decisions[i - 1].seq, o.decisions[i].seq);
  }
  // Only new events are read next time.
  ASSERT_TRUE(store_->AddJob(Job("999", "vision", 3), 101).ok());
  ASSERT_TRUE(store_->Decide("999", {{cluster_.nodes()[1].name, 3}}, 101).ok());
  ASSERT_TRUE(tracker.Update(101, cluster_, free, Active(), *store_).ok());
  o = tracker.Current();
  ASSERT_EQ(o.decisions.size(), kRecentDecisions);
  EXPECT_EQ(o.decisions.back().job, "999");
  EXPECT_EQ(o.decisions.back().team, "vision");
  EXPECT_EQ(o.decisions[o.decisions.size() - 2].job, "179");
}

// A resource manager that starts every job it is asked to at once, and never ends one.
class StartingRm : public ResourceManager {
 public:
  void Hold(const std::string& id, const std::string& team, int gpus) {
    RmJob j;
    j.request.id = id;
    j.request.user = "u";
    j.request.team = team;
    j.request.queue = "gpu";
    j.request.gpus = gpus;
    j.request.gpus_per_node = gpus;
    j.request.nodes = 1;
    j.request.time_limit = 3600;
    jobs_[id] = j;
  }
  Result<std::vector<RmJob>> Jobs() override {
    std::vector<RmJob> out;
    for (const auto& [id, j] : jobs_) out.push_back(j);
    return out;
  }
  Result<std::vector<RmNode>> Nodes() override { return std::vector<RmNode>{}; }
  Status Start(const std::string& id, const std::vector<NodeGpus>& placement) override {
    RmJob& j = jobs_.at(id);
    j.state = ObservedState::kRunning;
    j.placement = placement;
    return Status::Ok();
  }
  Status Requeue(const std::string& id) override { return Unimplemented("not in this test"); }
  Status Cancel(const std::string& id) override { return Unimplemented("not in this test"); }
  Status Signal(const std::string& id, const std::string& signal) override {
    return Unimplemented("not in this test");
  }

 private:
  std::map<std::string, RmJob> jobs_;
};

TEST_F(OverviewTrackerTest, TheControllerPublishesItWithEachSnapshot) {
  Result<Profile> profile = FindProfile("fifo-easy", {});
  ASSERT_TRUE(profile.ok());
  StartingRm rm;
  rm.Hold("1", "vision", 8);
  rm.Hold("2", "nlp", 4);
  auto ctl = Controller::Open(cluster_, *profile, store_.get(), &rm, 1000);
  ASSERT_TRUE(ctl.ok()) << ctl.status().ToString();
  ASSERT_TRUE((*ctl)->Cycle(1000).ok());
  auto snap = (*ctl)->Snapshot();
  const Overview& o = snap->overview;
  int busy = 0;
  for (const DomainOccupancy& d : o.occupancy) busy += d.busy_gpus;
  EXPECT_EQ(busy, 12);
  EXPECT_EQ(busy, snap->busy_gpus);
  ASSERT_GE(o.teams.size(), 2u);
  EXPECT_EQ(o.teams[0].team, "vision");
  EXPECT_EQ(o.teams[0].running_gpus, 8);
  EXPECT_EQ(o.teams[1].running_gpus, 4);
  ASSERT_EQ(o.decisions.size(), 2u);
  EXPECT_EQ(o.decisions[0].kind, "decide");
  // Open sampled at 1000 (nothing running yet); the next sample waits kUsageSampleInterval.
  ASSERT_EQ(o.history.size(), 1u);
  EXPECT_EQ(o.history[0]->running_gpus[0], 0);
  ASSERT_TRUE((*ctl)->Cycle(1000 + kUsageSampleInterval - 1).ok());
  EXPECT_EQ((*ctl)->Snapshot()->overview.history.size(), 1u);
  ASSERT_TRUE((*ctl)->Cycle(1000 + kUsageSampleInterval).ok());
  snap = (*ctl)->Snapshot();
  ASSERT_EQ(snap->overview.history.size(), 2u);
  EXPECT_EQ(snap->overview.history[1]->running_gpus[0], 8);
  EXPECT_EQ(snap->overview.history[1]->running_gpus[1], 4);
  // The confirmed starts joined the decisions.
  EXPECT_EQ(snap->overview.decisions.size(), 4u);
  EXPECT_EQ(snap->overview.decisions.back().kind, "start");
}

// The API side: /v1/overview scoped by token, and the page.
class WebApiTest : public testing::Test {
 protected:
  void SetUp() override {
    auto snap = std::make_shared<ControlSnapshot>();
    snap->time = 1000;
    snap->total_gpus = 32;
    snap->busy_gpus = 10;
    Overview& o = snap->overview;
    o.occupancy = {{"nv-0", "nvlink", 16, 8}, {"nv-1", "nvlink", 16, 2}};
    o.teams = {{"vision", 24, 8, 16, 1}, {"nlp", kNoQuota, 2, 0, 0}};
    for (Time t = 900; t <= 990; t += 10) {
      o.history.push_back(std::make_shared<UsageSample>(UsageSample{t, {8, 2}}));
    }
    o.decisions = {{1, 950, "decide", "1", "vision", 8, "n0:8"},
                   {2, 960, "start", "7", "nlp", 2, "n3:2"},
                   {3, 970, "finish", "8", "<img src=x onerror=alert(1)>", 1, "completed"}};
    snap_ = snap;
    options_.team_tokens = {{"vision-token", "vision"}, {"nlp-token", "nlp"}};
    options_.operator_token = "op-token";
  }

  void Start() {
    auto a = ApiServer::Start(
        options_, [this] { return snap_; }, nullptr);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    api_ = std::move(a).value();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", api_->port());
  }

  nlohmann::json GetOverview(const std::string& token) {
    auto r = client_->Get("/v1/overview", {{"Authorization", "Bearer " + token}});
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    return nlohmann::json::parse(r->body);
  }

  TempDir dir_{"gantry-web-api"};
  ApiOptions options_;
  std::shared_ptr<const ControlSnapshot> snap_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(WebApiTest, OverviewIsScopedByToken) {
  Start();
  auto r = client_->Get("/v1/overview");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);

  const nlohmann::json op = GetOverview("op-token");
  EXPECT_EQ(op.at("time"), 1000);
  EXPECT_EQ(op.at("occupancy").size(), 2u);
  EXPECT_EQ(op.at("occupancy")[0].at("busy"), 8);
  ASSERT_EQ(op.at("teams").size(), 2u);
  EXPECT_EQ(op.at("teams")[0].at("quota"), 24);
  EXPECT_TRUE(op.at("teams")[1].at("quota").is_null());
  EXPECT_EQ(op.at("history").size(), 10u);
  EXPECT_EQ(op.at("history")[0].at("running"), (nlohmann::json{{"vision", 8}, {"nlp", 2}}));
  EXPECT_EQ(op.at("decisions").size(), 3u);
  EXPECT_EQ(op.at("history_max_samples"), kUsageHistorySamples);

  const nlohmann::json nlp = GetOverview("nlp-token");
  EXPECT_EQ(nlp.at("occupancy").size(), 2u);  // cluster-wide
  ASSERT_EQ(nlp.at("teams").size(), 1u);
  EXPECT_EQ(nlp.at("teams")[0].at("team"), "nlp");
  EXPECT_EQ(nlp.at("history")[0].at("running"), (nlohmann::json{{"nlp", 2}}));
  ASSERT_EQ(nlp.at("decisions").size(), 1u);
  EXPECT_EQ(nlp.at("decisions")[0].at("job"), "7");
  EXPECT_EQ(nlp.dump().find("vision"), std::string::npos) << nlp.dump();
}

TEST_F(WebApiTest, ServesThePageWithNoInlineScriptAndTheChartLibrary) {
  Start();
  for (const char* path : {"/", "/ui"}) {
    auto r = client_->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->get_header_value("Content-Type").find("text/html"), std::string::npos);
    EXPECT_NE(r->get_header_value("Content-Security-Policy").find("script-src 'self'"),
              std::string::npos);
    EXPECT_NE(r->body.find("<script src=\"/ui/app.js\"></script>"), std::string::npos);
    EXPECT_EQ(r->body.find("<script>"), std::string::npos);  // nothing inline
    EXPECT_EQ(r->body.find("http"), std::string::npos);      // nothing from elsewhere
  }
  auto js = client_->Get("/ui/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_NE(js->body.find("textContent"), std::string::npos);
  EXPECT_EQ(js->body.find("innerHTML"), std::string::npos);  // no markup from data
  auto missing = client_->Get("/ui/assets/nope.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  const std::string web = GANTRY_WEB_DIR;
  if (access((web + "/vega/build/vega.min.js").c_str(), R_OK) != 0) {
    GTEST_SKIP() << "web assets missing in " << web << "; run scripts/setup";
  }
  for (const char* name : {"vega.min.js", "vega-lite.min.js", "vega-embed.min.js"}) {
    auto r = client_->Get(std::string("/ui/assets/") + name);
    ASSERT_TRUE(r) << name;
    EXPECT_EQ(r->status, 200) << name;
    EXPECT_GT(r->body.size(), 10000u) << name;
  }
}

TEST_F(WebApiTest, SaysSoWhenTheChartLibraryIsMissing) {
  options_.web_dir = dir_.sub("no-node-modules");
  Start();
  auto r = client_->Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("Charts are unavailable"), std::string::npos);
  EXPECT_NE(r->body.find("scripts/setup"), std::string::npos);
  EXPECT_EQ(r->body.find("/ui/assets/"), std::string::npos);
  auto a = client_->Get("/ui/assets/vega.min.js");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 404);
}

}  // namespace
}  // namespace gantry::control
