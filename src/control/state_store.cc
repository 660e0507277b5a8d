#include "gantry/control/state_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>

#include "gantry/common/paths.h"

namespace gantry::control {

namespace {

// Bumped when the schema changes; a database of another version is refused, never guessed at,
// except that version 1 (before preemptions) is brought up to 2 by adding the table.
constexpr int kSchemaVersion = 2;
// Written into SQLite's application_id header field: a database of some other program is not
// mistaken for ours.
constexpr int kApplicationId = 0x47414e54;  // "GANT"

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  phase INTEGER NOT NULL,
  submit INTEGER NOT NULL,
  request TEXT NOT NULL,
  placement TEXT NOT NULL DEFAULT '[]',
  decided INTEGER NOT NULL DEFAULT -1,
  started INTEGER NOT NULL DEFAULT -1,
  ended INTEGER NOT NULL DEFAULT -1,
  end_reason TEXT NOT NULL DEFAULT '',
  requeues INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_active ON jobs (phase, submit, id);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time INTEGER NOT NULL,
  job TEXT NOT NULL,
  kind TEXT NOT NULL,
  detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS preemptions (
  preemptor TEXT PRIMARY KEY,
  record TEXT NOT NULL
);
)sql";

// Version 1 -> 2: grace-time preemptions became durable (the table above).
constexpr const char* kMigrateFrom1 = R"sql(
CREATE TABLE IF NOT EXISTS preemptions (
  preemptor TEXT PRIMARY KEY,
  record TEXT NOT NULL
);
PRAGMA user_version=2;
)sql";

Status SqliteStatus(sqlite3* db, int rc, const std::string& what) {
  const std::string msg = what + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return DataLoss(msg);
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return PermissionDenied(msg);
    case SQLITE_FULL:
      return ResourceExhausted(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Unavailable(msg);
    case SQLITE_CANTOPEN:
      return NotFound(msg);
    case SQLITE_CONSTRAINT:
      return AlreadyExists(msg);
    default:
      return IoError(msg);
  }
}

nlohmann::json RequestJson(const JobRecord& j) {
  return {{"user", j.user},
          {"team", j.team},
          {"queue", j.queue},
          {"gpu_types", j.gpu_types},
          {"gpus", j.gpus},
          {"gpus_per_node", j.gpus_per_node},
          {"nodes", j.nodes},
          {"time_limit", j.time_limit},
          {"qos", j.qos},
          {"qos_name", j.qos_name},
          {"checkpoint_interval", j.checkpoint_interval},
          {"restart_cost", j.restart_cost},
          {"datasets", j.datasets},
          {"checkpoint", j.checkpoint}};
}

// A placement as stored: [[node, gpus], ...].
nlohmann::json PlacementArray(const std::vector<NodeGpus>& p) {
  nlohmann::json a = nlohmann::json::array();
  for (const NodeGpus& s : p) a.push_back({s.node, s.gpus});
  return a;
}

std::string PlacementJson(const std::vector<NodeGpus>& p) { return PlacementArray(p).dump(); }

// The reverse; throws nlohmann::json::exception on a damaged one.
std::vector<NodeGpus> PlacementFrom(const nlohmann::json& a) {
  std::vector<NodeGpus> p;
  for (const auto& slot : a) p.push_back({slot.at(0).get<std::string>(), slot.at(1).get<int>()});
  return p;
}

// A statement a connection prepares once and reuses: in a burst of 100,000 submissions,
// parsing the SQL of each job's lookup, insert, event and savepoint cost more than running them.
struct CachedStmt {
  sqlite3_stmt* stmt = nullptr;
  bool in_use = false;
};

// A prepared statement: its own, finalized on scope exit, or one borrowed from a CachedStmt,
// reset and given back on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  // A slot already borrowed (the same SQL used again inside its own use) gets a statement of
  // its own instead.
  Stmt(sqlite3* db, const char* sql, CachedStmt* slot) : db_(db) {
    if (slot->in_use) {
      rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
      return;
    }
    if (slot->stmt == nullptr) {
      rc_ = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &slot->stmt, nullptr);
      if (rc_ != SQLITE_OK) {
        sqlite3_finalize(slot->stmt);
        slot->stmt = nullptr;
        return;
      }
    }
    rc_ = SQLITE_OK;
    stmt_ = slot->stmt;
    slot_ = slot;
    slot->in_use = true;
  }
  ~Stmt() {
    if (slot_ == nullptr) {
      sqlite3_finalize(stmt_);
      return;
    }
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    slot_->in_use = false;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status ok(const std::string& what) const {
    return rc_ == SQLITE_OK ? Status() : SqliteStatus(db_, rc_, what);
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(t),
                                      static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  CachedStmt* slot_ = nullptr;
  int rc_;
};

constexpr const char* kJobColumns =
    "id, phase, submit, request, placement, decided, started, ended, end_reason, requeues";

Result<JobRecord> RowToJob(const Stmt& s) {
  JobRecord j;
  j.id = s.Text(0);
  const int64_t phase = s.Int(1);
  if (phase < 0 || phase > static_cast<int64_t>(JobPhase::kDone)) {
    return DataLoss("job '" + j.id + "': phase " + std::to_string(phase) + " is not one of ours");
  }
  j.phase = static_cast<JobPhase>(phase);
  j.submit = s.Int(2);
  try {
    const nlohmann::json r = nlohmann::json::parse(s.Text(3));
    j.user = r.at("user").get<std::string>();
    j.team = r.at("team").get<std::string>();
    j.queue = r.at("queue").get<std::string>();
    j.gpu_types = r.at("gpu_types").get<std::vector<std::string>>();
    j.gpus = r.at("gpus").get<int>();
    j.gpus_per_node = r.at("gpus_per_node").get<int>();
    j.nodes = r.at("nodes").get<int>();
    j.time_limit = r.at("time_limit").get<Duration>();
    j.qos = r.at("qos").get<int>();
    // Absent in databases written before gantryd read a job's QOS name.
    j.qos_name = r.value("qos_name", std::string());
    j.checkpoint_interval = r.at("checkpoint_interval").get<Duration>();
    j.restart_cost = r.at("restart_cost").get<Duration>();
    // Absent in databases written before jobs declared data.
    j.datasets = r.value("datasets", std::vector<std::string>{});
    j.checkpoint = r.value("checkpoint", std::string());
    j.placement = PlacementFrom(nlohmann::json::parse(s.Text(4)));
  } catch (const nlohmann::json::exception& e) {
    return DataLoss("job '" + j.id + "': damaged record: " + e.what());
  }
  j.decided = s.Int(5);
  j.started = s.Int(6);
  j.ended = s.Int(7);
  j.end_reason = s.Text(8);
  j.requeues = static_cast<int>(s.Int(9));
  return j;
}

}  // namespace

Status CheckNotStateFile(const std::string& state_path, const std::string& other,
                         const std::string& what) {
  for (const char* companion : {"", "-wal", "-shm", "-journal"}) {
    if (!other.empty() && LocalPathWithin(other, state_path + companion)) {
      return InvalidArgument(what + " " + other + " is the state database's own file " +
                             state_path + companion);
    }
  }
  return Status::Ok();
}

const char* JobPhaseName(JobPhase p) {
  switch (p) {
    case JobPhase::kPending:
      return "pending";
    case JobPhase::kStarting:
      return "starting";
    case JobPhase::kRunning:
      return "running";
    case JobPhase::kDone:
      return "done";
  }
  return "?";
}

class StateStore::Impl {
 public:
  ~Impl() {
    for (auto& [sql, slot] : stmts_) sqlite3_finalize(slot.stmt);
    if (db_ != nullptr) sqlite3_close_v2(db_);
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  }

  Status Open(const std::string& path) {
    path_ = path;
    // The lock is named after the real file, so a symlink or a path with ".." to the same
    // database meets the same lock.
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::weakly_canonical(path, ec);
    const std::string lock_path = (ec ? path : real.string()) + ".lock";
    lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) return StatusFromErrno(errno, "state store: open " + lock_path);
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        return FailedPrecondition("state store " + path +
                                  ": another process (gantryd?) holds it; one daemon per "
                                  "database");
      }
      return StatusFromErrno(errno, "state store: lock " + lock_path);
    }
    int rc = sqlite3_open_v2(path.c_str(), &db_,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                             nullptr);
    if (rc != SQLITE_OK) return SqliteStatus(db_, rc, "state store: open " + path);
    sqlite3_busy_timeout(db_, 5000);
    sqlite3_extended_result_codes(db_, 0);
    // The header says whether this is our database before anything is written to it.
    int app_id = 0;
    int version = 0;
    GANTRY_RETURN_IF_ERROR(PragmaInt("application_id", &app_id));
    GANTRY_RETURN_IF_ERROR(PragmaInt("user_version", &version));
    int objects = 0;
    {
      Stmt count(db_, "SELECT COUNT(*) FROM sqlite_master");
      GANTRY_RETURN_IF_ERROR(count.ok("state store " + path + ": read schema"));
      const int rc3 = count.Step();
      if (rc3 != SQLITE_ROW) return SqliteStatus(db_, rc3, "state store " + path + ": read schema");
      objects = static_cast<int>(count.Int(0));
    }
    // Fresh: an empty file (or none). A database with tables but without our id is another
    // program's, and is left alone.
    const bool fresh = app_id == 0 && version == 0 && objects == 0;
    if (!fresh && app_id != kApplicationId) {
      return DataLoss("state store " + path + ": not a Gantry state database");
    }
    if (!fresh && version == 1) {
      GANTRY_RETURN_IF_ERROR(ExecPrepared("BEGIN IMMEDIATE", "begin"));
      Status s = Exec(kMigrateFrom1, "add preemptions (schema 1 -> 2)");
      if (s.ok()) s = ExecPrepared("COMMIT", "commit schema 2");
      if (!s.ok()) {
        (void)ExecPrepared("ROLLBACK", "rollback");
        return s;
      }
      version = kSchemaVersion;
    }
    if (!fresh && version != kSchemaVersion) {
      return FailedPrecondition("state store " + path + ": schema version " +
                                std::to_string(version) + ", this gantryd reads version " +
                                std::to_string(kSchemaVersion));
    }
    GANTRY_RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL", "set WAL"));
    // FULL: a transaction that returned is on disk, not only in the OS cache.
    GANTRY_RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL", "set synchronous"));
    if (fresh) {
      GANTRY_RETURN_IF_ERROR(ExecPrepared("BEGIN IMMEDIATE", "begin"));
      Status s = Exec(kSchema, "create schema");
      if (s.ok()) {
        s = Exec("PRAGMA application_id=" + std::to_string(kApplicationId), "set id");
      }
      if (s.ok()) s = Exec("PRAGMA user_version=" + std::to_string(kSchemaVersion), "set version");
      if (s.ok()) s = ExecPrepared("COMMIT", "commit schema");
      if (!s.ok()) {
        (void)ExecPrepared("ROLLBACK", "rollback");
        return s;
      }
    }
    // A damaged page shows up here rather than in the middle of a decision.
    Stmt check(db_, "PRAGMA quick_check");
    GANTRY_RETURN_IF_ERROR(check.ok("state store " + path + ": check"));
    const int rc2 = check.Step();
    if (rc2 != SQLITE_ROW) return SqliteStatus(db_, rc2, "state store " + path + ": check");
    if (check.Text(0) != "ok") {
      return DataLoss("state store " + path + ": damaged: " + check.Text(0));
    }
    return LoadActive();
  }

  // Every job not yet done, into active_: from here on the store answers reads of them from
  // memory (SQLite stays the durable copy), so a cycle over 100k jobs parses no JSON.
  Status LoadActive() {
    Stmt s(db_, (std::string("SELECT ") + kJobColumns + " FROM jobs WHERE phase < ?").c_str());
    GANTRY_RETURN_IF_ERROR(s.ok("state store: list jobs"));
    s.Bind(1, static_cast<int64_t>(JobPhase::kDone));
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      GANTRY_ASSIGN_OR_RETURN(JobRecord j, RowToJob(s));
      Commit(std::move(j));
    }
    return rc == SQLITE_DONE ? Status() : SqliteStatus(db_, rc, "state store: list jobs");
  }

  // The connection's cached statement for `sql` (one statement, no trailing ones).
  Stmt Prepared(const std::string& sql) const { return Stmt(db_, sql.c_str(), &stmts_[sql]); }

  // Exec for one statement run often (a transaction's BEGIN, SAVEPOINT, RELEASE, COMMIT).
  Status ExecPrepared(const char* sql, const std::string& what) {
    Stmt s = Prepared(sql);
    GANTRY_RETURN_IF_ERROR(s.ok("state store: " + what));
    const int rc = s.Step();
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return Status();
    return SqliteStatus(db_, rc, "state store: " + what);
  }

  Status Exec(const std::string& sql, const std::string& what) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    sqlite3_free(err);
    return rc == SQLITE_OK ? Status() : SqliteStatus(db_, rc, "state store: " + what);
  }

  Status PragmaInt(const char* name, int* out) {
    Stmt s(db_, (std::string("PRAGMA ") + name).c_str());
    GANTRY_RETURN_IF_ERROR(s.ok(std::string("state store ") + path_ + ": read " + name));
    const int rc = s.Step();
    if (rc != SQLITE_ROW) return SqliteStatus(db_, rc, "state store " + path_ + ": read " + name);
    *out = static_cast<int>(s.Int(0));
    return Status();
  }

  // Runs fn inside one write transaction; commits when it returns OK, rolls back otherwise.
  // Inside another (a Batch), fn runs in a savepoint: its failure undoes only its own writes,
  // and nothing is durable before the outermost transaction commits. Records fn staged become
  // the in-memory view only when that commit succeeds.
  template <class Fn>
  Status Transaction(const std::string& what, Fn&& fn) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (depth_ > 0) {
      GANTRY_RETURN_IF_ERROR(ExecPrepared("SAVEPOINT step", what + ": savepoint"));
      ++depth_;
      Status s;
      try {
        s = fn();
      } catch (...) {  // the outer transaction's handler rolls everything back
        --depth_;
        throw;
      }
      --depth_;
      if (s.ok()) return ExecPrepared("RELEASE step", what + ": release");
      (void)ExecPrepared("ROLLBACK TO step", what + ": rollback");
      (void)ExecPrepared("RELEASE step", what + ": release");
      return s;
    }
    GANTRY_RETURN_IF_ERROR(ExecPrepared("BEGIN IMMEDIATE", what + ": begin"));
    depth_ = 1;
    Status s;
    try {
      s = fn();
    } catch (...) {
      // An exception out of a batch (a caller's code) leaves nothing half-written behind.
      depth_ = 0;
      (void)ExecPrepared("ROLLBACK", what + ": rollback");
      staged_.clear();
      throw;
    }
    depth_ = 0;
    if (s.ok()) s = ExecPrepared("COMMIT", what + ": commit");
    if (!s.ok()) {
      (void)ExecPrepared("ROLLBACK", what + ": rollback");
      staged_.clear();
      return s;
    }
    for (auto& [id, j] : staged_) Commit(std::move(j));
    staged_.clear();
    return s;
  }

  // Makes `j` the committed view of its job: a new immutable record (readers holding the old
  // one keep it), or none when it is done.
  void Commit(JobRecord j) {
    auto it = active_.find(j.id);
    if (it != active_.end()) {
      ordered_.erase({it->second->submit, j.id});
      if (j.phase == JobPhase::kDone) {
        active_.erase(it);
        return;
      }
    } else if (j.phase == JobPhase::kDone) {
      return;
    }
    auto rec = std::make_shared<const JobRecord>(std::move(j));
    ordered_[{rec->submit, rec->id}] = rec;
    active_[rec->id] = std::move(rec);
  }

  // The record as this connection sees it: this transaction's staged change, else the active
  // view, else (a job that has ended) the database.
  Result<JobRecord> Lookup(const std::string& id) const {
    if (auto it = staged_.find(id); it != staged_.end()) return it->second;
    if (auto it = active_.find(id); it != active_.end()) return *it->second;
    return GetLocked(id);
  }

  Status InsertEvent(Time now, const std::string& job, const std::string& kind,
                     const std::string& detail) {
    Stmt s = Prepared("INSERT INTO events (time, job, kind, detail) VALUES (?, ?, ?, ?)");
    GANTRY_RETURN_IF_ERROR(s.ok("state store: log"));
    s.Bind(1, now).Bind(2, job).Bind(3, kind).Bind(4, detail);
    const int rc = s.Step();
    return rc == SQLITE_DONE ? Status() : SqliteStatus(db_, rc, "state store: log " + kind);
  }

  Result<JobRecord> GetLocked(const std::string& id) const {
    Stmt s = Prepared(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?");
    GANTRY_RETURN_IF_ERROR(s.ok("state store: read job"));
    s.Bind(1, id);
    const int rc = s.Step();
    if (rc == SQLITE_DONE) return NotFound("job '" + id + "' is not in the state store");
    if (rc != SQLITE_ROW) return SqliteStatus(db_, rc, "state store: read job '" + id + "'");
    return RowToJob(s);
  }

  Status Update(const std::string& sql, const std::string& what,
                const std::function<void(Stmt&)>& bind) {
    Stmt s = Prepared(sql);
    GANTRY_RETURN_IF_ERROR(s.ok("state store: " + what));
    bind(s);
    const int rc = s.Step();
    return rc == SQLITE_DONE ? Status() : SqliteStatus(db_, rc, "state store: " + what);
  }

  // Reads the job, checks its phase is one of `from`, then runs `write`, which writes the
  // database and brings `j` to the new state; the new record is staged when it succeeds.
  Status Transition(const std::string& id, std::initializer_list<JobPhase> from,
                    const std::string& what, const std::function<Status(JobRecord& j)>& write) {
    return Transaction(what + " '" + id + "'", [&]() -> Status {
      GANTRY_ASSIGN_OR_RETURN(JobRecord j, Lookup(id));
      bool allowed = false;
      for (JobPhase p : from) allowed = allowed || j.phase == p;
      if (!allowed) {
        return FailedPrecondition("job '" + id + "': cannot " + what + " a job that is " +
                                  JobPhaseName(j.phase));
      }
      GANTRY_RETURN_IF_ERROR(write(j));
      staged_[id] = std::move(j);
      return Status();
    });
  }

  std::string path_;
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;
  // Recursive: a Batch holds it across the writes it groups, which lock it again.
  mutable std::recursive_mutex mu_;
  int depth_ = 0;  // open transactions: 0 none, 1 a transaction, more: savepoints inside it
  // Committed jobs not yet done, by id and by (submit, id); a record is replaced, never changed,
  // so a reader may keep one while the store moves on.
  std::map<std::string, std::shared_ptr<const JobRecord>> active_;
  std::map<std::pair<Time, std::string>, std::shared_ptr<const JobRecord>> ordered_;
  std::map<std::string, JobRecord> staged_;  // the open transaction's new records
  // Statements by SQL text, used under mu_ (unordered_map: a slot's address never moves).
  mutable std::unordered_map<std::string, CachedStmt> stmts_;
};

StateStore::StateStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StateStore::~StateStore() = default;

Result<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  GANTRY_RETURN_IF_ERROR(impl->Open(path));
  return std::unique_ptr<StateStore>(new StateStore(std::move(impl)));
}

const std::string& StateStore::path() const { return impl_->path_; }

Status StateStore::AddJob(const JobRecord& job, Time now) {
  if (job.id.empty()) return InvalidArgument("a job needs an id");
  if (job.gpus <= 0) {
    return InvalidArgument("job '" + job.id + "': needs at least one GPU (asked " +
                           std::to_string(job.gpus) + ")");
  }
  return impl_->Transaction("add job '" + job.id + "'", [&]() -> Status {
    Stmt s = impl_->Prepared("INSERT INTO jobs (id, phase, submit, request) VALUES (?, ?, ?, ?)");
    GANTRY_RETURN_IF_ERROR(s.ok("state store: add job"));
    s.Bind(1, job.id)
        .Bind(2, static_cast<int64_t>(JobPhase::kPending))
        .Bind(3, job.submit)
        .Bind(4, RequestJson(job).dump());
    const int rc = s.Step();
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      return AlreadyExists("job '" + job.id + "' is already in the state store");
    }
    if (rc != SQLITE_DONE) return SqliteStatus(impl_->db_, rc, "state store: add job");
    GANTRY_RETURN_IF_ERROR(
        impl_->InsertEvent(now, job.id, "submit", std::to_string(job.gpus) + " GPUs"));
    JobRecord added = job;
    added.phase = JobPhase::kPending;
    added.placement.clear();
    added.decided = added.started = added.ended = -1;
    added.end_reason.clear();
    added.requeues = 0;
    impl_->staged_[job.id] = std::move(added);
    return Status();
  });
}

Status StateStore::Decide(const std::string& id, const std::vector<NodeGpus>& placement, Time now) {
  if (placement.empty()) return InvalidArgument("job '" + id + "': an empty placement");
  return impl_->Transition(id, {JobPhase::kPending}, "decide", [&](JobRecord& j) -> Status {
    const std::string p = PlacementJson(placement);
    GANTRY_RETURN_IF_ERROR(impl_->Update(
        "UPDATE jobs SET phase = ?, placement = ?, decided = ? WHERE id = ?", "decide",
        [&](Stmt& s) {
          s.Bind(1, static_cast<int64_t>(JobPhase::kStarting)).Bind(2, p).Bind(3, now).Bind(4, id);
        }));
    GANTRY_RETURN_IF_ERROR(impl_->InsertEvent(now, id, "decide", p));
    j.phase = JobPhase::kStarting;
    j.placement = placement;
    j.decided = now;
    return Status();
  });
}

Status StateStore::Started(const std::string& id, Time now,
                           const std::vector<NodeGpus>& placement) {
  return impl_->Transition(
      id, {JobPhase::kStarting, JobPhase::kRunning}, "start", [&](JobRecord& j) -> Status {
        if (j.phase == JobPhase::kRunning && (placement.empty() || placement == j.placement)) {
          return Status();
        }
        const std::vector<NodeGpus> where = placement.empty() ? j.placement : placement;
        const std::string p = PlacementJson(where);
        const Time started = j.phase == JobPhase::kRunning ? j.started : now;
        GANTRY_RETURN_IF_ERROR(
            impl_->Update("UPDATE jobs SET phase = ?, placement = ?, started = ? WHERE id = ?",
                          "start", [&](Stmt& s) {
                            s.Bind(1, static_cast<int64_t>(JobPhase::kRunning))
                                .Bind(2, p)
                                .Bind(3, started)
                                .Bind(4, id);
                          }));
        GANTRY_RETURN_IF_ERROR(impl_->InsertEvent(now, id, "start", p));
        j.phase = JobPhase::kRunning;
        j.placement = where;
        j.started = started;
        return Status();
      });
}

Status StateStore::Requeue(const std::string& id, Time now, const std::string& why) {
  return impl_->Transition(
      id, {JobPhase::kStarting, JobPhase::kRunning}, "requeue", [&](JobRecord& j) -> Status {
        GANTRY_RETURN_IF_ERROR(impl_->Update(
            "UPDATE jobs SET phase = ?, placement = '[]', decided = -1, started = -1, "
            "requeues = requeues + 1 WHERE id = ?",
            "requeue",
            [&](Stmt& s) { s.Bind(1, static_cast<int64_t>(JobPhase::kPending)).Bind(2, id); }));
        GANTRY_RETURN_IF_ERROR(impl_->InsertEvent(now, id, "requeue", why));
        j.phase = JobPhase::kPending;
        j.placement.clear();
        j.decided = j.started = -1;
        ++j.requeues;
        return Status();
      });
}

Status StateStore::Finish(const std::string& id, Time now, const std::string& reason) {
  return impl_->Transition(
      id, {JobPhase::kPending, JobPhase::kStarting, JobPhase::kRunning}, "finish",
      [&](JobRecord& j) -> Status {
        GANTRY_RETURN_IF_ERROR(
            impl_->Update("UPDATE jobs SET phase = ?, ended = ?, end_reason = ? WHERE id = ?",
                          "finish", [&](Stmt& s) {
                            s.Bind(1, static_cast<int64_t>(JobPhase::kDone))
                                .Bind(2, now)
                                .Bind(3, reason)
                                .Bind(4, id);
                          }));
        GANTRY_RETURN_IF_ERROR(impl_->InsertEvent(now, id, "finish", reason));
        j.phase = JobPhase::kDone;
        j.ended = now;
        j.end_reason = reason;
        return Status();
      });
}

Status StateStore::LogEvent(Time now, const std::string& job, const std::string& kind,
                            const std::string& detail) {
  if (kind.empty()) return InvalidArgument("an event needs a kind");
  return impl_->Transaction("log " + kind,
                            [&] { return impl_->InsertEvent(now, job, kind, detail); });
}

Status StateStore::AddPreemption(const GracePreemption& p) {
  if (p.preemptor.empty() || p.victims.empty()) {
    return InvalidArgument("a preemption needs a preemptor and victims");
  }
  const std::string record = nlohmann::json{
      {"victims", p.victims},
      {"placement", PlacementArray(p.placement)},
      {"signalled", p.signalled},
      {"grace_end", p.grace_end},
      {"earlier", p.earlier}}.dump();
  return impl_->Transaction("preemption of '" + p.preemptor + "'", [&] {
    return impl_->Update("INSERT OR REPLACE INTO preemptions (preemptor, record) VALUES (?, ?)",
                         "record preemption",
                         [&](Stmt& s) { s.Bind(1, p.preemptor).Bind(2, record); });
  });
}

Status StateStore::EndPreemption(const std::string& preemptor) {
  return impl_->Transaction("end preemption of '" + preemptor + "'", [&] {
    return impl_->Update("DELETE FROM preemptions WHERE preemptor = ?", "end preemption",
                         [&](Stmt& s) { s.Bind(1, preemptor); });
  });
}

Result<std::vector<GracePreemption>> StateStore::Preemptions() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu_);
  Stmt s(impl_->db_, "SELECT preemptor, record FROM preemptions ORDER BY preemptor");
  GANTRY_RETURN_IF_ERROR(s.ok("state store: list preemptions"));
  std::vector<GracePreemption> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    GracePreemption p;
    p.preemptor = s.Text(0);
    try {
      const nlohmann::json r = nlohmann::json::parse(s.Text(1));
      p.victims = r.at("victims").get<std::vector<std::string>>();
      p.placement = PlacementFrom(r.at("placement"));
      p.signalled = r.at("signalled").get<Time>();
      p.grace_end = r.at("grace_end").get<Time>();
      if (r.contains("earlier")) {
        p.earlier = r.at("earlier").get<std::vector<std::pair<std::string, Time>>>();
      }
    } catch (const nlohmann::json::exception& e) {
      return DataLoss("preemption of '" + p.preemptor + "': damaged record: " + e.what());
    }
    out.push_back(std::move(p));
  }
  if (rc != SQLITE_DONE) return SqliteStatus(impl_->db_, rc, "state store: list preemptions");
  return out;
}

Status StateStore::Batch(const std::function<Status()>& fn) {
  return impl_->Transaction("batch", fn);
}

Result<JobRecord> StateStore::Get(const std::string& id) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu_);
  return impl_->Lookup(id);
}

Result<std::shared_ptr<const JobRecord>> StateStore::GetRef(const std::string& id) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu_);
  // A change staged in the open batch is a plain record; anything else active is shared.
  if (impl_->staged_.empty() || impl_->staged_.count(id) == 0) {
    if (auto it = impl_->active_.find(id); it != impl_->active_.end()) return it->second;
  }
  GANTRY_ASSIGN_OR_RETURN(JobRecord r, impl_->Lookup(id));
  return std::make_shared<const JobRecord>(std::move(r));
}

Result<std::vector<JobRecord>> StateStore::ActiveJobs() const {
  GANTRY_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const JobRecord>> refs, ActiveJobRefs());
  std::vector<JobRecord> out;
  out.reserve(refs.size());
  for (const auto& r : refs) out.push_back(*r);
  return out;
}

Result<std::vector<std::shared_ptr<const JobRecord>>> StateStore::ActiveJobRefs() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu_);
  std::vector<std::shared_ptr<const JobRecord>> out;
  out.reserve(impl_->active_.size() + impl_->staged_.size());
  if (impl_->staged_.empty()) {
    // Already in order: no copy of a record and no sort, whatever the queue's depth.
    for (const auto& [key, r] : impl_->ordered_) out.push_back(r);
    return out;
  }
  // Inside a batch: its staged records are not committed yet but reads see them.
  for (const auto& [key, r] : impl_->ordered_) {
    if (impl_->staged_.count(key.second) == 0) out.push_back(r);
  }
  for (const auto& [id, j] : impl_->staged_) {
    if (j.phase != JobPhase::kDone) out.push_back(std::make_shared<const JobRecord>(j));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a->submit != b->submit ? a->submit < b->submit : a->id < b->id;
  });
  return out;
}

Result<std::vector<StoreEvent>> StateStore::Events(int64_t after_seq, int limit) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu_);
  Stmt s(impl_->db_,
         "SELECT seq, time, job, kind, detail FROM events WHERE seq > ? ORDER BY seq LIMIT ?");
  GANTRY_RETURN_IF_ERROR(s.ok("state store: read events"));
  s.Bind(1, after_seq).Bind(2, limit);
  std::vector<StoreEvent> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.push_back({s.Int(0), s.Int(1), s.Text(2), s.Text(3), s.Text(4)});
  }
  if (rc != SQLITE_DONE) return SqliteStatus(impl_->db_, rc, "state store: read events");
  return out;
}

Result<std::map<std::string, std::set<std::string>>> StateStore::StartedOn(
    const std::set<std::string>& ids) const {
  std::map<std::string, std::set<std::string>> out;
  if (ids.empty()) return out;
  std::lock_guard<std::recursive_mutex> lock(impl_->mu_);
  Stmt s(impl_->db_, "SELECT job, detail FROM events WHERE kind = 'start'");
  GANTRY_RETURN_IF_ERROR(s.ok("state store: read start events"));
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    std::string job = s.Text(0);
    if (ids.count(job) == 0) continue;
    try {
      for (const NodeGpus& slot : PlacementFrom(nlohmann::json::parse(s.Text(1)))) {
        out[job].insert(slot.node);
      }
    } catch (const nlohmann::json::exception&) {
      // Written by this file; a damaged row only loses a hint.
    }
  }
  if (rc != SQLITE_DONE) return SqliteStatus(impl_->db_, rc, "state store: read start events");
  return out;
}

Result<std::vector<int64_t>> StateStore::CountByPhase() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu_);
  Stmt s(impl_->db_, "SELECT phase, COUNT(*) FROM jobs GROUP BY phase");
  GANTRY_RETURN_IF_ERROR(s.ok("state store: count jobs"));
  std::vector<int64_t> out(static_cast<size_t>(JobPhase::kDone) + 1, 0);
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    const int64_t p = s.Int(0);
    if (p >= 0 && p < static_cast<int64_t>(out.size())) out[static_cast<size_t>(p)] = s.Int(1);
  }
  if (rc != SQLITE_DONE) return SqliteStatus(impl_->db_, rc, "state store: count jobs");
  return out;
}

RecoveryAction Reconcile(JobPhase recorded, ObservedState observed) {
  switch (observed) {
    case ObservedState::kReleased:
      // A job seen running does not go back to released unless the resource manager requeued
      // it on its own (node failure); it would then start again wherever it pleases.
      return recorded == JobPhase::kRunning ? RecoveryAction::kHoldAgain : RecoveryAction::kAdopt;
    case ObservedState::kRunning:
      return RecoveryAction::kAdopt;
    case ObservedState::kFinished:
      return RecoveryAction::kFinish;
    case ObservedState::kUnknown:
      return RecoveryAction::kLost;
    case ObservedState::kHeld:
      break;
  }
  switch (recorded) {
    case JobPhase::kPending:
      return RecoveryAction::kResubmit;
    case JobPhase::kStarting:
    case JobPhase::kRunning:
      return RecoveryAction::kRequeue;
    case JobPhase::kDone:
      break;
  }
  return RecoveryAction::kFinish;
}

const char* RecoveryActionName(RecoveryAction a) {
  switch (a) {
    case RecoveryAction::kResubmit:
      return "resubmit";
    case RecoveryAction::kRequeue:
      return "requeue";
    case RecoveryAction::kHoldAgain:
      return "hold-again";
    case RecoveryAction::kAdopt:
      return "adopt";
    case RecoveryAction::kFinish:
      return "finish";
    case RecoveryAction::kLost:
      return "lost";
  }
  return "?";
}

}  // namespace gantry::control
