// ObjectStore: the one storage interface every tier implements (memory, posix directory, S3).
//
// Keys are relative, '/'-separated names ("ckpt/step-100/chunk-ab12"); ValidateKey rejects
// empty keys, absolute paths, "." and ".." segments, backslashes, control characters and the
// reserved top-level .gantry-tmp and .gantry-lock, so no key can escape a directory tier. Every
// error is a Status whose message names the backend, the object and what happened, e.g.
// "s3://bkt/pre: put 'a/b': HTTP 403 AccessDenied: ...", and a code every backend uses alike, so
// callers decide on codes alone: NotFound (no such object), AlreadyExists (a create-only put found
// the key), ResourceExhausted (out of space or quota), PermissionDenied (EACCES, HTTP 401/403),
// DataLoss (bytes damaged on the way or at rest), DeadlineExceeded (a timeout), Unavailable
// (transient: retry), Unimplemented (a read-only store asked to write), Aborted (lost a race with a
// concurrent writer), InvalidArgument (a bad or reserved key). The errno and HTTP mappings are in
// one place each (StatusFromErrno, and storage's CodeForHttpError); docs/storage.md lists them.
//
// A put is atomic: readers see the old object or the whole new one, never a partial object
// under its final name. Implementations are thread-safe: many operations may be in flight at
// once (the async helpers below, or callers' own threads).
//
//   GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> s, OpenObjectStore("file:///nvme/t", {}));
//   GANTRY_RETURN_IF_ERROR(s->Put("a/b", bytes));
//   GANTRY_ASSIGN_OR_RETURN(std::string back, s->Get("a/b"));
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"

namespace gantry {

class ThreadPool;

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  int64_t mtime_unix = 0;  // last modification, seconds since the Unix epoch (0 if unknown)
  // A version tag: another version of the object has another one (S3: the ETag; posix: inode,
  // mtime in ns and size; memory: a counter), from Head and List alike. Empty if unknown (http).
  std::string etag;
};

struct ListPage {
  std::vector<ObjectInfo> objects;  // in key order
  std::string next_token;           // pass to List for the next page; empty: no more pages
};

struct PutOptions {
  // Fail with AlreadyExists if the key exists (atomically: memory, posix via link(2), S3 via
  // If-None-Match: *). Read-only stores refuse every put with Unimplemented (see
  // ObjectStore::SupportsCreateIfAbsent).
  bool create_if_absent = false;
};

inline constexpr uint64_t kToEnd = std::numeric_limits<uint64_t>::max();

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // "memory", "posix", "s3", or a wrapper's name ("faulty(posix)").
  virtual std::string_view backend() const = 0;
  // Where it points, as a URL: "file:///data/tier", "s3://bucket/prefix", "mem://name".
  virtual std::string url() const = 0;
  virtual bool SupportsCreateIfAbsent() const = 0;

  virtual Status Put(std::string_view key, std::string_view data, const PutOptions& options) = 0;
  Status Put(std::string_view key, std::string_view data) { return Put(key, data, PutOptions{}); }
  // Put of the concatenation of `parts` (a header and a payload, say) without the caller
  // building it. The default concatenates; posix writes the parts in place.
  virtual Status PutParts(std::string_view key, std::span<const std::string_view> parts,
                          const PutOptions& options);
  virtual Result<std::string> Get(std::string_view key) = 0;
  // Reads bytes from `offset` into `parts` in order (a chunk's header, then its payload in the
  // caller's tensor, say) without an intermediate buffer, stopping at the end of the object;
  // returns the bytes read. OutOfRange if offset is past the end. The default goes through
  // GetRange; posix (preadv) and http (straight from the socket) override it.
  virtual Result<uint64_t> GetParts(std::string_view key, uint64_t offset,
                                    std::span<const std::span<char>> parts);
  // Bytes [offset, offset + length) (clipped at the end of the object); OutOfRange if offset is
  // past the end.
  virtual Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) = 0;
  virtual Result<ObjectInfo> Head(std::string_view key) = 0;
  // Up to max_keys objects whose key starts with prefix, after page_token.
  virtual Result<ListPage> List(std::string_view prefix, std::string_view page_token,
                                int max_keys) = 0;
  // Deleting a missing key is not an error (as in S3).
  virtual Status Delete(std::string_view key) = 0;

  // Large objects straight from and to files. The defaults read/write the whole file in
  // memory; posix and S3 override them (copy_file_range / parallel multipart and ranged GETs).
  virtual Status PutFile(std::string_view key, const std::string& path);
  virtual Status GetToFile(std::string_view key, const std::string& path);
  // PutFile as a create-only put (PutOptions::create_if_absent): AlreadyExists if the key
  // exists, atomically. Posix streams the file into a temp file and link(2)s it into place; the
  // default (memory, S3: one conditional PUT) reads the file whole.
  virtual Status PutFileIfAbsent(std::string_view key, const std::string& path);

  // Asynchronous forms, run on `pool` (keep many operations in flight). The store and the
  // data must outlive the futures.
  std::future<Status> PutAsync(ThreadPool& pool, std::string key, std::string data);
  std::future<Result<std::string>> GetAsync(ThreadPool& pool, std::string key);

  // Every object under prefix, following pages.
  Result<std::vector<ObjectInfo>> ListAll(std::string_view prefix);
};

// OK, or InvalidArgument naming the key and the rule it breaks (see the top of this file).
Status ValidateKey(std::string_view key);

// Options for OpenObjectStore; S3 fields fall back to the standard AWS environment variables
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION,
// AWS_ENDPOINT_URL, AWS_PROFILE) and to ~/.aws/credentials and ~/.aws/config.
// The environment variable holding the cluster's gantry-agent bearer token, and its value (empty
// when unset). The one place that decides the default token of StoreOptions, HttpStoreOptions and
// the gantry-agent binary (which also takes --token-file).
inline constexpr char kAgentTokenEnv[] = "GANTRY_AGENT_TOKEN";
std::string DefaultAgentToken();
// True if the token can be sent as `Authorization: Bearer TOKEN`: printable ASCII, no spaces.
bool IsValidAgentToken(std::string_view token);
// The agent token a daemon is given: the secret in `token_file` when one is named (its errors
// as ReadSecretFile's), else DefaultAgentToken(); empty when neither holds one. InvalidArgument
// for a token IsValidAgentToken refuses. gantry-agent and gantryd (--token-file,
// --agent-token-file) both read theirs here.
Result<std::string> AgentTokenFrom(const std::string& token_file);

struct StoreOptions {
  std::string endpoint;  // e.g. "http://127.0.0.1:7480"; empty: AWS default for the region
  std::string region;
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string profile;     // AWS profile name
  bool path_style = true;  // path-style (endpoint/bucket/key) or virtual-host (bucket.endpoint/key)
  int max_attempts = 5;    // per request, with exponential backoff and full jitter
  int base_backoff_ms = 50;
  int max_backoff_ms = 5000;
  int request_timeout_ms = 60000;
  int connect_timeout_ms = 5000;
  uint64_t multipart_threshold = 64ull << 20;  // objects at least this big use multipart
  uint64_t part_size = 16ull << 20;
  int parallelism = 16;  // parts or ranges in flight per large object
  // file:// roots: create the directory if it does not exist (a tier on a fresh node). False
  // opens an existing directory only, NotFound naming it otherwise, and writes nothing on open
  // (read-only commands, where a typo must not become a new empty root). Default: true.
  bool create_root = true;
  // Called by PutFile/GetToFile as bytes complete (from any thread; may be empty), so long
  // transfers can show progress.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;
  // http:// (peer gantry-agent) stores: the bearer token sent with every request; empty sends
  // none. Default: $GANTRY_AGENT_TOKEN.
  std::string agent_token = DefaultAgentToken();
};

// Opens "mem://NAME" (a process-wide in-memory store per name), "file:///abs/dir" (or a plain
// path), "s3://bucket[/prefix]", or "http://host:port" (a peer's gantry-agent, read-only; see
// http_store.h; timeouts from request_timeout_ms and connect_timeout_ms).
Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const std::string& url,
                                                     const StoreOptions& options);

}  // namespace gantry
