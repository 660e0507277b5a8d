#include "gantry/control/api.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <strings.h>

#include <algorithm>
#include <array>
#include <chrono>
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
                      {"requeues", r.requeues},
                      {"placement", placement},
                      {"reason", v.reason},
                      {"explain", v.explain}};
  j["estimated_start"] = v.estimated_start >= 0 ? nlohmann::json(v.estimated_start) : nullptr;
  j["started"] = r.started >= 0 ? nlohmann::json(r.started) : nullptr;
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
    server_.Get("/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      const std::string phase = req.get_param_value("phase");
      const std::string team = req.get_param_value("team");
      auto snap = snapshot_();
      nlohmann::json jobs = nlohmann::json::array();
      for (const JobView& v : snap->jobs) {
        if (!c.Sees(v.record)) continue;
        if (!phase.empty() && phase != JobPhaseName(v.record.phase)) continue;
        if (!team.empty() && team != v.record.team) continue;
        jobs.push_back(JobJson(v));
      }
      Json(res, 200, {{"time", snap->time}, {"jobs", std::move(jobs)}});
    });
    server_.Get(R"(/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      const std::string id = req.matches[1];
      auto snap = snapshot_();
      for (const JobView& v : snap->jobs) {
        if (v.record.id == id && c.Sees(v.record)) return Json(res, 200, JobJson(v));
      }
      // Another team's job answers as a missing one: a token learns nothing of other teams.
      Error(res, 404, "not_found", "no active job '" + id + "' visible to this token");
    });
    // Cancel: the caller must see the job (another team's is 404, like a missing one).
    server_.Delete(R"(/v1/jobs/([^/]+))", [this](const httplib::Request& req,
                                                 httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      const std::string id = req.matches[1];
      auto snap = snapshot_();
      const JobView* job = nullptr;
      for (const JobView& v : snap->jobs) {
        if (v.record.id == id && c.Sees(v.record)) job = &v;
      }
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
      for (const JobView& v : snap->jobs) {
        if (c.Sees(v.record)) visible.insert(v.record.id);
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
    // The pending jobs in the order the plan expects them to start (no estimate last).
    server_.Get("/v1/queue", [this](const httplib::Request& req, httplib::Response& res) {
      Caller c = Authenticate(req, res);
      if (!c.authenticated) return;
      auto snap = snapshot_();
      std::vector<const JobView*> pending;
      for (const JobView& v : snap->jobs) {
        if (v.record.phase == JobPhase::kPending && c.Sees(v.record)) pending.push_back(&v);
      }
      std::stable_sort(pending.begin(), pending.end(), [](const JobView* a, const JobView* b) {
        const Time ea = a->estimated_start < 0 ? kInfiniteTime : a->estimated_start;
        const Time eb = b->estimated_start < 0 ? kInfiniteTime : b->estimated_start;
        return ea < eb;
      });
      nlohmann::json jobs = nlohmann::json::array();
      for (const JobView* v : pending) jobs.push_back(JobJson(*v));
      Json(res, 200, {{"time", snap->time}, {"jobs", std::move(jobs)}});
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
