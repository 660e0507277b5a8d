// Internals of the S3 backend (src/storage/s3_store.cc), exposed to its tests: configuration
// and credential resolution, URL building for path-style and virtual-host addressing, the retry
// policy, the small XML readers for S3 responses, and the S3Store class with its test hooks.
//
// Pure helpers are thread-safe. S3Store is thread-safe (see gantry/storage/s3.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/storage/object_store.h"
#include "storage/sigv4.h"

namespace gantry {
class ThreadPool;
namespace storage_internal {
class CurlHandlePool;
}
}  // namespace gantry

namespace gantry::s3 {

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// Reads an environment variable; injectable so credential resolution is testable.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnv();

struct Endpoint {
  std::string scheme;  // "http" or "https"
  std::string host;    // "127.0.0.1", "s3.us-east-1.amazonaws.com"
  std::string port;    // empty: the scheme's default
};
// "http://127.0.0.1:7480" (a trailing '/' is allowed; a path is not).
Result<Endpoint> ParseEndpoint(std::string_view url);

struct Config {
  std::string bucket;
  std::string prefix;  // without leading or trailing '/'; may be empty
  Endpoint endpoint;
  std::string region;
  sigv4::Credentials credentials;
  bool path_style = true;
  StoreOptions options;  // limits: retries, timeouts, multipart sizes, parallelism
};

// Fills endpoint, region and credentials from `options`, then `env`, then the shared AWS
// credentials/config files (see OpenS3Store).
Result<Config> ResolveConfig(const std::string& bucket, const std::string& prefix,
                             const StoreOptions& options, const EnvLookup& env);

// Where a request goes: the full URL, the Host header, and the path as signed.
struct Target {
  std::string url;
  std::string host;
  std::string canonical_uri;
};
// `object_key` is the key inside the bucket (store prefix already applied); empty addresses the
// bucket itself.
Target BuildTarget(const Config& config, std::string_view object_key, const QueryParams& query);

// True for answers worth retrying: 500, 502, 503, 504, 429, and the S3 codes SlowDown,
// RequestTimeout, InternalError, ServiceUnavailable (whatever the status).
bool IsRetryableHttp(int http_status, std::string_view s3_code);
// Full-jitter exponential backoff for retry number `attempt` (1 = first retry):
// uniform in [0, min(max_ms, base_ms * 2^(attempt-1))], picked by `random`.
int64_t BackoffMs(int attempt, int base_ms, int max_ms, uint64_t random);

// The tiny, tolerant XML reading S3 needs: contents of each <tag>...</tag> (or <tag/>), and the
// first one's text with entities decoded.
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag);
std::string XmlText(std::string_view xml, std::string_view tag);
std::string XmlUnescape(std::string_view s);

struct ErrorBody {
  std::string code;
  std::string message;
};
ErrorBody ParseErrorBody(std::string_view xml);

// Parses a ListObjectsV2 answer; keys are returned relative to `strip_prefix`.
Result<ListPage> ParseListObjectsV2(std::string_view xml, std::string_view strip_prefix,
                                    bool* truncated);

// "2024-05-01T10:00:00.000Z" and "Wed, 01 May 2024 10:00:00 GMT" to Unix seconds (0 if bad).
int64_t ParseIsoTime(std::string_view s);
int64_t ParseHttpTime(std::string_view s);

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case
  std::string body;
  std::string Header(std::string_view name) const;
};

// Where a fault hook is consulted, once per attempt before the request is sent.
struct FaultPoint {
  std::string op;       // "put", "get", "upload part", "complete multipart", ...
  std::string key;      // the store-relative key
  int part_number = 0;  // for "upload part"
  int attempt = 1;
};

class S3Store final : public ObjectStore {
 public:
  static Result<std::unique_ptr<S3Store>> Open(const std::string& bucket, const std::string& prefix,
                                               const StoreOptions& options, const EnvLookup& env);
  explicit S3Store(Config config);
  ~S3Store() override;

  std::string_view backend() const override { return "s3"; }
  std::string url() const override;
  bool SupportsCreateIfAbsent() const override { return true; }

  using ObjectStore::Put;
  Status Put(std::string_view key, std::string_view data, const PutOptions& options) override;
  Result<std::string> Get(std::string_view key) override;
  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override;
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<ListPage> List(std::string_view prefix, std::string_view page_token,
                        int max_keys) override;
  Status Delete(std::string_view key) override;
  Status PutFile(std::string_view key, const std::string& path) override;
  Status GetToFile(std::string_view key, const std::string& path) override;

  const Config& config() const { return config_; }

  // Test hooks. A non-OK status from the hook stands in for a connection failure on that attempt
  // (so it is retried like one).
  void SetFaultHookForTesting(std::function<Status(const FaultPoint&)> hook);
  // Keys (store-relative) of multipart uploads in progress under `prefix`.
  Result<std::vector<std::string>> ListMultipartUploadsForTesting(std::string_view prefix);
  uint64_t requests_sent() const { return requests_sent_.load(); }
  uint64_t retries() const { return retries_.load(); }

 private:
  struct Request;
  using PartSource =
      std::function<Result<std::string_view>(uint64_t offset, uint64_t size, std::string* scratch)>;
  using RangeSink = std::function<Status(uint64_t offset, const char* data, size_t size)>;

  std::string FullKey(std::string_view key) const;
  std::string Where(std::string_view op, std::string_view key) const;
  Result<HttpResponse> Execute(const Request& request);
  Status ErrorStatus(const Request& request, const HttpResponse& response, int attempts) const;
  Status PutMultipart(std::string_view key, uint64_t size, const PartSource& source);
  bool CompletedAlready(std::string_view key, const std::vector<std::string>& etags);
  Status Download(std::string_view key, std::string* memory, int fd);
  ThreadPool& Pool() EXCLUDES(pool_mu_);

  Config config_;
  std::unique_ptr<storage_internal::CurlHandlePool> curl_;
  Mutex pool_mu_;
  std::unique_ptr<ThreadPool> pool_ GUARDED_BY(pool_mu_);  // created on first large transfer
  Mutex hook_mu_;
  std::function<Status(const FaultPoint&)> fault_hook_ GUARDED_BY(hook_mu_);
  std::atomic<uint64_t> requests_sent_{0};
  std::atomic<uint64_t> retries_{0};
};

}  // namespace gantry::s3
