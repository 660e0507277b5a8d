#include "gantry/control/api.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <strings.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "control/web.h"
#include "gantry/report/chart_library.h"

namespace gantry::control {

namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

Digest Sha256(std::string_view s) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

nlohmann::json JobJson(const JobView& v) {
  const JobRecord& r = v.record;
  nlohmann::json placement = nlohmann::json::array();
  for (const NodeGpus& s : r.placement) placement.push_back({{"node", s.node}, {"gpus", s.gpus}});
  nlohmann::json j = {{"id", r.id},
                      {"user", r.user},
                      {"team", r.team},
                      {"queue", r.queue},
                      {"phase", JobPhaseName(r.phase)},
                      {"gpus", r.gpus},
                      {"gpus_per_node", r.gpus_per_node},
                      {"nodes", r.nodes},
                      {"gpu_types", r.gpu_types},
                      {"submit", r.submit},
                      {"time_limit", r.time_limit},
                      {"qos", r.qos},
                      {"qos_name", r.qos_name},
                      {"requeues", r.requeues},
                      {"placement", placement},
                      {"reason", v.reason},
                      {"explain", v.explain}};
  j["estimated_start"] = v.estimated_start >= 0 ? nlohmann::json(v.estimated_start) : nullptr;
  j["started"] = r.started >= 0 ? nlohmann::json(r.started) : nullptr;
  j["datasets"] = r.datasets;
  j["checkpoint"] = r.checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.checkpoint);
  nlohmann::json staging = nlohmann::json::array();
  for (const StagingView& s : v.staging) {
    staging.push_back({{"node", s.node},
                       {"dataset", s.dataset},
                       {"state", s.state},
                       {"bytes_done", s.bytes_done},
                       {"bytes_total", s.bytes_total},
                       {"error", s.error}});
  }
  j["staging"] = std::move(staging);
  j["data_wait_until"] = v.data_wait_until >= 0 ? nlohmann::json(v.data_wait_until) : nullptr;
  return j;
}

nlohmann::json NodeJson(const NodeView& n) {
  return {{"name", n.name},
          {"state", n.state},
          {"slurm_state", n.rm_state},
          {"reason", n.reason},
          {"gpu_type", n.gpu_type},
          {"gpus", n.gpus},
          {"gpus_used", n.gpus_used},
          {"domain", n.domain},
          {"domains", n.domains},
          {"jobs", n.jobs}};
}

nlohmann::json TeamJson(const TeamView& t) {
  return {{"team", t.name},
          {"quota_gpus", t.quota_gpus >= 0 ? nlohmann::json(t.quota_gpus) : nlohmann::json()},
          {"shares", t.shares},
          {"running_gpus", t.running_gpus},
          {"running_jobs", t.running_jobs},
          {"pending_jobs", t.pending_jobs},
          {"pending_gpus", t.pending_gpus},
          {"gpu_seconds", t.gpu_seconds}};
}

nlohmann::json PluginJson(const PluginSpec& p) {
  nlohmann::json args = nlohmann::json::object();
  for (const auto& [k, v] : p.args.values()) args[k] = v;
  return {{"name", p.name}, {"weight", p.weight}, {"args", args}};
}

nlohmann::json ProfileJson(const Profile& p) {
  nlohmann::json priority = nlohmann::json::array();
  for (const PluginSpec& s : p.priority) priority.push_back(PluginJson(s));
  nlohmann::json admission = nlohmann::json::array();
  for (const PluginSpec& s : p.admission) admission.push_back(PluginJson(s));
  const char* backfill = p.backfill == BackfillMode::kEasy           ? "easy"
                         : p.backfill == BackfillMode::kConservative ? "conservative"
                                                                     : "none";
  return {{"name", p.name},
          {"description", p.description},
          {"priority", priority},
          {"admission", admission},
          {"placement", p.placement.name.empty() ? nlohmann::json() : PluginJson(p.placement)},
          {"backfill", backfill},
          {"max_jobs_per_cycle", p.max_jobs_per_cycle},
          {"preemption", p.preemption.name.empty() ? nlohmann::json() : PluginJson(p.preemption)},
          {"priority_recalc_interval", p.priority_recalc_interval}};
}

// Who a request speaks for.
struct Caller {
  bool authenticated = false;
  bool is_operator = false;
  std::string team;
  bool Sees(const JobRecord& r) const { return is_operator || r.team == team; }
};

}  // namespace

std::string JobViewJson(const JobView& job) { return JobJson(job).dump(); }
std::string NodeViewJson(const NodeView& node) { return NodeJson(node).dump(); }
std::string TeamViewJson(const TeamView& team) { return TeamJson(team).dump(); }

std::vector<std::string> TokenTeamsNotInCluster(
    const std::map<std::string, std::string>& team_tokens, const Cluster& cluster) {
  std::set<std::string> named, unknown;
  for (const Team& t : cluster.teams()) named.insert(t.name);
  for (const auto& [token, team] : team_tokens) {
    if (!named.contains(team)) unknown.insert(team);
  }
  return std::vector<std::string>(unknown.begin(), unknown.end());
}

Result<std::map<std::string, std::string>> ParseTeamTokens(const std::string& text,
                                                           const std::string& source) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  for (int line_no = 1; start <= text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> words;
    std::string word;
    for (char c : line + " ") {
      if (c == ' ' || c == '\t') {
        if (!word.empty()) words.push_back(std::move(word));
        word.clear();
      } else {
        word += c;
      }
    }
    if (words.empty() || words[0][0] == '#') continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    if (words.size() != 2) return InvalidArgument(where + "expected 'TEAM TOKEN'");
    for (char c : words[1]) {
      if (c < 0x21 || c > 0x7e) {
        return InvalidArgument(where + "a token may hold only printable ASCII without spaces");
      }
    }
    if (!out.emplace(words[1], words[0]).second) {
      return InvalidArgument(where + "this token is given twice (each team needs its own)");
    }
  }
  return out;
}

class ApiServer::Impl {
 public:
  Impl(ApiOptions options, SnapshotSource snapshot, MetricsRegistry* metrics)
      : options_(std::move(options)), snapshot_(std::move(snapshot)), metrics_(metrics) {}

  ~Impl() { Stop(); }

  Status Start() {
    for (const auto& [token, team] : options_.team_tokens) {
      if (token.empty() || team.empty()) {
        return InvalidArgument("api: a team token and its team must not be empty");
      }
      tokens_.push_back({Sha256(token), team, false});
    }
    if (!options_.operator_token.empty()) {
      if (options_.team_tokens.count(options_.operator_token) > 0) {
        return InvalidArgument("api: the operator token is also a team's token");
      }
      tokens_.push_back({Sha256(options_.operator_token), "", true});
    }
    server_.new_task_queue = [n = options_.threads] {
      return new httplib::ThreadPool(static_cast<size_t>(n > 0 ? n : 1));
    };
    server_.set_read_timeout(options_.read_timeout_s, 0);
    // httplib writes headers and body in separate sends: with Nagle's algorithm on, a client on
    // a kept-alive connection waits for its delayed ACK (40 ms) on every request.
    server_.set_tcp_nodelay(true);
    server_.set_write_timeout(options_.read_timeout_s, 0);
    server_.set_payload_max_length(64 << 10);

    server_.Get("/v1/health", [this](const httplib::Request&, httplib::Response& res) {
      auto snap = snapshot_();
      Json(res, 200,
           {{"status", snap->time >= 0 ? "ok" : "starting"},
            {"time", snap->time},
            {"cycles", snap->cycles},
            {"active_jobs", snap->jobs.size()},
            {"gpus", {{"total", snap->total_gpus}, {"busy", snap->busy_gpus}}}});
    });
    // Every active job the caller sees, by submit time then id, a page at a time.
    server_.Get("/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      const std::string phase = req.get_param_value("phase");
      const std::string team = req.get_param_value("team");
      Page page;
      if (!ParsePage(req, res, &page)) return;
      auto snap = PagedSnapshot(page);
      std::vector<const JobView*> all;
      all.reserve(snap->jobs.size());
      for (const auto& v : snap->jobs) all.push_back(v.get());
      Serve(res, "/v1/jobs", snap, all, page, ListKey::kSubmit, {{"phase", phase}, {"team", team}},
            [&](const JobView& v) {
              return c.Sees(v.record) && (phase.empty() || phase == JobPhaseName(v.record.phase)) &&
                     (team.empty() || team == v.record.team);
            });
    });
    server_.Get(R"(/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      const std::string id = req.matches[1];
      auto snap = snapshot_();
      const JobView* v = snap->Find(id);
      // Another team's job answers as a missing one: a token learns nothing of other teams.
      if (v == nullptr || !c.Sees(v->record)) {
        return Error(res, 404, "not_found", "no active job '" + id + "' visible to this token");
      }
      nlohmann::json j = JobJson(*v);
      // Asked for by name: the sentence as of now, not as of the job's last change (the engine
      // has no sentence for a job held back for its data: the loop's stands).
      if (options_.explain && v->data_wait_until < 0) {
        Result<std::string> now = options_.explain(id);
        if (now.ok()) j["explain"] = *now;
      }
      Json(res, 200, j);
    });
    // Cancel: the caller must see the job (another team's is 404, like a missing one).
    server_.Delete(R"(/v1/jobs/([^/]+))", [this](const httplib::Request& req,
                                                 httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      const std::string id = req.matches[1];
      auto snap = snapshot_();
      const JobView* job = snap->Find(id);
      if (job != nullptr && !c.Sees(job->record)) job = nullptr;
      if (job == nullptr) {
        return Error(res, 404, "not_found", "no active job '" + id + "' visible to this token");
      }
      if (!options_.cancel) {
        return Error(res, 501, "unimplemented", "this server cannot cancel jobs");
      }
      Status s = options_.cancel(id, c.is_operator ? "operator" : "team " + c.team);
      if (s.ok()) {
        return Json(res, 202, {{"id", id}, {"status", "cancelling"}, {"team", job->record.team}});
      }
      if (s.code() == StatusCode::kNotFound) {
        return Error(res, 404, "not_found", s.message());
      }
      if (s.code() == StatusCode::kFailedPrecondition) {
        return Error(res, 409, "conflict", s.message());
      }
      Error(res, 503, "unavailable", s.message());
    });
    // Every node; a team's token sees the GPUs in use on each but only its own jobs' ids.
    server_.Get("/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      auto snap = snapshot_();
      std::set<std::string> visible;
      for (const auto& v : snap->jobs) {
        if (c.Sees(v->record)) visible.insert(v->record.id);
      }
      nlohmann::json nodes = nlohmann::json::array();
      for (const NodeView& n : snap->nodes) {
        nlohmann::json j = NodeJson(n);
        nlohmann::json jobs = nlohmann::json::array();
        for (const std::string& id : n.jobs) {
          if (visible.count(id) > 0) jobs.push_back(id);
        }
        j["jobs"] = std::move(jobs);
        nodes.push_back(std::move(j));
      }
      Json(res, 200, {{"time", snap->time}, {"nodes", std::move(nodes)}});
    });
    // Per team: quota, running and pending; a team's token sees its own team only.
    server_.Get("/v1/usage", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      auto snap = snapshot_();
      nlohmann::json teams = nlohmann::json::array();
      for (const TeamView& t : snap->teams) {
        if (c.is_operator || t.name == c.team) teams.push_back(TeamJson(t));
      }
      Json(res, 200, {{"time", snap->time}, {"teams", std::move(teams)}});
    });
    server_.Get("/v1/profiles", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      auto snap = snapshot_();
      Json(res, 200, {{"time", snap->time}, {"profile", ProfileJson(snap->profile)}});
    });
    // The pending jobs in the order the plan expects them to start (no estimate last), a page
    // at a time.
    server_.Get("/v1/queue", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      const std::string team = req.get_param_value("team");
      const std::string reason = req.get_param_value("reason");
      Page page;
      if (!ParsePage(req, res, &page)) return;
      auto snap = PagedSnapshot(page);
      Serve(res, "/v1/queue", snap, snap->Queue(), page, ListKey::kEstimate,
            {{"team", team}, {"reason", reason}}, [&](const JobView& v) {
              return c.Sees(v.record) && (team.empty() || team == v.record.team) &&
                     (reason.empty() || reason == v.reason);
            });
    });
    // The web page's feed: occupancy is cluster-wide, the rest the caller's team's (web.h).
    server_.Get("/v1/overview", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      Json(res, 200, web::OverviewJson(*snapshot_(), c.is_operator, c.team));
    });
    web::RegisterPage(server_, options_.web_dir.empty() ? ChartLibraryDir() : options_.web_dir);
    server_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (options_.metrics_need_token && !Authenticate(req, res).authenticated) return;
      res.status = 200;
      res.set_content(metrics_ != nullptr ? metrics_->PrometheusText() : std::string(),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    server_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) {
        Error(res, res.status, res.status == 404 ? "not_found" : "error",
              res.status == 404 ? "no such endpoint (see docs/openapi.yaml)" : "request failed");
      }
    });

    if (options_.port == 0) {
      port_ = server_.bind_to_any_port(options_.host);
    } else if (options_.port > 0 && options_.port < 65536 &&
               server_.bind_to_port(options_.host, options_.port)) {
      port_ = options_.port;
    }
    if (port_ <= 0) {
      return Unavailable("gantryd api: cannot listen on " + options_.host + ":" +
                         std::to_string(options_.port) +
                         " (address in use, not an address of this host, or not permitted)");
    }
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() is a no-op until the accept loop runs: wait for it, so Stop() cannot miss it.
    for (int i = 0; i < 5000 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::Ok();
  }

  void Stop() {
    server_.stop();
    if (listener_.joinable()) listener_.join();
  }

  Caller Authenticate(const httplib::Request& req, httplib::Response& res) {
    Caller c;
    const std::string value = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool presented = value.size() > kBearer.size() &&
                           strncasecmp(value.c_str(), kBearer.data(), kBearer.size()) == 0;
    if (presented) {
      const Digest d = Sha256(std::string_view(value).substr(kBearer.size()));
      // Every configured token is compared, in constant time each, so the time taken says
      // nothing about which (if any) matched.
      for (const Token& t : tokens_) {
        if (CRYPTO_memcmp(d.data(), t.digest.data(), d.size()) == 0) {
          c.authenticated = true;
          c.is_operator = t.is_operator;
          c.team = t.team;
        }
      }
    }
    if (!c.authenticated) {
      res.set_header("WWW-Authenticate", presented
                                             ? "Bearer realm=\"gantryd\", error=\"invalid_token\""
                                             : "Bearer realm=\"gantryd\"");
      Error(res, 401, "unauthenticated",
            presented ? "the token is not known" : "send 'Authorization: Bearer TOKEN'");
    }
    return c;
  }

  // Paging (docs/openapi.yaml, "Paging"). A list is walked in a fixed order; the cursor names
  // the snapshot the first page came from and the last job returned. The next page comes from
  // that same snapshot while it is among the last kPinned ones paged, so a walk sees one
  // consistent list however many cycles pass; after that, from the current snapshot, after
  // the last job returned in the list's order (no job twice in /v1/jobs, whose order never
  // changes; the queue's order may have moved by then).
  static constexpr int kDefaultLimit = 1000;
  static constexpr int kMaxLimit = 10000;
  static constexpr size_t kPinned = 8;
  enum class ListKey { kSubmit, kEstimate };
  struct Key {
    Time estimate = kInfiniteTime;  // kEstimate lists only
    Time submit = 0;
    std::string id;
  };
  struct Page {
    int limit = kDefaultLimit;
    bool has_cursor = false;
    int64_t cycles = -1;  // the snapshot of the first page
    Key after;
  };

  static Key KeyOf(const JobView& v, ListKey k) {
    Key key;
    if (k == ListKey::kEstimate && v.estimated_start >= 0) key.estimate = v.estimated_start;
    key.submit = v.record.submit;
    key.id = v.record.id;
    return key;
  }
  static bool Less(const Key& a, const Key& b) {
    if (a.estimate != b.estimate) return a.estimate < b.estimate;
    if (a.submit != b.submit) return a.submit < b.submit;
    return a.id < b.id;
  }
  // Opaque to clients: hex of "cycles estimate submit id", so it is safe in a query string.
  static std::string EncodeCursor(int64_t cycles, const Key& k) {
    const std::string raw = std::to_string(cycles) + " " + std::to_string(k.estimate) + " " +
                            std::to_string(k.submit) + " " + k.id;
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned char ch : raw) {
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
    return out;
  }
  static bool DecodeCursor(const std::string& text, Page* page) {
    if (text.empty() || text.size() % 2 != 0 || text.size() > 2048) return false;
    std::string raw;
    for (size_t i = 0; i < text.size(); i += 2) {
      int v = 0;
      for (size_t k = i; k < i + 2; ++k) {
        const char ch = text[k];
        const int d = ch >= '0' && ch <= '9'   ? ch - '0'
                      : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                               : -1;
        if (d < 0) return false;
        v = v * 16 + d;
      }
      raw += static_cast<char>(v);
    }
    long long cycles = 0, estimate = 0, submit = 0;
    int used = 0;
    if (std::sscanf(raw.c_str(), "%lld %lld %lld %n", &cycles, &estimate, &submit, &used) != 3 ||
        used <= 0 || static_cast<size_t>(used) >= raw.size()) {
      return false;
    }
    page->has_cursor = true;
    page->cycles = cycles;
    page->after.estimate = estimate;
    page->after.submit = submit;
    page->after.id = raw.substr(static_cast<size_t>(used));
    return true;
  }

  // limit and cursor from the query; false (and a 400 written) when either is malformed.
  static bool ParsePage(const httplib::Request& req, httplib::Response& res, Page* page) {
    if (req.has_param("limit")) {
      const std::string text = req.get_param_value("limit");
      char* end = nullptr;
      const long v = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || v < 1 || v > kMaxLimit) {
        Error(res, 400, "invalid_argument",
              "limit must be a whole number from 1 to " + std::to_string(kMaxLimit));
        return false;
      }
      page->limit = static_cast<int>(v);
    }
    if (req.has_param("cursor") && !DecodeCursor(req.get_param_value("cursor"), page)) {
      Error(res, 400, "invalid_argument",
            "cursor is not one this server gave out (take it from a response's 'next')");
      return false;
    }
    return true;
  }

  // The snapshot a page reads: the cursor's, while pinned; else the current one.
  std::shared_ptr<const ControlSnapshot> PagedSnapshot(const Page& page) {
    if (page.has_cursor) {
      std::lock_guard<std::mutex> lock(pinned_mu_);
      for (const auto& p : pinned_) {
        if (p->cycles == page.cycles) return p;
      }
    }
    return snapshot_();
  }
  void Pin(const std::shared_ptr<const ControlSnapshot>& snap) {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    for (const auto& p : pinned_) {
      if (p.get() == snap.get()) return;
    }
    // One per cycle count: a snapshot published again under the same count replaces it.
    for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
      if ((*it)->cycles == snap->cycles) {
        pinned_.erase(it);
        break;
      }
    }
    pinned_.push_back(snap);
    while (pinned_.size() > kPinned) pinned_.pop_front();
  }

  // Writes one page of `list` (in `order`'s order) filtered by `keep`: the jobs, how many
  // match in all, and the link to the next page (null on the last).
  template <typename Keep>
  void Serve(httplib::Response& res, const std::string& path,
             const std::shared_ptr<const ControlSnapshot>& snap_ref,
             const std::vector<const JobView*>& list, const Page& page, ListKey order,
             const std::vector<std::pair<std::string, std::string>>& filters, Keep keep) {
    const ControlSnapshot& snap = *snap_ref;
    size_t from = 0;
    if (page.has_cursor) {
      Key after = page.after;
      if (order == ListKey::kSubmit) after.estimate = kInfiniteTime;
      from = static_cast<size_t>(std::upper_bound(list.begin(), list.end(), after,
                                                  [&](const Key& k, const JobView* v) {
                                                    return Less(k, KeyOf(*v, order));
                                                  }) -
                                 list.begin());
    }
    nlohmann::json jobs = nlohmann::json::array();
    const JobView* last = nullptr;
    bool more = false;
    int64_t total = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!keep(*list[i])) continue;
      ++total;
      if (i < from || more) continue;
      if (static_cast<int>(jobs.size()) == page.limit) {
        more = true;
        continue;
      }
      jobs.push_back(JobJson(*list[i]));
      last = list[i];
    }
    nlohmann::json next = nullptr;
    if (more && last != nullptr) {
      std::string link = path + "?limit=" + std::to_string(page.limit) +
                         "&cursor=" + EncodeCursor(snap.cycles, KeyOf(*last, order));
      for (const auto& [name, value] : filters) {
        if (!value.empty()) link += "&" + name + "=" + httplib::detail::encode_query_param(value);
      }
      next = link;
      Pin(snap_ref);
    }
    Json(res, 200,
         {{"time", snap.time}, {"total", total}, {"jobs", std::move(jobs)}, {"next", next}});
  }

  static void Json(httplib::Response& res, int status, const nlohmann::json& body) {
    res.status = status;
    res.set_content(body.dump() + "\n", "application/json");
  }
  static void Error(httplib::Response& res, int status, const std::string& code,
                    const std::string& message) {
    Json(res, status, {{"error", {{"code", code}, {"message", message}}}});
  }

  struct Token {
    Digest digest;
    std::string team;
    bool is_operator;
  };

  ApiOptions options_;
  SnapshotSource snapshot_;
  std::mutex pinned_mu_;
  std::deque<std::shared_ptr<const ControlSnapshot>> pinned_;  // oldest first
  MetricsRegistry* metrics_;
  std::vector<Token> tokens_;
  httplib::Server server_;
  std::thread listener_;
  int port_ = -1;
};

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiServer::~ApiServer() = default;

Result<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiOptions& options,
                                                    SnapshotSource snapshot,
                                                    MetricsRegistry* metrics) {
  if (!snapshot) return InvalidArgument("api: no snapshot source");
  auto impl = std::make_unique<Impl>(options, std::move(snapshot), metrics);
  GANTRY_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

int ApiServer::port() const { return impl_->port_; }

void ApiServer::Stop() { impl_->Stop(); }

}  // namespace gantry::control
