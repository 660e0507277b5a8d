// Stager: gantryd's side of data staging. The control loop tells it which jobs will run on
// which nodes soon -- the reservation plan's planned placement of a waiting job, or the nodes a
// job was just given -- and which datasets each job declared (#GANTRY --dataset); the stager
// asks every one of those nodes' gantry-agent to stage the datasets into the node's local shard
// cache (POST /v1/stage, docs/storage.md "Peer agent"), follows their progress, and answers the
// loop's two questions: what does each node hold (the data-locality score), and is a decided
// job's data in place yet (so that it starts with its data local). For a waiting job that
// declared a checkpoint location and ran before, it also asks the agents of the nodes it ran on
// how much of its newest checkpoint their local tier holds (GET /v1/checkpoint), once per node
// while the job waits, so that the score prefers the node its restore reads locally.
//
// The agents' HTTP calls happen on the stager's own thread (Start), never on the control
// loop's: the loop only hands over its targets (Want) and reads progress, both cheap. Poll does
// one round synchronously, for tests and for that thread.
//
//   Stager stager(agents.get(), {});
//   stager.Start();
//   stager.Want({{"42", {"n1", "n2"}, {"s3://b/imagenet"}}});
//   ... stager.Ready("42") ...
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "gantry/ckpt/catalog.h"
#include "gantry/common/metrics.h"
#include "gantry/common/status.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/common/time.h"

namespace gantry::control {

// One dataset on one node, as the node's agent last reported it.
struct StageProgress {
  // "queued", "staging", "done", "failed" (the agent's words); "unreachable": the agent did not
  // answer (retried); "" before the first answer.
  std::string state;
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  int64_t bytes_fetched = 0;  // of bytes_done, those the agent fetched rather than found cached
  std::string error;          // why it failed or was unreachable
  Time updated = -1;          // when this was last heard
};

// A node agent's drains: "draining" while one runs or is asked for, else "idle"; `runs`
// counts the drains it finished since it started.
struct NodeDrain {
  std::string state = "idle";
  int64_t runs = 0;
};

// The nodes' agents as gantryd reaches them.
class StagingAgents {
 public:
  virtual ~StagingAgents() = default;
  // Asks `node`'s agent to stage `dataset` on behalf of `job` (idempotent: a dataset staging or
  // staged is just reported) and returns its state. Unavailable when the agent cannot be
  // reached; NotFound when no agent is known for the node.
  virtual Result<StageProgress> Stage(const std::string& node, const std::string& dataset,
                                      const std::string& job) = 0;
  // The state of `dataset` on `node` without asking for it; NotFound when the agent was never
  // asked (or has restarted since).
  virtual Result<StageProgress> Get(const std::string& node, const std::string& dataset) = 0;
  // `job` no longer needs `dataset` pinned in `node`'s cache (it started, ended, or is planned
  // elsewhere now). Errors are the calls' (the agent's pin lease ends on its own anyway).
  virtual Status Release(const std::string& node, const std::string& dataset,
                         const std::string& job) = 0;
  // How much of the newest committed checkpoint at `checkpoint` (a root, or ROOT/ckpt/JOB)
  // `node`'s local tier holds. NotFound when there is none there (or no agent is known for the
  // node); Unavailable when the agent cannot be reached.
  virtual Result<ckpt::TierCopy> Checkpoint(const std::string& node,
                                            const std::string& checkpoint) = 0;
  // Asks `node`'s agent to drain its local tier: to finish the saves whose process ended before
  // they were durable (POST /v1/drain; ckpt/drain.h). Returns once the agent has accepted, with
  // its drain state then; Unavailable when it cannot be reached, NotFound when no agent is known
  // for the node.
  virtual Result<NodeDrain> Drain(const std::string& node) = 0;
  // `node`'s agent's drain state (GET /v1/drain), errors as Drain's.
  virtual Result<NodeDrain> DrainState(const std::string& node) = 0;
};

// The agents over HTTP (include/gantry/agent/stage_client.h): node NAME's agent is at
// `urls[NAME]`, else at `url_template` with "{node}" replaced by NAME (e.g.
// "http://{node}:7070"); neither: NotFound. `token` is the cluster's agent token.
std::unique_ptr<StagingAgents> HttpStagingAgents(std::map<std::string, std::string> urls,
                                                 std::string url_template, std::string token);

// "NODE=URL" words (gantryd's --agent) as a map; InvalidArgument naming a word without
// both, or a node given twice.
Result<std::map<std::string, std::string>> ParseAgentUrls(const std::vector<std::string>& words);

// A job that will run on `nodes` soon and reads `datasets`; and, for a waiting job that
// declared one, its checkpoint location and the nodes whose local tier may hold its newest
// checkpoint (those it ran on).
struct StageTarget {
  std::string job;
  std::vector<std::string> nodes;
  std::vector<std::string> datasets;
  // (Default initializers, so the many {job, nodes, datasets} targets need not spell them.)
  std::string checkpoint = {};
  std::vector<std::string> checkpoint_nodes = {};
};

struct StagerOptions {
  // How often the thread polls unfinished staging. Default: 1 s.
  int64_t poll_interval_ms = 1000;
  // A failed or unreachable dataset is asked for again after this long. Default: 30 s.
  Duration retry_after_s = 30;
  // Where to record bytes staged, datasets by state and per-job progress; null: nowhere.
  MetricsRegistry* metrics = nullptr;
};

class Stager {
 public:
  // `agents` is borrowed and must outlive the stager.
  Stager(StagingAgents* agents, StagerOptions options);
  ~Stager();  // Stops.
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // Replaces the set of jobs whose data is wanted. A (node, dataset) nobody wants any more is
  // not polled again, but what was staged stays known (the node still holds it); the next
  // Poll tells its agent to drop the pin it holds for the job it was asked for. A (node,
  // checkpoint) nobody wants any more is forgotten: its job runs again and will write newer
  // checkpoints, so a later wait asks afresh.
  void Want(std::vector<StageTarget> targets);
  // One round at `now`: asks for every wanted (node, dataset) not yet asked for, or failed
  // longer than retry_after_s ago; polls those not done. Asks each wanted (node, checkpoint)
  // once, again after retry_after_s when the agent failed or did not answer.
  void Poll(Time now);
  // Polls every poll_interval_ms on a thread of its own (and at once after a Want that adds
  // work), until Stop. Idempotent.
  void Start();
  void Stop();

  // What the agent last said of `dataset` on `node`; state "" when never asked.
  StageProgress Progress(const std::string& node, const std::string& dataset) const;
  // Every (node, dataset) of a wanted job with its progress, in the target's order.
  struct Part {
    std::string node;
    std::string dataset;
    StageProgress progress;
  };
  std::vector<Part> JobProgress(const std::string& job) const;
  // Every dataset of the wanted job is done on every one of its nodes.
  bool Ready(const std::string& job) const;
  // The first failure among the job's parts ("n1: s3://b/x: NotFound ..."), empty when none
  // failed (unreachable agents are not failures: they are retried).
  std::string Failure(const std::string& job) const;
  // Every (node, dataset) whose staging is done: what the nodes hold.
  std::vector<std::pair<std::string, std::string>> Held() const;
  // A wanted checkpoint as a node's agent last described its local copy.
  struct HeldCheckpoint {
    std::string node;
    std::string checkpoint;
    ckpt::TierCopy copy;
  };
  // Every wanted (node, checkpoint) whose agent said it holds some of the newest checkpoint.
  std::vector<HeldCheckpoint> HeldCheckpoints() const;

  // A job that declared a checkpoint location ended: each node it ran on is asked to drain its
  // local tier at the next Poll (so a save the job's last moments left short of the durable
  // root is finished and committed there), again after retry_after_s while its agent cannot
  // be reached, at most kDrainAttempts times.
  // `job`, when given, waits for those drains (DrainPending) before it starts again: it was
  // requeued, and its newest save may be one its process left on a node. Each node is followed
  // until its agent reports a drain that began after the request has finished.
  void DrainAfterEnd(const std::vector<std::string>& nodes, const std::string& job = "");
  static constexpr int kDrainAttempts = 10;
  // Whether a drain asked for `job` (DrainAfterEnd) may still commit a save of it: some node's
  // agent accepted and has not finished, or was not asked yet. A node whose agent failed to
  // answer once no longer holds the job back (it may be the node that failed); it is still
  // asked again in the background.
  bool DrainPending(const std::string& job) const;
  // Nodes still to be asked to drain or followed (for tests).
  std::vector<std::string> PendingDrains() const;

 private:
  struct Entry {
    StageProgress progress;
    bool asked = false;
    std::string asked_for;  // the job the agent was asked for (it pins for it); "" once released
    Time retry_at = 0;      // failed or unreachable: ask again from then
  };
  using Key = std::pair<std::string, std::string>;  // node, dataset

  void UpdateMetrics() REQUIRES(mu_);
  void Run() EXCLUDES(mu_);

  StagingAgents* const agents_;
  const StagerOptions options_;
  mutable Mutex mu_;
  CondVar wake_;
  std::map<std::string, StageTarget> wanted_ GUARDED_BY(mu_);  // by job
  std::map<Key, Entry> entries_ GUARDED_BY(mu_);
  // (node, dataset, job) no job wants any more: released at the next Poll.
  std::vector<std::tuple<std::string, std::string, std::string>> releases_ GUARDED_BY(mu_);
  // What the agents said of wanted checkpoints, by (node, checkpoint URL). state: "held" (an
  // answer, which may hold nothing), "none" (NotFound), "failed", "unreachable".
  struct CheckpointEntry {
    std::string state;
    ckpt::TierCopy copy;
    Time retry_at = 0;
  };
  std::map<Key, CheckpointEntry> checkpoints_ GUARDED_BY(mu_);
  // Nodes to ask to drain: attempts so far, and not before when. `asked` numbers each
  // DrainAfterEnd, so an answer to an older request does not clear a newer one made while the
  // call was in flight (that job's records may postdate the drain the older call started).
  // Once the agent accepted, `runs_before` is its finished drains then: the request is done
  // when it reports idle with more. `answered_badly`: a call failed since the request.
  struct DrainEntry {
    int attempts = 0;
    Time retry_at = 0;
    int64_t asked = 0;
    bool accepted = false;
    int64_t runs_before = 0;
    bool answered_badly = false;
  };
  std::map<std::string, DrainEntry> drains_ GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::string>> drain_waiters_ GUARDED_BY(mu_);  // job -> nodes
  bool DrainPendingLocked(const std::string& job) const REQUIRES(mu_);
  int64_t drain_requests_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> job_series_ GUARDED_BY(mu_);  // jobs with per-job series
  int64_t generation_ GUARDED_BY(mu_) = 0;  // bumped by Want, so the thread polls at once
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gantry::control
