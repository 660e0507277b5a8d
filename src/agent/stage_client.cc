// StageState's JSON and the client calls of include/gantry/agent/stage_client.h, on cpp-httplib.
#include "gantry/agent/stage_client.h"

#include <httplib.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "storage/http_common.h"

namespace gantry {
namespace {

constexpr int kConnectTimeoutS = 5;
constexpr int kReadTimeoutS = 30;  // the routes answer from memory; staging runs in background

std::string PercentEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

StatusCode CodeNamed(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kCancelled); ++c) {
    if (name == StatusCodeName(static_cast<StatusCode>(c))) return static_cast<StatusCode>(c);
  }
  return StatusCode::kInternal;  // a name this build does not know: still a failure
}

// Sends one request to the agent and parses its JSON answer (or turns its error into a Status).
Result<nlohmann::json> Call(const std::string& agent_url, const std::string& token,
                            const std::string& method, const std::string& path) {
  httplib::Client client(agent_url);
  if (!client.is_valid()) return InvalidArgument("agent URL '" + agent_url + "' is not valid");
  client.set_connection_timeout(kConnectTimeoutS, 0);
  client.set_read_timeout(kReadTimeoutS, 0);
  client.set_write_timeout(kReadTimeoutS, 0);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  const std::string where = method + " " + agent_url + path;
  httplib::Result res = method == "POST"     ? client.Post(path, headers, "", "text/plain")
                        : method == "DELETE" ? client.Delete(path, headers)
                                             : client.Get(path, headers);
  if (!res) {
    const httplib::Error e = res.error();
    const StatusCode code = e == httplib::Error::ConnectionTimeout || e == httplib::Error::Read
                                ? StatusCode::kDeadlineExceeded
                                : StatusCode::kUnavailable;
    return Status(code, where + ": " + httplib::to_string(e));
  }
  if (res->status < 200 || res->status >= 300) {
    std::string body = res->body;
    while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
    return Status(storage_internal::CodeForHttpError(res->status, ""),
                  where + ": HTTP " + std::to_string(res->status) + ": " + body);
  }
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return IoError(where + ": the answer is not JSON");
  return j;
}

}  // namespace

Status StageState::status() const {
  if (state != "failed") return Status::Ok();
  return Status(CodeNamed(code), error);
}

nlohmann::json StageStateToJson(const StageState& s) {
  return nlohmann::json{{"dataset", s.dataset},
                        {"state", s.state},
                        {"shards_total", s.shards_total},
                        {"shards_done", s.shards_done},
                        {"bytes_total", s.bytes_total},
                        {"bytes_done", s.bytes_done},
                        {"bytes_fetched", s.bytes_fetched},
                        {"error", s.error},
                        {"code", s.code},
                        {"jobs", s.jobs},
                        {"started", s.started},
                        {"finished", s.finished},
                        {"pinned_until", s.pinned_until}};
}

Result<StageState> StageStateFromJson(const nlohmann::json& j) {
  StageState s;
  try {
    s.dataset = j.at("dataset").get<std::string>();
    s.state = j.at("state").get<std::string>();
    s.shards_total = j.at("shards_total").get<uint64_t>();
    s.shards_done = j.at("shards_done").get<uint64_t>();
    s.bytes_total = j.at("bytes_total").get<uint64_t>();
    s.bytes_done = j.at("bytes_done").get<uint64_t>();
    s.bytes_fetched = j.at("bytes_fetched").get<uint64_t>();
    s.error = j.at("error").get<std::string>();
    s.code = j.at("code").get<std::string>();
    s.jobs = j.at("jobs").get<std::vector<std::string>>();
    s.started = j.at("started").get<int64_t>();
    s.finished = j.at("finished").get<int64_t>();
    s.pinned_until = j.value("pinned_until", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("not a staging state: ") + e.what());
  }
  static const std::array<const char*, 4> kStates = {"queued", "staging", "done", "failed"};
  if (std::find(kStates.begin(), kStates.end(), s.state) == kStates.end()) {
    return InvalidArgument("not a staging state: state '" + s.state + "'");
  }
  return s;
}

Result<StageState> RequestStage(const std::string& agent_url, const std::string& token,
                                const std::string& dataset, const std::string& job) {
  std::string path = "/v1/stage?dataset=" + PercentEncode(dataset);
  if (!job.empty()) path += "&job=" + PercentEncode(job);
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json j, Call(agent_url, token, "POST", path));
  return StageStateFromJson(j);
}

Result<StageState> ReleaseStage(const std::string& agent_url, const std::string& token,
                                const std::string& dataset, const std::string& job) {
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json j, Call(agent_url, token, "DELETE",
                                                 "/v1/stage?dataset=" + PercentEncode(dataset) +
                                                     "&job=" + PercentEncode(job)));
  return StageStateFromJson(j);
}

Result<StageState> GetStage(const std::string& agent_url, const std::string& token,
                            const std::string& dataset) {
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json j, Call(agent_url, token, "GET",
                                                 "/v1/stage?dataset=" + PercentEncode(dataset)));
  return StageStateFromJson(j);
}

Result<std::vector<StageState>> ListStages(const std::string& agent_url, const std::string& token) {
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json j, Call(agent_url, token, "GET", "/v1/stage"));
  if (!j.is_object() || !j.contains("datasets") || !j["datasets"].is_array()) {
    return IoError("GET " + agent_url + "/v1/stage: no \"datasets\" list in the answer");
  }
  std::vector<StageState> out;
  for (const nlohmann::json& d : j["datasets"]) {
    GANTRY_ASSIGN_OR_RETURN(StageState s, StageStateFromJson(d));
    out.push_back(std::move(s));
  }
  return out;
}

nlohmann::json TierCopyToJson(const std::string& checkpoint, const ckpt::TierCopy& c) {
  return nlohmann::json{{"checkpoint", checkpoint}, {"step", c.step},
                        {"chunks", c.chunks},       {"chunks_held", c.chunks_held},
                        {"bytes", c.bytes},         {"bytes_held", c.bytes_held}};
}

Result<ckpt::TierCopy> TierCopyFromJson(const nlohmann::json& j) {
  ckpt::TierCopy c;
  try {
    c.step = j.at("step").get<int64_t>();
    c.chunks = j.at("chunks").get<uint64_t>();
    c.chunks_held = j.at("chunks_held").get<uint64_t>();
    c.bytes = j.at("bytes").get<uint64_t>();
    c.bytes_held = j.at("bytes_held").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("not a checkpoint copy: ") + e.what());
  }
  if (c.chunks_held > c.chunks || c.bytes_held > c.bytes) {
    return InvalidArgument("not a checkpoint copy: holds more than the checkpoint has");
  }
  return c;
}

Result<ckpt::TierCopy> LocateCheckpoint(const std::string& agent_url, const std::string& token,
                                        const std::string& checkpoint) {
  GANTRY_ASSIGN_OR_RETURN(
      nlohmann::json j,
      Call(agent_url, token, "GET", "/v1/checkpoint?url=" + PercentEncode(checkpoint)));
  return TierCopyFromJson(j);
}

nlohmann::json DrainReportToJson(const ckpt::DrainReport& r) {
  return nlohmann::json{{"records", r.records},
                        {"parts_written", r.parts_written},
                        {"committed", r.committed},
                        {"skipped", r.skipped},
                        {"discarded", r.discarded},
                        {"failed", r.failed},
                        {"chunks_copied", r.chunks_copied},
                        {"bytes_copied", r.bytes_copied},
                        {"errors", r.errors}};
}

nlohmann::json DrainStatusToJson(const DrainStatus& s) {
  return nlohmann::json{{"state", s.state},
                        {"runs", s.runs},
                        {"error", s.error},
                        {"last", DrainReportToJson(s.last)}};
}

namespace {

Result<DrainStatus> DrainStatusFromJson(const nlohmann::json& j, const std::string& where) {
  const auto bad = [&] { return IoError(where + ": not a drain state"); };
  if (!j.is_object() || !j.contains("state") || !j["state"].is_string() || !j.contains("runs") ||
      !j["runs"].is_number_integer() || !j.contains("last") || !j["last"].is_object()) {
    return bad();
  }
  DrainStatus s;
  s.state = j["state"].get<std::string>();
  s.runs = j["runs"].get<int64_t>();
  s.error = j.value("error", "");
  const nlohmann::json& l = j["last"];
  try {
    s.last.records = l.at("records").get<int>();
    s.last.parts_written = l.at("parts_written").get<int>();
    s.last.committed = l.at("committed").get<std::vector<std::string>>();
    s.last.skipped = l.at("skipped").get<int>();
    s.last.discarded = l.at("discarded").get<int>();
    s.last.failed = l.at("failed").get<int>();
    s.last.chunks_copied = l.at("chunks_copied").get<uint64_t>();
    s.last.bytes_copied = l.at("bytes_copied").get<uint64_t>();
    s.last.errors = l.at("errors").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception&) {
    return bad();
  }
  return s;
}

}  // namespace

Result<DrainStatus> RequestDrain(const std::string& agent_url, const std::string& token) {
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json j, Call(agent_url, token, "POST", "/v1/drain"));
  return DrainStatusFromJson(j, "POST " + agent_url + "/v1/drain");
}

Result<DrainStatus> GetDrain(const std::string& agent_url, const std::string& token) {
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json j, Call(agent_url, token, "GET", "/v1/drain"));
  return DrainStatusFromJson(j, "GET " + agent_url + "/v1/drain");
}

}  // namespace gantry
