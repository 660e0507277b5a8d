#include "gantry/control/state_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "common/test_support.h"
#include "gantry/common/rng.h"

namespace gantry::control {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;

JobRecord MakeJob(const std::string& id, Time submit, int gpus) {
  JobRecord j;
  j.id = id;
  j.user = "alice";
  j.team = "vision";
  j.queue = "gpu";
  j.gpu_types = {"a100", "h100"};
  j.submit = submit;
  j.gpus = gpus;
  j.gpus_per_node = gpus >= 8 ? 8 : 0;
  j.nodes = gpus >= 8 ? gpus / 8 : 0;
  j.time_limit = 3600;
  j.qos = 2;
  j.qos_name = "high";
  j.checkpoint_interval = 600;
  j.restart_cost = 120;
  j.datasets = {"s3://data/" + id, "file:///shared/common"};
  j.checkpoint = "s3://ckpt/" + id;
  return j;
}

std::unique_ptr<StateStore> OpenOrDie(const std::string& path) {
  auto s = StateStore::Open(path);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(StateStore, LifecycleSurvivesReopen) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  {
    auto store = OpenOrDie(db);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->AddJob(MakeJob("101", 10, 16), 10).ok());
    ASSERT_TRUE(store->AddJob(MakeJob("102", 5, 2), 11).ok());
    ASSERT_TRUE(store->AddJob(MakeJob("103", 20, 1), 12).ok());
    ASSERT_TRUE(store->Decide("101", {{"n1", 8}, {"n2", 8}}, 30).ok());
    ASSERT_TRUE(store->Started("101", 31).ok());
    ASSERT_TRUE(store->Decide("103", {{"n3", 1}}, 32).ok());
    ASSERT_TRUE(store->Requeue("103", 33, "slurm refused: node n3 down").ok());
    ASSERT_TRUE(store->Decide("102", {{"n4", 2}}, 34).ok());
    ASSERT_TRUE(store->Started("102", 35, {{"n5", 2}}).ok());  // Slurm's word wins
    ASSERT_TRUE(store->Finish("102", 40, "completed").ok());
  }
  auto store = OpenOrDie(db);
  ASSERT_NE(store, nullptr);
  Result<std::vector<JobRecord>> active = store->ActiveJobs();
  ASSERT_TRUE(active.ok()) << active.status().ToString();
  ASSERT_EQ(active->size(), 2u);
  const JobRecord& a = (*active)[0];  // by submit time
  EXPECT_EQ(a.id, "101");
  EXPECT_EQ(a.phase, JobPhase::kRunning);
  EXPECT_EQ(a.placement, (std::vector<NodeGpus>{{"n1", 8}, {"n2", 8}}));
  EXPECT_EQ(a.decided, 30);
  EXPECT_EQ(a.started, 31);
  const JobRecord want = MakeJob("101", 10, 16);
  EXPECT_EQ(a.user, want.user);
  EXPECT_EQ(a.team, want.team);
  EXPECT_EQ(a.queue, want.queue);
  EXPECT_EQ(a.gpu_types, want.gpu_types);
  EXPECT_EQ(a.gpus, 16);
  EXPECT_EQ(a.gpus_per_node, 8);
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.time_limit, 3600);
  EXPECT_EQ(a.qos, 2);
  EXPECT_EQ(a.qos_name, "high");
  EXPECT_EQ(a.checkpoint_interval, 600);
  EXPECT_EQ(a.restart_cost, 120);
  EXPECT_EQ(a.datasets, want.datasets);
  EXPECT_EQ(a.checkpoint, "s3://ckpt/101");
  const JobRecord& c = (*active)[1];
  EXPECT_EQ(c.id, "103");
  EXPECT_EQ(c.phase, JobPhase::kPending);
  EXPECT_TRUE(c.placement.empty());
  EXPECT_EQ(c.requeues, 1);
  EXPECT_EQ(c.decided, -1);

  Result<JobRecord> done = store->Get("102");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->phase, JobPhase::kDone);
  EXPECT_EQ(done->placement, (std::vector<NodeGpus>{{"n5", 2}}));
  EXPECT_EQ(done->ended, 40);
  EXPECT_EQ(done->end_reason, "completed");

  Result<std::vector<StoreEvent>> events = store->Events(0, 100);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> kinds;
  for (const StoreEvent& e : *events) kinds.push_back(e.job + ":" + e.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"101:submit", "102:submit", "103:submit", "101:decide",
                                             "101:start", "103:decide", "103:requeue", "102:decide",
                                             "102:start", "102:finish"}));
  EXPECT_EQ((*events)[6].detail, "slurm refused: node n3 down");
  Result<std::vector<StoreEvent>> tail = store->Events((*events)[7].seq, 100);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->size(), 2u);
  Result<std::vector<int64_t>> counts = store->CountByPhase();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<int64_t>{1, 0, 1, 1}));
}

// The shared records: the same object until the job changes, in submit order, and what an
// open batch staged is seen (as a copy) before it commits.
TEST(StateStore, SharedRecordsChangeOnlyWithTheirJob) {
  TempDir dir("gantry-store-refs");
  auto store = OpenOrDie(dir.sub("state.db"));
  ASSERT_TRUE(store->AddJob(MakeJob("b", 10, 2), 1).ok());
  ASSERT_TRUE(store->AddJob(MakeJob("a", 10, 1), 1).ok());
  ASSERT_TRUE(store->AddJob(MakeJob("c", 5, 4), 1).ok());
  auto refs = store->ActiveJobRefs();
  ASSERT_TRUE(refs.ok());
  std::vector<std::string> ids;
  for (const auto& r : *refs) ids.push_back(r->id);
  EXPECT_EQ(ids, (std::vector<std::string>{"c", "a", "b"}));  // submit time, then id
  auto a1 = store->GetRef("a");
  ASSERT_TRUE(a1.ok());
  EXPECT_EQ(a1->get(), (*refs)[1].get());
  ASSERT_TRUE(store->Decide("a", {{"n1", 1}}, 2).ok());
  auto a2 = store->GetRef("a");
  ASSERT_TRUE(a2.ok());
  EXPECT_NE(a2->get(), a1->get());
  EXPECT_EQ((*a1)->phase, JobPhase::kPending);  // the old record is unchanged
  EXPECT_EQ((*a2)->phase, JobPhase::kStarting);
  EXPECT_EQ(store->GetRef("b")->get(), (*refs)[2].get());
  ASSERT_TRUE(store
                  ->Batch([&]() -> Status {
                    GANTRY_RETURN_IF_ERROR(store->Finish("c", 3, "completed"));
                    GANTRY_RETURN_IF_ERROR(store->Decide("b", {{"n2", 2}}, 3));
                    auto b = store->GetRef("b");
                    EXPECT_TRUE(b.ok() && (*b)->phase == JobPhase::kStarting);
                    auto inside = store->ActiveJobRefs();
                    EXPECT_TRUE(inside.ok() && inside->size() == 2u);
                    EXPECT_EQ(store->GetRef("a")->get(), a2->get());
                    return Status::Ok();
                  })
                  .ok());
  refs = store->ActiveJobRefs();
  ASSERT_TRUE(refs.ok());
  ASSERT_EQ(refs->size(), 2u);
  EXPECT_EQ((*refs)[0]->id, "a");
  EXPECT_EQ((*refs)[1]->id, "b");
  EXPECT_EQ((*refs)[1]->phase, JobPhase::kStarting);
  EXPECT_EQ(store->GetRef("zz").status().code(), StatusCode::kNotFound);
  auto ended = store->GetRef("c");  // from the database
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ((*ended)->phase, JobPhase::kDone);
}

TEST(StateStore, RefusesWhatIsNotAllowedWithCodes) {
  TempDir dir;
  auto store = OpenOrDie(dir.sub("state.db"));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->AddJob(MakeJob("1", 0, 4), 0).ok());
  EXPECT_EQ(store->AddJob(MakeJob("1", 0, 4), 0).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(store->AddJob(MakeJob("", 0, 4), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->AddJob(MakeJob("2", 0, 0), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Decide("nope", {{"n1", 1}}, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Decide("1", {}, 1).code(), StatusCode::kInvalidArgument);
  // Only a pending job is decided; only a decided one starts; done is final.
  EXPECT_EQ(store->Started("1", 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Requeue("1", 1, "x").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->Decide("1", {{"n1", 4}}, 1).ok());
  EXPECT_EQ(store->Decide("1", {{"n2", 4}}, 2).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->Started("1", 2).ok());
  ASSERT_TRUE(store->Started("1", 3).ok());  // reported again: no change
  EXPECT_EQ(store->Get("1")->started, 2);
  ASSERT_TRUE(store->Finish("1", 4, "cancelled").ok());
  EXPECT_EQ(store->Finish("1", 5, "completed").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Get("1")->end_reason, "cancelled");
  // A refused transition changed nothing and logged nothing.
  EXPECT_EQ(store->Events(0, 100)->size(), 4u);
}

TEST(StateStore, OneProcessPerDatabaseWhateverThePathSays) {
  TempDir dir;
  fs::create_directories(dir.sub("a"));
  const std::string db = dir.sub("a/state.db");
  auto first = OpenOrDie(db);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(StateStore::Open(db).status().code(), StatusCode::kFailedPrecondition);
  // The same file through a symlink and through "..".
  fs::create_symlink(db, dir.sub("link.db"));
  EXPECT_EQ(StateStore::Open(dir.sub("link.db")).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(StateStore::Open(dir.sub("a/../a/state.db")).status().code(),
            StatusCode::kFailedPrecondition);
  first.reset();
  EXPECT_NE(OpenOrDie(dir.sub("link.db")), nullptr);
}

TEST(StateStore, RefusesFilesThatAreNotItsDatabase) {
  TempDir dir;
  std::ofstream(dir.sub("junk.db")) << std::string(8192, 'x');
  Result<std::unique_ptr<StateStore>> junk = StateStore::Open(dir.sub("junk.db"));
  EXPECT_EQ(junk.status().code(), StatusCode::kDataLoss) << junk.status().ToString();

  // Another program's SQLite database is neither taken over nor changed.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(dir.sub("other.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "CREATE TABLE t (x); INSERT INTO t VALUES (1);", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(other);
  Result<std::unique_ptr<StateStore>> foreign = StateStore::Open(dir.sub("other.db"));
  EXPECT_EQ(foreign.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(foreign.status().message().find("not a Gantry state database"), std::string::npos);

  EXPECT_EQ(StateStore::Open(dir.sub("missing/state.db")).status().code(), StatusCode::kNotFound);
}

// A batch is one transaction: its writes are seen inside it, a failed write inside undoes only
// itself, and everything is durable once it returns OK -- or gone if its function fails.
TEST(StateStore, BatchCommitsTogetherAndAFailedStepUndoesOnlyItself) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  {
    auto store = OpenOrDie(db);
    ASSERT_TRUE(store->AddJob(MakeJob("1", 0, 4), 0).ok());
    Status s = store->Batch([&]() -> Status {
      EXPECT_TRUE(store->AddJob(MakeJob("2", 1, 2), 5).ok());
      // The same job again fails inside the batch and leaves the rest alone.
      EXPECT_EQ(store->AddJob(MakeJob("2", 1, 2), 5).code(), StatusCode::kAlreadyExists);
      // Transitions see the batch's own writes: decided, then refused and requeued.
      EXPECT_TRUE(store->Decide("2", {{"n1", 2}}, 6).ok());
      EXPECT_EQ(store->Get("2")->phase, JobPhase::kStarting);
      EXPECT_TRUE(store->Requeue("2", 6, "refused").ok());
      EXPECT_TRUE(store->Finish("1", 6, "completed").ok());
      EXPECT_EQ(store->ActiveJobs()->size(), 1u);  // "1" ended inside the batch
      return Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
    // A batch whose function fails leaves nothing behind, in memory or on disk.
    s = store->Batch([&]() -> Status {
      EXPECT_TRUE(store->AddJob(MakeJob("3", 2, 1), 7).ok());
      EXPECT_TRUE(store->Decide("2", {{"n2", 2}}, 7).ok());
      return Aborted("changed my mind");
    });
    EXPECT_EQ(s.code(), StatusCode::kAborted);
    EXPECT_EQ(store->Get("3").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(store->Get("2")->phase, JobPhase::kPending);
  }
  auto store = OpenOrDie(db);
  Result<JobRecord> two = store->Get("2");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->phase, JobPhase::kPending);
  EXPECT_EQ(two->requeues, 1);
  EXPECT_TRUE(two->placement.empty());
  EXPECT_EQ(store->Get("1")->phase, JobPhase::kDone);
  EXPECT_EQ(store->Get("1")->end_reason, "completed");
  EXPECT_EQ(store->Get("3").status().code(), StatusCode::kNotFound);
  ASSERT_EQ(store->ActiveJobs()->size(), 1u);
  Result<std::vector<StoreEvent>> events = store->Events(0, 100);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> kinds;
  for (const StoreEvent& e : *events) kinds.push_back(e.kind + ":" + e.job);
  EXPECT_EQ(kinds, (std::vector<std::string>{"submit:1", "submit:2", "decide:2", "requeue:2",
                                             "finish:1"}));
}

// An exception out of a batch's function rolls the batch back and leaves the store usable: the
// next write commits on its own (before, the transaction stayed open and later writes only
// nested inside it, never reaching the disk).
TEST(StateStore, AnExceptionOutOfABatchRollsItBack) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  {
    auto store = OpenOrDie(db);
    EXPECT_THROW((void)store->Batch([&]() -> Status {
      EXPECT_TRUE(store->AddJob(MakeJob("1", 0, 4), 0).ok());
      throw std::runtime_error("the caller's code failed");
    }),
                 std::runtime_error);
    EXPECT_EQ(store->Get("1").status().code(), StatusCode::kNotFound);
    ASSERT_TRUE(store->AddJob(MakeJob("2", 0, 4), 1).ok());
  }
  auto store = OpenOrDie(db);
  EXPECT_EQ(store->Get("1").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->Get("2").ok());
}

// What memory answers equals what the database holds: every record read back after reopening
// (from SQLite) matches the one read before (from memory), through a random history.
TEST(StateStore, MemoryAndDatabaseAgree) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  Rng rng(7);
  std::vector<JobRecord> before;
  {
    auto store = OpenOrDie(db);
    for (int i = 0; i < 60; ++i) {
      const std::string id = std::to_string(i);
      ASSERT_TRUE(store->AddJob(MakeJob(id, static_cast<Time>(rng.Below(50)), 1 + i % 4), i).ok());
      const int steps = static_cast<int>(rng.Below(5));
      for (int k = 0; k < steps; ++k) {
        const JobPhase p = store->Get(id)->phase;
        if (p == JobPhase::kPending) (void)store->Decide(id, {{"n" + std::to_string(k), 1}}, i);
        if (p == JobPhase::kStarting) (void)store->Started(id, i + 1);
        if (p == JobPhase::kRunning && rng.Below(2) == 0) (void)store->Requeue(id, i + 2, "x");
        if (p == JobPhase::kRunning && k == 3) (void)store->Finish(id, i + 3, "completed");
      }
    }
    before = *store->ActiveJobs();
  }
  auto store = OpenOrDie(db);
  std::vector<JobRecord> after = *store->ActiveJobs();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].id, before[i].id);
    EXPECT_EQ(after[i].phase, before[i].phase) << after[i].id;
    EXPECT_EQ(after[i].placement, before[i].placement) << after[i].id;
    EXPECT_EQ(after[i].decided, before[i].decided) << after[i].id;
    EXPECT_EQ(after[i].started, before[i].started) << after[i].id;
    EXPECT_EQ(after[i].requeues, before[i].requeues) << after[i].id;
    EXPECT_EQ(after[i].gpus, before[i].gpus) << after[i].id;
    EXPECT_EQ(after[i].submit, before[i].submit) << after[i].id;
  }
}

// A database holding job "7", changed behind the store's back by `sql` (raw SQLite).
void OneJobThenSql(const std::string& db, const char* sql) {
  {
    auto store = OpenOrDie(db);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->AddJob(MakeJob("7", 0, 1), 0).ok());
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sql;
  sqlite3_close(raw);
}

TEST(StateStore, ADamagedRecordIsDataLossNamingTheJob) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  OneJobThenSql(db, "UPDATE jobs SET request = '{\"user\": 1' WHERE id = '7'");
  // Active jobs are read when the store opens, so the damage stops gantryd at start rather
  // than in the middle of a decision.
  auto store = StateStore::Open(db);
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(store.status().message().find("job '7'"), std::string::npos)
      << store.status().ToString();
}

// A record written before gantryd kept a job's QOS name (no "qos_name" in its request) still
// reads, with no name and its level as written.
TEST(StateStore, ARecordWithoutAQosNameReads) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  OneJobThenSql(db, "UPDATE jobs SET request = json_remove(request, '$.qos_name')");
  auto store = OpenOrDie(db);
  ASSERT_NE(store, nullptr);
  Result<JobRecord> r = store->Get("7");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->qos_name, "");
  EXPECT_EQ(r->qos, 2);
}

// Preemptions under way are durable: recorded, replaced, listed after reopening, ended.
TEST(StateStore, PreemptionsSurviveReopenUntilEnded) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  {
    auto store = OpenOrDie(db);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->AddPreemption({"9", {}, {}, 1, 2, {}}).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(store->AddPreemption({"9", {"3"}, {{"n1", 8}}, 100, 130, {}}).ok());
    ASSERT_TRUE(store->AddPreemption({"7", {"1", "2"}, {{"n1", 4}, {"n2", 4}}, 10, 40, {}}).ok());
    // Replaces; "3", still signalled, goes on in it with its own grace end.
    ASSERT_TRUE(store->AddPreemption({"9", {"4"}, {{"n3", 8}}, 200, 230, {{"3", 130}}}).ok());
    ASSERT_TRUE(store->EndPreemption("nobody").ok());
  }
  auto store = OpenOrDie(db);
  ASSERT_NE(store, nullptr);
  Result<std::vector<GracePreemption>> p = store->Preemptions();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].preemptor, "7");
  EXPECT_EQ((*p)[0].victims, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ((*p)[0].placement, (std::vector<NodeGpus>{{"n1", 4}, {"n2", 4}}));
  EXPECT_EQ((*p)[0].signalled, 10);
  EXPECT_EQ((*p)[0].grace_end, 40);
  EXPECT_EQ((*p)[1].preemptor, "9");
  EXPECT_EQ((*p)[1].victims, (std::vector<std::string>{"4"}));
  EXPECT_EQ((*p)[1].grace_end, 230);
  EXPECT_EQ((*p)[1].earlier, (std::vector<std::pair<std::string, Time>>{{"3", 130}}));
  EXPECT_TRUE((*p)[0].earlier.empty());
  ASSERT_TRUE(store->EndPreemption("7").ok());
  p = store->Preemptions();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].preemptor, "9");
}

// A database of schema version 1 (before preemptions were recorded) opens, its jobs intact, and
// takes preemptions from then on.
TEST(StateStore, ASchemaOneDatabaseIsUpgraded) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  OneJobThenSql(db, "DROP TABLE preemptions; PRAGMA user_version=1;");
  {
    auto store = OpenOrDie(db);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->Get("7").ok());
    ASSERT_TRUE(store->Preemptions().ok());
    EXPECT_TRUE(store->Preemptions()->empty());
    ASSERT_TRUE(store->AddPreemption({"8", {"7"}, {{"n1", 1}}, 1, 31, {}}).ok());
  }
  auto store = OpenOrDie(db);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Preemptions()->size(), 1u);
}

// A writer killed with SIGKILL at random instants: every AddJob that returned before the kill
// is there after reopening, at most the one in flight besides, and the database is intact.
TEST(StateStore, KillNineKeepsEveryAcknowledgedWrite) {
  TempDir dir;
  const std::string db = dir.sub("state.db");
  Rng rng(4242);
  int64_t total_acked = 0;
  for (int round = 0; round < 6; ++round) {
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(pipefd[0]);
      auto s = StateStore::Open(db);
      if (!s.ok()) ::_exit(3);
      for (int i = 0;; ++i) {
        const std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
        if (!(*s)->AddJob(MakeJob(id, i, 1), i).ok()) ::_exit(4);
        if (i % 3 == 0 && !(*s)->Decide(id, {{"n1", 1}}, i).ok()) ::_exit(5);
        const char ack = 1;
        if (::write(pipefd[1], &ack, 1) != 1) ::_exit(6);
      }
    }
    ::close(pipefd[1]);
    const int kill_after = 5 + static_cast<int>(rng.Next() % 60);
    int acked = 0;
    char c;
    while (acked < kill_after && ::read(pipefd[0], &c, 1) == 1) ++acked;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Acks written before the kill but not yet read still count as acknowledged.
    while (::read(pipefd[0], &c, 1) == 1) ++acked;
    ::close(pipefd[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited " << WEXITSTATUS(status);
    total_acked += acked;

    auto store = OpenOrDie(db);  // the dead writer's lock is gone with it
    ASSERT_NE(store, nullptr);
    Result<std::vector<int64_t>> counts = store->CountByPhase();
    ASSERT_TRUE(counts.ok()) << counts.status().ToString();
    const int64_t jobs = (*counts)[0] + (*counts)[1];
    EXPECT_GE(jobs, total_acked) << "round " << round;
    EXPECT_LE(jobs, total_acked + 1) << "round " << round;
    total_acked = jobs;  // the in-flight one, if it landed, counts from now on
    // Every decided job of the round is recorded as starting, with its placement.
    Result<std::vector<JobRecord>> active = store->ActiveJobs();
    ASSERT_TRUE(active.ok()) << active.status().ToString();
    for (const JobRecord& j : *active) {
      if (j.phase == JobPhase::kStarting) {
        EXPECT_EQ(j.placement.size(), 1u) << j.id;
      }
    }
  }
}

TEST(StateStore, ReconcileOnRestart) {
  using O = ObservedState;
  using A = RecoveryAction;
  EXPECT_EQ(Reconcile(JobPhase::kPending, O::kHeld), A::kResubmit);
  EXPECT_EQ(Reconcile(JobPhase::kPending, O::kRunning), A::kAdopt);  // released by hand
  EXPECT_EQ(Reconcile(JobPhase::kPending, O::kReleased), A::kAdopt);
  EXPECT_EQ(Reconcile(JobPhase::kPending, O::kFinished), A::kFinish);
  EXPECT_EQ(Reconcile(JobPhase::kPending, O::kUnknown), A::kLost);
  for (JobPhase p : {JobPhase::kStarting, JobPhase::kRunning}) {
    EXPECT_EQ(Reconcile(p, O::kHeld), A::kRequeue) << JobPhaseName(p);  // never released
    EXPECT_EQ(Reconcile(p, O::kRunning), A::kAdopt) << JobPhaseName(p);
    EXPECT_EQ(Reconcile(p, O::kFinished), A::kFinish) << JobPhaseName(p);
    EXPECT_EQ(Reconcile(p, O::kUnknown), A::kLost) << JobPhaseName(p);
  }
  // Released after a start decision: it starts soon. Released after it was seen running: the
  // resource manager requeued it on its own (a node failed), so it is held and decided again.
  EXPECT_EQ(Reconcile(JobPhase::kStarting, O::kReleased), A::kAdopt);
  EXPECT_EQ(Reconcile(JobPhase::kRunning, O::kReleased), A::kHoldAgain);
  EXPECT_STREQ(RecoveryActionName(A::kHoldAgain), "hold-again");
}

}  // namespace
}  // namespace gantry::control
