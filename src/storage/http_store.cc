// HTTP backend: a read-only ObjectStore over a peer's gantry-agent, on libcurl. See
// include/gantry/storage/http_store.h for the contract and docs/storage.md for the protocol.
#include "gantry/storage/http_store.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gantry/common/daemon.h"
#include "storage/http_common.h"

namespace gantry {
namespace {

// A body larger than this is not reserved up front: a Content-Length is the peer's claim, and a
// broken peer must not make us allocate gigabytes before a single byte arrives.
constexpr uint64_t kMaxReserve = 64ull << 20;
// Error answers are kept only this far, for the message.
constexpr size_t kMaxErrorBody = 512;
// Range ends beyond this are sent open-ended ("bytes=A-"): the agent's HTTP library parses range
// bounds as signed 64-bit numbers.
constexpr uint64_t kMaxRangeEnd = (1ull << 62);

// One request's response as it streams in. Only the bytes of the body inside [keep_begin,
// keep_end) are kept, so a peer that ignores a Range header and sends the whole object costs
// no more memory than the range.
struct Exchange {
  // Set before the request.
  uint64_t keep_begin = 0;
  uint64_t keep_end = UINT64_MAX;
  bool ranged = false;     // a Range header was sent
  uint64_t range_len = 0;  // its length (when ranged)

  // Filled by the callbacks.
  int status = 0;
  bool has_content_length = false;
  uint64_t content_length = 0;
  std::string content_length_text;  // as sent, for messages when it is not a number
  std::string content_range;
  std::string last_modified;
  std::string body;  // the kept bytes of a 2xx body, or the start of an error body
  // Set for GetParts: kept 2xx bytes go here, in order, instead of into `body`.
  std::span<const std::span<char>> sink;
  uint64_t sunk = 0;      // bytes written into sink
  uint64_t received = 0;  // body bytes seen
  bool overflow = false;  // a 206 body longer than the range asked for
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// Parses a whole decimal number (no sign, no spaces); false on anything else or overflow.
bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const std::string_view line = Trim(std::string_view(data, size * n));
  if (line.starts_with("HTTP/")) {
    // A new response (an interim 1xx) starts over.
    const size_t sp = line.find(' ');
    x->status = sp == std::string_view::npos ? 0 : std::atoi(line.data() + sp + 1);
    x->has_content_length = false;
    x->content_length_text.clear();
    x->content_range.clear();
    x->last_modified.clear();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = Trim(line.substr(colon + 1));
  if (IEquals(name, "content-length")) {
    x->content_length_text = std::string(value.substr(0, 40));
    x->has_content_length = ParseU64(value, &x->content_length);
  } else if (IEquals(name, "content-range")) {
    x->content_range = std::string(value);
  } else if (IEquals(name, "last-modified")) {
    x->last_modified = std::string(value);
  }
  return size * n;
}

// Keeps body bytes: appended to x->body, or copied into the caller's parts (GetParts).
void Keep(Exchange* x, const char* data, uint64_t bytes) {
  if (x->sink.empty()) {
    x->body.append(data, static_cast<size_t>(bytes));
    return;
  }
  uint64_t pos = 0;  // where x->sunk falls among the parts
  for (std::span<char> p : x->sink) {
    if (bytes == 0) break;
    if (x->sunk >= pos + p.size()) {
      pos += p.size();
      continue;
    }
    const uint64_t at = x->sunk - pos;
    const uint64_t n = std::min<uint64_t>(bytes, p.size() - at);
    std::memcpy(p.data() + at, data, static_cast<size_t>(n));
    data += n;
    bytes -= n;
    x->sunk += n;
    pos += p.size();
  }
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t bytes = size * n;
  const uint64_t at = x->received;
  x->received += bytes;
  if (x->status < 200 || x->status >= 300) {
    if (x->body.size() < kMaxErrorBody) {
      x->body.append(data, std::min(bytes, kMaxErrorBody - x->body.size()));
    }
    return bytes;
  }
  if (x->status == 206) {
    // The body is the range itself: keep all of it, but no more than was asked for.
    if (x->ranged && x->received > x->range_len) {
      x->overflow = true;
      return 0;  // aborts the transfer
    }
    if (at == 0 && x->has_content_length && x->sink.empty()) {
      x->body.reserve(static_cast<size_t>(std::min(x->content_length, kMaxReserve)));
    }
    Keep(x, data, bytes);
    return bytes;
  }
  if (at == 0 && x->has_content_length && x->sink.empty()) {
    x->body.reserve(static_cast<size_t>(
        std::min({x->content_length, x->keep_end - x->keep_begin, kMaxReserve})));
  }
  // Keep the overlap of [at, at + bytes) with [keep_begin, keep_end).
  const uint64_t lo = std::max(at, x->keep_begin);
  const uint64_t hi = std::min(at + bytes, x->keep_end);
  if (lo < hi) Keep(x, data + (lo - at), hi - lo);
  return bytes;
}

// "a/b c/d" -> "a/b%20c/d": every byte but the unreserved ones (RFC 3986) and '/' is escaped.
std::string EncodeKey(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~' || c == '/';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The printable start of an error body, on one line.
std::string Snippet(std::string_view body) {
  std::string out;
  for (unsigned char c : body.substr(0, 200)) out += (c < 0x20 || c >= 0x7f) ? ' ' : c;
  return std::string(Trim(out));
}

class HttpStore final : public ObjectStore {
 public:
  HttpStore(std::string base_url, const HttpStoreOptions& options)
      : base_url_(std::move(base_url)),
        options_(options),
        auth_header_(options.token.empty() ? "" : "Authorization: Bearer " + options.token),
        pool_(static_cast<size_t>(std::max(0, options.max_idle_connections))) {}

  std::string_view backend() const override { return "http"; }
  std::string url() const override { return base_url_; }
  bool SupportsCreateIfAbsent() const override { return false; }

  using ObjectStore::Put;
  Status Put(std::string_view key, std::string_view, const PutOptions&) override {
    return ReadOnly("put", key);
  }
  Status Delete(std::string_view key) override { return ReadOnly("delete", key); }
  Result<ListPage> List(std::string_view prefix, std::string_view, int) override {
    return ReadOnly("list", prefix);
  }
  Status PutFile(std::string_view key, const std::string&) override { return ReadOnly("put", key); }
  Status PutFileIfAbsent(std::string_view key, const std::string&) override {
    return ReadOnly("put", key);
  }

  Result<std::string> Get(std::string_view key) override {
    GANTRY_RETURN_IF_ERROR(ValidateKey(key));
    Exchange x;
    GANTRY_RETURN_IF_ERROR(Perform("get", key, "GET", "", &x));
    if (x.status != 200) return HttpError("get", key, x);
    GANTRY_RETURN_IF_ERROR(CheckComplete("get", key, x));
    return std::move(x.body);
  }

  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override {
    Exchange x;
    GANTRY_RETURN_IF_ERROR(RangeInto(key, offset, length, &x));
    return std::move(x.body);
  }

  Result<uint64_t> GetParts(std::string_view key, uint64_t offset,
                            std::span<const std::span<char>> parts) override {
    uint64_t total = 0;
    for (std::span<char> p : parts) total += p.size();
    Exchange x;
    x.sink = parts;
    GANTRY_RETURN_IF_ERROR(RangeInto(key, offset, total, &x));
    return x.sunk;
  }

  // A ranged GET whose kept bytes land in x->body or x->sink; checks the answer.
  Status RangeInto(std::string_view key, uint64_t offset, uint64_t length, Exchange* xp) {
    Exchange& x = *xp;
    GANTRY_RETURN_IF_ERROR(ValidateKey(key));
    if (length == 0) return CheckOffset(key, offset, false, std::nullopt).status();
    x.ranged = true;
    std::string range = "bytes=" + std::to_string(offset) + "-";
    uint64_t want = length;
    if (offset < kMaxRangeEnd && length <= kMaxRangeEnd - offset) {
      range += std::to_string(offset + length - 1);
    } else {
      want = kToEnd - offset;  // open-ended: to the end, whatever that is
    }
    x.range_len = want;
    // If the peer ignores the range (200 with the whole object), keep only the range's bytes.
    x.keep_begin = offset;
    x.keep_end = offset + want;
    GANTRY_RETURN_IF_ERROR(Perform("get range", key, "GET", range, &x));
    if (x.status == 416) {
      x.body.clear();  // the refusal's text is not object bytes
      return CheckOffset(key, offset, true, TotalFromContentRange(x.content_range)).status();
    }
    if (x.status == 200) {
      GANTRY_RETURN_IF_ERROR(CheckComplete("get range", key, x));
      if (offset > x.received) return PastEnd(key, offset, x.received);
      return Status::Ok();
    }
    if (x.status != 206) return HttpError("get range", key, x);
    GANTRY_RETURN_IF_ERROR(CheckComplete("get range", key, x));
    // A 206's body starts at the range's first byte: keep all of it.
    uint64_t first = 0;
    uint64_t last = 0;
    std::optional<uint64_t> total;
    if (!ParseContentRange(x.content_range, &first, &last, &total) || first != offset ||
        last < first || last - first + 1 > want || last - first + 1 != x.received ||
        (total && (last >= *total || (last + 1 < *total && last - first + 1 < want)))) {
      return IoError(Where("get range", key) + ": asked for bytes " + std::to_string(offset) + "+" +
                     std::to_string(length) + ", the answer's Content-Range is '" +
                     x.content_range + "' with " + std::to_string(x.received) +
                     " body bytes: inconsistent");
    }
    return Status::Ok();
  }

  Result<ObjectInfo> Head(std::string_view key) override {
    GANTRY_RETURN_IF_ERROR(ValidateKey(key));
    Exchange x;
    GANTRY_RETURN_IF_ERROR(Perform("head", key, "HEAD", "", &x));
    if (x.status != 200) return HttpError("head", key, x);
    if (!x.has_content_length) return NoContentLength("head", key, x);
    ObjectInfo info;
    info.key = std::string(key);
    info.size = x.content_length;
    if (!x.last_modified.empty()) {
      const time_t t = curl_getdate(x.last_modified.c_str(), nullptr);
      if (t > 0) info.mtime_unix = static_cast<int64_t>(t);
    }
    return info;
  }

 private:
  std::string Where(std::string_view op, std::string_view key) const {
    return base_url_ + ": " + std::string(op) + " '" + std::string(key) + "'";
  }

  Status ReadOnly(std::string_view op, std::string_view key) const {
    return Unimplemented(Where(op, key) + ": read-only store (a peer agent only serves reads)");
  }

  Status PastEnd(std::string_view key, uint64_t offset, uint64_t size) const {
    return OutOfRange(Where("get range", key) + ": offset " + std::to_string(offset) +
                      " is past the end (" + std::to_string(size) + " bytes)");
  }

  // GetRange of an empty range, or after a 416 (`refused`): OutOfRange past the end, else "".
  // `size` is the object's size if the 416 named it; otherwise it is asked for.
  Result<std::string> CheckOffset(std::string_view key, uint64_t offset, bool refused,
                                  std::optional<uint64_t> size) {
    if (!size) {
      GANTRY_ASSIGN_OR_RETURN(ObjectInfo info, Head(key));
      size = info.size;
    }
    if (offset > *size) return PastEnd(key, offset, *size);
    if (refused && offset < *size) {
      return IoError(Where("get range", key) + ": the peer refused offset " +
                     std::to_string(offset) + " (HTTP 416) of an object of " +
                     std::to_string(*size) + " bytes");
    }
    return std::string();
  }

  // "bytes */1234" -> 1234.
  static std::optional<uint64_t> TotalFromContentRange(std::string_view cr) {
    const size_t slash = cr.rfind('/');
    uint64_t total = 0;
    if (slash == std::string_view::npos || !ParseU64(cr.substr(slash + 1), &total)) {
      return std::nullopt;
    }
    return total;
  }

  // "bytes 10-19/100" (the total may be "*").
  static bool ParseContentRange(std::string_view cr, uint64_t* first, uint64_t* last,
                                std::optional<uint64_t>* total) {
    if (!cr.starts_with("bytes ")) return false;
    cr.remove_prefix(6);
    const size_t dash = cr.find('-');
    const size_t slash = cr.find('/');
    if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
      return false;
    }
    if (!ParseU64(cr.substr(0, dash), first) ||
        !ParseU64(cr.substr(dash + 1, slash - dash - 1), last)) {
      return false;
    }
    const std::string_view t = cr.substr(slash + 1);
    if (t == "*") {
      *total = std::nullopt;
      return true;
    }
    uint64_t v = 0;
    if (!ParseU64(t, &v)) return false;
    *total = v;
    return true;
  }

  // A body delimited by the connection closing cannot be told from a truncated one, so a 2xx
  // answer must carry a Content-Length that the body matched.
  Status CheckComplete(std::string_view op, std::string_view key, const Exchange& x) const {
    if (!x.has_content_length) return NoContentLength(op, key, x);
    if (x.received != x.content_length) {
      return IoError(Where(op, key) + ": truncated body: got " + std::to_string(x.received) +
                     " of " + std::to_string(x.content_length) + " bytes");
    }
    return Status::Ok();
  }

  Status NoContentLength(std::string_view op, std::string_view key, const Exchange& x) const {
    if (!x.content_length_text.empty()) {
      return IoError(Where(op, key) + ": HTTP " + std::to_string(x.status) +
                     " answer with an unreadable Content-Length '" + x.content_length_text + "'");
    }
    return IoError(Where(op, key) + ": HTTP " + std::to_string(x.status) +
                   " answer without a Content-Length (cannot tell a whole body from a cut one)");
  }

  Status HttpError(std::string_view op, std::string_view key, const Exchange& x) const {
    std::string msg = Where(op, key) + ": HTTP " + std::to_string(x.status);
    const std::string detail = Snippet(x.body);
    if (!detail.empty()) msg += ": " + detail;
    return Status(storage_internal::CodeForHttpError(x.status, ""), msg);
  }

  // Sends one request and collects the answer in *x. Transport failures are the returned
  // status; HTTP statuses (404, 416, ...) are left to the caller in x->status.
  Status Perform(std::string_view op, std::string_view key, const char* method,
                 const std::string& range, Exchange* x) {
    const std::string target = base_url_ + "/v1/objects/" + EncodeKey(key);
    CURL* h = pool_.Acquire();
    if (h == nullptr) return Internal(Where(op, key) + ": curl_easy_init failed");
    curl_easy_reset(h);  // keeps the live connection
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = nullptr;
    if (!range.empty()) headers = curl_slist_append(headers, ("Range: " + range).c_str());
    if (!auth_header_.empty()) headers = curl_slist_append(headers, auth_header_.c_str());
    curl_easy_setopt(h, CURLOPT_URL, target.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: we are threaded
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    // Chunks are megabytes: fewer, larger receive calls and body callbacks than the 16 KiB
    // default.
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max(0, options_.timeout_ms)));
    if (options_.low_speed_bytes_per_s > 0 && options_.low_speed_time_s > 0) {
      curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_bytes_per_s);
      curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options_.low_speed_time_s));
    }
    // Connections are kept alive (libcurl's cache in each pooled handle), so a restore's
    // requests share a few connections. The agent closes one idle for keep_alive_timeout_s
    // (default 5 s); reusing only connections idle under a second never races that close.
    curl_easy_setopt(h, CURLOPT_MAXAGE_CONN, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (std::strcmp(method, "HEAD") == 0) curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    const CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    // Which timeout fired, for the message: a transfer that never got past connecting, or one
    // cut before the total timeout (so by the low-speed limit).
    curl_off_t pretransfer_us = 0;
    curl_off_t total_us = 0;
    curl_easy_getinfo(h, CURLINFO_PRETRANSFER_TIME_T, &pretransfer_us);
    curl_easy_getinfo(h, CURLINFO_TOTAL_TIME_T, &total_us);
    pool_.Release(h, rc == CURLE_OK);
    if (rc == CURLE_OK) return Status::Ok();
    return TransportError(op, key, rc, errbuf, *x, pretransfer_us == 0, total_us / 1000);
  }

  Status TransportError(std::string_view op, std::string_view key, CURLcode rc, const char* errbuf,
                        const Exchange& x, bool never_connected, int64_t elapsed_ms) const {
    const std::string where = Where(op, key);
    const std::string detail =
        std::string(curl_easy_strerror(rc)) + (errbuf[0] != '\0' ? std::string(": ") + errbuf : "");
    const std::string got =
        " (got " + std::to_string(x.received) +
        (x.has_content_length ? " of " + std::to_string(x.content_length) : "") + " body bytes)";
    const StatusCode code = storage_internal::CodeForCurlError(rc);
    switch (rc) {
      case CURLE_OPERATION_TIMEDOUT: {
        if (never_connected) {
          return Status(code, where + ": connect timed out after " +
                                  std::to_string(options_.connect_timeout_ms) + " ms");
        }
        // Cut well before the total timeout (or with none): the low-speed limit fired.
        const bool low_speed = options_.low_speed_bytes_per_s > 0 &&
                               options_.low_speed_time_s > 0 &&
                               (options_.timeout_ms == 0 || elapsed_ms + 50 < options_.timeout_ms);
        if (low_speed) {
          return Status(code, where + ": peer too slow: under " +
                                  std::to_string(options_.low_speed_bytes_per_s) + " bytes/s for " +
                                  std::to_string(options_.low_speed_time_s) + " s" + got);
        }
        return Status(
            code, where + ": timed out after " + std::to_string(options_.timeout_ms) + " ms" + got);
      }
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
        return Status(code, where + ": cannot reach the peer: " + detail);
      case CURLE_PARTIAL_FILE:
      case CURLE_RECV_ERROR:
      case CURLE_SEND_ERROR:
      case CURLE_GOT_NOTHING:
        return Status(code, where + ": connection lost: " + detail + got);
      case CURLE_WRITE_ERROR:
        if (x.overflow) {
          return IoError(where + ": the peer sent more than the " + std::to_string(x.range_len) +
                         " bytes asked for");
        }
        return IoError(where + ": " + detail);
      case CURLE_WEIRD_SERVER_REPLY:
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_BAD_CONTENT_ENCODING:
        return IoError(where + ": malformed answer from the peer: " + detail);
      default:
        return IoError(where + ": " + detail);
    }
  }

  const std::string base_url_;
  const HttpStoreOptions options_;
  const std::string auth_header_;  // "Authorization: Bearer TOKEN", built once; empty: none
  storage_internal::CurlHandlePool pool_;
};

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenHttpStore(const std::string& base_url,
                                                   const HttpStoreOptions& options) {
  constexpr std::string_view kHttp = "http://";
  std::string url = base_url;
  while (url.size() > kHttp.size() && url.back() == '/') url.pop_back();
  if (!std::string_view(url).starts_with(kHttp) || url.size() == kHttp.size() ||
      url[kHttp.size()] == '/') {
    return InvalidArgument("peer URL '" + base_url +
                           "': expected http://HOST[:PORT][/PATH], like http://node7:7070");
  }
  for (unsigned char c : url) {
    if (c <= 0x20 || c == 0x7f || c == '?' || c == '#') {
      return InvalidArgument("peer URL '" + base_url +
                             "': spaces, control characters, '?' and '#' are not allowed");
    }
  }
  if (options.connect_timeout_ms < 0 || options.timeout_ms < 0) {
    return InvalidArgument("peer URL '" + base_url + "': negative timeout");
  }
  if (!IsValidAgentToken(options.token)) {
    return InvalidArgument("peer URL '" + base_url + "': the agent token (" +
                           std::string(kAgentTokenEnv) +
                           ") may hold only printable ASCII without spaces");
  }
  return std::unique_ptr<ObjectStore>(std::make_unique<HttpStore>(std::move(url), options));
}

std::string DefaultAgentToken() {
  const char* v = std::getenv(kAgentTokenEnv);
  return v == nullptr ? std::string() : std::string(v);
}

Result<std::string> AgentTokenFrom(const std::string& token_file) {
  std::string token = DefaultAgentToken();
  if (!token_file.empty()) {
    GANTRY_ASSIGN_OR_RETURN(token, ReadSecretFile(token_file));
  }
  if (!IsValidAgentToken(token)) {
    return InvalidArgument("the agent token may hold only printable ASCII without spaces");
  }
  return token;
}

bool IsValidAgentToken(std::string_view token) {
  // Bytes a header value can carry verbatim: no CR/LF (header injection), no spaces (the
  // token is one word after "Bearer").
  return std::all_of(token.begin(), token.end(),
                     [](unsigned char c) { return c > 0x20 && c < 0x7f; });
}

}  // namespace gantry
