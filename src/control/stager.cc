#include "gantry/control/stager.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "gantry/agent/stage_client.h"

namespace gantry::control {

namespace {

constexpr char kJobBytes[] = "gantry_staging_job_bytes";
constexpr char kJobBytesHelp[] =
    "Bytes of a waiting or starting job's datasets on its nodes: staged so far (kind=done) and "
    "in all (kind=total), summed over its nodes.";

bool Finished(const StageProgress& p) { return p.state == "done" || p.state == "failed"; }

StageProgress FromState(const StageState& s) {
  StageProgress p;
  p.state = s.state;
  p.bytes_done = static_cast<int64_t>(s.bytes_done);
  p.bytes_total = static_cast<int64_t>(s.bytes_total);
  p.bytes_fetched = static_cast<int64_t>(s.bytes_fetched);
  p.error = s.error.empty() ? "" : s.code + ": " + s.error;
  return p;
}

class HttpAgents final : public StagingAgents {
 public:
  HttpAgents(std::map<std::string, std::string> urls, std::string url_template, std::string token)
      : urls_(std::move(urls)), template_(std::move(url_template)), token_(std::move(token)) {}

  Result<StageProgress> Stage(const std::string& node, const std::string& dataset,
                              const std::string& job) override {
    GANTRY_ASSIGN_OR_RETURN(std::string url, UrlOf(node));
    GANTRY_ASSIGN_OR_RETURN(StageState s, RequestStage(url, token_, dataset, job));
    return FromState(s);
  }
  Result<StageProgress> Get(const std::string& node, const std::string& dataset) override {
    GANTRY_ASSIGN_OR_RETURN(std::string url, UrlOf(node));
    GANTRY_ASSIGN_OR_RETURN(StageState s, GetStage(url, token_, dataset));
    return FromState(s);
  }
  Status Release(const std::string& node, const std::string& dataset,
                 const std::string& job) override {
    GANTRY_ASSIGN_OR_RETURN(std::string url, UrlOf(node));
    return ReleaseStage(url, token_, dataset, job).status();
  }
  Result<ckpt::TierCopy> Checkpoint(const std::string& node,
                                    const std::string& checkpoint) override {
    GANTRY_ASSIGN_OR_RETURN(std::string url, UrlOf(node));
    return LocateCheckpoint(url, token_, checkpoint);
  }
  Result<NodeDrain> Drain(const std::string& node) override {
    GANTRY_ASSIGN_OR_RETURN(std::string url, UrlOf(node));
    GANTRY_ASSIGN_OR_RETURN(DrainStatus d, RequestDrain(url, token_));
    return NodeDrain{d.state, d.runs};
  }
  Result<NodeDrain> DrainState(const std::string& node) override {
    GANTRY_ASSIGN_OR_RETURN(std::string url, UrlOf(node));
    GANTRY_ASSIGN_OR_RETURN(DrainStatus d, GetDrain(url, token_));
    return NodeDrain{d.state, d.runs};
  }

 private:
  Result<std::string> UrlOf(const std::string& node) const {
    if (auto it = urls_.find(node); it != urls_.end()) return it->second;
    const size_t at = template_.find("{node}");
    if (at == std::string::npos) return NotFound("no gantry-agent is known for node " + node);
    std::string url = template_;
    url.replace(at, 6, node);
    return url;
  }

  const std::map<std::string, std::string> urls_;
  const std::string template_;
  const std::string token_;
};

}  // namespace

std::unique_ptr<StagingAgents> HttpStagingAgents(std::map<std::string, std::string> urls,
                                                 std::string url_template, std::string token) {
  return std::make_unique<HttpAgents>(std::move(urls), std::move(url_template), std::move(token));
}

Result<std::map<std::string, std::string>> ParseAgentUrls(const std::vector<std::string>& words) {
  std::map<std::string, std::string> out;
  for (const std::string& w : words) {
    const size_t eq = w.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == w.size()) {
      return InvalidArgument("'" + w + "': expected NODE=URL, e.g. n1=http://n1:7070");
    }
    if (!out.emplace(w.substr(0, eq), w.substr(eq + 1)).second) {
      return InvalidArgument("node '" + w.substr(0, eq) + "' is given twice");
    }
  }
  return out;
}

Stager::Stager(StagingAgents* agents, StagerOptions options)
    : agents_(agents), options_(std::move(options)) {}

Stager::~Stager() { Stop(); }

void Stager::Want(std::vector<StageTarget> targets) {
  MutexLock lock(mu_);
  std::map<std::string, StageTarget> next;
  bool adds = false;
  std::set<Key> checkpoints;
  for (StageTarget& t : targets) {
    const bool data = !t.nodes.empty() && !t.datasets.empty();
    const bool checkpoint = !t.checkpoint.empty() && !t.checkpoint_nodes.empty();
    if (!data && !checkpoint) continue;
    for (const std::string& node : t.nodes) {
      for (const std::string& d : t.datasets) {
        auto it = entries_.find({node, d});
        adds = adds || it == entries_.end() || !it->second.asked;
      }
    }
    if (checkpoint) {
      for (const std::string& node : t.checkpoint_nodes) {
        checkpoints.insert({node, t.checkpoint});
        adds = adds || checkpoints_.count({node, t.checkpoint}) == 0;
      }
    }
    std::string job = t.job;
    next[job] = std::move(t);
  }
  // A (node, dataset) no job wants any more (they started, ended, or are planned elsewhere):
  // its agent drops the pin it holds for the job it was asked for.
  std::set<Key> still;
  for (const auto& [job, t] : next) {
    for (const std::string& node : t.nodes) {
      for (const std::string& d : t.datasets) still.insert({node, d});
    }
  }
  for (const auto& [job, old] : wanted_) {
    for (const std::string& node : old.nodes) {
      for (const std::string& d : old.datasets) {
        auto e = entries_.find({node, d});
        if (e == entries_.end() || e->second.asked_for.empty() || still.count(e->first) > 0) {
          continue;
        }
        releases_.emplace_back(node, d, std::move(e->second.asked_for));
        e->second.asked_for.clear();  // once
        // Wanted there again later (its plan came back), it is asked again, which pins again.
        e->second.asked = false;
        adds = true;  // wake the thread to send it
      }
    }
  }
  wanted_ = std::move(next);
  std::erase_if(checkpoints_, [&](const auto& e) { return checkpoints.count(e.first) == 0; });
  UpdateMetrics();
  if (adds) {
    ++generation_;
    wake_.NotifyAll();
  }
}

void Stager::Poll(Time now) {
  // The work of this round, chosen under the lock; the calls are made without it.
  struct Call {
    Key key;
    std::string job;
    bool ask;
  };
  std::vector<Call> calls;
  std::vector<Key> checkpoint_calls;
  std::vector<std::tuple<std::string, std::string, std::string>> releases;
  struct DrainCall {
    std::string node;
    int64_t asked;  // the request it serves
    bool follow;    // accepted already: ask how it went (GET) rather than for a drain (POST)
  };
  std::vector<DrainCall> drains;
  {
    MutexLock lock(mu_);
    releases.swap(releases_);
    for (const auto& [node, d] : drains_) {
      if (now >= d.retry_at) drains.push_back({node, d.asked, d.accepted});
    }
    for (auto w = drain_waiters_.begin(); w != drain_waiters_.end();) {
      w = DrainPendingLocked(w->first) ? std::next(w) : drain_waiters_.erase(w);
    }
    for (const auto& [job, t] : wanted_) {
      for (const std::string& node : t.checkpoint_nodes) {
        Key key{node, t.checkpoint};
        auto it = checkpoints_.find(key);
        const bool retry = it != checkpoints_.end() &&
                           (it->second.state == "failed" || it->second.state == "unreachable") &&
                           now >= it->second.retry_at;
        if ((it == checkpoints_.end() || retry) &&
            std::find(checkpoint_calls.begin(), checkpoint_calls.end(), key) ==
                checkpoint_calls.end()) {
          checkpoint_calls.push_back(std::move(key));
        }
      }
    }
    std::set<Key> planned;
    for (const auto& [job, t] : wanted_) {
      for (const std::string& node : t.nodes) {
        for (const std::string& d : t.datasets) {
          Key key{node, d};
          if (!planned.insert(key).second) continue;
          Entry& e = entries_[key];
          const bool retry = (e.progress.state == "failed" || e.progress.state == "unreachable") &&
                             now >= e.retry_at;
          if (!e.asked || retry) {
            calls.push_back({key, job, true});
          } else if (!Finished(e.progress) && e.progress.state != "unreachable") {
            calls.push_back({key, job, false});
          }
        }
      }
    }
  }
  for (const Call& c : calls) {
    Result<StageProgress> r = c.ask ? agents_->Stage(c.key.first, c.key.second, c.job)
                                    : agents_->Get(c.key.first, c.key.second);
    // An agent that forgot the dataset (it restarted) is asked again.
    if (!c.ask && r.status().code() == StatusCode::kNotFound) {
      r = agents_->Stage(c.key.first, c.key.second, c.job);
    }
    MutexLock lock(mu_);
    Entry& e = entries_[c.key];
    e.asked = true;
    if (c.ask) e.asked_for = c.job;
    if (r.ok()) {
      e.progress = *r;
    } else {
      // No agent for the node, or a refusal (a bad URL): failed; a network failure: unreachable.
      // Both are asked again later.
      e.progress.state = r.status().code() == StatusCode::kUnavailable ||
                                 r.status().code() == StatusCode::kDeadlineExceeded
                             ? "unreachable"
                             : "failed";
      e.progress.error = r.status().ToString();
    }
    e.progress.updated = now;
    if (e.progress.state == "failed" || e.progress.state == "unreachable") {
      e.retry_at = now + options_.retry_after_s;
    }
  }
  for (const auto& [node, dataset, job] : releases) {
    // Best effort: an agent that misses it drops the pin when its lease ends.
    (void)agents_->Release(node, dataset, job);
  }
  for (const DrainCall& c : drains) {
    const Result<NodeDrain> r = c.follow ? agents_->DrainState(c.node) : agents_->Drain(c.node);
    MutexLock lock(mu_);
    auto it = drains_.find(c.node);
    // Asked again during the call: the newer request starts over at once, from its own count.
    const bool current = it != drains_.end() && it->second.asked == c.asked;
    std::string outcome;  // counted for each POST, and for a request's end
    if (!r.ok()) {
      outcome = "retry";
      if (current) {
        DrainEntry& d = it->second;
        d.answered_badly = true;
        // No agent known for the node is not going to change; a refusal is not retried forever.
        if (++d.attempts >= kDrainAttempts || r.status().code() == StatusCode::kNotFound) {
          outcome = "given_up";
          drains_.erase(it);
        } else {
          d.retry_at = now + options_.retry_after_s;
        }
      }
    } else if (!c.follow) {
      outcome = "accepted";
      if (current) {
        it->second.accepted = true;
        it->second.runs_before = r->runs;
        it->second.retry_at = 0;  // followed from the next round
      }
    } else if (current && r->runs < it->second.runs_before) {
      it->second.accepted = false;  // the agent restarted and forgot: asked again
    } else if (current && r->state == "idle" && r->runs > it->second.runs_before) {
      outcome = "finished";
      drains_.erase(it);
    }
    if (options_.metrics != nullptr && !outcome.empty() && (!c.follow || outcome != "retry")) {
      options_.metrics
          ->GetCounter("gantry_staging_drain_requests_total",
                       "Requests to nodes' agents to drain checkpoints after a job ended or was "
                       "requeued, by outcome (accepted; finished: the agent's drain after it "
                       "ran to its end; retry: not reached, asked again; given_up).",
                       {{"outcome", outcome}})
          .Increment();
    }
  }
  for (const Key& key : checkpoint_calls) {
    Result<ckpt::TierCopy> r = agents_->Checkpoint(key.first, key.second);
    CheckpointEntry e;
    if (r.ok()) {
      e.state = "held";
      e.copy = *r;
    } else {
      const StatusCode code = r.status().code();
      e.state = code == StatusCode::kNotFound ? "none"
                : code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded
                    ? "unreachable"
                    : "failed";
      e.retry_at = now + options_.retry_after_s;
    }
    MutexLock lock(mu_);
    // Kept only while still wanted: Want may have dropped it during the call.
    bool wanted = false;
    for (const auto& [job, t] : wanted_) {
      wanted = wanted || (t.checkpoint == key.second &&
                          std::find(t.checkpoint_nodes.begin(), t.checkpoint_nodes.end(),
                                    key.first) != t.checkpoint_nodes.end());
    }
    if (wanted) checkpoints_[key] = std::move(e);
  }
  MutexLock lock(mu_);
  UpdateMetrics();
}

void Stager::DrainAfterEnd(const std::vector<std::string>& nodes, const std::string& job) {
  MutexLock lock(mu_);
  for (const std::string& node : nodes) drains_[node] = DrainEntry{.asked = ++drain_requests_};
  if (!job.empty()) drain_waiters_[job] = nodes;
  ++generation_;  // asked at once, not at the next poll interval
  wake_.NotifyAll();
}

bool Stager::DrainPending(const std::string& job) const {
  MutexLock lock(mu_);
  return DrainPendingLocked(job);
}

bool Stager::DrainPendingLocked(const std::string& job) const {
  auto w = drain_waiters_.find(job);
  if (w == drain_waiters_.end()) return false;
  for (const std::string& node : w->second) {
    auto d = drains_.find(node);
    if (d != drains_.end() && !d->second.answered_badly) return true;
  }
  return false;
}

std::vector<std::string> Stager::PendingDrains() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [node, d] : drains_) out.push_back(node);
  return out;
}

void Stager::UpdateMetrics() {
  MetricsRegistry* m = options_.metrics;
  if (m == nullptr) return;
  std::map<std::string, int> by_state = {
      {"queued", 0}, {"staging", 0}, {"done", 0}, {"failed", 0}, {"unreachable", 0}};
  int64_t fetched = 0;
  for (const auto& [key, e] : entries_) {
    if (!e.progress.state.empty()) ++by_state[e.progress.state];
    fetched += e.progress.bytes_fetched;
  }
  for (const auto& [state, n] : by_state) {
    m->GetGauge("gantry_staging_datasets",
                "Datasets on nodes by staging state (one per node and dataset gantryd asked for).",
                {{"state", state}})
        .Set(n);
  }
  std::map<std::string, int> checkpoints_by_state = {
      {"held", 0}, {"none", 0}, {"failed", 0}, {"unreachable", 0}};
  for (const auto& [key, e] : checkpoints_) ++checkpoints_by_state[e.state];
  for (const auto& [state, n] : checkpoints_by_state) {
    m->GetGauge("gantry_staging_checkpoint_nodes",
                "Nodes asked how much of a waiting job's newest checkpoint their local tier "
                "holds, by answer (held: an answer; none: no checkpoint there).",
                {{"state", state}})
        .Set(n);
  }
  m->GetGauge("gantry_staging_fetched_bytes",
              "Bytes the agents fetched to stage datasets gantryd asked for, as they last said.")
      .Set(static_cast<double>(fetched));
  // Per-job series only while the job is wanted, so the scrape does not grow with history.
  std::vector<std::string> now_jobs;
  for (const auto& [job, t] : wanted_) {
    int64_t done = 0;
    int64_t total = 0;
    for (const std::string& node : t.nodes) {
      for (const std::string& d : t.datasets) {
        auto it = entries_.find({node, d});
        if (it == entries_.end()) continue;
        done += it->second.progress.bytes_done;
        total += it->second.progress.bytes_total;
      }
    }
    m->GetGauge(kJobBytes, kJobBytesHelp, {{"job", job}, {"kind", "done"}})
        .Set(static_cast<double>(done));
    m->GetGauge(kJobBytes, kJobBytesHelp, {{"job", job}, {"kind", "total"}})
        .Set(static_cast<double>(total));
    now_jobs.push_back(job);
  }
  for (const std::string& job : job_series_) {
    if (wanted_.count(job) > 0) continue;
    m->RemoveGauge(kJobBytes, {{"job", job}, {"kind", "done"}});
    m->RemoveGauge(kJobBytes, {{"job", job}, {"kind", "total"}});
  }
  job_series_ = std::move(now_jobs);
}

void Stager::Start() {
  MutexLock lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void Stager::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    wake_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void Stager::Run() {
  int64_t seen = -1;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (seen == generation_) {
        wake_.WaitFor(mu_, std::chrono::milliseconds(options_.poll_interval_ms));
      }
      if (stop_) return;
      seen = generation_;
    }
    Poll(DefaultClock().Now());
  }
}

StageProgress Stager::Progress(const std::string& node, const std::string& dataset) const {
  MutexLock lock(mu_);
  auto it = entries_.find({node, dataset});
  return it == entries_.end() ? StageProgress{} : it->second.progress;
}

std::vector<Stager::Part> Stager::JobProgress(const std::string& job) const {
  MutexLock lock(mu_);
  std::vector<Part> out;
  auto w = wanted_.find(job);
  if (w == wanted_.end()) return out;
  for (const std::string& node : w->second.nodes) {
    for (const std::string& d : w->second.datasets) {
      auto it = entries_.find({node, d});
      out.push_back({node, d, it == entries_.end() ? StageProgress{} : it->second.progress});
    }
  }
  return out;
}

bool Stager::Ready(const std::string& job) const {
  std::vector<Part> parts = JobProgress(job);
  return !parts.empty() && std::all_of(parts.begin(), parts.end(),
                                       [](const Part& p) { return p.progress.state == "done"; });
}

std::string Stager::Failure(const std::string& job) const {
  for (const Part& p : JobProgress(job)) {
    if (p.progress.state == "failed") {
      return p.node + ": " + p.dataset + ": " +
             (p.progress.error.empty() ? "staging failed" : p.progress.error);
    }
  }
  return "";
}

std::vector<std::pair<std::string, std::string>> Stager::Held() const {
  MutexLock lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, e] : entries_) {
    if (e.progress.state == "done") out.push_back(key);
  }
  return out;
}

std::vector<Stager::HeldCheckpoint> Stager::HeldCheckpoints() const {
  MutexLock lock(mu_);
  std::vector<HeldCheckpoint> out;
  for (const auto& [key, e] : checkpoints_) {
    if (e.state == "held" && e.copy.chunks_held > 0) out.push_back({key.first, key.second, e.copy});
  }
  return out;
}

}  // namespace gantry::control
