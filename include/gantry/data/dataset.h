// A dataset at a URL, whichever format it is in: finding it (LocateDataset), summarising it
// (InspectDataset), checking every shard and hash (VerifyDataset) and writing one from files
// (PackDataset). These are what `gantry data inspect|verify|pack` run; the formats themselves
// are in mds.h and webdataset.h.
//
//   GANTRY_ASSIGN_OR_RETURN(DatasetLocation d, LocateDataset("s3://bkt/train", {}));
//   GANTRY_ASSIGN_OR_RETURN(VerifyReport r, VerifyDataset(d, nullptr));
//   for (const Status& p : r.problems) Log(p.message());
//
// Functions are thread-compatible; progress callbacks run on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/data/webdataset.h"
#include "gantry/storage/object_store.h"

namespace gantry::data {

enum class DatasetFormat { kMds, kWebDataset };
const char* DatasetFormatName(DatasetFormat format);  // "mds", "webdataset"
// "mds" or "wds"/"webdataset"; InvalidArgument otherwise.
Result<DatasetFormat> ParseDatasetFormat(const std::string& name);

// Called with (done, total) as shards or samples complete.
using DataProgress = std::function<void(uint64_t done, uint64_t total)>;

struct DatasetLocation {
  std::string url;
  std::unique_ptr<ObjectStore> store;
  DatasetFormat format = DatasetFormat::kMds;
  std::vector<std::string> wds_shards;  // WebDataset: the shard keys, in order
  // WebDataset: each shard's size as listed (what a fetched copy is checked against, as a tar
  // carries no hash). Empty when the location was built by hand: sizes are then not checked.
  std::vector<uint64_t> wds_shard_bytes;
  // WebDataset: each shard's version as listed (ObjectInfo::etag, else its mtime), which names
  // the version in the cache's key: a tar rewritten at the same size is another shard there.
  // Empty, like the sizes, when built by hand.
  std::vector<std::string> wds_shard_versions;
  // MDS: index.json's version as found (its tag, else its mtime), in the cache's key for the same
  // reason: without hashes in the index, shards rewritten at the same sizes (a corpus tokenized
  // again into fixed-length rows) would look the same. Empty when built by hand.
  std::string mds_index_version;
};

// `url` names a folder holding index.json (MDS) or .tar/.tar.gz/.tgz shards (WebDataset), or a
// single shard object. Opens nothing for writing. NotFound when there is neither.
Result<DatasetLocation> LocateDataset(const std::string& url, const StoreOptions& options);

struct ShardSummary {
  std::string name;
  uint64_t samples = 0;
  uint64_t stored_bytes = 0;  // as stored (compressed, when it is)
  uint64_t raw_bytes = 0;     // uncompressed
  std::string compression;    // "", "zstd", "gzip", ...
};

struct ColumnSummary {
  std::string name;              // MDS column, or WebDataset field ("jpg")
  std::string encoding;          // MDS encoding; empty for WebDataset
  std::optional<uint64_t> size;  // MDS: fixed bytes per sample
  uint64_t samples = 0;          // samples that hold it
  uint64_t bytes = 0;            // WebDataset: its bytes over all samples (0 for MDS)
};

struct DatasetSummary {
  std::string url;
  DatasetFormat format = DatasetFormat::kMds;
  uint64_t samples = 0;
  uint64_t stored_bytes = 0;
  uint64_t raw_bytes = 0;
  std::vector<ShardSummary> shards;
  std::vector<ColumnSummary> columns;
  std::vector<std::string> hashes;  // MDS: algorithms recorded per file
  // WebDataset: the folders its shards lie in, relative to the dataset's ("" for its own), in
  // the order of their first shard. A folder's shards at any depth are the dataset's (as an S3
  // prefix lists them), so more than one here may be a copy of the shards read as more samples.
  std::vector<std::string> folders;
};

// MDS reads index.json only; WebDataset reads every shard (a tar has no index).
Result<DatasetSummary> InspectDataset(DatasetLocation& dataset, const ReadLimits& limits,
                                      const DataProgress& progress);

struct VerifyReport {
  uint64_t shards = 0;
  uint64_t samples = 0;
  uint64_t bytes = 0;            // stored bytes read
  uint64_t hashes_checked = 0;   // MDS digests compared
  std::vector<Status> problems;  // one per damaged or missing shard, naming it
  bool ok() const { return problems.empty(); }
};

// Reads every shard: MDS checks each file's size and every hash the index records, then the
// layout of every sample; WebDataset checks every tar header checksum, the gzip CRCs and the
// sample grouping (the format has no hashes). A failing shard is reported in `problems` and the
// rest are still checked; the Result is an error only when the dataset cannot be listed.
Result<VerifyReport> VerifyDataset(DatasetLocation& dataset, const ReadLimits& limits,
                                   const DataProgress& progress);

struct PackOptions {
  DatasetFormat format = DatasetFormat::kWebDataset;
  // A folder whose files "<key>.<field>" become samples (grouped by key, as WebDataset groups
  // tar members), or a JSONL manifest (a URL or path ending in .jsonl), one sample a line:
  //   {"__key__": "a", "jpg": {"path": "img/a.jpg"}, "txt": "a cat", "cls": 3,
  //    "raw": {"b64": "AAEC"}}
  // A string is text, a number a number, {"path": P} a file's bytes (P relative to the
  // manifest's folder), {"b64": B} bytes.
  std::string input;
  // MDS: encodings by column; by default files and b64 are "bytes", text "str", integers
  // "int" and other numbers "float64". Numbers are stored as the encoding says (8 bytes little-
  // endian for "int"); "__key__" becomes a "str" column.
  std::map<std::string, std::string> encodings;
  std::string compression;                   // MDS: "" or "zstd[:LEVEL]"
  std::vector<std::string> hashes;           // MDS: digests to record ("sha1", "xxh64", ...)
  uint64_t shard_bytes = uint64_t{1} << 26;  // MDS size_limit; WebDataset max tar size
  uint64_t shard_samples = 0;                // WebDataset: samples per shard; 0: by size only
  bool gzip = false;                         // WebDataset: write shard-NNNNNN.tar.gz
  // A dataset a pack wrote, already in the output folder, is replaced: its index.json goes
  // first, its other files that this pack does not rewrite once it has written its own.
  // Without it such a folder is refused.
  bool overwrite = false;
};

struct PackReport {
  uint64_t samples = 0;
  uint64_t input_bytes = 0;
  std::vector<std::string> shards;   // keys written (plus index.json for MDS)
  std::vector<std::string> removed;  // overwrite: the old dataset's files not rewritten
};

// Writes the dataset into `out` (a folder URL). Samples stream through: memory holds one
// sample and one shard. InvalidArgument names the file or manifest line at fault.
// AlreadyExists where `out` holds a dataset already (index.json, an MDS shard, a tar shard at
// any depth: what a reader of the folder would read) and options.overwrite is off, or files a
// pack does not write (a tar below `out` or of another name) whatever it is, and where another
// pack of the same names started meanwhile: the first shard is created only where its name is
// free, so of two such packs one writes and the other fails before writing anything.
Result<PackReport> PackDataset(const PackOptions& options, const std::string& out,
                               const StoreOptions& store_options, const DataProgress& progress);

}  // namespace gantry::data
