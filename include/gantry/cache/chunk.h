// Chunks: the unit of the content-addressed store. A chunk's id is the XXH3-128 hash of its raw
// (uncompressed) bytes; a stored chunk is a 32-byte header followed by the payload, raw or
// compressed with lz4 or zstd. All functions are pure and thread-safe.
//
// Stored layout (little-endian), see docs/storage.md "Chunk store":
//   0  4  magic "GCHK"
//   4  1  format version (1)
//   5  1  codec (0 none, 1 lz4, 2 zstd)
//   6  2  reserved, zero
//   8  8  raw length
//   16 16 XXH3-128 of the raw bytes (high 64 bits first) -- equals the chunk id
//   32 .. payload
//
//   ChunkId id = HashChunk(bytes);
//   std::string stored = EncodeChunk(bytes, Codec::kZstd);
//   GANTRY_ASSIGN_OR_RETURN(std::string back, DecodeChunk(stored, id));  // verifies the hash
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"

namespace gantry {

struct ChunkId {
  uint64_t hi = 0;
  uint64_t lo = 0;

  auto operator<=>(const ChunkId&) const = default;
  // 32 lowercase hex digits, high half first.
  std::string ToHex() const;
  static Result<ChunkId> FromHex(std::string_view hex);
};

struct ChunkIdHash {
  size_t operator()(const ChunkId& id) const { return static_cast<size_t>(id.lo ^ id.hi); }
};

// XXH3-128 of `data`.
ChunkId HashChunk(std::string_view data);

// The object key of a chunk in a tier: "chunks/ab/cd/<32 hex>". Two levels of 256-way fan-out
// keep a posix directory at a few thousand entries for ~10^10 chunks.
std::string ChunkKey(const ChunkId& id);
inline constexpr std::string_view kChunkPrefix = "chunks/";
// Parses a key made by ChunkKey; InvalidArgument for anything else.
Result<ChunkId> ChunkIdFromKey(std::string_view key);

enum class Codec : uint8_t { kNone = 0, kLz4 = 1, kZstd = 2 };
const char* CodecName(Codec codec);
Result<Codec> ParseCodec(std::string_view name);  // "none", "lz4", "zstd"

inline constexpr size_t kChunkHeaderSize = 32;
// Default chunk size: 4 MiB (why: docs/storage.md "Chunk store").
inline constexpr uint64_t kDefaultChunkSize = 4ull << 20;

// Header + payload. If compression does not shrink the data, the chunk is stored raw (codec
// kNone) so reading it back costs nothing extra. `level` is the zstd level (ignored by lz4).
std::string EncodeChunk(std::string_view raw, Codec codec, int level = 3);
// EncodeChunk for a caller that already hashed the bytes (`id` must be HashChunk(raw)).
std::string EncodeChunkWithId(std::string_view raw, const ChunkId& id, Codec codec, int level = 3);
// The header of an uncompressed chunk: written before the raw bytes, it makes the stored chunk
// without copying them (ObjectStore::PutParts).
std::string RawChunkHeader(const ChunkId& id, uint64_t raw_length);

struct ChunkHeader {
  uint8_t version = 0;
  Codec codec = Codec::kNone;
  uint64_t raw_length = 0;
  ChunkId checksum;
};
// Parses and checks the header (magic, version, codec); DataLoss "corrupt chunk" otherwise.
Result<ChunkHeader> ParseChunkHeader(std::string_view stored);

// Decodes and verifies: the header's checksum and the hash of the decoded bytes must both equal
// `id`, and the length must match. Any mismatch is DataLoss "corrupt chunk <id>: <why>".
// `verify_hash` = false skips hashing the decoded bytes (for tiers that cannot rot: memory);
// the header is still checked.
Result<std::string> DecodeChunk(std::string_view stored, const ChunkId& id,
                                bool verify_hash = true);

// The raw length a stored chunk decodes to, after checking its header against `id`.
Result<uint64_t> DecodedLength(std::string_view stored, const ChunkId& id);
// DecodeChunk into caller memory of exactly the raw length (no intermediate copy).
Status DecodeChunkInto(std::string_view stored, const ChunkId& id, char* out, uint64_t out_size,
                       bool verify_hash = true);

// Fixed-size split: views into `data` of `chunk_size` bytes (the last one shorter). Empty data
// gives no chunks.
std::vector<std::string_view> SplitChunks(std::string_view data, uint64_t chunk_size);

}  // namespace gantry
