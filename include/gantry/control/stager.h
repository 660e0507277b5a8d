// Stager: gantryd's side of data staging. The control loop tells it which jobs will run on
// which nodes soon -- the reservation plan's planned placement of a waiting job, or the nodes a
// job was just given -- and which datasets each job declared (#GANTRY --dataset); the stager
// asks every one of those nodes' gantry-agent to stage the datasets into the node's local shard
// cache (POST /v1/stage, docs/storage.md "Peer agent"), follows their progress, and answers the
// loop's two questions: what does each node hold (the data-locality score), and is a decided
// job's data in place yet (so that it starts with its data local).
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
#include <utility>
#include <vector>

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
};

// The agents over HTTP (include/gantry/agent/stage_client.h): node NAME's agent is at
// `urls[NAME]`, else at `url_template` with "{node}" replaced by NAME (e.g.
// "http://{node}:7070"); neither: NotFound. `token` is the cluster's agent token.
std::unique_ptr<StagingAgents> HttpStagingAgents(std::map<std::string, std::string> urls,
                                                 std::string url_template, std::string token);

// "NODE=URL" words (gantryd's --agent) as a map; InvalidArgument naming a word without
// both, or a node given twice.
Result<std::map<std::string, std::string>> ParseAgentUrls(const std::vector<std::string>& words);

// A job that will run on `nodes` soon and reads `datasets`.
struct StageTarget {
  std::string job;
  std::vector<std::string> nodes;
  std::vector<std::string> datasets;
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
  // not polled again, but what was staged stays known (the node still holds it).
  void Want(std::vector<StageTarget> targets);
  // One round at `now`: asks for every wanted (node, dataset) not yet asked for, or failed
  // longer than retry_after_s ago; polls those not done.
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

 private:
  struct Entry {
    StageProgress progress;
    bool asked = false;
    Time retry_at = 0;  // failed or unreachable: ask again from then
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
  std::vector<std::string> job_series_ GUARDED_BY(mu_);  // jobs with per-job series
  int64_t generation_ GUARDED_BY(mu_) = 0;  // bumped by Want, so the thread polls at once
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gantry::control
