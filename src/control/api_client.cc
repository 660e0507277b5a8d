#include "gantry/control/api_client.h"

#include <httplib.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>

namespace gantry::control {

namespace {

Result<JobPhase> PhaseFromName(const std::string& name) {
  for (JobPhase p :
       {JobPhase::kPending, JobPhase::kStarting, JobPhase::kRunning, JobPhase::kDone}) {
    if (name == JobPhaseName(p)) return p;
  }
  return DataLoss("unknown job phase '" + name + "'");
}

Result<JobView> FromJson(const nlohmann::json& j) {
  JobView v;
  JobRecord& r = v.record;
  try {
    r.id = j.at("id").get<std::string>();
    r.user = j.at("user").get<std::string>();
    r.team = j.at("team").get<std::string>();
    r.queue = j.value("queue", "");
    GANTRY_ASSIGN_OR_RETURN(r.phase, PhaseFromName(j.at("phase").get<std::string>()));
    r.gpus = j.at("gpus").get<int>();
    r.gpus_per_node = j.value("gpus_per_node", 0);
    r.nodes = j.value("nodes", 0);
    r.gpu_types = j.value("gpu_types", std::vector<std::string>{});
    r.submit = j.value("submit", Time{0});
    r.time_limit = j.value("time_limit", Duration{0});
    r.qos = j.value("qos", 0);
    r.requeues = j.value("requeues", 0);
    for (const auto& s : j.value("placement", nlohmann::json::array())) {
      r.placement.push_back({s.at("node").get<std::string>(), s.at("gpus").get<int>()});
    }
    if (j.contains("started") && !j.at("started").is_null())
      r.started = j.at("started").get<Time>();
    v.reason = j.at("reason").get<std::string>();
    v.explain = j.at("explain").get<std::string>();
    if (j.contains("estimated_start") && !j.at("estimated_start").is_null()) {
      v.estimated_start = j.at("estimated_start").get<Time>();
    }
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("a job in gantryd's answer is not as documented: ") + e.what());
  }
  return v;
}

// One page's jobs appended to `out`; `next` becomes the next page's link, empty on the last.
Status PageFromJson(const std::string& text, std::vector<JobView>* out, std::string* next) {
  try {
    const nlohmann::json body = nlohmann::json::parse(text);
    for (const auto& j : body.at("jobs")) {
      GANTRY_ASSIGN_OR_RETURN(JobView v, FromJson(j));
      out->push_back(std::move(v));
    }
    next->clear();
    if (body.contains("next") && !body.at("next").is_null()) {
      *next = body.at("next").get<std::string>();
    }
    return Status::Ok();
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("gantryd's answer is not the documented JSON: ") + e.what());
  }
}

Result<NodeView> NodeFromJson(const nlohmann::json& j) {
  NodeView n;
  try {
    n.name = j.at("name").get<std::string>();
    n.state = j.at("state").get<std::string>();
    n.rm_state = j.value("slurm_state", "");
    n.reason = j.value("reason", "");
    n.gpu_type = j.value("gpu_type", "");
    n.gpus = j.at("gpus").get<int>();
    n.gpus_used = j.at("gpus_used").get<int>();
    n.domain = j.value("domain", "");
    n.domains = j.value("domains", std::vector<std::string>{});
    n.jobs = j.value("jobs", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("a node in gantryd's answer is not as documented: ") + e.what());
  }
  return n;
}

Result<TeamView> TeamFromJson(const nlohmann::json& j) {
  TeamView t;
  try {
    t.name = j.at("team").get<std::string>();
    t.quota_gpus = j.contains("quota_gpus") && !j.at("quota_gpus").is_null()
                       ? j.at("quota_gpus").get<int>()
                       : -1;
    t.shares = j.value("shares", 1.0);
    t.running_gpus = j.at("running_gpus").get<int>();
    t.running_jobs = j.value("running_jobs", 0);
    t.pending_jobs = j.at("pending_jobs").get<int>();
    t.pending_gpus = j.value("pending_gpus", 0);
    t.gpu_seconds = j.value("gpu_seconds", 0.0);
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("a team in gantryd's answer is not as documented: ") + e.what());
  }
  return t;
}

// The array `key` of an answer, each element read by `one`.
template <typename T, typename F>
Result<std::vector<T>> ArrayFromJson(const std::string& text, const char* key, F one) {
  try {
    const nlohmann::json body = nlohmann::json::parse(text);
    std::vector<T> out;
    for (const auto& j : body.at(key)) {
      GANTRY_ASSIGN_OR_RETURN(T v, one(j));
      out.push_back(std::move(v));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("gantryd's answer is not the documented JSON: ") + e.what());
  }
}

Status CheckJobId(const std::string& id) {
  if (id.empty()) return InvalidArgument("an empty job id");
  for (char c : id) {
    if (c == '/' || c == '?' || c == '#' || c == '%' || static_cast<unsigned char>(c) <= 0x20) {
      return InvalidArgument("'" + id + "' is not a job id");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<NodeView> NodeViewFromJson(const std::string& json) {
  try {
    return NodeFromJson(nlohmann::json::parse(json));
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("not JSON: ") + e.what());
  }
}

Result<TeamView> TeamViewFromJson(const std::string& json) {
  try {
    return TeamFromJson(nlohmann::json::parse(json));
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("not JSON: ") + e.what());
  }
}

std::string DefaultServer() {
  const char* s = std::getenv("GANTRY_SERVER");
  return s != nullptr && *s != '\0' ? s : "http://127.0.0.1:8642";
}

Result<JobView> JobViewFromJson(const std::string& json) {
  try {
    return FromJson(nlohmann::json::parse(json));
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("not JSON: ") + e.what());
  }
}

ApiClient::ApiClient(ApiClientOptions options) : options_(std::move(options)) {}

Result<std::string> ApiClient::Get(const std::string& path) const { return Send("GET", path); }

Result<std::string> ApiClient::Send(const std::string& method, const std::string& path) const {
  const std::string& s = options_.server;
  if (s.rfind("http://", 0) != 0 || s.size() <= 7) {
    return InvalidArgument("server '" + s + "': expected http://HOST[:PORT]");
  }
  httplib::Client client(s);
  client.set_connection_timeout(options_.timeout_s, 0);
  client.set_read_timeout(options_.timeout_s, 0);
  httplib::Headers headers;
  if (!options_.token.empty()) headers.emplace("Authorization", "Bearer " + options_.token);
  httplib::Result r = method == "DELETE" ? client.Delete(path, headers) : client.Get(path, headers);
  if (!r) {
    return Unavailable("cannot reach gantryd at " + s + " (" + httplib::to_string(r.error()) +
                       "); is it running? (--server, $GANTRY_SERVER)");
  }
  std::string message = r->body;
  try {
    message = nlohmann::json::parse(r->body).at("error").at("message").get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  switch (r->status) {
    case 200:
    case 202:
      return r->body;
    case 401:
      return PermissionDenied("gantryd at " + s + " refused the token: " + message +
                              " (--token-file, $GANTRY_TOKEN)");
    case 404:
      return NotFound(message);
    case 409:
      return FailedPrecondition(message);
    case 501:
      return Unimplemented(message);
    default:
      if (r->status >= 500) {
        return Unavailable("gantryd at " + s + " failed: HTTP " + std::to_string(r->status));
      }
      return InvalidArgument("gantryd at " + s + ": HTTP " + std::to_string(r->status) + ": " +
                             message);
  }
}

Result<std::vector<JobView>> ApiClient::Queue() const { return AllPages("/v1/queue"); }

Result<std::vector<JobView>> ApiClient::Jobs() const { return AllPages("/v1/jobs"); }

Result<std::vector<JobView>> ApiClient::AllPages(const std::string& first) const {
  std::vector<JobView> out;
  std::string path =
      options_.page_limit > 0 ? first + "?limit=" + std::to_string(options_.page_limit) : first;
  // Each page names the next; a server that keeps naming pages past any sane count is broken.
  for (int pages = 0; !path.empty(); ++pages) {
    if (pages >= kMaxPages) {
      return DataLoss("gantryd's " + first + " named more than " + std::to_string(kMaxPages) +
                      " pages");
    }
    if (path.rfind(first, 0) != 0) {
      return DataLoss("gantryd's " + first + " named a next page elsewhere: " + path);
    }
    GANTRY_ASSIGN_OR_RETURN(std::string body, Get(path));
    GANTRY_RETURN_IF_ERROR(PageFromJson(body, &out, &path));
  }
  return out;
}

Result<JobView> ApiClient::Job(const std::string& id) const {
  GANTRY_RETURN_IF_ERROR(CheckJobId(id));
  GANTRY_ASSIGN_OR_RETURN(std::string body, Get("/v1/jobs/" + id));
  return JobViewFromJson(body);
}

Status ApiClient::Cancel(const std::string& id) const {
  GANTRY_RETURN_IF_ERROR(CheckJobId(id));
  return Send("DELETE", "/v1/jobs/" + id).status();
}

Result<std::vector<NodeView>> ApiClient::Nodes() const {
  GANTRY_ASSIGN_OR_RETURN(std::string body, Get("/v1/nodes"));
  return ArrayFromJson<NodeView>(body, "nodes", NodeFromJson);
}

Result<std::vector<TeamView>> ApiClient::Usage() const {
  GANTRY_ASSIGN_OR_RETURN(std::string body, Get("/v1/usage"));
  return ArrayFromJson<TeamView>(body, "teams", TeamFromJson);
}

}  // namespace gantry::control
