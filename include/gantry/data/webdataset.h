// WebDataset shards: tar archives (optionally gzip-compressed, ".tar.gz"/".tgz") whose members
// named "<key>.<field>" are grouped into samples, read and written through any ObjectStore.
//
// Grouping follows WebDataset's own reader (webdataset.tariterators): only regular files count;
// a top-level "__name__" member is metadata and skipped; the key is the name up to the first '.'
// of its last path component and the field is the rest, lower-cased ("a/b.c/d.seg.png" is key
// "a/b.c/d", field "seg.png"; "UP.TXT" is field "txt"); a member whose last component has no '.'
// after at least one other character is skipped; consecutive members with the same key form one
// sample. So "p.1.txt" then "p.2.txt" are one sample "p" with fields "1.txt" and "2.txt", as the
// Python reader returns them. A field repeated within a sample is an error (as in WebDataset).
//
// A shard is read whole into memory, or mapped (shard_bytes.h), bounded by
// ReadLimits::max_shard_bytes (also for the decompressed size of a .tar.gz), and its samples hold
// views into it.
//
//   GANTRY_ASSIGN_OR_RETURN(WdsShard shard, ReadWdsShard(*store, "train/shard-000000.tar", {}));
//   for (const WdsSample& s : shard.samples()) Use(s.key, s.Find("jpg"));
//
// WdsShard is a movable value (the views stay valid across moves); thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/data/shard_bytes.h"
#include "gantry/storage/object_store.h"

namespace gantry::data {

// Bounds on what one read may hold in memory.
struct ReadLimits {
  // The most bytes one shard may take in memory, stored or decompressed. A larger one is
  // ResourceExhausted (checked before it is fetched). Default: 16 GiB.
  uint64_t max_shard_bytes = uint64_t{16} << 30;
};

struct WdsField {
  std::string name;        // "jpg", "seg.png" (lower-cased)
  std::string member;      // the tar member's full name, as stored
  std::string_view bytes;  // the member's bytes (a view into the shard)
};

struct WdsSample {
  std::string key;
  std::vector<WdsField> fields;  // in archive order
  // The field's bytes, or nullptr when the sample has no such field.
  const WdsField* Find(std::string_view field) const;
};

// One shard, parsed: owns the (decompressed) tar bytes the samples point into.
class WdsShard {
 public:
  // `stored`: the shard object's bytes as stored; gzip when `name` ends in ".gz" or ".tgz".
  static Result<WdsShard> Parse(std::string stored, std::string name, const ReadLimits& limits);
  // The same over bytes held elsewhere (a mapped file): an uncompressed shard's samples point
  // into `stored` itself, which the shard keeps alive.
  static Result<WdsShard> Parse(std::shared_ptr<const ShardBytes> stored, std::string name,
                                const ReadLimits& limits);

  const std::string& name() const { return name_; }
  uint64_t stored_bytes() const { return stored_bytes_; }
  uint64_t tar_bytes() const { return tar_->size(); }
  const std::vector<WdsSample>& samples() const { return samples_; }
  // The (uncompressed) tar bytes every field's bytes point into.
  const std::shared_ptr<const ShardBytes>& bytes() const { return tar_; }

 private:
  std::string name_;
  uint64_t stored_bytes_ = 0;
  std::shared_ptr<const ShardBytes> tar_;  // heap-held so moves keep the views valid
  std::vector<WdsSample> samples_;
};

// Splits a member name as WebDataset does: {key, lower-cased field}, or {"", ""} for a member
// the reader skips.
std::pair<std::string, std::string> SplitWdsName(std::string_view member);

// True for the names ListWdsShards returns: ".tar", ".tar.gz", ".tgz".
bool IsWdsShardName(std::string_view key);
// The shard objects under `prefix` of `store`, in key order.
Result<std::vector<ObjectInfo>> ListWdsShards(ObjectStore& store, std::string_view prefix);
// Fetches and parses one shard. NotFound names the shard.
Result<WdsShard> ReadWdsShard(ObjectStore& store, const std::string& key, const ReadLimits& limits);

// Writes samples as tar shards "<prefix><pattern % n>" into a store: a new shard starts when
// the current one holds max_samples samples or would pass max_bytes.
struct WdsWriterOptions {
  std::string prefix;                      // "train/" (keys are prefix + shard name)
  std::string pattern = "shard-%06d.tar";  // one %d (with width); ".tar.gz" compresses with gzip
  uint64_t max_samples = 10000;            // per shard; 0: no limit
  uint64_t max_bytes = uint64_t{1} << 30;  // per shard (uncompressed tar); 0: no limit
  int64_t mtime = 0;                       // stamped on every member
  // The first shard is created only where its key is free (PutOptions::create_if_absent):
  // AlreadyExists where it is taken, so of two writers of the same names into one folder one
  // writes and the other fails before writing anything. Only the first: on S3 a create-only
  // put is one request, never a multipart upload.
  bool claim_first = false;
};

class WdsWriter {
 public:
  // InvalidArgument for a pattern without exactly one %d or not ending in .tar/.tar.gz/.tgz.
  static Result<std::unique_ptr<WdsWriter>> Create(ObjectStore& store, WdsWriterOptions options);
  ~WdsWriter();

  // Appends one sample: members "<key>.<field>" in the order given. InvalidArgument when the
  // sample would not read back as written: an empty key or field, a '.' in the key's last
  // component, a field that is not lower-case, a field given twice, or the same key as the
  // sample before (WebDataset's reader would merge the two).
  Status Write(std::string_view key,
               const std::vector<std::pair<std::string, std::string>>& fields);
  // Writes the last shard. Call once; the writer takes no samples after it.
  Status Finish();

  uint64_t samples_written() const { return samples_; }
  const std::vector<std::string>& shards_written() const { return shards_; }

 private:
  WdsWriter(ObjectStore& store, WdsWriterOptions options);
  Status Flush();

  ObjectStore& store_;
  const WdsWriterOptions options_;
  struct State;
  std::unique_ptr<State> state_;
  uint64_t samples_ = 0;
  std::vector<std::string> shards_;
};

}  // namespace gantry::data
