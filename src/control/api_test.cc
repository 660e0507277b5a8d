#include "gantry/control/api.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "gantry/control/api_client.h"

namespace gantry::control {
namespace {

std::shared_ptr<const JobView> View(const std::string& id, const std::string& team, JobPhase phase,
                                    Time estimate) {
  JobView v;
  v.record.id = id;
  v.record.team = team;
  v.record.user = "u-" + team;
  v.record.gpus = 8;
  v.record.phase = phase;
  if (phase == JobPhase::kRunning) v.record.placement = {{"n1", 8}};
  v.reason = phase == JobPhase::kPending ? "Resources" : "StartedHead";
  v.explain = "why " + id;
  v.estimated_start = estimate;
  return std::make_shared<const JobView>(std::move(v));
}

class ApiTest : public testing::Test {
 protected:
  void SetUp() override {
    auto snap = std::make_shared<ControlSnapshot>();
    snap->time = 500;
    snap->cycles = 7;
    snap->total_gpus = 32;
    snap->busy_gpus = 16;
    snap->jobs = {
        View("1", "vision", JobPhase::kRunning, -1), View("2", "vision", JobPhase::kPending, 900),
        View("3", "nlp", JobPhase::kPending, 700), View("4", "vision", JobPhase::kPending, -1),
        View("5", "vision", JobPhase::kPending, 600)};
    NodeView n1;
    n1.name = "n1";
    n1.state = "up";
    n1.rm_state = "mixed";
    n1.gpu_type = "H100";
    n1.gpus = 8;
    n1.gpus_used = 8;
    n1.domain = "nv-0";
    n1.domains = {"nv-0", "spine"};
    n1.jobs = {"1", "6"};
    NodeView n2 = n1;
    n2.name = "n2";
    n2.state = "down";
    n2.rm_state = "down";
    n2.reason = "bad fan";
    n2.gpus_used = 0;
    n2.jobs = {};
    snap->nodes = {n1, n2};
    TeamView vision{"vision", 24, 24, 8, 1, 3, 24, 4000};
    TeamView nlp{"nlp", -1, 1, 0, 0, 1, 8, 0};
    snap->teams = {vision, nlp};
    snap->profile.name = "fifo-easy";
    snap->profile.backfill = BackfillMode::kEasy;
    snap->profile.priority = {{"age", 1000, {}}};
    snap_ = snap;
    options_.cancel = [this](const std::string& id, const std::string& by) -> Status {
      std::lock_guard<std::mutex> lock(mu_);  // the server's threads call this
      cancels_.push_back(id + " by " + by);
      if (id == "2") return FailedPrecondition("job 2 is ending already");
      return Status::Ok();
    };
    metrics_.GetCounter("gantry_decisions_total", "Decisions.").Increment(3);
    options_.team_tokens = {{"vision-token", "vision"}, {"nlp-token", "nlp"}};
    options_.operator_token = "op-token";
    Restart();
  }

  void Restart() {
    api_.reset();
    auto a = ApiServer::Start(
        options_, [this] { return Snapshot(); }, &metrics_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    api_ = std::move(a).value();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", api_->port());
  }

  httplib::Result Get(const std::string& path, const std::string& token) {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    return client_->Get(path, h);
  }

  std::vector<std::string> Ids(const httplib::Result& r) {
    std::vector<std::string> ids;
    if (!r) return {"(no response)"};
    if (r->status != 200) return {"(status " + std::to_string(r->status) + ": " + r->body + ")"};
    const nlohmann::json body = nlohmann::json::parse(r->body);
    for (const auto& j : body.at("jobs")) ids.push_back(j.at("id").get<std::string>());
    return ids;
  }

  httplib::Result Delete(const std::string& path, const std::string& token) {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    return client_->Delete(path, h);
  }

  // What the server's threads read and write while the test runs: through mu_, as gantryd's
  // cycle hands its snapshot over.
  std::shared_ptr<const ControlSnapshot> Snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    return snap_;
  }
  void SetSnapshot(std::shared_ptr<const ControlSnapshot> snap) {
    std::lock_guard<std::mutex> lock(mu_);
    snap_ = std::move(snap);
  }
  std::vector<std::string> Cancels() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancels_;
  }

  ApiOptions options_;
  std::mutex mu_;
  std::vector<std::string> cancels_;
  std::shared_ptr<const ControlSnapshot> snap_;
  MetricsRegistry metrics_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ApiTest, HealthNeedsNoToken) {
  auto r = Get("/v1/health", "");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j.at("status"), "ok");
  EXPECT_EQ(j.at("cycles"), 7);
  EXPECT_EQ(j.at("active_jobs"), 5);
  EXPECT_EQ(j.at("gpus").at("busy"), 16);
  SetSnapshot(std::make_shared<ControlSnapshot>());  // before the first cycle
  EXPECT_EQ(nlohmann::json::parse(Get("/v1/health", "")->body).at("status"), "starting");
}

TEST_F(ApiTest, TokensAreRequiredAndChecked) {
  auto none = Get("/v1/jobs", "");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"gantryd\"");
  EXPECT_EQ(nlohmann::json::parse(none->body).at("error").at("code"), "unauthenticated");
  auto wrong = Get("/v1/jobs", "vision-token-x");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->get_header_value("WWW-Authenticate").find("invalid_token"), std::string::npos);
  // A prefix of a real token is no token either.
  EXPECT_EQ(Get("/v1/jobs", "vision-tok")->status, 401);
  EXPECT_EQ(Get("/v1/queue", "")->status, 401);
  EXPECT_EQ(Get("/v1/jobs/1", "")->status, 401);
}

TEST_F(ApiTest, ATeamSeesOnlyItsOwnJobsAndTheOperatorSeesAll) {
  EXPECT_EQ(Ids(Get("/v1/jobs", "vision-token")), (std::vector<std::string>{"1", "2", "4", "5"}));
  EXPECT_EQ(Ids(Get("/v1/jobs", "nlp-token")), (std::vector<std::string>{"3"}));
  EXPECT_EQ(Ids(Get("/v1/jobs", "op-token")), (std::vector<std::string>{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(Ids(Get("/v1/jobs?team=nlp", "op-token")), (std::vector<std::string>{"3"}));
  // Asking for another team's jobs by filter shows nothing, not them.
  EXPECT_TRUE(Ids(Get("/v1/jobs?team=nlp", "vision-token")).empty());
  EXPECT_EQ(Ids(Get("/v1/jobs?phase=running", "vision-token")), (std::vector<std::string>{"1"}));

  auto mine = Get("/v1/jobs/3", "nlp-token");
  ASSERT_EQ(mine->status, 200);
  const auto j = nlohmann::json::parse(mine->body);
  EXPECT_EQ(j.at("reason"), "Resources");
  EXPECT_EQ(j.at("estimated_start"), 700);
  EXPECT_EQ(j.at("explain"), "why 3");
  // Another team's job and a missing job answer the same way.
  auto theirs = Get("/v1/jobs/3", "vision-token");
  auto missing = Get("/v1/jobs/99", "vision-token");
  EXPECT_EQ(theirs->status, 404);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(theirs->body).at("error").at("code"),
            nlohmann::json::parse(missing->body).at("error").at("code"));
  EXPECT_EQ(Get("/v1/jobs/3", "op-token")->status, 200);
}

TEST_F(ApiTest, TheQueueIsInEstimatedStartOrder) {
  // Pending only; those without an estimate last, in submit order.
  EXPECT_EQ(Ids(Get("/v1/queue", "op-token")), (std::vector<std::string>{"5", "3", "2", "4"}));
  EXPECT_EQ(Ids(Get("/v1/queue", "vision-token")), (std::vector<std::string>{"5", "2", "4"}));
  const auto j = nlohmann::json::parse(Get("/v1/queue", "vision-token")->body);
  EXPECT_TRUE(j.at("jobs")[2].at("estimated_start").is_null());
}

TEST_F(ApiTest, MetricsAreOpenUnlessConfiguredOtherwise) {
  auto r = Get("/metrics", "");
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("gantry_decisions_total 3"), std::string::npos);
  options_.metrics_need_token = true;
  Restart();
  EXPECT_EQ(Get("/metrics", "")->status, 401);
  EXPECT_EQ(Get("/metrics", "nlp-token")->status, 200);
}

TEST_F(ApiTest, UnknownPathsAndBadConfigurations) {
  auto r = Get("/v1/nope", "op-token");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(nlohmann::json::parse(r->body).at("error").at("code"), "not_found");
  const auto start_code = [this](const ApiOptions& o) {
    return ApiServer::Start(
               o, [this] { return Snapshot(); }, nullptr)
        .status()
        .code();
  };
  ApiOptions bad = options_;
  bad.operator_token = "nlp-token";
  EXPECT_EQ(start_code(bad), StatusCode::kInvalidArgument);
  bad = options_;
  bad.team_tokens[""] = "x";
  EXPECT_EQ(start_code(bad), StatusCode::kInvalidArgument);
  bad = options_;
  bad.host = "192.0.2.1";  // TEST-NET-1: not an address of this host
  EXPECT_EQ(start_code(bad), StatusCode::kUnavailable);
}

TEST_F(ApiTest, TheClientReadsBackWhatTheServerShows) {
  const std::string server = "http://127.0.0.1:" + std::to_string(api_->port());
  ApiClient vision({server, "vision-token"});
  Result<std::vector<JobView>> queue = vision.Queue();
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  ASSERT_EQ(queue->size(), 3u);
  EXPECT_EQ((*queue)[0].record.id, "5");
  EXPECT_EQ((*queue)[0].estimated_start, 600);
  EXPECT_EQ((*queue)[2].estimated_start, -1);
  EXPECT_EQ((*queue)[0].reason, "Resources");
  EXPECT_EQ((*queue)[0].explain, "why 5");
  Result<std::vector<JobView>> all = vision.Jobs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].record.phase, JobPhase::kRunning);
  EXPECT_EQ((*all)[0].record.placement, (std::vector<NodeGpus>{{"n1", 8}}));
  Result<JobView> one = vision.Job("2");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->record.team, "vision");
  EXPECT_EQ(one->record.user, "u-vision");
  // Every field survives JSON both ways.
  Result<JobView> back = JobViewFromJson(JobViewJson(*snap_->jobs[0]));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(JobViewJson(*back), JobViewJson(*snap_->jobs[0]));

  // Errors are codes.
  EXPECT_EQ(vision.Job("3").status().code(), StatusCode::kNotFound);  // nlp's
  EXPECT_EQ(vision.Job("../v1/queue").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ApiClient({server, "wrong"}).Queue().status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ApiClient({"ftp://x", "t"}).Queue().status().code(), StatusCode::kInvalidArgument);
  const int port = api_->port();
  api_->Stop();
  Result<std::vector<JobView>> down =
      ApiClient({"http://127.0.0.1:" + std::to_string(port), "vision-token", 2}).Queue();
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find("cannot reach gantryd"), std::string::npos);
  EXPECT_EQ(JobViewFromJson("{\"id\": 1}").status().code(), StatusCode::kDataLoss);
}

TEST_F(ApiTest, ATeamCancelsOnlyItsOwnJobs) {
  EXPECT_EQ(Delete("/v1/jobs/3", "")->status, 401);
  auto theirs = Delete("/v1/jobs/3", "vision-token");  // nlp's: as if it did not exist
  ASSERT_TRUE(theirs);
  EXPECT_EQ(theirs->status, 404);
  EXPECT_EQ(Delete("/v1/jobs/99", "vision-token")->status, 404);
  EXPECT_TRUE(Cancels().empty());
  auto mine = Delete("/v1/jobs/5", "vision-token");
  ASSERT_EQ(mine->status, 202) << mine->body;
  EXPECT_EQ(nlohmann::json::parse(mine->body).at("status"), "cancelling");
  EXPECT_EQ(Delete("/v1/jobs/3", "op-token")->status, 202);
  EXPECT_EQ(Cancels(), (std::vector<std::string>{"5 by team vision", "3 by operator"}));
  auto ending = Delete("/v1/jobs/2", "vision-token");
  EXPECT_EQ(ending->status, 409);
  EXPECT_EQ(nlohmann::json::parse(ending->body).at("error").at("code"), "conflict");
  // Through the client: codes.
  const std::string server = "http://127.0.0.1:" + std::to_string(api_->port());
  EXPECT_TRUE(ApiClient({server, "nlp-token"}).Cancel("3").ok());
  EXPECT_EQ(ApiClient({server, "nlp-token"}).Cancel("5").code(), StatusCode::kNotFound);
  EXPECT_EQ(ApiClient({server, "vision-token"}).Cancel("2").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(ApiClient({server, "vision-token"}).Cancel("a/b").code(), StatusCode::kInvalidArgument);
  // A server without a way to cancel says so.
  options_.cancel = nullptr;
  Restart();
  EXPECT_EQ(Delete("/v1/jobs/5", "op-token")->status, 501);
}

TEST_F(ApiTest, NodesUsageAndProfileAreScopedByToken) {
  auto r = Get("/v1/nodes", "nlp-token");
  ASSERT_EQ(r->status, 200);
  nlohmann::json j = nlohmann::json::parse(r->body);
  ASSERT_EQ(j.at("nodes").size(), 2u);
  EXPECT_EQ(j.at("nodes")[0].at("gpus_used"), 8);    // every team sees how full a node is
  EXPECT_TRUE(j.at("nodes")[0].at("jobs").empty());  // but not other teams' job ids
  EXPECT_EQ(j.at("nodes")[1].at("state"), "down");
  EXPECT_EQ(j.at("nodes")[1].at("reason"), "bad fan");
  j = nlohmann::json::parse(Get("/v1/nodes", "vision-token")->body);
  EXPECT_EQ(j.at("nodes")[0].at("jobs"), nlohmann::json::array({"1"}));  // 6 is no active job
  EXPECT_EQ(Get("/v1/nodes", "")->status, 401);

  j = nlohmann::json::parse(Get("/v1/usage", "nlp-token")->body);
  ASSERT_EQ(j.at("teams").size(), 1u);
  EXPECT_EQ(j.at("teams")[0].at("team"), "nlp");
  EXPECT_TRUE(j.at("teams")[0].at("quota_gpus").is_null());  // no quota
  j = nlohmann::json::parse(Get("/v1/usage", "op-token")->body);
  ASSERT_EQ(j.at("teams").size(), 2u);
  EXPECT_EQ(j.at("teams")[0].at("running_gpus"), 8);
  EXPECT_EQ(j.at("teams")[0].at("quota_gpus"), 24);

  j = nlohmann::json::parse(Get("/v1/profiles", "nlp-token")->body);
  EXPECT_EQ(j.at("profile").at("name"), "fifo-easy");
  EXPECT_EQ(j.at("profile").at("backfill"), "easy");
  EXPECT_EQ(j.at("profile").at("priority")[0].at("name"), "age");

  // The client reads them back; every field survives JSON both ways.
  const std::string server = "http://127.0.0.1:" + std::to_string(api_->port());
  Result<std::vector<NodeView>> nodes = ApiClient({server, "op-token"}).Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].domains, (std::vector<std::string>{"nv-0", "spine"}));
  EXPECT_EQ(NodeViewJson((*nodes)[1]), NodeViewJson(snap_->nodes[1]));
  Result<std::vector<TeamView>> teams = ApiClient({server, "vision-token"}).Usage();
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  ASSERT_EQ(teams->size(), 1u);
  EXPECT_EQ(TeamViewJson((*teams)[0]), TeamViewJson(snap_->teams[0]));
  EXPECT_EQ(TeamViewFromJson("{}").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(NodeViewFromJson("[").status().code(), StatusCode::kDataLoss);
}

TEST(TeamTokens, ParsesLinesAndRefusesNonsense) {
  Result<std::map<std::string, std::string>> t =
      ParseTeamTokens("# team token\nvision  abc123\n\n\tnlp xyz\r\n", "tokens");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, (std::map<std::string, std::string>{{"abc123", "vision"}, {"xyz", "nlp"}}));
  Result<std::map<std::string, std::string>> bad = ParseTeamTokens("vision\n", "f");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("f:1:"), std::string::npos);
  EXPECT_EQ(ParseTeamTokens("a t\nb t\n", "f").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ParseTeamTokens("a t\nb t\n", "f").status().message().find("f:2:"), std::string::npos);
  EXPECT_EQ(ParseTeamTokens("a t\x01k\n", "f").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseTeamTokens("", "f")->empty());
}

TEST(TeamTokens, TeamsTheClusterDoesNotNameAreListedOnce) {
  Result<Cluster> cluster =
      LoadCluster(std::string(GANTRY_SOURCE_DIR) + "/data/clusters/tiny.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();  // teams a and b
  EXPECT_TRUE(TokenTeamsNotInCluster({{"t1", "a"}, {"t2", "b"}}, *cluster).empty());
  EXPECT_EQ(TokenTeamsNotInCluster({{"t1", "a"}, {"t2", "zeta"}, {"t3", "nobody"}, {"t4", "zeta"}},
                                   *cluster),
            (std::vector<std::string>{"nobody", "zeta"}));
}

TEST_F(ApiTest, ASilentClientDoesNotBlockOthers) {
  // Clients that connect and send nothing hold a worker each until the read timeout; with
  // more of them than workers, others are still answered once those time out, and the server
  // keeps serving.
  options_.threads = 2;
  options_.read_timeout_s = 1;
  Restart();
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(api_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    silent.push_back(fd);
  }
  client_->set_read_timeout(10, 0);
  auto r = Get("/v1/health", "");
  ASSERT_TRUE(r) << "no answer while silent clients were connected";
  EXPECT_EQ(r->status, 200);
  for (int fd : silent) ::close(fd);
}

// A snapshot of `n` pending jobs j0000..j(n-1), vision's and nlp's alternately, each expected to
// start `n - i` seconds from now (so the queue's order is the reverse of the submit order).
std::shared_ptr<ControlSnapshot> Deep(int n, int64_t cycles) {
  auto snap = std::make_shared<ControlSnapshot>();
  snap->time = 100;
  snap->cycles = cycles;
  for (int i = 0; i < n; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "j%04d", i);
    JobView v;
    v.record.id = id;
    v.record.team = i % 2 == 0 ? "vision" : "nlp";
    v.record.user = "u";
    v.record.gpus = 1;
    v.record.submit = i;
    v.reason = i % 3 == 0 ? "Quota" : "Resources";
    v.explain = "why";
    v.estimated_start = 1000 + n - i;
    snap->jobs.push_back(std::make_shared<const JobView>(std::move(v)));
  }
  return snap;
}

// Every page of `path` for `token`, following `next`; the ids in order, and the pages read.
std::vector<std::string> Walk(httplib::Client& client, std::string path, const std::string& token,
                              int* pages, const std::function<void(int)>& between = nullptr) {
  std::vector<std::string> ids;
  *pages = 0;
  while (!path.empty()) {
    auto r = client.Get(path, {{"Authorization", "Bearer " + token}});
    if (!r || r->status != 200) return {"(failed: " + path + ")"};
    const nlohmann::json body = nlohmann::json::parse(r->body);
    for (const auto& j : body.at("jobs")) ids.push_back(j.at("id").get<std::string>());
    path = body.at("next").is_null() ? "" : body.at("next").get<std::string>();
    ++*pages;
    if (between) between(*pages);
  }
  return ids;
}

TEST_F(ApiTest, TheQueueComesInPagesThatNameTheNext) {
  SetSnapshot(Deep(25, 1));
  // One page with everything: the order the pages must reproduce.
  auto whole = Get("/v1/queue?limit=10000", "op-token");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200);
  const nlohmann::json body = nlohmann::json::parse(whole->body);
  EXPECT_EQ(body.at("total"), 25);
  EXPECT_TRUE(body.at("next").is_null());
  const std::vector<std::string> expected = Ids(whole);
  ASSERT_EQ(expected.size(), 25u);
  EXPECT_EQ(expected.front(), "j0024");  // the earliest estimate first

  int pages = 0;
  EXPECT_EQ(Walk(*client_, "/v1/queue?limit=7", "op-token", &pages), expected);
  EXPECT_EQ(pages, 4);
  // The default page holds all 25; a first page of 7 says how many there are in all.
  EXPECT_EQ(Ids(Get("/v1/queue", "op-token")), expected);
  const nlohmann::json first = nlohmann::json::parse(Get("/v1/queue?limit=7", "op-token")->body);
  EXPECT_EQ(first.at("jobs").size(), 7u);
  EXPECT_EQ(first.at("total"), 25);
  // Filters stay on every page: a team's token pages through its own jobs only.
  std::vector<std::string> vision;
  for (const std::string& id : expected) {
    if (std::stoi(id.substr(1)) % 2 == 0) vision.push_back(id);
  }
  EXPECT_EQ(Walk(*client_, "/v1/queue?limit=4", "vision-token", &pages), vision);
  std::vector<std::string> quota_nlp;
  for (const std::string& id : expected) {
    const int i = std::stoi(id.substr(1));
    if (i % 2 == 1 && i % 3 == 0) quota_nlp.push_back(id);
  }
  EXPECT_EQ(Walk(*client_, "/v1/queue?limit=1&team=nlp&reason=Quota", "op-token", &pages),
            quota_nlp);
  EXPECT_EQ(pages, static_cast<int>(quota_nlp.size()));
  // /v1/jobs pages by submit time.
  std::vector<std::string> by_submit(expected.rbegin(), expected.rend());
  EXPECT_EQ(Walk(*client_, "/v1/jobs?limit=6", "op-token", &pages), by_submit);
  EXPECT_EQ(pages, 5);

  // Malformed paging is a 400, not a guess.
  for (const char* bad :
       {"/v1/queue?limit=0", "/v1/queue?limit=10001", "/v1/queue?limit=x", "/v1/jobs?limit=-3",
        "/v1/queue?cursor=zz", "/v1/queue?cursor=31", "/v1/jobs?cursor="}) {
    auto r = Get(bad, "op-token");
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 400) << bad << ": " << r->body;
  }
}

// A walk through the pages reads the snapshot its first page came from, however the queue moves
// meanwhile: every job of it exactly once, none submitted since, in its order.
TEST_F(ApiTest, PagesStayOnOneSnapshotWhileJobsArrive) {
  SetSnapshot(Deep(30, 1));
  const std::vector<std::string> expected = Ids(Get("/v1/queue?limit=10000", "op-token"));
  int pages = 0;
  int64_t cycle = 1;
  // After each page a cycle publishes a new snapshot with more jobs, ahead in the queue.
  auto arrive = [&](int) {
    ++cycle;
    SetSnapshot(Deep(30 + 5 * static_cast<int>(cycle), cycle));
  };
  EXPECT_EQ(Walk(*client_, "/v1/queue?limit=4", "op-token", &pages, arrive), expected);
  EXPECT_EQ(pages, 8);

  // A snapshot no longer pinned (more walks started since than the server keeps): the walk goes
  // on in the current snapshot after the last job returned, so /v1/jobs, whose order never
  // changes, still shows no job twice.
  SetSnapshot(Deep(30, 100));
  auto first = Get("/v1/jobs?limit=10", "op-token");
  const std::string next = nlohmann::json::parse(first->body).at("next").get<std::string>();
  for (int64_t c = 101; c < 120; ++c) {  // other clients' walks, each pinning its snapshot
    SetSnapshot(Deep(30, c));
    ASSERT_EQ(Get("/v1/jobs?limit=10", "op-token")->status, 200);
  }
  SetSnapshot(Deep(40, 200));  // ten more submitted
  std::vector<std::string> ids = Ids(first);
  std::vector<std::string> rest = Walk(*client_, next, "op-token", &pages);
  ids.insert(ids.end(), rest.begin(), rest.end());
  std::vector<std::string> all = Ids(Get("/v1/jobs?limit=10000", "op-token"));
  EXPECT_EQ(ids, all);  // the first ten, then j0010..j0039, each once
}

TEST_F(ApiTest, OneJobByIdCarriesTheSentenceAsOfNow) {
  std::mutex mu;  // the server's threads ask; only the socket orders them before the checks
  std::vector<std::string> asked;
  options_.explain = [&](const std::string& id) -> Result<std::string> {
    std::lock_guard<std::mutex> lock(mu);
    asked.push_back(id);
    if (id == "4") return NotFound("not in the engine");
    return "now: " + id;
  };
  Restart();
  auto r = Get("/v1/jobs/2", "vision-token");
  ASSERT_TRUE(r);
  EXPECT_EQ(nlohmann::json::parse(r->body).at("explain"), "now: 2");
  // The engine no longer has it: the snapshot's sentence.
  EXPECT_EQ(nlohmann::json::parse(Get("/v1/jobs/4", "vision-token")->body).at("explain"), "why 4");
  // The lists show the snapshot's sentences and ask nothing.
  const nlohmann::json queue = nlohmann::json::parse(Get("/v1/queue", "vision-token")->body);
  EXPECT_EQ(queue.at("jobs").at(0).at("explain"), "why 5");
  // Another team's job is not asked about.
  EXPECT_EQ(Get("/v1/jobs/3", "vision-token")->status, 404);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(asked, (std::vector<std::string>{"2", "4"}));
}

TEST_F(ApiTest, TheClientFollowsEveryPage) {
  SetSnapshot(Deep(23, 1));
  const std::string server = "http://127.0.0.1:" + std::to_string(api_->port());
  ApiClientOptions o{server, "op-token"};
  o.page_limit = 5;
  Result<std::vector<JobView>> queue = ApiClient(o).Queue();
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  ASSERT_EQ(queue->size(), 23u);
  for (size_t i = 0; i < queue->size(); ++i) {
    EXPECT_EQ((*queue)[i].record.id, snap_->Queue()[i]->record.id) << i;
  }
  Result<std::vector<JobView>> all = ApiClient(o).Jobs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 23u);
  EXPECT_EQ(all->back().record.id, "j0022");
}

TEST(ControlSnapshotTest, FindsJobsByIdAndOrdersTheQueue) {
  auto snap = Deep(1000, 1);
  for (int i : {0, 1, 499, 999}) {
    char id[16];
    std::snprintf(id, sizeof id, "j%04d", i);
    const JobView* v = snap->Find(id);
    ASSERT_NE(v, nullptr) << id;
    EXPECT_EQ(v->record.id, id);
  }
  EXPECT_EQ(snap->Find("j1000"), nullptr);
  EXPECT_EQ(snap->Find(""), nullptr);
  const auto& q = snap->Queue();
  ASSERT_EQ(q.size(), 1000u);
  for (size_t i = 1; i < q.size(); ++i) EXPECT_LT(q[i - 1]->estimated_start, q[i]->estimated_start);
}

// docs/openapi.yaml describes what the server does: every endpoint it serves, the paging
// parameters and their bounds, and the fields of a page.
TEST_F(ApiTest, TheOpenApiDocumentMatchesTheServer) {
  YAML::Node doc = YAML::LoadFile(std::string(GANTRY_SOURCE_DIR) + "/docs/openapi.yaml");
  const YAML::Node paths = doc["paths"];
  for (const char* path : {"/v1/health", "/v1/jobs", "/v1/jobs/{id}", "/v1/nodes", "/v1/usage",
                           "/v1/profiles", "/v1/queue", "/v1/overview", "/metrics"}) {
    ASSERT_TRUE(paths[path] && paths[path]["get"]) << path << " is not documented";
  }
  for (const char* path : {"/v1/jobs", "/v1/queue"}) {
    std::set<std::string> refs;
    for (const auto& p : paths[path]["get"]["parameters"]) {
      if (p["$ref"]) refs.insert(p["$ref"].as<std::string>());
    }
    EXPECT_EQ(refs.count("#/components/parameters/Limit"), 1u) << path;
    EXPECT_EQ(refs.count("#/components/parameters/Cursor"), 1u) << path;
    EXPECT_TRUE(paths[path]["get"]["responses"]["400"]) << path;
  }
  const YAML::Node limit = doc["components"]["parameters"]["Limit"]["schema"];
  const int max = limit["maximum"].as<int>();
  const int def = limit["default"].as<int>();
  EXPECT_EQ(Get("/v1/queue?limit=" + std::to_string(max), "op-token")->status, 200);
  EXPECT_EQ(Get("/v1/queue?limit=" + std::to_string(max + 1), "op-token")->status, 400);
  SetSnapshot(Deep(def + 1, 1));
  const nlohmann::json page = nlohmann::json::parse(Get("/v1/queue", "op-token")->body);
  EXPECT_EQ(page.at("jobs").size(), static_cast<size_t>(def));
  std::set<std::string> keys;
  for (const auto& [k, v] : page.items()) keys.insert(k);
  std::set<std::string> required;
  for (const auto& k : doc["components"]["schemas"]["JobList"]["required"]) {
    required.insert(k.as<std::string>());
  }
  EXPECT_EQ(keys, required);
}

}  // namespace
}  // namespace gantry::control
