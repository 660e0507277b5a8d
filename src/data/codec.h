// Byte codecs and digests the dataset formats use, private to src/data: zstd and gzip with a
// bound on the output (a shard's header can claim anything, so no decoder may grow past what
// the caller allows), and the named digests MosaicML Streaming records in index.json.
// Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gantry/common/status.h"

namespace gantry::data::internal {

// Decompresses one or more zstd frames. DataLoss when the input is not zstd or is cut short;
// ResourceExhausted when the output would pass `max_out` bytes. `where` names the object.
Result<std::string> ZstdDecompress(std::string_view in, uint64_t max_out, const std::string& where);
Result<std::string> ZstdCompress(std::string_view in, int level);

// Decompresses a gzip stream (one or more members, as `cat a.gz b.gz` makes), with the CRC of
// every member checked by zlib. Errors as ZstdDecompress.
Result<std::string> GunzipBounded(std::string_view in, uint64_t max_out, const std::string& where);
// A gzip stream of `in` (one member, no file name, mtime 0: the same bytes on every run).
Result<std::string> Gzip(std::string_view in, int level);

// True if `algo` names a digest HexDigest computes: md5, sha1, sha224, sha256, sha384, sha512,
// sha3_224, sha3_256, sha3_384, sha3_512, blake2b, blake2s (hashlib's names and default sizes),
// xxh32, xxh64, xxh3_64, xxh128 and xxh3_128 (python-xxhash's names).
bool IsKnownDigest(std::string_view algo);
// The lowercase hex digest of `data`, as Python's hashlib/xxhash hexdigest() prints it.
// Unimplemented for an unknown name.
Result<std::string> HexDigest(std::string_view algo, std::string_view data);

}  // namespace gantry::data::internal
