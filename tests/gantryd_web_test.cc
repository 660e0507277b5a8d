// gantryd's web page in headless Chromium: what a person opening it sees.
//
// WebPageBrowserTest serves a hand-made snapshot with hostile job, user and team names from an
// in-process ApiServer and checks they show as text, never as markup. GantrydWebSlurmTest runs
// the real gantryd against the real Slurm of scripts/slurm (skipped without one unless
// GANTRY_SLURM_REQUIRED is set; RESOURCE_LOCK slurm, tests/CMakeLists.txt), submits jobs with
// sbatch, and checks the page shows them with the reasons the API gives, charts with marks, and
// the teams -- and that a team's token shows only that team.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_support.h"
#include "common/test_support.h"
#include "gantry/control/api.h"
#include "gantry/slurm/slurm.h"

extern char** environ;

namespace gantry {
namespace {

using cli_test::Quote;
using cli_test::ReadFile;
using cli_test::RunShell;

constexpr char kChromium[] = "/usr/bin/chromium";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Why the page cannot be tested here, or empty.
std::string BrowserMissing() {
  if (access(kChromium, X_OK) != 0) return std::string(kChromium) + " not installed";
  const std::string web = GANTRY_WEB_DIR;
  if (access((web + "/vega/build/vega.min.js").c_str(), R_OK) != 0) {
    return "chart library missing in " + web + "; run scripts/setup";
  }
  return "";
}

// The page's DOM after Chromium ran it for `budget_ms` of virtual time (its timers run, its
// fetches complete: virtual time waits for the network).
std::string LoadPage(const std::string& url, const std::string& scratch, int budget_ms = 5000) {
  const std::string command =
      "timeout 60 " + std::string(kChromium) +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --user-data-dir=" +
      Quote(scratch) + " --virtual-time-budget=" + std::to_string(budget_ms) + " --dump-dom " +
      Quote(url) + " 2>/dev/null";
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// The text of the element with this id, up to the next element with an id of the page's
// sections (enough to tell one chart or table from the next).
std::string Section(const std::string& dom, const std::string& id) {
  const size_t begin = dom.find("id=\"" + id + "\"");
  if (begin == std::string::npos) return "";
  size_t end = dom.find("</section>", begin);
  return dom.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

void ExpectChartDrawn(const std::string& dom, const std::string& id, const std::string& mark) {
  const std::string chart = Section(dom, id);
  ASSERT_FALSE(chart.empty()) << id << " missing";
  EXPECT_EQ(chart.find("data-chart-error"), std::string::npos) << chart.substr(0, 400);
  EXPECT_NE(chart.find("<svg"), std::string::npos) << id;
  const size_t m = chart.find(mark);
  ASSERT_NE(m, std::string::npos) << id << " has no " << mark;
  const size_t path = chart.find("<path", m);
  ASSERT_NE(path, std::string::npos) << id;
  EXPECT_NE(chart.find(" d=\"M", path), std::string::npos) << id << ": marks without geometry";
}

std::shared_ptr<const control::JobView> View(const std::string& id, const std::string& team,
                                             const std::string& user, control::JobPhase phase) {
  control::JobView v;
  v.record.id = id;
  v.record.team = team;
  v.record.user = user;
  v.record.gpus = 4;
  v.record.phase = phase;
  v.reason = phase == control::JobPhase::kPending ? "Resources" : "StartedHead";
  v.explain = "waits for " + user;
  v.estimated_start = phase == control::JobPhase::kPending ? 1700000600 : -1;
  return std::make_shared<const control::JobView>(std::move(v));
}

TEST(WebPageBrowserTest, ShowsHostileNamesAsTextNotMarkup) {
  const std::string missing = BrowserMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  // Each payload, run, would mark the body; shown as text, it is only characters.
  const std::string evil_user = "<img src=x onerror=\"document.body.dataset.pwned='user'\">";
  const std::string evil_team = "</td><script>document.body.dataset.pwned='team'</script>";
  auto snap = std::make_shared<control::ControlSnapshot>();
  snap->time = 1700000000;
  snap->total_gpus = 16;
  snap->busy_gpus = 4;
  snap->jobs = {View("41", evil_team, "alice", control::JobPhase::kRunning),
                View("42", evil_team, evil_user, control::JobPhase::kPending)};
  control::Overview& o = snap->overview;
  o.occupancy = {{"nv-0", "nvlink", 8, 4}, {"nv-1", "nvlink", 8, 0}};
  o.teams = {{evil_team, 8, 4, 4, 1}};
  for (Time t = snap->time - 60; t < snap->time; t += 10) {
    o.history.push_back(std::make_shared<control::UsageSample>(control::UsageSample{t, {4}}));
  }
  o.decisions = {{1, snap->time - 30, "decide", "41", evil_team, 4, evil_user}};
  control::ApiOptions options;
  options.operator_token = "op-token";
  auto api = control::ApiServer::Start(
      options, [snap] { return snap; }, nullptr);
  ASSERT_TRUE(api.ok()) << api.status().ToString();

  test_support::TempDir tmp("gantry-web-xss");
  const std::string dom =
      LoadPage("http://127.0.0.1:" + std::to_string((*api)->port()) + "/#token=op-token",
               tmp.sub("profile"));
  ASSERT_FALSE(dom.empty()) << "chromium printed no DOM";
  EXPECT_NE(dom.find("data-updates=\""), std::string::npos) << dom.substr(0, 3000);
  EXPECT_EQ(dom.find("data-pwned"), std::string::npos) << "a payload ran";
  const std::string queue = Section(dom, "queue");
  EXPECT_NE(queue.find("&lt;img src=x onerror="), std::string::npos) << queue;
  EXPECT_NE(queue.find("&lt;/td&gt;&lt;script&gt;"), std::string::npos) << queue;
  EXPECT_EQ(queue.find("<img"), std::string::npos) << queue;
  EXPECT_EQ(Section(dom, "decisions").find("<img"), std::string::npos);
  // The charts drew, with the hostile team as a legend label (SVG text, not markup).
  ExpectChartDrawn(dom, "chart-occupancy", "mark-rect");
  ExpectChartDrawn(dom, "chart-usage", "mark-line");
  EXPECT_EQ(Section(dom, "chart-usage").find("<script"), std::string::npos);
}

TEST(WebPageBrowserTest, AnUnknownTokenAsksForAnother) {
  const std::string missing = BrowserMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  auto snap = std::make_shared<control::ControlSnapshot>();
  snap->time = 1700000000;
  control::ApiOptions options;
  options.operator_token = "op-token";
  auto api = control::ApiServer::Start(
      options, [snap] { return snap; }, nullptr);
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  test_support::TempDir tmp("gantry-web-token");
  const std::string dom =
      LoadPage("http://127.0.0.1:" + std::to_string((*api)->port()) + "/#token=wrong",
               tmp.sub("profile"), 3000);
  EXPECT_NE(dom.find("does not know this token"), std::string::npos) << dom.substr(0, 3000);
  EXPECT_NE(dom.find("<form id=\"login\">"), std::string::npos) << "the token form is hidden";
  EXPECT_EQ(dom.find("data-updates"), std::string::npos);
}

// A gantryd process, its output appended to `log`; killed with SIGKILL when dropped.
class Gantryd {
 public:
  Gantryd(const std::vector<std::string>& args, const std::string& log) {
    std::vector<std::string> argv = {GANTRYD_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, cargv[0], &fa, nullptr, cargv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Gantryd() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

class GantrydWebSlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Env("GANTRY_SLURM_DIR").empty() || Env("SLURM_CONF").empty()) {
      if (!Env("GANTRY_SLURM_REQUIRED").empty()) {
        FAIL() << "GANTRY_SLURM_REQUIRED is set but GANTRY_SLURM_DIR/SLURM_CONF are not";
      }
      GTEST_SKIP() << "no Slurm cluster (source \"$(scripts/slurm start)\" to run this)";
    }
    const std::string missing = BrowserMissing();
    if (!missing.empty()) GTEST_SKIP() << missing;
    partition_ = Env("GANTRY_SLURM_PARTITION").empty() ? "gantry" : Env("GANTRY_SLURM_PARTITION");
    slurm::SlurmOptions o;
    o.slurm_conf = Env("SLURM_CONF");
    client_ = std::make_unique<slurm::SlurmClient>(o);
  }

  void TearDown() override {
    // The jobs sleep for minutes: the next test needs the nodes.
    for (int64_t id : submitted_) {
      if (client_) (void)client_->Run({"scancel", std::to_string(id)});
    }
  }

  int64_t Submit(const std::string& account, const std::string& gres) {
    auto out = client_->Run({"sbatch", "--parsable", "-p", partition_, "-A", account, "-N", "1",
                             "--gres=" + gres, "-t", "5", "-o", "/dev/null", "--wrap", "sleep 60"});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    const int64_t id = out.ok() ? std::stoll(*out) : -1;
    if (id > 0) submitted_.push_back(id);
    return id;
  }

  test_support::TempDir tmp_{"gantryd-web-slurm"};
  std::string partition_;
  std::unique_ptr<slurm::SlurmClient> client_;
  std::vector<int64_t> submitted_;
};

TEST_F(GantrydWebSlurmTest, ThePageShowsTheQueueChartsAndTeams) {
  cli_test::CliRun run = RunShell(
      std::string(GANTRY_CLI) + " cluster import --from-slurm -o " + Quote(tmp_.sub("site.yaml")),
      tmp_.sub("import.err"));
  ASSERT_EQ(run.code, 0) << run.err;
  std::ofstream(tmp_.sub("tokens")) << "physics phys-token\nbiology bio-token\n";
  std::ofstream(tmp_.sub("op")) << "op-token\n";
  // Each team fills its quota (physics 16 GPUs: two h100 nodes; biology 8: two a100 nodes),
  // and one more job of each waits. All are held (job_submit.lua) before gantryd starts, so its
  // first cycle sees them all.
  for (int i = 0; i < 3; ++i) {
    ASSERT_GT(Submit("physics", "gpu:h100:8"), 0);
    ASSERT_GT(Submit("biology", "gpu:a100:4"), 0);
  }
  const std::string log = tmp_.sub("gantryd.log");
  Gantryd gantryd(
      {"--cluster", tmp_.sub("site.yaml"), "--state", tmp_.sub("state.db"), "--partition",
       partition_, "--listen", "127.0.0.1:0", "--port-file", tmp_.sub("port"), "--tokens",
       tmp_.sub("tokens"), "--operator-token-file", tmp_.sub("op"), "--interval", "0.2"},
      log);
  ASSERT_TRUE(gantryd.running());
  int port = -1;
  for (int i = 0; i < 1200 && port < 0; ++i) {
    const std::string p = ReadFile(tmp_.sub("port"));
    if (!p.empty() && p.back() == '\n') port = std::stoi(p);
    if (port < 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0) << ReadFile(log);

  // Until gantryd has placed the four that fit and holds the two that do not.
  httplib::Client api("127.0.0.1", port);
  const httplib::Headers op = {{"Authorization", "Bearer op-token"}};
  nlohmann::json queue;
  for (int i = 0; i < 600; ++i) {
    auto jobs = api.Get("/v1/jobs", op);
    auto q = api.Get("/v1/queue", op);
    ASSERT_TRUE(jobs && q) << ReadFile(log);
    int placed = 0;
    const nlohmann::json all = nlohmann::json::parse(jobs->body);
    for (const auto& j : all.at("jobs")) placed += j.at("phase") != "pending";
    queue = nlohmann::json::parse(q->body).at("jobs");
    if (placed == 4 && queue.size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(queue.size(), 2u) << queue.dump() << "\n" << ReadFile(log);

  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  const std::string dom = LoadPage(base + "/#token=op-token", tmp_.sub("profile-op"));
  ASSERT_FALSE(dom.empty()) << "chromium printed no DOM";
  EXPECT_NE(dom.find("data-updates=\""), std::string::npos) << dom.substr(0, 3000);
  // The queue: each waiting job with its team and the reason the API gives.
  const std::string table = Section(dom, "queue");
  for (const auto& j : queue) {
    const std::string row = "<td>" + j.at("id").get<std::string>() + "</td><td>" +
                            j.at("team").get<std::string>() + "</td>";
    const size_t at = table.find(row);
    ASSERT_NE(at, std::string::npos) << row << " not in\n" << table;
    const std::string reason = j.at("reason").get<std::string>();
    EXPECT_FALSE(reason.empty());
    EXPECT_NE(table.find("<td>" + reason + "</td>", at), std::string::npos) << table;
  }
  ExpectChartDrawn(dom, "chart-occupancy", "mark-rect");
  ExpectChartDrawn(dom, "chart-usage", "mark-line");
  // The topology's domains label the occupancy chart; both teams appear in the usage chart,
  // the team table (at their quotas) and the decisions.
  const nlohmann::json overview = nlohmann::json::parse(api.Get("/v1/overview", op)->body);
  ASSERT_FALSE(overview.at("occupancy").empty());
  for (const auto& d : overview.at("occupancy")) {
    EXPECT_NE(Section(dom, "chart-occupancy").find(">" + d.at("domain").get<std::string>() + "<"),
              std::string::npos)
        << d.dump();
  }
  for (const std::string team : {"physics", "biology"}) {
    EXPECT_NE(Section(dom, "chart-usage").find(">" + team + "<"), std::string::npos) << team;
    EXPECT_NE(Section(dom, "teams").find("<td>" + team + "</td>"), std::string::npos) << team;
    EXPECT_NE(Section(dom, "decisions").find("<td>" + team + "</td>"), std::string::npos) << team;
  }
  EXPECT_NE(Section(dom, "teams")
                .find("<td>physics</td><td class=\"num\">16</td>"
                      "<td class=\"num\">16</td>"),
            std::string::npos)
      << Section(dom, "teams");

  // A team's token: that team only.
  const std::string bio = LoadPage(base + "/#token=bio-token", tmp_.sub("profile-bio"));
  EXPECT_NE(Section(bio, "queue").find("<td>biology</td>"), std::string::npos)
      << Section(bio, "queue");
  EXPECT_NE(Section(bio, "teams").find("<td>biology</td>"), std::string::npos);
  for (const char* id : {"queue", "teams", "decisions", "chart-usage"}) {
    EXPECT_EQ(Section(bio, id).find("physics"), std::string::npos) << id;
  }
}

}  // namespace
}  // namespace gantry
