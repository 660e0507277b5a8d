// Checkpoint manifests: what a committed checkpoint holds (tensor names, dtypes, global shapes,
// row slices per rank, chunk references, checksums, step, rank layout, user metadata), and the
// per-rank part each rank writes before the commit. The JSON format is documented, field by
// field, in docs/formats/checkpoint.md; this header is its one reader and writer.
//
// Object layout under a checkpoint root (the durable tier's URL):
//   chunks/ab/cd/<32 hex>                      chunk bytes (the chunk store's layout, chunk.h)
//   ckpt/<job>/<step, 12 digits>/rank-<5 digits>.json   one rank's part ("kind": "part")
//   ckpt/<job>/<step, 12 digits>/manifest.json          the commit record ("kind": "checkpoint")
//   ckpt/<job>/latest                          the step of the newest commit, as text
// A checkpoint exists once its manifest.json does; parts without one are an unfinished save.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cache/chunk.h"
#include "gantry/common/status.h"

namespace gantry::ckpt {

// Element types a checkpoint can hold; the names are PyTorch's without "torch.".
enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kBool,
  kComplex64,
  kComplex128,
};
// InvalidArgument "unknown dtype 'x' (known: float32, ...)" for anything else.
Result<DType> ParseDType(std::string_view name);
const char* DTypeName(DType dtype);
uint64_t DTypeSize(DType dtype);

// "[4, 1024]"
std::string ShapeString(const std::vector<int64_t>& shape);
// Bytes of `rows` rows of a tensor of this dtype and global shape (a 0-d tensor has one "row").
uint64_t RowBytes(DType dtype, const std::vector<int64_t>& global_shape);
int64_t GlobalRows(const std::vector<int64_t>& global_shape);

// The newest manifest version this build reads and writes. Version 1 has no packs; a manifest
// is written as version 1 when it holds none (so builds that read only version 1 still read it),
// as version 2 otherwise. Both are read.
inline constexpr int kManifestVersion = 2;

// `size` bytes of a slice stored at `offset` in the chunk `id`. A chunk holds the bytes of one
// slice (offset 0, size the chunk's size) or, if `id` is one of the manifest's packs, small
// slices of several tensors back to back.
struct ChunkRef {
  ChunkId id;
  uint64_t size = 0;    // raw bytes of the slice in this chunk
  uint64_t offset = 0;  // where they start in the chunk's raw bytes (non-zero only in a pack)
};

// A pack: one chunk holding the bytes of several small slices (docs/formats/checkpoint.md).
struct PackRecord {
  ChunkId id;
  uint64_t size = 0;  // the chunk's raw bytes
};

// Rows [row_offset, row_offset + rows) of dim 0, saved by `rank`, as consecutive chunks of the
// slice's row-major bytes (every chunk chunk_size bytes but the last), or as one ref into a pack.
struct SliceRecord {
  int rank = 0;
  int64_t row_offset = 0;
  int64_t rows = 0;
  uint64_t nbytes = 0;
  std::vector<ChunkRef> chunks;
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  std::vector<SliceRecord> slices;  // sorted by row_offset; in a part, exactly one
};

struct RankRecord {
  int rank = 0;
  // The binding's description of this rank's state (nesting and plain values), opaque here.
  std::string structure_json = "null";
  uint64_t bytes_total = 0;    // raw bytes of its tensors
  uint64_t bytes_written = 0;  // raw bytes of chunks it had to write (the rest deduplicated)
  uint64_t chunks_total = 0;
  uint64_t chunks_written = 0;
};

struct CheckpointManifest {
  enum class Kind { kPart, kCheckpoint };
  Kind kind = Kind::kCheckpoint;
  std::string job;
  int64_t step = 0;
  int world_size = 1;
  uint64_t chunk_size = kDefaultChunkSize;
  int64_t created_unix = 0;
  std::vector<std::string> tags;
  std::string metadata_json = "{}";  // user metadata, a JSON object
  // The run (launch) that wrote it: parts of one checkpoint must share it, so parts a crashed
  // earlier attempt left at the same step are never merged with fresh ones. Empty: unknown.
  std::string run_id;
  std::vector<RankRecord> ranks;      // sorted by rank; in a part, exactly one
  std::vector<TensorRecord> tensors;  // sorted by name
  // The chunks that hold small slices of several tensors (version 2), sorted by id.
  std::vector<PackRecord> packs;

  // JSON with a "checksum" field: XXH3-128 over the rest of the document, so a tampered or
  // truncated manifest is detected, not misread.
  std::string ToJson() const;
  // InvalidArgument naming `what` (the object) and the field, for malformed JSON, a bad
  // checksum, an unknown version or dtype, slices that do not tile their tensor, or a ref that
  // reaches outside its pack.
  static Result<CheckpointManifest> FromJson(std::string_view json, std::string_view what);

  uint64_t TotalBytes() const;
  const TensorRecord* FindTensor(std::string_view name) const;
  // Distinct chunk ids referenced.
  std::vector<ChunkId> ChunkIds() const;
  // Distinct chunks referenced, each with its whole raw size (a pack's, not a ref's).
  std::vector<PackRecord> StoredChunks() const;
  // The pack with this id, or nullptr if the chunk is not a pack.
  const PackRecord* FindPack(const ChunkId& id) const;
};

// Merges the parts of all world_size ranks into the commit record; InvalidArgument if a rank is
// missing or duplicated, the parts come from different runs, two ranks disagree on a tensor's
// dtype or global shape, or the slices of a tensor do not tile its rows. Zero-row slices are
// dropped (one is kept for a tensor with no rows).
Result<CheckpointManifest> MergeParts(std::vector<CheckpointManifest> parts);

// Object keys (see the layout above). They are built, and parsed (ParseCheckpointKey), only in
// catalog.cc: no other code spells a checkpoint key.
std::string StepPrefix(std::string_view job, int64_t step);  // "ckpt/<job>/<step>/"
std::string PartKey(std::string_view job, int64_t step, int rank);
std::string PartKeyPrefix(std::string_view job, int64_t step);  // what every PartKey starts with
std::string ManifestKey(std::string_view job, int64_t step);
std::string LatestKey(std::string_view job);
std::string JobPrefix(std::string_view job);  // "ckpt/<job>/"
// A drain record's key in a node's local tier (drain.h): under kDrainRecordPrefix, by job and
// step, named by rank and a hash of the durable root's URL (two roots on one node never share
// a record).
inline constexpr std::string_view kDrainRecordPrefix = "drain/";
std::string DrainRecordKey(std::string_view durable_url, std::string_view job, int64_t step,
                           int rank);
// A job name is one key segment: letters, digits, '-', '_', '.'; InvalidArgument otherwise.
Status ValidateJobName(std::string_view job);

}  // namespace gantry::ckpt
