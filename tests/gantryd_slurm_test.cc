// gantryd end to end on a real Slurm cluster (scripts/slurm; scripts/test starts one for the
// default preset): jobs submitted with plain sbatch are held by Gantry's job_submit.lua, and
// gantryd -- the real binary -- decides where each runs, starts it there, survives being killed
// with SIGKILL in the middle, and shows each team only its own jobs through its API. Checked
// against Slurm's own accounting (sacct): every job completed, exactly once, on the nodes
// gantryd recorded for it.
//
// Skipped without a cluster unless GANTRY_SLURM_REQUIRED is set (as the Slurm driver's tests).
// It shares the cluster's managed partition with those tests, so ctest runs them one at a time
// (RESOURCE_LOCK slurm, tests/CMakeLists.txt).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_support.h"
#include "common/test_support.h"
#include "gantry/cluster/cluster.h"
#include "gantry/control/state_store.h"
#include "gantry/slurm/slurm.h"

extern char** environ;

namespace gantry {
namespace {

using cli_test::Quote;
using cli_test::ReadFile;
using cli_test::RunShell;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Flags that cannot time a cycle are usage errors (exit 2), caught before anything is opened:
// a NaN or infinite wait would otherwise reach sigtimedwait as garbage.
TEST(GantrydFlags, AnIntervalOrCycleOffsetThatIsNotAFiniteNumberIsAUsageError) {
  const std::string err = ::testing::TempDir() + "gantryd-flags.err";
  for (const std::string flags :
       {"--interval nan", "--interval inf", "--interval 0", "--cycle-offset nan",
        "--cycle-offset inf", "--cycle-offset -inf"}) {
    cli_test::CliRun r =
        RunShell(std::string(GANTRYD_BIN) +
                     " --cluster /nonexistent.yaml --state /nonexistent/s.db " + flags,
                 err, 10);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.err;
    EXPECT_NE(r.err.find(flags.substr(0, flags.find(' '))), std::string::npos) << r.err;
  }
}

// The heartbeat and the port file are written beside and renamed into place: named as the state
// database (directly, through a link, or as its -wal), they would replace it. Refused as usage
// errors before anything is opened, and the database is left as it was.
TEST(GantrydFlags, AHeartbeatOrPortFileThatIsTheStateDatabaseIsAUsageError) {
  test_support::TempDir tmp("gantryd-flags");
  const std::string state = tmp.sub("state.db");
  {
    std::ofstream f(state);
    f << "the database";
  }
  std::filesystem::create_directory_symlink(tmp.path(), tmp.sub("link"));
  for (const std::string& flags :
       {"--heartbeat " + state, "--heartbeat " + tmp.sub("link/state.db"),
        "--heartbeat " + tmp.sub("link/state.db-wal"),
        "--heartbeat " +
            tmp.sub("../" + std::filesystem::path(tmp.path()).filename().string() + "/state.db"),
        "--port-file " + state, "--heartbeat " + state + " --check"}) {
    cli_test::CliRun r =
        RunShell(std::string(GANTRYD_BIN) + " --cluster " +
                     Quote(std::string(GANTRY_SOURCE_DIR) + "/data/clusters/tiny.yaml") +
                     " --state " + Quote(state) + " " + flags,
                 tmp.sub("err"), 10);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.err;
    EXPECT_NE(r.err.find("is the state database's own file"), std::string::npos) << r.err;
    EXPECT_EQ(ReadFile(state), "the database") << flags;
  }
  cli_test::CliRun r =
      RunShell(std::string(GANTRYD_BIN) + " --cluster " +
                   Quote(std::string(GANTRY_SOURCE_DIR) + "/data/clusters/tiny.yaml") +
                   " --state " + Quote(state) + " --heartbeat " + Quote(tmp.sub("beat")) +
                   " --port-file " + Quote(tmp.sub("link/beat")),
               tmp.sub("err"), 10);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("name the same file"), std::string::npos) << r.err;
}

// A gantryd process, its stdout and stderr appended to `log`.
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
  ~Gantryd() { Kill(SIGKILL); }
  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    pid_ = -1;
  }
  // Its exit code once it has exited within `ms` (negative: killed by that signal); INT_MIN
  // while it still runs.
  int Wait(int ms) {
    for (int i = 0; i < ms / 10 && pid_ > 0; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        pid_ = -1;
        return exit_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pid_ > 0 ? INT_MIN : exit_;
  }
  bool running() const { return pid_ > 0; }
  int exit_code() const { return exit_; }

 private:
  pid_t pid_ = -1;
  int exit_ = 0;
};

class GantrydSlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = Env("GANTRY_SLURM_DIR");
    if (dir_.empty() || Env("SLURM_CONF").empty()) {
      if (!Env("GANTRY_SLURM_REQUIRED").empty()) {
        FAIL() << "GANTRY_SLURM_REQUIRED is set but GANTRY_SLURM_DIR/SLURM_CONF are not";
      }
      GTEST_SKIP() << "no Slurm cluster (source \"$(scripts/slurm start)\" to run this)";
    }
    partition_ = Env("GANTRY_SLURM_PARTITION").empty() ? "gantry" : Env("GANTRY_SLURM_PARTITION");
    slurm::SlurmOptions o;
    o.slurm_conf = Env("SLURM_CONF");
    client_ = std::make_unique<slurm::SlurmClient>(o);
  }

  std::vector<std::string> GantrydArgs() {
    return {"--cluster",
            tmp_.sub("site.yaml"),
            "--state",
            tmp_.sub("state.db"),
            "--partition",
            partition_,
            "--listen",
            "127.0.0.1:0",
            "--port-file",
            tmp_.sub("port"),
            "--tokens",
            tmp_.sub("tokens"),
            "--operator-token-file",
            tmp_.sub("op"),
            "--interval",
            "0.2"};
  }

  // Polls `done` until it holds or `seconds` pass; whether it held. The CI machine is a loaded
  // 2-core box: every wait on gantryd or Slurm is a generous deadline, never a fixed sleep.
  template <typename Done>
  static bool Eventually(Done done, int seconds = kPatience) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }
  static constexpr int kPatience = 60;

  int WaitPort() {
    int port = -1;
    Eventually([&] {
      const std::string p = ReadFile(tmp_.sub("port"));
      if (!p.empty() && p.back() == '\n') port = std::stoi(p);
      return port > 0;
    });
    return port;
  }

  // The job as gantryd's API shows it to the operator: its JSON, or null when absent (404).
  nlohmann::json ApiJob(httplib::Client& api, int64_t id) {
    auto j = api.Get("/v1/jobs/" + std::to_string(id), {{"Authorization", "Bearer op-token"}});
    if (j && j->status == 200) return nlohmann::json::parse(j->body);
    return nullptr;
  }
  // Whether gantryd's API stopped listing the job (it saw it end) within the patience.
  bool LeavesTheApi(httplib::Client& api, int64_t id) {
    return Eventually([&] {
      auto j = api.Get("/v1/jobs/" + std::to_string(id), {{"Authorization", "Bearer op-token"}});
      return j && j->status == 404;
    });
  }

  int64_t Submit(const std::string& account, const std::string& gres, int nodes,
                 const std::string& command = "sleep 2") {
    auto out = client_->Run({"sbatch", "--parsable", "-p", partition_, "-A", account, "-N",
                             std::to_string(nodes), "--gres=" + gres, "-t", "5", "-o",
                             dir_ + "/jobs/%j.out", "--wrap", command});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? std::stoll(*out) : -1;
  }

  // The site's spec and the tokens, as the first test writes them.
  void SetUpSite() {
    cli_test::CliRun run = RunShell(
        std::string(GANTRY_CLI) + " cluster import --from-slurm -o " + Quote(tmp_.sub("site.yaml")),
        tmp_.sub("import.err"));
    ASSERT_EQ(run.code, 0) << run.err;
    std::ofstream(tmp_.sub("tokens")) << "physics phys-token\nbiology bio-token\n";
    std::ofstream(tmp_.sub("op")) << "op-token\n";
  }

  // Polls Slurm until `pred` holds for job `id` or `seconds` pass.
  template <typename Pred>
  Result<slurm::SlurmJob> WaitJob(int64_t id, Pred pred, int seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    Result<slurm::SlurmJob> j = client_->Job(id);
    while (!(j.ok() && pred(*j)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      j = client_->Job(id);
    }
    if (j.ok() && !pred(*j)) return DeadlineExceeded("job state " + j->slurm_state);
    return j;
  }

  // sacct's records of every run of a job ("STATE|NODES" lines), once it has a completed one.
  std::string Runs(int64_t id) {
    std::string runs;
    Eventually([&] {
      auto out = client_->Run(
          {"sacct", "-D", "-X", "-n", "-P", "-j", std::to_string(id), "--format=State,NodeList"});
      if (out.ok() && out->find("COMPLETED") != std::string::npos) runs = *out;
      return !runs.empty();
    });
    return runs;
  }

  test_support::TempDir tmp_{"gantryd-slurm"};
  std::string dir_;
  std::string partition_;
  std::unique_ptr<slurm::SlurmClient> client_;
};

TEST_F(GantrydSlurmTest, RunsEveryJobOnceWhereItDecidedAcrossAKillNine) {
  // The site's cluster spec, as an operator makes it.
  cli_test::CliRun run = RunShell(
      std::string(GANTRY_CLI) + " cluster import --from-slurm -o " + Quote(tmp_.sub("site.yaml")),
      tmp_.sub("import.err"));
  ASSERT_EQ(run.code, 0) << run.err;
  {
    std::ofstream(tmp_.sub("tokens")) << "physics phys-token\nbiology bio-token\n";
    std::ofstream(tmp_.sub("op")) << "op-token\n";
  }
  const std::string log = tmp_.sub("gantryd.log");
  auto gantryd = std::make_unique<Gantryd>(GantrydArgs(), log);
  ASSERT_TRUE(gantryd->running());
  int port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);

  // 16 jobs of both teams and shapes: 2 x h100 on one node, a100 on one node, and 8 x h100
  // gangs over both h100 nodes.
  std::map<int64_t, std::string> team_of;
  for (int i = 0; i < 16; ++i) {
    const bool phys = i % 2 == 0;
    const std::string gres = i % 8 == 0 ? "gpu:h100:8" : (phys ? "gpu:h100:2" : "gpu:a100:1");
    const int nodes = i % 8 == 0 ? 2 : 1;
    const int64_t id = Submit(phys ? "physics" : "biology", gres, nodes);
    ASSERT_GT(id, 0);
    team_of[id] = phys ? "physics" : "biology";
  }

  // Killed mid-run -- as soon as some jobs were started and others still wait (physics asks
  // for far more than its 16-GPU quota) -- and restarted on the same state: it picks up where
  // it was. The poll starts right after the submissions: on a loaded machine, anything done
  // first can outlast the queue.
  int pending = 0, started = 0;
  httplib::Client before("127.0.0.1", port);
  for (int i = 0; i < 600 && (started == 0 || pending == 0); ++i) {
    auto r = before.Get("/v1/jobs", {{"Authorization", "Bearer op-token"}});
    ASSERT_TRUE(r && r->status == 200) << ReadFile(log);
    pending = started = 0;
    const nlohmann::json body = nlohmann::json::parse(r->body);
    for (const auto& j : body.at("jobs")) {
      if (team_of.count(std::stoll(j.at("id").get<std::string>())) == 0) continue;
      (j.at("phase") == "pending" ? pending : started)++;
    }
    if (started == static_cast<int>(team_of.size())) break;
    if (started == 0 || pending == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(started, 0) << ReadFile(log);
  ASSERT_GT(pending, 0) << "everything started before the kill: it would test nothing";
  gantryd->Kill(SIGKILL);
  std::remove(tmp_.sub("port").c_str());
  gantryd = std::make_unique<Gantryd>(GantrydArgs(), log);
  port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);
  httplib::Client api("127.0.0.1", port);

  // The restarted gantryd's API: each team sees only its own jobs.
  const std::map<std::string, std::string> teams = {{"phys-token", "physics"},
                                                    {"bio-token", "biology"}};
  EXPECT_TRUE(Eventually([&] {
    for (const auto& [token, team] : teams) {
      auto r = api.Get("/v1/jobs", {{"Authorization", "Bearer " + token}});
      if (!r || r->status != 200 || nlohmann::json::parse(r->body).at("jobs").empty()) return false;
    }
    return true;
  })) << "a team never saw its jobs\n"
      << ReadFile(log);
  for (const auto& [token, team] : teams) {
    auto r = api.Get("/v1/jobs", {{"Authorization", "Bearer " + token}});
    ASSERT_TRUE(r) << ReadFile(log);
    ASSERT_EQ(r->status, 200) << r->body;
    const nlohmann::json body = nlohmann::json::parse(r->body);
    EXPECT_FALSE(body.at("jobs").empty()) << team << " sees none of its jobs";
    for (const auto& j : body.at("jobs")) EXPECT_EQ(j.at("team"), team) << r->body;
  }
  // The same through the CLI: `gantry queue --all --json` with a team's token, and `gantry
  // explain` of another team's job (not found, exit 3).
  {
    const std::string server = " --server http://127.0.0.1:" + std::to_string(port);
    std::ofstream(tmp_.sub("bio-token")) << "bio-token\n";
    cli_test::CliRun q = RunShell(
        "env GANTRY_TOKEN=phys-token " + std::string(GANTRY_CLI) + " queue --all --json" + server,
        tmp_.sub("queue.err"));
    ASSERT_EQ(q.code, 0) << q.err;
    const nlohmann::json rows = nlohmann::json::parse(q.out);
    EXPECT_FALSE(rows.empty());
    for (const auto& j : rows) EXPECT_EQ(j.at("team"), "physics") << q.out;
    int64_t physics_job = -1, biology_job = -1;
    for (const auto& [id, team] : team_of) (team == "physics" ? physics_job : biology_job) = id;
    cli_test::CliRun e =
        RunShell(std::string(GANTRY_CLI) + " explain " + std::to_string(biology_job) +
                     " --token-file " + Quote(tmp_.sub("bio-token")) + server,
                 tmp_.sub("explain.err"));
    EXPECT_TRUE(e.code == 0 || e.code == 3) << e.err;  // 3: it ended already
    if (e.code == 0) {
      EXPECT_NE(e.out.find("team biology"), std::string::npos) << e.out;
    }
    e = RunShell("env GANTRY_TOKEN=bio-token " + std::string(GANTRY_CLI) + " explain " +
                     std::to_string(physics_job) + server,
                 tmp_.sub("explain2.err"));
    EXPECT_EQ(e.code, 3) << e.out << e.err;  // another team's job is not found
  }
  auto health = api.Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(nlohmann::json::parse(health->body).at("status"), "ok");

  // Everything ends (Slurm forgets finished jobs only after MinJobAge).
  std::set<int64_t> left;
  for (const auto& [id, team] : team_of) left.insert(id);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto it = left.begin(); it != left.end();) {
      auto j = client_->Job(*it);
      const bool ended = j.ok() && j->state != slurm::JobState::kPending &&
                         j->state != slurm::JobState::kRunning &&
                         j->state != slurm::JobState::kCompleting;
      it = ended ? left.erase(it) : std::next(it);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(left.empty()) << left.size() << " jobs never ended; first " << *left.begin() << "\n"
                            << ReadFile(log);
  gantryd->Kill(SIGTERM);
  EXPECT_EQ(gantryd->exit_code(), 0) << ReadFile(log);

  // What gantryd recorded, against what Slurm accounted.
  auto store = control::StateStore::Open(tmp_.sub("state.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (const auto& [id, team] : team_of) {
    const std::string sid = std::to_string(id);
    Result<control::JobRecord> r = (*store)->Get(sid);
    ASSERT_TRUE(r.ok()) << sid << ": " << r.status().ToString();
    EXPECT_EQ(r->phase, control::JobPhase::kDone) << sid;
    EXPECT_EQ(r->team, team);
    std::set<std::string> recorded;
    for (const control::NodeGpus& s : r->placement) recorded.insert(s.node);
    // -D lists every start of a job (a requeued job has one record per run).
    const std::string sacct = Runs(id);
    ASSERT_FALSE(sacct.empty()) << "sacct has no completed record of " << sid;
    EXPECT_EQ(std::count(sacct.begin(), sacct.end(), '\n'), 1) << sid << " ran more than once:\n"
                                                               << sacct;
    const std::string first = sacct.substr(0, sacct.find('\n'));
    const size_t bar = first.find('|');
    ASSERT_NE(bar, std::string::npos) << sacct;
    EXPECT_EQ(first.substr(0, bar), "COMPLETED") << sid;
    auto nodes = slurm::ExpandHostlist(first.substr(bar + 1));
    ASSERT_TRUE(nodes.ok()) << first;
    EXPECT_EQ(std::set<std::string>(nodes->begin(), nodes->end()), recorded)
        << sid << " ran on " << first.substr(bar + 1) << ", not where gantryd decided";
  }
  // (Not "no job active in the store": gantryd adopts jobs of the partition that other tests
  // on this shared cluster started by hand, and those may still run.)
}

// A node set down under a running job: Slurm kills the job and queues it again, gantryd holds
// it, decides again, and it runs once more on another node -- and completes exactly once.
TEST_F(GantrydSlurmTest, ANodeDownRequeuesItsJobWhichCompletesOnceElsewhere) {
  SetUpSite();
  const std::string log = tmp_.sub("gantryd.log");
  Gantryd gantryd(GantrydArgs(), log);
  const int port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);
  const int64_t id = Submit("physics", "gpu:h100:2", 1, "sleep 4");
  ASSERT_GT(id, 0);
  auto running = WaitJob(
      id, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kRunning; }, kPatience);
  ASSERT_TRUE(running.ok()) << running.status().ToString() << "\n" << ReadFile(log);
  ASSERT_EQ(running->nodes.size(), 1u);
  const std::string first = running->nodes[0];
  // Whatever happens below, the node is resumed for the tests that follow on this cluster.
  struct Resume {
    slurm::SlurmClient* client;
    std::string node;
    ~Resume() {
      (void)client->ResumeNode(node);
      for (int i = 0; i < 100; ++i) {
        auto nodes = client->Nodes();
        bool idle = false;
        for (const auto& n : nodes.ok() ? *nodes : std::vector<slurm::SlurmNode>{}) {
          idle = idle || (n.name == node && n.state == slurm::NodeState::kIdle);
        }
        if (idle) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  } resume{client_.get(), first};
  auto down =
      client_->Run({"scontrol", "update", "NodeName=" + first, "State=DOWN", "Reason=gantry-test"});
  ASSERT_TRUE(down.ok()) << down.status().ToString();

  auto done = WaitJob(
      id, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kCompleted; }, 90);
  ASSERT_TRUE(done.ok()) << done.status().ToString() << "\n" << ReadFile(log);
  EXPECT_GE(done->restart_count, 1);
  const std::string runs = Runs(id);
  ASSERT_FALSE(runs.empty()) << "sacct has no completed record of " << id;
  EXPECT_EQ(std::count(runs.begin(), runs.end(), '\n'), 2) << runs;  // killed once, then ran
  size_t completed = 0;
  std::string completed_on;
  for (size_t pos = 0; pos < runs.size();) {
    const size_t end = runs.find('\n', pos);
    const std::string line = runs.substr(pos, end - pos);
    pos = end == std::string::npos ? runs.size() : end + 1;
    if (line.rfind("COMPLETED|", 0) == 0) {
      ++completed;
      completed_on = line.substr(10);
    }
  }
  EXPECT_EQ(completed, 1u) << runs;
  EXPECT_NE(completed_on, first) << "ran again on the node that went down\n" << runs;

  // gantryd saw the node go down, requeued the job, and followed it to the end.
  httplib::Client api("127.0.0.1", port);
  EXPECT_TRUE(LeavesTheApi(api, id)) << ReadFile(log);
  gantryd.Kill(SIGTERM);
  auto store = control::StateStore::Open(tmp_.sub("state.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Result<control::JobRecord> r = (*store)->Get(std::to_string(id));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->phase, control::JobPhase::kDone) << ReadFile(log);
  EXPECT_EQ(r->end_reason, "completed");
  EXPECT_GE(r->requeues, 1);
  ASSERT_EQ(r->placement.size(), 1u);
  EXPECT_EQ(r->placement[0].node, completed_on);
  auto events = (*store)->Events(0, 10000);
  ASSERT_TRUE(events.ok());
  bool node_down = false;
  for (const control::StoreEvent& e : *events) {
    node_down = node_down || (e.kind == "node-down" && e.detail.rfind(first, 0) == 0);
  }
  EXPECT_TRUE(node_down) << "no node-down event for " << first;
}

// `gantry nodes`, `gantry usage` and `gantry cancel` against the live gantryd: the CLI's JSON is
// the API's, scoped by the token; a team cancels its own running and held jobs, not another's.
TEST_F(GantrydSlurmTest, CancelNodesAndUsageThroughTheCli) {
  SetUpSite();
  const std::string log = tmp_.sub("gantryd.log");
  Gantryd gantryd(GantrydArgs(), log);
  const int port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);
  const std::string cli =
      "env GANTRY_SERVER=http://127.0.0.1:" + std::to_string(port) + " " + std::string(GANTRY_CLI);
  const int64_t running = Submit("physics", "gpu:h100:2", 1, "sleep 60");
  ASSERT_GT(running, 0);
  auto r = WaitJob(
      running, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kRunning; },
      kPatience);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << ReadFile(log);
  ASSERT_EQ(r->nodes.size(), 1u);
  // More than physics' 16-GPU quota leaves beside it: held by Gantry (reason Quota).
  const int64_t waiting = Submit("physics", "gpu:h100:8", 2, "sleep 60");
  ASSERT_GT(waiting, 0);
  // gantryd confirms the one running and holds the other (reason Quota) within a cycle or two:
  // what follows reads both from gantryd, so it waits for gantryd to have seen them.
  httplib::Client api("127.0.0.1", port);
  ASSERT_TRUE(Eventually([&] {
    const nlohmann::json j = ApiJob(api, running);
    const nlohmann::json w = ApiJob(api, waiting);
    return !j.is_null() && j.at("phase") == "running" && !w.is_null() && w.at("phase") == "pending";
  })) << ReadFile(log);

  cli_test::CliRun nodes =
      RunShell("env GANTRY_TOKEN=phys-token " + cli + " nodes --json", tmp_.sub("nodes.err"));
  ASSERT_EQ(nodes.code, 0) << nodes.err;
  const nlohmann::json rows = nlohmann::json::parse(nodes.out);
  ASSERT_EQ(rows.size(), 4u) << nodes.out;
  bool found = false;
  for (const auto& n : rows) {
    if (n.at("name") != r->nodes[0]) continue;
    found = true;
    EXPECT_GE(n.at("gpus_used").get<int>(), 2) << n;
    EXPECT_NE(std::find(n.at("jobs").begin(), n.at("jobs").end(), std::to_string(running)),
              n.at("jobs").end())
        << n;
    EXPECT_EQ(n.at("state"), "up");
    EXPECT_FALSE(n.at("domain").get<std::string>().empty()) << n;  // leaf0/leaf1
  }
  EXPECT_TRUE(found) << nodes.out;
  // The same shape as the API's.
  auto api_nodes = api.Get("/v1/nodes", {{"Authorization", "Bearer phys-token"}});
  ASSERT_TRUE(api_nodes && api_nodes->status == 200);
  EXPECT_EQ(nlohmann::json::parse(api_nodes->body).at("nodes")[0].size(), rows[0].size());
  // Another team sees the GPUs in use but not physics' job ids.
  cli_test::CliRun bio_nodes =
      RunShell("env GANTRY_TOKEN=bio-token " + cli + " nodes --json", tmp_.sub("nodes2.err"));
  ASSERT_EQ(bio_nodes.code, 0) << bio_nodes.err;
  for (const auto& n : nlohmann::json::parse(bio_nodes.out)) {
    for (const auto& id : n.at("jobs")) {
      EXPECT_NE(id, std::to_string(running));
      EXPECT_NE(id, std::to_string(waiting));
    }
  }

  cli_test::CliRun usage =
      RunShell("env GANTRY_TOKEN=phys-token " + cli + " usage --json", tmp_.sub("usage.err"));
  ASSERT_EQ(usage.code, 0) << usage.err;
  const nlohmann::json teams = nlohmann::json::parse(usage.out);
  ASSERT_EQ(teams.size(), 1u) << usage.out;  // its own team only
  EXPECT_EQ(teams[0].at("team"), "physics");
  EXPECT_EQ(teams[0].at("quota_gpus"), 16);
  EXPECT_GE(teams[0].at("running_gpus").get<int>(), 2);
  EXPECT_GE(teams[0].at("pending_jobs").get<int>(), 1);
  cli_test::CliRun table =
      RunShell("env GANTRY_TOKEN=op-token " + cli + " usage", tmp_.sub("usage2.err"));
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("biology"), std::string::npos) << table.out;

  // Cancel: not another team's (exit 3, and the job runs on), but its own, held or running.
  cli_test::CliRun no =
      RunShell("env GANTRY_TOKEN=bio-token " + cli + " cancel " + std::to_string(running),
               tmp_.sub("c.err"));
  EXPECT_EQ(no.code, 3) << no.out << no.err;
  EXPECT_EQ(client_->Job(running)->state, slurm::JobState::kRunning);
  for (int64_t id : {waiting, running}) {
    cli_test::CliRun yes = RunShell(
        "env GANTRY_TOKEN=phys-token " + cli + " cancel " + std::to_string(id), tmp_.sub("c.err"));
    EXPECT_EQ(yes.code, 0) << yes.out << yes.err;
    auto ended = WaitJob(
        id, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kCancelled; },
        kPatience);
    EXPECT_TRUE(ended.ok()) << id << ": " << ended.status().ToString();
  }
  // gantryd notices within a cycle: the jobs leave its API and are done in its store.
  for (int64_t id : {waiting, running}) EXPECT_TRUE(LeavesTheApi(api, id)) << id;
  gantryd.Kill(SIGTERM);
  auto store = control::StateStore::Open(tmp_.sub("state.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (int64_t id : {waiting, running}) {
    Result<control::JobRecord> rec = (*store)->Get(std::to_string(id));
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    EXPECT_EQ(rec->phase, control::JobPhase::kDone) << id;
    EXPECT_EQ(rec->end_reason, "cancelled") << id;
  }
}

// Fail-open: gantryd dies; once its heartbeat is older than --fail-open-after, job_submit.lua
// stops holding new jobs (Slurm schedules them) and `gantry failopen` releases those held
// before; the restarted gantryd adopts what Slurm started and holds new jobs again.
TEST_F(GantrydSlurmTest, FailOpenHandsJobsToSlurmAndGantrydAdoptsThemOnReturn) {
  const std::string heartbeat = Env("GANTRY_HEARTBEAT_FILE");
  if (heartbeat.empty()) GTEST_SKIP() << "this cluster's job_submit.lua has no heartbeat file";
  SetUpSite();
  // Whatever happens, no heartbeat is left behind: later tests need jobs held.
  struct Remove {
    std::string path;
    ~Remove() { std::remove(path.c_str()); }
  } remove{heartbeat};
  std::vector<std::string> args = GantrydArgs();
  for (const char* a : {"--heartbeat", heartbeat.c_str(), "--fail-open-after", "2"}) {
    args.push_back(a);
  }
  const std::string log = tmp_.sub("gantryd.log");
  auto gantryd = std::make_unique<Gantryd>(args, log);
  ASSERT_GT(WaitPort(), 0) << ReadFile(log);
  ASSERT_FALSE(ReadFile(heartbeat).empty());
  gantryd->Kill(SIGKILL);
  std::remove(tmp_.sub("port").c_str());
  // Submitted while the heartbeat is fresh: held, and nobody releases it ...
  const int64_t held = Submit("biology", "gpu:a100:1", 1, "sleep 8");
  ASSERT_GT(held, 0);
  EXPECT_TRUE(client_->Job(held)->held);
  // ... until the heartbeat is stale. `gantry failopen` did nothing before.
  const std::string failopen =
      std::string(GANTRY_CLI) + " failopen --partition " + partition_ + " --heartbeat " + heartbeat;
  cli_test::CliRun early = RunShell(failopen, tmp_.sub("fo0.err"));
  EXPECT_EQ(early.code, 0) << early.err;
  EXPECT_NE(early.out.find("alive"), std::string::npos) << early.out;
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  const int64_t fresh = Submit("biology", "gpu:a100:1", 1, "sleep 8");
  ASSERT_GT(fresh, 0);
  auto started = WaitJob(
      fresh, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kRunning; },
      kPatience);
  EXPECT_TRUE(started.ok()) << "Slurm did not schedule a job of the managed partition on its own: "
                            << started.status().ToString();
  cli_test::CliRun fo = RunShell(failopen, tmp_.sub("fo.err"));
  EXPECT_EQ(fo.code, 0) << fo.err;
  EXPECT_NE(fo.out.find("released 1 held job"), std::string::npos) << fo.out;
  auto released = WaitJob(
      held, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kRunning; },
      kPatience);
  ASSERT_TRUE(released.ok()) << released.status().ToString();

  // gantryd returns: it adopts both where Slurm runs them, and holds new jobs again.
  gantryd = std::make_unique<Gantryd>(args, log);
  const int port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);
  httplib::Client api("127.0.0.1", port);
  for (int64_t id : {held, fresh}) {
    std::string phase, reason;
    Eventually([&] {
      const nlohmann::json j = ApiJob(api, id);
      if (!j.is_null()) {
        phase = j.at("phase");
        reason = j.at("reason");
      }
      return phase == "running";
    });
    EXPECT_EQ(phase, "running") << id << "\n" << ReadFile(log);
    EXPECT_EQ(reason, "Adopted") << id;
  }
  const int64_t after = Submit("biology", "gpu:a100:1", 1, "sleep 1");
  ASSERT_GT(after, 0);
  auto done = WaitJob(
      after, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kCompleted; },
      kPatience);
  ASSERT_TRUE(done.ok()) << done.status().ToString() << "\n" << ReadFile(log);
  for (int64_t id : {held, fresh, after}) {
    auto end = WaitJob(
        id, [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kCompleted; },
        kPatience);
    EXPECT_TRUE(end.ok()) << id << ": " << end.status().ToString();
    // ... and gantryd saw it end (it leaves the API).
    EXPECT_TRUE(LeavesTheApi(api, id)) << id;
  }
  gantryd->Kill(SIGTERM);
  auto store = control::StateStore::Open(tmp_.sub("state.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  // The job after the return was held and placed by gantryd (a decision of its own); the two
  // of the fail-open were adopted where Slurm ran them.
  auto events = (*store)->Events(0, 100000);
  ASSERT_TRUE(events.ok());
  std::map<std::string, std::set<std::string>> kinds;
  for (const control::StoreEvent& e : *events) kinds[e.job].insert(e.kind);
  EXPECT_EQ(kinds[std::to_string(after)].count("released-outside"), 0u);
  EXPECT_EQ(kinds[std::to_string(after)].count("decide"), 1u);
  for (int64_t id : {held, fresh}) {
    EXPECT_EQ(kinds[std::to_string(id)].count("released-outside"), 1u) << id;
    Result<control::JobRecord> rec = (*store)->Get(std::to_string(id));
    ASSERT_TRUE(rec.ok());
    EXPECT_EQ(rec->phase, control::JobPhase::kDone);
    EXPECT_EQ(rec->end_reason, "completed");
  }
}

TEST_F(GantrydSlurmTest, RefusesASecondDaemonOnTheSameState) {
  RunShell(
      std::string(GANTRY_CLI) + " cluster import --from-slurm -o " + Quote(tmp_.sub("site.yaml")),
      tmp_.sub("import.err"));
  std::ofstream(tmp_.sub("tokens")) << "physics t\n";
  std::ofstream(tmp_.sub("op")) << "o\n";
  Gantryd first(GantrydArgs(), tmp_.sub("1.log"));
  ASSERT_GT(WaitPort(), 0) << ReadFile(tmp_.sub("1.log"));
  std::vector<std::string> args = GantrydArgs();
  args.push_back("--cycles");
  args.push_back("1");
  Gantryd second(args, tmp_.sub("2.log"));
  EXPECT_EQ(second.Wait(20000), 3) << ReadFile(tmp_.sub("2.log"));
  EXPECT_NE(ReadFile(tmp_.sub("2.log")).find("another process"), std::string::npos)
      << ReadFile(tmp_.sub("2.log"));
}

// Three teams with quotas and 54 jobs of mixed shapes, all submitted with plain sbatch, run to
// the end under gantryd. Polled throughout (squeue, /v1/usage, /v1/jobs) and checked after
// (sacct, gantryd's state):
// - placements inside topology domains: with a profile that holds multi-node jobs to one leaf
//   switch, every job ran inside one innermost domain (a leaf switch of topology.conf, as
//   `gantry cluster import --from-slurm` wrote the spec) -- the two-node jobs that name no GPU
//   type could have spanned both switches, and with the default profile some do;
// - quotas: at every poll no team's running jobs hold more GPUs than its GrpTRES, by Slurm's
//   view (squeue) and by gantryd's (/v1/usage);
// - fair order: of two jobs of one team with the same shape (GRES and node count; all have the
//   same time limit, so the same priority but for age), the one Slurm recorded as submitted in
//   an earlier second started no later (sacct's Start, whole seconds);
// - every job gantryd lists as pending has a reason code (and a sentence) at every poll;
// - every job completed exactly once (one sacct record, COMPLETED; gantryd recorded it done,
//   completed, never requeued, on the nodes Slurm ran it on).
TEST_F(GantrydSlurmTest, ThreeTeamsWithQuotasFiftyFourJobsFairOrderInsideDomains) {
  // The cluster's three teams (scripts/slurm): physics 16 GPUs, biology 8, chemistry 8.
  const std::map<std::string, int> quota = {{"physics", 16}, {"biology", 8}, {"chemistry", 8}};

  SetUpSite();
  Result<Cluster> site = LoadClusterSpecFile(tmp_.sub("site.yaml"));
  ASSERT_TRUE(site.ok()) << site.status().ToString();
  std::map<std::string, int> imported;
  for (const Team& t : site->teams()) imported[t.name] = t.quota_gpus;
  for (const auto& [team, gpus] : quota) EXPECT_EQ(imported[team], gpus) << team;
  std::map<std::string, DomainIndex> domain_of;
  for (const Node& n : site->nodes()) domain_of[n.name] = n.domain;
  ASSERT_EQ(domain_of.size(), 4u);
  ASSERT_NE(domain_of["n1"], domain_of["n3"]) << "the import lost topology.conf's switches";
  // Whether `nodes` lie inside one innermost domain.
  auto one_domain = [&](const std::vector<std::string>& nodes) {
    std::set<DomainIndex> d;
    for (const std::string& n : nodes) d.insert(domain_of.count(n) > 0 ? domain_of[n] : -2);
    return d.size() == 1 && *d.begin() >= 0;
  };

  // The default profile with multi-node jobs held to one leaf switch, as a site whose jobs
  // need the switch's bandwidth sets it. (The `gantry` profile itself puts a job in the
  // smallest domain that holds it now -- the spine, when no single switch has room.)
  std::ofstream(tmp_.sub("profiles.yaml"))
      << "profiles:\n"
         "  gantry-leaf:\n"
         "    description: \"gantry, multi-node jobs inside one leaf switch\"\n"
         "    priority:\n"
         "      - {plugin: age, weight: 1000, args: {max_age: 7d}}\n"
         "      - {plugin: fairshare, weight: 10000, args: {half_life: 7d}}\n"
         "      - {plugin: job-size, weight: 1000}\n"
         "      - {plugin: qos, weight: 1000, args: {max_qos: 3}}\n"
         "    admission: [quota]\n"
         "    placement: {plugin: topology, args: {max_span_level: leaf}}\n"
         "    backfill: {mode: easy, max_jobs: 500, max_scan: 1000000}\n"
         "    priority_recalc_interval: 5m\n";
  std::vector<std::string> args = GantrydArgs();
  args.insert(args.end(), {"--profiles", tmp_.sub("profiles.yaml"), "--profile", "gantry-leaf"});
  const std::string log = tmp_.sub("gantryd.log");
  Gantryd gantryd(args, log);
  const int port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);

  // Mixed shapes per team (GRES, nodes), each team's within its quota; the two-node "gpu:N"
  // jobs name no type and so could straddle the switches.
  struct Shape {
    std::string gres;
    int nodes;
  };
  const std::map<std::string, std::vector<Shape>> shapes = {
      {"physics", {{"gpu:h100:2", 1}, {"gpu:4", 2}, {"gpu:h100:8", 2}, {"gpu:a100:1", 1}}},
      {"biology", {{"gpu:a100:1", 1}, {"gpu:2", 2}, {"gpu:h100:2", 1}, {"gpu:a100:4", 1}}},
      {"chemistry", {{"gpu:h100:1", 1}, {"gpu:4", 2}, {"gpu:a100:2", 1}, {"gpu:1", 1}}}};
  const std::vector<std::string> teams = {"physics", "biology", "chemistry"};
  struct Submitted {
    std::string team;
    std::string shape;
  };
  std::map<int64_t, Submitted> jobs;
  for (int i = 0; i < 54; ++i) {
    // Two waves a second apart, each with every team's every shape: sacct's submit times have
    // whole seconds, and on an idle machine 54 sbatch calls take less than one, which would
    // leave the fair-order check below with no pair to compare.
    if (i == 27) std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    const std::string& team = teams[static_cast<size_t>(i % 3)];
    const Shape& s = shapes.at(team)[static_cast<size_t>(i / 3) % 4];
    const int64_t id = Submit(team, s.gres, s.nodes, i % 4 == 0 ? "sleep 2" : "sleep 1");
    ASSERT_GT(id, 0);
    jobs[id] = {team, s.gres + "x" + std::to_string(s.nodes)};
  }

  httplib::Client api("127.0.0.1", port);
  const httplib::Headers op = {{"Authorization", "Bearer op-token"}};
  std::set<int64_t> left;
  for (const auto& [id, j] : jobs) left.insert(id);
  int polls = 0, pending_seen = 0, over_quota = 0, no_reason = 0, split = 0;
  std::map<std::string, int> peak;  // the most GPUs each team ran at once (squeue)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    ++polls;
    // Slurm's view: running GPUs per team, and where each running job is.
    auto sq = client_->Jobs();
    ASSERT_TRUE(sq.ok()) << sq.status().ToString();
    std::map<std::string, int> running;
    for (const slurm::SlurmJob& j : *sq) {
      if (jobs.count(j.id) == 0) continue;
      if (j.state == slurm::JobState::kRunning) {
        running[j.account] += j.gpus;
        if (!one_domain(j.nodes)) {
          ++split;
          ADD_FAILURE() << "job " << j.id << " runs across domains";
        }
      }
    }
    for (const auto& [team, gpus] : running) {
      peak[team] = std::max(peak[team], gpus);
      if (gpus > quota.at(team)) {
        ++over_quota;
        ADD_FAILURE() << team << " runs " << gpus << " GPUs, quota " << quota.at(team);
      }
    }
    // gantryd's view: usage against quota, and a reason for every pending job (every page).
    auto usage = api.Get("/v1/usage", op);
    ASSERT_TRUE(usage && usage->status == 200) << ReadFile(log);
    for (const auto& t : nlohmann::json::parse(usage->body).at("teams")) {
      const std::string team = t.at("team");
      if (quota.count(team) == 0 || t.at("quota_gpus").is_null()) continue;
      EXPECT_EQ(t.at("quota_gpus").get<int>(), quota.at(team));
      if (t.at("running_gpus").get<int>() > quota.at(team)) {
        ++over_quota;
        ADD_FAILURE() << "gantryd runs " << t.dump();
      }
    }
    for (std::string path = "/v1/jobs?phase=pending&limit=20"; !path.empty();) {
      auto r = api.Get(path, op);
      ASSERT_TRUE(r && r->status == 200) << path << "\n" << ReadFile(log);
      const nlohmann::json body = nlohmann::json::parse(r->body);
      for (const auto& j : body.at("jobs")) {
        if (jobs.count(std::stoll(j.at("id").get<std::string>())) == 0) continue;
        ++pending_seen;
        const std::string reason = j.at("reason");
        if (reason.empty() || reason == "None" || j.at("explain").get<std::string>().empty()) {
          ++no_reason;
          ADD_FAILURE() << "pending without a reason: " << j.dump();
        }
      }
      path = body.at("next").is_null() ? "" : body.at("next").get<std::string>();
    }
    for (const slurm::SlurmJob& j : *sq) {
      const bool ended = j.state != slurm::JobState::kPending &&
                         j.state != slurm::JobState::kRunning &&
                         j.state != slurm::JobState::kCompleting;
      if (ended) left.erase(j.id);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(left.empty()) << left.size() << " jobs never ended; first " << *left.begin() << "\n"
                            << ReadFile(log);
  EXPECT_GT(polls, 5);
  EXPECT_GT(pending_seen, 0) << "no job ever waited: the quotas and order went untested";
  EXPECT_EQ(over_quota, 0);
  EXPECT_EQ(no_reason, 0);
  EXPECT_EQ(split, 0);
  // The quotas bound: physics and biology each filled theirs at some poll.
  EXPECT_GT(peak["physics"], 0);
  gantryd.Kill(SIGTERM);
  EXPECT_EQ(gantryd.exit_code(), 0) << ReadFile(log);

  // Slurm's accounting against gantryd's records.
  auto store = control::StateStore::Open(tmp_.sub("state.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  struct Ran {
    std::string submit, start;
  };
  std::map<std::string, std::vector<std::pair<int64_t, Ran>>> by_shape;  // team/shape -> runs
  for (const auto& [id, job] : jobs) {
    const std::string sid = std::to_string(id);
    std::string sacct;
    for (int i = 0; i < 150; ++i) {
      auto out = client_->Run(
          {"sacct", "-D", "-X", "-n", "-P", "-j", sid, "--format=State,NodeList,Submit,Start"});
      if (out.ok() && out->find("COMPLETED") != std::string::npos) {
        sacct = *out;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_FALSE(sacct.empty()) << "sacct has no completed record of " << sid;
    EXPECT_EQ(std::count(sacct.begin(), sacct.end(), '\n'), 1) << sid << " ran more than once:\n"
                                                               << sacct;
    std::vector<std::string> f;
    std::stringstream line(sacct.substr(0, sacct.find('\n')));
    for (std::string field; std::getline(line, field, '|');) f.push_back(field);
    ASSERT_EQ(f.size(), 4u) << sacct;
    EXPECT_EQ(f[0], "COMPLETED") << sid;
    auto nodes = slurm::ExpandHostlist(f[1]);
    ASSERT_TRUE(nodes.ok()) << f[1];
    EXPECT_TRUE(one_domain(*nodes)) << sid << " (" << job.shape << ") ran on " << f[1];
    by_shape[job.team + " " + job.shape].push_back({id, {f[2], f[3]}});

    Result<control::JobRecord> r = (*store)->Get(sid);
    ASSERT_TRUE(r.ok()) << sid << ": " << r.status().ToString();
    EXPECT_EQ(r->phase, control::JobPhase::kDone) << sid;
    EXPECT_EQ(r->end_reason, "completed") << sid;
    EXPECT_EQ(r->requeues, 0) << sid;
    EXPECT_EQ(r->team, job.team);
    std::set<std::string> recorded;
    for (const control::NodeGpus& s : r->placement) recorded.insert(s.node);
    EXPECT_EQ(std::set<std::string>(nodes->begin(), nodes->end()), recorded)
        << sid << " ran on " << f[1] << ", not where gantryd decided";
  }
  int pairs = 0;
  for (const auto& [key, runs] : by_shape) {
    for (const auto& [a, ra] : runs) {
      for (const auto& [b, rb] : runs) {
        if (!(ra.submit < rb.submit)) continue;  // same format: compares as times
        ++pairs;
        EXPECT_LE(ra.start, rb.start)
            << key << ": job " << a << " (submitted " << ra.submit << ") started at " << ra.start
            << ", after job " << b << " (submitted " << rb.submit << ") at " << rb.start;
      }
    }
  }
  EXPECT_GT(pairs, 0) << "no two jobs of one shape were submitted in different seconds";
}

// gantryd's default profile preempts for fair share. With one share per team (the imported spec
// gives each team its quota as shares, which makes physics' 16 GPUs its due), physics runs two
// 8-GPU jobs (all of the H100 nodes), and biology submits one: it would hold 8 per share against
// physics' 16. The victim must be physics' requeueable job, though the --no-requeue one started
// later and so is the cheaper victim by checkpoint cost: Slurm would refuse to requeue it, and it
// runs on.
TEST_F(GantrydSlurmTest, DefaultProfilePreemptsForFairShareButNeverANoRequeueJob) {
  SetUpSite();
  std::string spec = ReadFile(tmp_.sub("site.yaml"));
  for (const char* team : {"physics", "biology"}) {
    const std::string from = std::string("{name: \"") + team + "\", quota_gpus: ";
    const size_t at = spec.find(from);
    ASSERT_NE(at, std::string::npos) << spec;
    spec.insert(spec.find('}', at), ", shares: 1");
  }
  std::ofstream(tmp_.sub("site.yaml")) << spec;
  const std::string log = tmp_.sub("gantryd.log");
  Gantryd gantryd(GantrydArgs(), log);  // the default profile
  const int port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);
  auto submit = [&](const std::string& account, bool requeue, const std::string& command) {
    std::vector<std::string> argv = {"sbatch",
                                     "--parsable",
                                     "-p",
                                     partition_,
                                     "-A",
                                     account,
                                     "-N",
                                     "1",
                                     "--gres=gpu:h100:8",
                                     "-t",
                                     "5",
                                     "-o",
                                     dir_ + "/jobs/%j.out",
                                     "--wrap",
                                     command};
    if (!requeue) argv.insert(argv.begin() + 2, "--no-requeue");
    auto out = client_->Run(argv);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? std::stoll(*out) : int64_t{-1};
  };
  struct CancelAtEnd {
    slurm::SlurmClient* client;
    std::vector<int64_t> ids;
    ~CancelAtEnd() {
      for (int64_t id : ids) (void)client->Cancel(id);
    }
  } cancel{client_.get(), {}};
  auto running = [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kRunning; };
  const int64_t requeueable = submit("physics", true, "sleep 300");
  ASSERT_GT(requeueable, 0);
  cancel.ids.push_back(requeueable);
  ASSERT_TRUE(WaitJob(requeueable, running, kPatience).ok()) << ReadFile(log);
  const int64_t fixed = submit("physics", false, "sleep 300");
  ASSERT_GT(fixed, 0);
  cancel.ids.push_back(fixed);
  ASSERT_TRUE(WaitJob(fixed, running, kPatience).ok()) << ReadFile(log);

  const int64_t fair = submit("biology", true, "hostname; sleep 2");
  ASSERT_GT(fair, 0);
  cancel.ids.push_back(fair);
  Result<slurm::SlurmJob> v = WaitJob(
      requeueable,
      [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kPending && j.held; },
      kPatience);
  httplib::Client api("127.0.0.1", port);
  ASSERT_TRUE(v.ok()) << v.status().ToString() << "\n"
                      << ApiJob(api, fair).dump() << "\n"
                      << ReadFile(log);
  EXPECT_GE(v->restart_count, 1);
  EXPECT_TRUE(LeavesTheApi(api, fair)) << ReadFile(log);  // it ran, on the victim's node
  Result<slurm::SlurmJob> f = client_->Job(fixed);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->state, slurm::JobState::kRunning);
  EXPECT_EQ(f->restart_count, 0);

  gantryd.Kill(SIGTERM);
  auto store = control::StateStore::Open(tmp_.sub("state.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto events = (*store)->Events(0, 100000);
  ASSERT_TRUE(events.ok());
  std::string preempts;
  for (const control::StoreEvent& e : *events) {
    if (e.kind == "preempt" || e.kind == "requeue-refused") {
      preempts += e.job + " " + e.kind + " " + e.detail + "\n";
    }
  }
  EXPECT_EQ(preempts, std::to_string(requeueable) + " preempt by " + std::to_string(fair) + "\n")
      << ReadFile(log);
}

// Preemption by QOS with a grace time on the real Slurm (Slurm's own preemption is off; gantryd
// decides): a running job of QOS normal on both h100 nodes is preempted by a `--qos=high` job
// under a profile with `mode: qos` and 6 s of grace. The victim gets the signal (its trap
// records it) and runs on; after the grace time gantryd holds it again (requeued, held, restart
// count up), and the preemptor runs on one of the GPUs it freed. The levels come from the QOS
// that `gantry cluster import --from-slurm` read from sacctmgr.
TEST_F(GantrydSlurmTest, QosPreemptionWithAGraceTime) {
  constexpr int kGrace = 6;
  SetUpSite();
  Result<Cluster> site = LoadClusterSpecFile(tmp_.sub("site.yaml"));
  ASSERT_TRUE(site.ok()) << site.status().ToString();
  ASSERT_EQ(site->QosLevel("high"), 1) << ReadFile(tmp_.sub("site.yaml"));
  ASSERT_EQ(site->QosLevel("normal"), 0);
  std::ofstream(tmp_.sub("profiles.yaml"))
      << "profiles:\n"
         "  qos-grace:\n"
         "    priority:\n"
         "      - {plugin: age, weight: 1000, args: {max_age: 7d}}\n"
         "      - {plugin: qos, weight: 100000, args: {max_qos: 3}}\n"
         "    admission: [quota]\n"
         "    placement: first-fit\n"
         "    backfill: {mode: easy}\n"
         "    preemption: {plugin: checkpoint-aware, args: {mode: qos, grace_time: "
      << kGrace << "}}\n";
  std::vector<std::string> args = GantrydArgs();
  args.insert(args.end(), {"--profiles", tmp_.sub("profiles.yaml"), "--profile", "qos-grace",
                           "--preempt-signal", "USR1"});
  const std::string log = tmp_.sub("gantryd.log");
  Gantryd gantryd(args, log);
  const int port = WaitPort();
  ASSERT_GT(port, 0) << ReadFile(log);
  httplib::Client api("127.0.0.1", port);

  // The victim records each signal and runs on (its sleeps die of USR1 too: --full); stopped by
  // the requeue it takes its time, as a job saving at SIGTERM does (Slurm kills it after
  // KillWait), so gantryd sees it completing.
  const std::string mark = tmp_.sub("victim.signals");
  auto submit = [&](const std::string& account, const std::string& qos, int nodes,
                    const std::string& command) -> int64_t {
    auto out = client_->Run({"sbatch", "--parsable", "-p", partition_, "-A", account,
                             "--qos=" + qos, "-N", std::to_string(nodes), "--gres=gpu:h100:8", "-t",
                             "5", "-o", dir_ + "/jobs/%j.out", "--wrap", command});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? std::stoll(*out) : -1;
  };
  const int64_t victim = submit("physics", "normal", 2,
                                "trap 'echo usr1 >> " + mark +
                                    "' USR1; trap 'sleep 10' TERM; while true; do sleep 0.2; done");
  ASSERT_GT(victim, 0);
  // Whatever fails below, neither job outlives the test.
  struct CancelAtEnd {
    slurm::SlurmClient* client;
    std::vector<int64_t> ids;
    ~CancelAtEnd() {
      for (int64_t id : ids) (void)client->Cancel(id);
    }
  } cancel{client_.get(), {victim}};
  auto running = [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kRunning; };
  ASSERT_TRUE(WaitJob(victim, running, kPatience).ok()) << ReadFile(log);

  const int64_t preemptor = submit("biology", "high", 1, "hostname; sleep 2");
  ASSERT_GT(preemptor, 0);
  cancel.ids.push_back(preemptor);
  // The victim gets the signal while the preemptor waits, held.
  ASSERT_TRUE(Eventually([&] { return ReadFile(mark).find("usr1") != std::string::npos; }))
      << ReadFile(log);
  Result<slurm::SlurmJob> pre = client_->Job(preemptor);
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(pre->state, slurm::JobState::kPending);
  nlohmann::json view = ApiJob(api, preemptor);
  ASSERT_FALSE(view.is_null());
  EXPECT_EQ(view.at("qos_name"), "high");
  EXPECT_EQ(view.at("qos"), 1);

  // After the grace time the victim is held again, and the preemptor runs on its GPUs.
  Result<slurm::SlurmJob> v = WaitJob(
      victim,
      [](const slurm::SlurmJob& j) { return j.state == slurm::JobState::kPending && j.held; },
      kPatience);
  ASSERT_TRUE(v.ok()) << v.status().ToString() << "\n" << ReadFile(log);
  EXPECT_GE(v->restart_count, 1);
  pre = WaitJob(
      preemptor, [](const slurm::SlurmJob& j) { return !j.nodes.empty(); }, kPatience);
  ASSERT_TRUE(pre.ok()) << pre.status().ToString() << "\n" << ReadFile(log);
  ASSERT_EQ(pre->nodes.size(), 1u);
  EXPECT_TRUE(pre->nodes[0] == "n1" || pre->nodes[0] == "n2") << pre->nodes[0];
  EXPECT_TRUE(LeavesTheApi(api, preemptor)) << ReadFile(log);  // it ran to the end
  view = ApiJob(api, victim);
  ASSERT_FALSE(view.is_null());
  EXPECT_EQ(view.at("qos_name"), "normal");
  EXPECT_EQ(view.at("qos"), 0);
  EXPECT_GE(view.at("requeues").get<int>(), 1);

  // gantryd's log: the signal, then the requeue no earlier than the grace end.
  gantryd.Kill(SIGTERM);
  auto store = control::StateStore::Open(tmp_.sub("state.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto events = (*store)->Events(0, 100000);
  ASSERT_TRUE(events.ok());
  Time signalled = -1, requeued = -1;
  int requeues = 0;
  std::string victim_log;
  for (const control::StoreEvent& e : *events) {
    if (e.job != std::to_string(victim)) continue;
    victim_log += std::to_string(e.time) + " " + e.kind + " " + e.detail + "\n";
    if (e.kind == "preempt-signal" && signalled < 0) signalled = e.time;
    if (e.kind == "requeue" && requeued < 0) requeued = e.time;
    requeues += e.kind == "requeue" ? 1 : 0;
    // Slurm reports the requeued victim completing, on its nodes, until its processes are
    // gone: that is not a start behind Gantry's back.
    EXPECT_NE(e.kind, "released-outside") << victim_log;
  }
  ASSERT_GE(signalled, 0) << ReadFile(log);
  ASSERT_GE(requeued, 0) << ReadFile(log);
  EXPECT_GE(requeued - signalled, kGrace);
  EXPECT_EQ(requeues, 1) << victim_log;
  Result<control::JobRecord> pr = (*store)->Get(std::to_string(preemptor));
  ASSERT_TRUE(pr.ok());
  EXPECT_EQ(pr->phase, control::JobPhase::kDone);
  EXPECT_EQ(pr->end_reason, "completed");
  EXPECT_TRUE((*store)->Preemptions()->empty());
}

}  // namespace
}  // namespace gantry
