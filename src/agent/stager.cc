// The agent's background staging (stager.h): a queue of dataset URLs, a few threads running
// data::StageDataset on them, and the state of each for the /v1/stage routes.
#include "stager.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include "gantry/data/stage.h"

namespace gantry::agent_internal {
namespace {

constexpr std::string_view kFetchedHelp =
    "Dataset bytes the agent fetched into its node's shard cache (staging), by dataset.";
constexpr std::string_view kFailuresHelp =
    "Stagings that failed, by status code (ResourceExhausted: the cache holds part of it).";

}  // namespace

namespace {

// A file:// URL with its path resolved ("..", ".", symlinks; the part that does not exist yet
// lexically), so that a prefix check cannot be walked around; other URLs as they are.
std::string Resolved(const std::string& url) {
  constexpr std::string_view kFile = "file://";
  if (!url.starts_with(kFile)) return url;
  std::error_code ec;
  const std::filesystem::path p =
      std::filesystem::weakly_canonical(std::filesystem::path(url.substr(kFile.size())), ec);
  return ec ? url : std::string(kFile) + p.lexically_normal().string();
}

// `url` starts with `prefix`, ending at a path component's boundary.
bool UnderPrefix(const std::string& url, std::string prefix) {
  while (prefix.size() > 1 && prefix.back() == '/' && !prefix.ends_with("://")) prefix.pop_back();
  if (!url.starts_with(prefix)) return false;
  return url.size() == prefix.size() || prefix.back() == '/' || url[prefix.size()] == '/';
}

}  // namespace

Status CheckStageUrl(const std::string& url, const std::vector<std::string>& allow,
                     std::string_view what) {
  bool scheme_ok = false;
  for (const char* scheme : {"file://", "s3://", "http://", "https://"}) {
    scheme_ok =
        scheme_ok || (url.starts_with(scheme) && url.size() > std::string_view(scheme).size());
  }
  if (!scheme_ok) {
    return InvalidArgument(std::string(what) + " '" + url +
                           "': the agent reads file://, s3://, http:// and https:// URLs only");
  }
  if (allow.empty()) return Status::Ok();
  const std::string resolved = Resolved(url);
  for (const std::string& prefix : allow) {
    if (UnderPrefix(resolved, Resolved(prefix))) return Status::Ok();
  }
  return PermissionDenied(std::string(what) + " '" + url +
                          "' is not under any of this agent's --stage-allow "
                          "prefixes");
}

Stager::Stager(StagerOptions options)
    : options_(std::move(options)),
      staging_(options_.metrics->GetGauge("gantry_agent_datasets_staging",
                                          "Datasets queued or being staged into the shard "
                                          "cache now.")) {
  for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { Work(); });
}

Stager::~Stager() { Stop(); }

int64_t Stager::Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<StageState> Stager::Request(const std::string& dataset, const std::string& job) {
  GANTRY_RETURN_IF_ERROR(CheckStageUrl(dataset, options_.allow));
  MutexLock lock(mu_);
  if (stopping_) return Cancelled("the agent is stopping");
  ExpirePins();
  auto [it, inserted] = datasets_.try_emplace(dataset);
  StageState& s = it->second;
  if (!job.empty() && std::find(s.jobs.begin(), s.jobs.end(), job) == s.jobs.end()) {
    s.jobs.push_back(job);
  }
  // A job's request pins the dataset (again) for pin_seconds from now. One staged without
  // pins (for nobody, or released) is staged again to take them: it fetches nothing.
  bool repin = false;
  if (!job.empty() && options_.pin_seconds > 0) {
    Pinned& p = pinned_[dataset];
    p.jobs.insert(job);
    s.pinned_until = options_.clock->Now() + options_.pin_seconds;
    repin = s.state == "done" && p.pins.empty();
  }
  if (inserted || s.state == "failed" || repin) {
    // A fresh attempt: what the failed one got is in the cache, so it is not fetched again.
    std::vector<std::string> jobs = std::move(s.jobs);
    const int64_t pinned_until = s.pinned_until;
    s = StageState{};
    s.dataset = dataset;
    s.jobs = std::move(jobs);
    s.pinned_until = pinned_until;
    queue_.push_back(dataset);
    staging_.Add(1);
    cv_.NotifyOne();
  }
  return s;
}

std::optional<StageState> Stager::Release(const std::string& dataset, const std::string& job) {
  MutexLock lock(mu_);
  ExpirePins();
  auto it = datasets_.find(dataset);
  if (it == datasets_.end()) return std::nullopt;
  if (auto p = pinned_.find(dataset); p != pinned_.end()) {
    p->second.jobs.erase(job);
    if (p->second.jobs.empty()) {
      pinned_.erase(p);
      it->second.pinned_until = 0;
    }
  }
  return it->second;
}

void Stager::ExpirePins() {
  const Time now = options_.clock->Now();
  for (auto p = pinned_.begin(); p != pinned_.end();) {
    StageState& s = datasets_[p->first];
    if (s.pinned_until > now) {
      ++p;
      continue;
    }
    s.pinned_until = 0;
    p = pinned_.erase(p);
  }
}

std::optional<StageState> Stager::Get(const std::string& dataset) {
  MutexLock lock(mu_);
  ExpirePins();
  auto it = datasets_.find(dataset);
  if (it == datasets_.end()) return std::nullopt;
  return it->second;
}

std::vector<StageState> Stager::List() {
  MutexLock lock(mu_);
  ExpirePins();
  std::vector<StageState> out;
  for (const auto& [url, s] : datasets_) out.push_back(s);
  return out;
}

void Stager::Work() {
  while (true) {
    std::string dataset;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) {
        // Leases end on their own, asked or not.
        cv_.WaitFor(mu_, std::chrono::seconds(1));
        ExpirePins();
      }
      if (stopping_) return;
      dataset = std::move(queue_.front());
      queue_.pop_front();
      StageState& s = datasets_[dataset];
      s.state = "staging";
      s.started = Now();
    }
    Stage(dataset);
  }
}

void Stager::Stage(const std::string& dataset) {
  Counter& fetched = options_.metrics->GetCounter("gantry_agent_stage_bytes_fetched_total",
                                                  kFetchedHelp, {{"dataset", dataset}});
  uint64_t fetched_so_far = 0;
  data::StageOptions o;
  o.cache.dir = options_.cache_dir;
  o.cache.capacity_bytes = options_.cache_bytes;
  o.store_options = options_.store_options;
  o.cancel = &cancel_;
  std::vector<std::shared_ptr<const void>> pins;
  o.keep_pinned = &pins;
  o.progress = [&](const data::StageProgress& p) {
    fetched.Increment(p.bytes_fetched - fetched_so_far);
    fetched_so_far = p.bytes_fetched;
    MutexLock lock(mu_);
    StageState& s = datasets_[dataset];
    s.shards_total = p.shards_total;
    s.shards_done = p.shards_done;
    s.bytes_total = p.bytes_total;
    s.bytes_done = p.bytes_done;
    s.bytes_fetched = p.bytes_fetched;
  };
  Result<data::StageProgress> result = data::StageDataset(dataset, o);
  if (result.ok()) o.progress(*result);
  MutexLock lock(mu_);
  StageState& s = datasets_[dataset];
  s.finished = Now();
  staging_.Add(-1);
  // Kept for the jobs that still hold a lease on it (what was staged, even of a failure).
  ExpirePins();
  if (auto p = pinned_.find(dataset); p != pinned_.end()) p->second.pins = std::move(pins);
  if (result.ok()) {
    s.state = "done";
    return;
  }
  s.state = "failed";
  s.error = result.status().message();
  s.code = StatusCodeName(result.status().code());
  options_.metrics
      ->GetCounter("gantry_agent_stage_failures_total", kFailuresHelp, {{"code", s.code}})
      .Increment();
}

void Stager::Stop() {
  MutexLock stop_lock(stop_mu_);
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cancel_ = true;  // stagings in flight stop at their next shard
  cv_.NotifyAll();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace gantry::agent_internal
