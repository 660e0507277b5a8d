// The S3 backend: an ObjectStore over any S3-compatible endpoint (AWS, Ceph RGW, MinIO), on
// Gantry's own libcurl client with SigV4 signing.
//
// Objects live under "bucket/prefix/KEY". Large puts use multipart upload with parts sent in
// parallel (aborted on failure, so no partial object ever appears); large reads use parallel
// ranged GETs pinned to one ETag. Transient failures (HTTP 500/502/503/504, SlowDown,
// RequestTimeout, connection errors and timeouts, truncated bodies) are retried with
// exponential backoff and full jitter; authentication errors are not. Connections are kept alive
// and reused. See docs/storage.md, "S3 backend". The store is thread-safe.
//
//   StoreOptions o;
//   o.endpoint = "http://127.0.0.1:7480";
//   GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> s, OpenS3Store("bkt", "ckpt", o));
#pragma once

#include <memory>
#include <string>

#include "gantry/common/status.h"
#include "gantry/storage/object_store.h"

namespace gantry {

// Opens bucket/prefix. Settings left empty in `options` are resolved, in order, from the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION,
// AWS_DEFAULT_REGION, AWS_ENDPOINT_URL, AWS_PROFILE) and from the shared credentials and config
// files (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, AWS_CONFIG_FILE or ~/.aws/config).
// Fails with FailedPrecondition when no credentials are found. Does not contact the endpoint.
Result<std::unique_ptr<ObjectStore>> OpenS3Store(const std::string& bucket,
                                                 const std::string& prefix,
                                                 const StoreOptions& options);

}  // namespace gantry
