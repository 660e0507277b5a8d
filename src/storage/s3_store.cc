// S3 backend: the HTTP client on libcurl (connection reuse, signing, retries) and the
// ObjectStore operations on top of it (single and multipart puts, ranged and parallel gets).
#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "gantry/common/text.h"
#include "gantry/common/thread_pool.h"
#include "gantry/storage/s3.h"
#include "storage/http_common.h"
#include "storage/s3_internal.h"

namespace gantry::s3 {

// Bodies up to this size are signed with their real SHA-256; larger ones (multipart parts, big
// single puts) are sent as UNSIGNED-PAYLOAD so hashing does not sit on the throughput path.
constexpr size_t kMaxHashedPayload = 1 << 20;
constexpr uint64_t kMinPartSize = 5ull << 20;  // S3's minimum for every part but the last
constexpr uint64_t kMaxParts = 10000;

struct S3Store::Request {
  std::string op;        // for messages and fault hooks: "put", "get", ...
  std::string user_key;  // store-relative key (or listed prefix) for messages
  std::string method;
  std::string object_key;  // key inside the bucket; empty: the bucket
  QueryParams query;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, signed
  std::string_view body;
  std::string content_type;
  int part_number = 0;
  // When set, a 2xx body goes here (offset within the body) instead of HttpResponse::body.
  const RangeSink* sink = nullptr;
  // A create-only put (If-None-Match: *): a 412 answer is AlreadyExists.
  bool create_only = false;
  // When set, receives the S3 error code (<Code> of the error body, or the name standing in
  // for a bodiless answer) of a failed request, so callers react to "NoSuchUpload" without
  // reading messages.
  std::string* error_code = nullptr;
};

namespace {

struct Transfer {
  HttpResponse* response = nullptr;
  const std::function<Status(uint64_t, const char*, size_t)>* sink = nullptr;
  uint64_t received = 0;
  Status sink_status;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.starts_with("HTTP/")) {
    // A new response (after a redirect or an interim 1xx) starts over.
    t->response->headers.clear();
    const size_t sp = line.find(' ');
    t->response->status = sp == std::string_view::npos ? 0 : std::atoi(line.data() + sp + 1);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    t->response->headers.emplace_back(std::move(name), std::string(value));
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  const int status = t->response->status;
  if (t->sink != nullptr && status >= 200 && status < 300) {
    t->sink_status = (*t->sink)(t->received, data, bytes);
    if (!t->sink_status.ok()) return 0;  // aborts the transfer
  } else {
    t->response->body.append(data, bytes);
  }
  t->received += bytes;
  return bytes;
}

// Transport failures worth another attempt: the ones the shared mapping calls transient.
bool RetryableCurl(CURLcode rc) {
  const StatusCode code = storage_internal::CodeForCurlError(rc);
  return code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded;
}

uint64_t JitterRandom() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

Status PwriteAll(int fd, const char* data, size_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return StatusFromErrno(errno, "write");
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<S3Store>> S3Store::Open(const std::string& bucket, const std::string& prefix,
                                               const StoreOptions& options, const EnvLookup& env) {
  GANTRY_ASSIGN_OR_RETURN(Config config, ResolveConfig(bucket, prefix, options, env));
  return std::make_unique<S3Store>(std::move(config));
}

S3Store::S3Store(Config config)
    : config_(std::move(config)),
      // Every idle handle is kept: at most one per request in flight.
      curl_(std::make_unique<storage_internal::CurlHandlePool>(SIZE_MAX)) {}

S3Store::~S3Store() {
  // Transfers in the pool use the CURL handles: finish them first.
  pool_.reset();
  curl_.reset();
}

std::string S3Store::url() const {
  return "s3://" + config_.bucket + (config_.prefix.empty() ? "" : "/" + config_.prefix);
}

std::string S3Store::FullKey(std::string_view key) const {
  if (config_.prefix.empty()) return std::string(key);
  return config_.prefix + "/" + std::string(key);
}

std::string S3Store::Where(std::string_view op, std::string_view key) const {
  return url() + ": " + std::string(op) + " '" + std::string(key) + "'";
}

ThreadPool& S3Store::Pool() {
  MutexLock lock(pool_mu_);
  if (!pool_) pool_ = std::make_unique<ThreadPool>(config_.options.parallelism);
  return *pool_;
}

void S3Store::SetFaultHookForTesting(std::function<Status(const FaultPoint&)> hook) {
  MutexLock lock(hook_mu_);
  fault_hook_ = std::move(hook);
}

Status S3Store::ErrorStatus(const Request& request, const HttpResponse& response,
                            int attempts) const {
  ErrorBody err = ParseErrorBody(response.body);
  if (err.code.empty()) {
    // HEAD answers carry no body; name the status instead.
    switch (response.status) {
      case 403:
        err.code = "Forbidden";
        break;
      case 404:
        err.code = request.object_key.empty() ? "NoSuchBucket" : "NoSuchKey";
        break;
      case 412:
        err.code = "PreconditionFailed";
        break;
      default:
        err.code = "Error";
    }
  }
  std::string msg = Where(request.op, request.user_key) + ": HTTP " +
                    std::to_string(response.status) + " " + err.code;
  if (!err.message.empty()) msg += ": " + err.message;
  if (attempts > 1) msg += " (after " + std::to_string(attempts) + " attempts)";
  if (request.error_code != nullptr) *request.error_code = err.code;
  // Hints an operator needs, keyed on S3's code (structured), never on the message.
  if (err.code == "NoSuchBucket") {
    msg += " [bucket '" + config_.bucket + "' does not exist at " + config_.endpoint.scheme +
           "://" + config_.endpoint.host +
           (config_.endpoint.port.empty() ? "" : ":" + config_.endpoint.port) + "]";
  } else if (err.code == "SignatureDoesNotMatch") {
    msg += " [check the secret key for access key '" + config_.credentials.access_key + "']";
  }
  const storage_internal::HttpRequestKind kind{.create_only = request.create_only};
  return Status(storage_internal::CodeForHttpError(response.status, err.code, kind), msg);
}

Result<HttpResponse> S3Store::Execute(const Request& request) {
  const StoreOptions& o = config_.options;
  const Target target = BuildTarget(config_, request.object_key, request.query);
  const std::string payload_hash = request.body.size() <= kMaxHashedPayload
                                       ? sigv4::Sha256Hex(request.body)
                                       : std::string(sigv4::kUnsignedPayload);
  std::function<Status(const FaultPoint&)> hook;
  {
    MutexLock lock(hook_mu_);
    hook = fault_hook_;
  }

  std::string last_transport_error;
  for (int attempt = 1;; ++attempt) {
    if (attempt > 1) {
      retries_.fetch_add(1);
      const int64_t ms =
          BackoffMs(attempt - 1, o.base_backoff_ms, o.max_backoff_ms, JitterRandom());
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    HttpResponse response;
    bool retryable = false;
    last_transport_error.clear();
    StatusCode last_transport_code = StatusCode::kUnavailable;

    Status injected;
    if (hook) {
      injected = hook(FaultPoint{request.op, request.user_key, request.part_number, attempt});
    }
    if (!injected.ok()) {
      last_transport_error = "injected fault: " + injected.message();
      retryable = true;
    } else {
      // Signed headers: the host, the payload hash, the date, and everything the op adds.
      sigv4::Request sreq;
      sreq.method = request.method;
      sreq.canonical_uri = target.canonical_uri;
      sreq.query = request.query;
      sreq.payload_hash = payload_hash;
      const std::string amz_date =
          sigv4::AmzDate(std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count());
      sreq.headers = {
          {"host", target.host}, {"x-amz-content-sha256", payload_hash}, {"x-amz-date", amz_date}};
      if (!config_.credentials.session_token.empty()) {
        sreq.headers.emplace_back("x-amz-security-token", config_.credentials.session_token);
      }
      for (const auto& h : request.headers) sreq.headers.push_back(h);
      const sigv4::Signature sig =
          sigv4::Sign(sreq, config_.credentials, config_.region, "s3", amz_date);

      curl_slist* list = nullptr;
      for (const auto& [k, v] : sreq.headers)
        list = curl_slist_append(list, (k + ": " + v).c_str());
      list = curl_slist_append(list, ("Authorization: " + sig.authorization).c_str());
      list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
      if (!request.content_type.empty()) {
        list = curl_slist_append(list, ("Content-Type: " + request.content_type).c_str());
      }

      CURL* h = curl_->Acquire();
      curl_easy_reset(h);  // keeps the live connection
      Transfer transfer;
      transfer.response = &response;
      transfer.sink = request.sink;
      char errbuf[CURL_ERROR_SIZE] = {0};
      curl_easy_setopt(h, CURLOPT_URL, target.url.c_str());
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
      curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
      curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
      curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
      curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout_ms));
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(o.request_timeout_ms));
      curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
      curl_easy_setopt(h, CURLOPT_HEADERDATA, &transfer);
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
      curl_easy_setopt(h, CURLOPT_WRITEDATA, &transfer);
      curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
      if (request.method == "HEAD") {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
      } else if (request.method == "PUT" || request.method == "POST") {
        // POSTFIELDS sends straight from our buffer (no read-callback copy); PUT rides on it.
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         static_cast<curl_off_t>(request.body.size()));
        if (request.method == "PUT") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
      } else if (request.method != "GET") {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
      }
      requests_sent_.fetch_add(1);
      const CURLcode rc = curl_easy_perform(h);
      curl_slist_free_all(list);
      curl_->Release(h, rc == CURLE_OK);

      if (!transfer.sink_status.ok()) {
        return transfer.sink_status.WithContext(Where(request.op, request.user_key));
      }
      if (rc != CURLE_OK) {
        last_transport_error = std::string(curl_easy_strerror(rc)) +
                               (errbuf[0] != '\0' ? std::string(" (") + errbuf + ")" : "");
        last_transport_code = storage_internal::CodeForCurlError(rc);
        retryable = RetryableCurl(rc);
        if (!retryable) {
          return Status(last_transport_code, Where(request.op, request.user_key) + ": " +
                                                 request.method + " " + target.url + ": " +
                                                 last_transport_error);
        }
      } else if (request.method != "HEAD" && response.status >= 200 && response.status < 300 &&
                 !response.Header("content-length").empty() &&
                 std::strtoull(response.Header("content-length").c_str(), nullptr, 10) !=
                     transfer.received) {
        last_transport_error = "truncated body: got " + std::to_string(transfer.received) + " of " +
                               response.Header("content-length") + " bytes";
        retryable = true;
      } else if (response.status >= 200 && response.status < 300) {
        return response;
      } else {
        const ErrorBody err = ParseErrorBody(response.body);
        if (!IsRetryableHttp(response.status, err.code) || attempt >= o.max_attempts) {
          return ErrorStatus(request, response, attempt);
        }
        continue;
      }
    }
    if (retryable && attempt < o.max_attempts) continue;
    // A timeout on the last attempt is DeadlineExceeded; lost or refused connections,
    // truncated bodies and injected faults are Unavailable.
    return Status(last_transport_code, Where(request.op, request.user_key) + ": " + request.method +
                                           " " + target.url + ": " + last_transport_error +
                                           " (after " + std::to_string(attempt) + " attempts)");
  }
}

Status S3Store::Put(std::string_view key, std::string_view data, const PutOptions& options) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  if (data.size() >= config_.options.multipart_threshold && !options.create_if_absent) {
    return PutMultipart(key, data.size(),
                        [data](uint64_t off, uint64_t n, std::string*) -> Result<std::string_view> {
                          return data.substr(off, n);
                        });
  }
  Request r;
  r.op = "put";
  r.user_key = std::string(key);
  r.method = "PUT";
  r.object_key = FullKey(key);
  r.body = data;
  r.content_type = "application/octet-stream";
  if (options.create_if_absent) r.headers.emplace_back("if-none-match", "*");
  r.create_only = options.create_if_absent;
  Result<HttpResponse> resp = Execute(r);
  if (!resp.ok()) {
    if (resp.status().code() == StatusCode::kAlreadyExists) {
      return AlreadyExists(Where("put", key) + ": already exists (create_if_absent)");
    }
    return resp.status();
  }
  return Status::Ok();
}

// True when `key` holds the object these parts make: S3 and RGW give a multipart object the
// ETag MD5(part MD5s, concatenated in binary) + "-" + number of parts.
bool S3Store::CompletedAlready(std::string_view key, const std::vector<std::string>& etags) {
  std::string joined;
  for (const std::string& e : etags) {
    std::string hex = e;
    if (hex.size() >= 2 && hex.front() == '"') hex = hex.substr(1, hex.size() - 2);
    if (hex.size() != 32) return false;
    for (size_t i = 0; i < 32; i += 2) {
      joined += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(joined.data(), joined.size(), md, &len, EVP_md5(), nullptr);
  const std::string want = sigv4::HexEncode(std::string_view(reinterpret_cast<char*>(md), len)) +
                           "-" + std::to_string(etags.size());
  Result<ObjectInfo> info = Head(key);
  return info.ok() && info->etag == want;
}

Status S3Store::PutMultipart(std::string_view key, uint64_t size, const PartSource& source) {
  const StoreOptions& o = config_.options;
  uint64_t part_size = std::max<uint64_t>(o.part_size, kMinPartSize);
  if ((size + part_size - 1) / part_size > kMaxParts)
    part_size = (size + kMaxParts - 1) / kMaxParts;
  const uint64_t parts = std::max<uint64_t>(1, (size + part_size - 1) / part_size);
  const std::string full_key = FullKey(key);

  Request create;
  create.op = "create multipart";
  create.user_key = std::string(key);
  create.method = "POST";
  create.object_key = full_key;
  create.query = {{"uploads", ""}};
  create.content_type = "application/octet-stream";
  GANTRY_ASSIGN_OR_RETURN(HttpResponse created, Execute(create));
  const std::string upload_id = XmlText(created.body, "UploadId");
  if (upload_id.empty()) {
    return Internal(Where("put", key) + ": CreateMultipartUpload answered without an UploadId");
  }

  std::vector<std::string> etags(parts);
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> uploaded{0};  // for the progress callback
  std::atomic<bool> failed{false};
  Mutex err_mu;
  Status first_error;
  auto worker = [&]() {
    std::string scratch;
    while (!failed.load()) {
      const uint64_t i = next.fetch_add(1);
      if (i >= parts) return;
      const uint64_t off = i * part_size;
      const uint64_t n = std::min(part_size, size - off);
      Result<std::string_view> body = source(off, n, &scratch);
      Status st = body.status();
      if (body.ok()) {
        Request up;
        up.op = "upload part";
        up.user_key = std::string(key);
        up.method = "PUT";
        up.object_key = full_key;
        up.query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}};
        up.body = *body;
        up.part_number = static_cast<int>(i + 1);
        up.content_type = "application/octet-stream";
        Result<HttpResponse> r = Execute(up);
        if (r.ok()) {
          etags[i] = r->Header("etag");
          if (o.progress) o.progress(uploaded.fetch_add(n) + n, size);
          if (etags[i].empty()) {
            st = Internal(Where("upload part", key) + ": part " + std::to_string(i + 1) +
                          " answered without an ETag");
          }
        } else {
          st = r.status();
        }
      }
      if (!st.ok()) {
        MutexLock lock(err_mu);
        if (first_error.ok()) first_error = st;
        failed.store(true);
        return;
      }
    }
  };
  const uint64_t workers = std::min<uint64_t>(parts, static_cast<uint64_t>(o.parallelism));
  std::vector<std::future<void>> running;
  ThreadPool& pool = Pool();
  for (uint64_t w = 0; w < workers; ++w) running.push_back(pool.Submit(worker));
  for (auto& f : running) f.get();

  Status result = first_error;
  if (result.ok()) {
    std::string xml = "<CompleteMultipartUpload>";
    for (uint64_t i = 0; i < parts; ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
             EscapeMarkup(etags[i]) + "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    Request complete;
    complete.op = "complete multipart";
    complete.user_key = std::string(key);
    complete.method = "POST";
    complete.object_key = full_key;
    complete.query = {{"uploadId", upload_id}};
    complete.body = xml;
    complete.content_type = "application/xml";
    std::string error_code;
    complete.error_code = &error_code;
    Result<HttpResponse> r = Execute(complete);
    if (!r.ok() && error_code == "NoSuchUpload" && CompletedAlready(key, etags)) {
      return Status::Ok();  // an earlier attempt completed it; only its answer was lost
    }
    if (!r.ok()) {
      result = r.status();
    } else if (r->body.find("<Error>") != std::string::npos) {
      // S3 may answer 200 and report the failure in the body.
      const ErrorBody err = ParseErrorBody(r->body);
      result = Status(storage_internal::CodeForHttpError(r->status, err.code),
                      Where("complete multipart", key) + ": " + err.code + ": " + err.message);
    }
  }
  if (!result.ok()) {
    // Abort so no parts linger and nothing appears under the key; best effort.
    Request abort;
    abort.op = "abort multipart";
    abort.user_key = std::string(key);
    abort.method = "DELETE";
    abort.object_key = full_key;
    abort.query = {{"uploadId", upload_id}};
    Result<HttpResponse> r = Execute(abort);
    if (!r.ok()) {
      return result.WithContext("(abort of upload " + upload_id +
                                " failed too: " + r.status().message() + ")");
    }
  }
  return result;
}

Status S3Store::PutFile(std::string_view key, const std::string& path) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return StatusFromErrno(errno, Where("put", key) + ": " + "open " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return StatusFromErrno(err, Where("put", key) + ": " + "stat " + path);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_at = [fd, &path](uint64_t off, uint64_t n,
                             std::string* buf) -> Result<std::string_view> {
    if (buf->size() < n) buf->resize(n);
    uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, buf->data() + done, n - done, static_cast<off_t>(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return StatusFromErrno(errno, "read " + path);
      if (r == 0) return IoError("read " + path + ": file shrank while uploading");
      done += static_cast<uint64_t>(r);
    }
    return std::string_view(buf->data(), n);
  };
  Status s;
  if (size >= config_.options.multipart_threshold) {
    s = PutMultipart(key, size, read_at);
  } else {
    std::string buf;
    Result<std::string_view> data = read_at(0, size, &buf);
    s = data.ok() ? Put(key, *data, PutOptions{}) : data.status().WithContext(Where("put", key));
  }
  ::close(fd);
  return s;
}

Result<std::string> S3Store::Get(std::string_view key) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  std::string out;
  GANTRY_RETURN_IF_ERROR(Download(key, &out, -1));
  return out;
}

// Reads the first part with a ranged GET (which also reveals the size and ETag), then the rest in
// parallel ranges pinned to that ETag with If-Match, so a concurrent overwrite fails the read
// instead of mixing two versions. Writes into *memory, or into `fd` at the object's offsets.
Status S3Store::Download(std::string_view key, std::string* memory, int fd) {
  const StoreOptions& o = config_.options;
  const uint64_t part = std::max<uint64_t>(o.part_size, 1);
  Request first;
  first.op = "get";
  first.user_key = std::string(key);
  first.method = "GET";
  first.object_key = FullKey(key);
  first.headers = {{"range", "bytes=0-" + std::to_string(part - 1)}};
  Result<HttpResponse> resp = Execute(first);
  if (!resp.ok()) {
    if (resp.status().code() == StatusCode::kOutOfRange) {  // 416: an empty object
      GANTRY_ASSIGN_OR_RETURN(ObjectInfo info, Head(key));
      if (info.size == 0) {
        if (memory) memory->clear();
        return Status::Ok();
      }
    }
    return resp.status();
  }
  uint64_t total = resp->body.size();
  if (resp->status == 206) {
    const std::string cr = resp->Header("content-range");  // "bytes 0-99/1234"
    const size_t slash = cr.rfind('/');
    if (slash == std::string::npos) {
      return Internal(Where("get", key) + ": 206 answer without a Content-Range");
    }
    total = std::strtoull(cr.c_str() + slash + 1, nullptr, 10);
  }
  const std::string etag = resp->Header("etag");
  if (total <= resp->body.size()) {
    if (memory) {
      *memory = std::move(resp->body);
      return Status::Ok();
    }
    return PwriteAll(fd, resp->body.data(), resp->body.size(), 0).WithContext(Where("get", key));
  }

  if (memory) {
    memory->resize(total);
    std::memcpy(memory->data(), resp->body.data(), resp->body.size());
  } else {
    GANTRY_RETURN_IF_ERROR(
        PwriteAll(fd, resp->body.data(), resp->body.size(), 0).WithContext(Where("get", key)));
  }
  const uint64_t start = resp->body.size();
  resp->body = std::string();
  const uint64_t ranges = (total - start + part - 1) / part;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> downloaded{0};  // for the progress callback
  std::atomic<bool> failed{false};
  Mutex err_mu;
  Status first_error;
  auto worker = [&]() {
    while (!failed.load()) {
      const uint64_t i = next.fetch_add(1);
      if (i >= ranges) return;
      const uint64_t off = start + i * part;
      const uint64_t n = std::min(part, total - off);
      const RangeSink sink = [&, off, n](uint64_t at, const char* data, size_t len) -> Status {
        if (at + len > n) return IoError("server sent more bytes than the range asked for");
        if (memory) {
          std::memcpy(memory->data() + off + at, data, len);
          return Status::Ok();
        }
        return PwriteAll(fd, data, len, off + at);
      };
      Request r;
      r.op = "get";
      r.user_key = std::string(key);
      r.method = "GET";
      r.object_key = FullKey(key);
      r.headers = {{"range", "bytes=" + std::to_string(off) + "-" + std::to_string(off + n - 1)}};
      if (!etag.empty()) r.headers.emplace_back("if-match", etag);
      r.sink = &sink;
      Result<HttpResponse> got = Execute(r);
      Status st = got.status();
      if (got.ok() && got->status != 206) {
        st = Internal(Where("get", key) + ": ranged GET answered HTTP " +
                      std::to_string(got->status));
      }
      if (st.ok() && o.progress) o.progress(start + downloaded.fetch_add(n) + n, total);
      if (!st.ok()) {
        // The only precondition is If-Match on the first answer's ETag: a concurrent writer
        // replaced the object. Lost a race: the caller may read again from the start.
        if (st.code() == StatusCode::kFailedPrecondition) {
          st = Aborted(Where("get", key) + ": object changed while being read");
        }
        MutexLock lock(err_mu);
        if (first_error.ok()) first_error = st;
        failed.store(true);
        return;
      }
    }
  };
  const uint64_t workers = std::min<uint64_t>(ranges, static_cast<uint64_t>(o.parallelism));
  std::vector<std::future<void>> running;
  ThreadPool& pool = Pool();
  for (uint64_t w = 0; w < workers; ++w) running.push_back(pool.Submit(worker));
  for (auto& f : running) f.get();
  return first_error;
}

Status S3Store::GetToFile(std::string_view key, const std::string& path) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".gantry-tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return StatusFromErrno(errno, Where("get", key) + ": " + "create " + tmp);
  Status s = Download(key, nullptr, fd);
  if (::close(fd) != 0 && s.ok())
    s = StatusFromErrno(errno, Where("get", key) + ": " + "close " + tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = StatusFromErrno(errno, Where("get", key) + ": " + "rename to " + path);
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Result<std::string> S3Store::GetRange(std::string_view key, uint64_t offset, uint64_t length) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  auto check_end = [&]() -> Result<std::string> {
    GANTRY_ASSIGN_OR_RETURN(ObjectInfo info, Head(key));
    if (offset > info.size) {
      return OutOfRange(Where("get range", key) + ": offset " + std::to_string(offset) +
                        " is past the end (" + std::to_string(info.size) + " bytes)");
    }
    return std::string();
  };
  if (length == 0) return check_end();
  Request r;
  r.op = "get range";
  r.user_key = std::string(key);
  r.method = "GET";
  r.object_key = FullKey(key);
  std::string range = "bytes=" + std::to_string(offset) + "-";
  if (length <= kToEnd - offset) range += std::to_string(offset + length - 1);
  r.headers = {{"range", range}};
  Result<HttpResponse> resp = Execute(r);
  if (!resp.ok()) {
    if (resp.status().code() == StatusCode::kOutOfRange) return check_end();
    return resp.status();
  }
  if (resp->status == 200) {  // the server ignored the range
    if (offset > resp->body.size()) return check_end();
    return resp->body.substr(offset, length);
  }
  return std::move(resp->body);
}

Result<ObjectInfo> S3Store::Head(std::string_view key) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  Request r;
  r.op = "head";
  r.user_key = std::string(key);
  r.method = "HEAD";
  r.object_key = FullKey(key);
  GANTRY_ASSIGN_OR_RETURN(HttpResponse resp, Execute(r));
  ObjectInfo info;
  info.key = std::string(key);
  info.size = std::strtoull(resp.Header("content-length").c_str(), nullptr, 10);
  info.mtime_unix = ParseHttpTime(resp.Header("last-modified"));
  info.etag = resp.Header("etag");
  if (info.etag.size() >= 2 && info.etag.front() == '"' && info.etag.back() == '"') {
    info.etag = info.etag.substr(1, info.etag.size() - 2);
  }
  return info;
}

// Page tokens are the last key of the previous page and go out as StartAfter: store-relative,
// readable, increasing (ObjectStore::ListAll relies on that) and stable across servers, unlike
// S3's opaque continuation tokens.
Result<ListPage> S3Store::List(std::string_view prefix, std::string_view page_token, int max_keys) {
  const std::string base = config_.prefix.empty() ? "" : config_.prefix + "/";
  Request r;
  r.op = "list";
  r.user_key = std::string(prefix);
  r.method = "GET";
  r.query = {{"list-type", "2"},
             {"prefix", base + std::string(prefix)},
             {"max-keys", std::to_string(max_keys <= 0 ? 1000 : std::min(max_keys, 1000))}};
  if (!page_token.empty()) r.query.emplace_back("start-after", base + std::string(page_token));
  GANTRY_ASSIGN_OR_RETURN(HttpResponse resp, Execute(r));
  bool truncated = false;
  Result<ListPage> page = ParseListObjectsV2(resp.body, base, &truncated);
  if (!page.ok()) return page.status().WithContext(Where("list", prefix));
  if (truncated && !page->objects.empty()) page->next_token = page->objects.back().key;
  return page;
}

Status S3Store::Delete(std::string_view key) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  Request r;
  r.op = "delete";
  r.user_key = std::string(key);
  r.method = "DELETE";
  r.object_key = FullKey(key);
  std::string error_code;
  r.error_code = &error_code;
  Result<HttpResponse> resp = Execute(r);
  if (!resp.ok()) {
    // A missing key is deleted already (as S3 itself answers); a missing bucket is an error.
    if (resp.status().code() == StatusCode::kNotFound && error_code != "NoSuchBucket") {
      return Status::Ok();
    }
    return resp.status();
  }
  return Status::Ok();
}

Result<std::vector<std::string>> S3Store::ListMultipartUploadsForTesting(std::string_view prefix) {
  Request r;
  r.op = "list uploads";
  r.user_key = std::string(prefix);
  r.method = "GET";
  r.query = {{"uploads", ""}, {"prefix", FullKey(prefix)}};
  GANTRY_ASSIGN_OR_RETURN(HttpResponse resp, Execute(r));
  std::vector<std::string> keys;
  const size_t strip = config_.prefix.empty() ? 0 : config_.prefix.size() + 1;
  for (std::string_view upload : XmlElements(resp.body, "Upload")) {
    std::string k = XmlText(upload, "Key");
    keys.push_back(k.size() >= strip ? k.substr(strip) : k);
  }
  return keys;
}

}  // namespace gantry::s3

namespace gantry {

Result<std::unique_ptr<ObjectStore>> OpenS3Store(const std::string& bucket,
                                                 const std::string& prefix,
                                                 const StoreOptions& options) {
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<s3::S3Store> store,
                          s3::S3Store::Open(bucket, prefix, options, s3::ProcessEnv()));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace gantry
