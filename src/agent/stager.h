// Stager: the agent's background staging of datasets into its node's shard cache (the
// /v1/stage routes of include/gantry/agent/agent.h; the staging itself is
// include/gantry/data/stage.h). A few threads of its own, apart from the object-serving
// workers, so staging never delays peers' chunk reads or /healthz. One entry per dataset URL,
// kept for the agent's life: asking again for a queued, staging or staged dataset answers its
// state; a failed one is queued again. A dataset asked for by a job keeps its shards pinned in
// the cache after staging (data::StageOptions::keep_pinned) until every such job released it or
// pin_seconds after the latest request (agent.h).
//
// Thread-safe. Stop() cancels stagings in flight (between shards) and joins the threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gantry/agent/stage_client.h"
#include "gantry/common/metrics.h"
#include "gantry/common/status.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/common/time.h"
#include "gantry/storage/object_store.h"

namespace gantry::agent_internal {

struct StagerOptions {
  std::string cache_dir;           // the node-local shard cache (required)
  uint64_t cache_bytes = 0;        // its capacity; 0: no limit
  int threads = 2;                 // datasets staged at once
  std::vector<std::string> allow;  // URL prefixes allowed (AgentOptions::stage_allow); empty: all
  int64_t pin_seconds = 0;         // AgentOptions::stage_pin_seconds; 0: never pinned
  Clock* clock = nullptr;          // of the pins' leases (required)
  StoreOptions store_options;
  MetricsRegistry* metrics = nullptr;  // required
};

// InvalidArgument unless `url` is a file://, s3://, http:// or https:// URL; PermissionDenied
// unless it starts with one of `allow` (when not empty; see AgentOptions::stage_allow). The one
// rule for every location a caller names to the agent: a dataset to stage, a checkpoint root to
// look up (`what` names which in the messages).
Status CheckStageUrl(const std::string& url, const std::vector<std::string>& allow = {},
                     std::string_view what = "dataset");

class Stager {
 public:
  explicit Stager(StagerOptions options);
  ~Stager();  // Stops.
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // Queues the dataset unless it is queued, staging or done; records `job` (if not "") as one
  // that asked for it. InvalidArgument for a URL CheckStageUrl refuses; Cancelled after Stop.
  Result<StageState> Request(const std::string& dataset, const std::string& job) EXCLUDES(mu_);
  std::optional<StageState> Get(const std::string& dataset) EXCLUDES(mu_);
  std::vector<StageState> List() EXCLUDES(mu_);  // by URL
  // `job` no longer needs `dataset` pinned; nullopt when it was never asked for.
  std::optional<StageState> Release(const std::string& dataset, const std::string& job)
      EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);

 private:
  void Work() EXCLUDES(mu_);
  // Drops the pins whose lease is over.
  void ExpirePins() REQUIRES(mu_);
  void Stage(const std::string& dataset) EXCLUDES(mu_);
  static int64_t Now();

  const StagerOptions options_;
  Gauge& staging_;
  std::atomic<bool> cancel_{false};
  mutable Mutex mu_;
  CondVar cv_;
  std::map<std::string, StageState> datasets_ GUARDED_BY(mu_);
  // The jobs a dataset is pinned for, and the pins (held once its staging ended).
  struct Pinned {
    std::set<std::string> jobs;
    std::vector<std::shared_ptr<const void>> pins;
  };
  std::map<std::string, Pinned> pinned_ GUARDED_BY(mu_);
  std::deque<std::string> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  Mutex stop_mu_;  // one Stop at a time; the threads are joined once
};

}  // namespace gantry::agent_internal
