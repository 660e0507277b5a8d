// MosaicML Streaming's MDS format, read and written through any ObjectStore: a dataset is an
// `index.json` (version 2) listing shards `shard.NNNNN.mds`, each optionally compressed
// (`shard.NNNNN.mds.zstd`) and hashed (sha1, xxh64, ... of each file, hex in the index).
//
// A shard file is: u32 sample count n; u32 offsets[n + 1] (absolute, little-endian); a JSON
// copy of the shard's settings; then the samples, sample i at [offsets[i], offsets[i + 1]). A
// sample is the u32 sizes of its variable-size columns (those whose size is null in the index),
// then every column's bytes in column order. Gantry hands out each column's stored bytes as
// they are (an "int" column is 8 little-endian bytes); decoding is the caller's (or Python's).
//
// Errors name the file and, where it helps, the byte offset: InvalidArgument for a malformed
// index.json or a shard whose layout contradicts itself, DataLoss for a shard cut short, of the
// wrong size, or whose hash does not match, NotFound for a missing shard, Unimplemented for a
// compression or hash this build cannot read. Nothing is allocated from a count a file claims:
// an index that says 2^40 samples is refused, not believed.
//
//   GANTRY_ASSIGN_OR_RETURN(MdsIndex index, ReadMdsIndex(*store, "train/"));
//   GANTRY_ASSIGN_OR_RETURN(MdsShard shard, ReadMdsShard(*store, "train/", index.shards[0], {}));
//   GANTRY_ASSIGN_OR_RETURN(std::vector<std::string_view> cols, shard.Sample(0));
//
// Values are movable and thread-compatible; an MdsShard may be read from many threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/data/webdataset.h"  // ReadLimits
#include "gantry/storage/object_store.h"

namespace gantry::data {

struct MdsColumn {
  std::string name;
  std::string encoding;          // "int", "str", "bytes", "ndarray:float32:16", "jpeg", ...
  std::optional<uint64_t> size;  // bytes per sample; nullopt: variable (sized per sample)
};

struct MdsFile {
  std::string basename;  // relative to the index's folder
  uint64_t bytes = 0;
  std::map<std::string, std::string> hashes;  // algorithm -> lowercase hex digest
};

struct MdsShardInfo {
  std::vector<MdsColumn> columns;
  std::string compression;          // "" (none), "zstd", "zstd:7", "gz", ...
  std::vector<std::string> hashes;  // the algorithms the writer was asked for
  MdsFile raw;                      // the uncompressed shard
  std::optional<MdsFile> zip;       // the stored, compressed shard (when compression is set)
  uint64_t samples = 0;
  uint64_t size_limit = 0;
  // The object actually stored: zip when compressed, raw otherwise.
  const MdsFile& stored() const { return zip ? *zip : raw; }
};

struct MdsIndex {
  std::vector<MdsShardInfo> shards;
  uint64_t total_samples = 0;
};

inline constexpr char kMdsIndexName[] = "index.json";

// Parses index.json text; `where` names it in errors.
Result<MdsIndex> ParseMdsIndex(std::string_view json, const std::string& where);
// Reads "<prefix>index.json" (prefix "" or ending in '/').
Result<MdsIndex> ReadMdsIndex(ObjectStore& store, const std::string& prefix);

// One shard, decompressed and parsed.
class MdsShard {
 public:
  // `raw`: the uncompressed shard file, whose layout is checked against `info` (sample count,
  // offsets inside the file); `where` names it in errors.
  static Result<MdsShard> Parse(std::string raw, const MdsShardInfo& info, std::string where);
  // The same over bytes held elsewhere (a mapped file), which the shard keeps alive.
  static Result<MdsShard> Parse(std::shared_ptr<const ShardBytes> raw, const MdsShardInfo& info,
                                std::string where);

  uint32_t num_samples() const { return num_samples_; }
  uint64_t raw_bytes() const { return raw_->size(); }
  // The raw shard file every sample's bytes point into.
  const std::shared_ptr<const ShardBytes>& bytes() const { return raw_; }
  // Sample i: each column's stored bytes, in column order (views into this shard, valid while
  // it lives). OutOfRange past the end; InvalidArgument if the sample's sizes do not add up.
  Result<std::vector<std::string_view>> Sample(uint32_t i) const;
  // A hint that sample i is read soon (LoadedShard::Prefetch): step 0 asks for its offset,
  // step 1 (a sample later) for its first bytes. Nothing past the end.
  void Prefetch(uint32_t i, int step) const;
  // Checks every sample's layout (what verify does), so later Sample calls cannot fail.
  Status CheckAllSamples() const;

 private:
  uint32_t Offset(uint32_t i) const;
  // For a shard not read yet (ShardBytes::OpenFile), after its offsets are checked: reads
  // every sample's column sizes, and the samples too small to be left in the file.
  Status FillRecordHeads(uint64_t header) const;

  std::string where_;
  std::shared_ptr<const ShardBytes> raw_;  // heap-held so moves keep the views valid
  std::vector<std::optional<uint64_t>> sizes_;
  uint32_t num_samples_ = 0;
};

struct MdsReadOptions {
  ReadLimits limits;
  // Check every hash the index lists for the shard's files (compressed and raw). Default: off,
  // as in Streaming (validate_hash=None); `gantry data verify` turns it on.
  bool verify_hashes = false;
};

// Fetches "<prefix><stored basename>", checks its size against the index, decompresses and
// parses it. NotFound names the missing shard; DataLoss names a damaged one.
Result<MdsShard> ReadMdsShard(ObjectStore& store, const std::string& prefix,
                              const MdsShardInfo& info, const MdsReadOptions& options);

// ReadMdsShard after the fetch: `stored` is the shard object's bytes (from any source, or a
// cache), checked against the index's size (and hashes, when asked), then decompressed and
// parsed. `where` names the shard in errors.
Result<MdsShard> DecodeMdsShard(std::string stored, const MdsShardInfo& info,
                                const MdsReadOptions& options, const std::string& where);
// The same over bytes held elsewhere (a mapped file): an uncompressed shard is parsed in place.
Result<MdsShard> DecodeMdsShard(std::shared_ptr<const ShardBytes> stored, const MdsShardInfo& info,
                                const MdsReadOptions& options, const std::string& where);

// The byte size of one value of a fixed-size encoding ("int" 8, "float32" 4,
// "ndarray:uint8:3,4" 12), nullopt for a variable-size one ("str", "bytes", "jpeg", "ndarray"),
// InvalidArgument for an encoding MDS does not define.
Result<std::optional<uint64_t>> MdsEncodingSize(std::string_view encoding);

struct MdsWriterOptions {
  std::string prefix;  // where index.json and the shards go: "" or ending in '/'
  // name -> encoding; stored sorted by name, as MDSWriter does.
  std::map<std::string, std::string> columns;
  std::string compression;                  // "" or "zstd" / "zstd:LEVEL" (level 3 by default)
  std::vector<std::string> hashes;          // e.g. {"sha1", "xxh64"}
  uint64_t size_limit = uint64_t{1} << 26;  // per shard (uncompressed); Streaming's default
  // The first shard's file is created only where its key is free
  // (PutOptions::create_if_absent): AlreadyExists where it is taken, so of two writers of the
  // same names into one folder one writes and the other fails before writing anything. Only
  // the first: on S3 a create-only put is one request, never a multipart upload.
  bool claim_first = false;
};

// Writes samples into shards and, at Finish, index.json: files Streaming's StreamingDataset
// reads (same layout, same index fields).
class MdsWriter {
 public:
  // InvalidArgument for no columns, an unknown encoding or hash, or a compression other than
  // zstd.
  static Result<std::unique_ptr<MdsWriter>> Create(ObjectStore& store, MdsWriterOptions options);
  ~MdsWriter();

  // One sample: the stored bytes of every column, by name. InvalidArgument for a missing or
  // unknown column, or a fixed-size column of the wrong length.
  Status Write(const std::map<std::string, std::string>& sample);
  // Writes the last shard and index.json. Call once.
  Status Finish();

  uint64_t samples_written() const { return samples_; }
  const MdsIndex& index() const { return index_; }

 private:
  MdsWriter(ObjectStore& store, MdsWriterOptions options);
  Status Flush();
  // The first shard's claim (claim_first); plain puts after it.
  PutOptions PutFlags() const {
    return PutOptions{.create_if_absent = options_.claim_first && index_.shards.empty()};
  }

  ObjectStore& store_;
  const MdsWriterOptions options_;
  std::vector<MdsColumn> columns_;
  std::string config_json_;  // the settings copied into every shard
  std::string samples_bytes_;
  std::vector<uint64_t> sample_ends_;  // relative to the first sample
  MdsIndex index_;
  uint64_t samples_ = 0;
  bool finished_ = false;
};

}  // namespace gantry::data
