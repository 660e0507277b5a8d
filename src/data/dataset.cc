// Datasets by URL: locate, inspect, verify, pack (dataset.h).
#include "gantry/data/dataset.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "gantry/common/paths.h"
#include "gantry/data/mds.h"
#include "gantry/storage/posix_store.h"

namespace gantry::data {
namespace {

using nlohmann::json;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "s3://b/p/x.tar" -> {"s3://b/p", "x.tar"}; "/d/x.tar" -> {"/d", "x.tar"}.
Result<std::pair<std::string, std::string>> SplitObjectUrl(const std::string& given) {
  // A relative path ("m.jsonl") is relative to the working directory.
  const std::string url =
      given.find("://") == std::string::npos && !given.empty() && given.front() != '/'
          ? std::filesystem::absolute(given).string()
          : given;
  const size_t slash = url.rfind('/');
  const size_t scheme = url.find("://");
  const size_t root = scheme == std::string::npos ? 0 : scheme + 3;
  if (slash == std::string::npos || slash < root || slash + 1 == url.size()) {
    return InvalidArgument("'" + url + "' does not name an object inside a folder");
  }
  std::string parent = url.substr(0, slash);
  // "s3://bucket/x.tar": the parent is the bucket itself.
  if (parent.size() <= root) return InvalidArgument("'" + url + "' has no folder");
  return std::make_pair(parent, url.substr(slash + 1));
}

std::string Shorten(const std::string& s) { return s.size() > 80 ? s.substr(0, 77) + "..." : s; }

Result<std::string> Base64Decode(std::string_view in, const std::string& at) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size() && in[i] != '='; ++i) {
    const char c = in[i];
    int v = -1;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    if (c >= '0' && c <= '9') v = c - '0' + 52;
    if (c == '+') v = 62;
    if (c == '/') v = 63;
    if (v < 0) return InvalidArgument(at + ": 'b64' is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  for (; i < in.size(); ++i) {
    if (in[i] != '=') return InvalidArgument(at + ": 'b64' is not base64");
  }
  return out;
}

}  // namespace

const char* DatasetFormatName(DatasetFormat format) {
  return format == DatasetFormat::kMds ? "mds" : "webdataset";
}

Result<DatasetFormat> ParseDatasetFormat(const std::string& name) {
  if (name == "mds") return DatasetFormat::kMds;
  if (name == "wds" || name == "webdataset") return DatasetFormat::kWebDataset;
  return InvalidArgument("unknown dataset format '" + name + "' (mds or wds)");
}

namespace {

// A shard's or index's version for the cache's key (DatasetLocation::wds_shard_versions,
// mds_index_version): its tag, else its mtime (an http peer gives only that), else nothing.
std::string ShardVersion(const ObjectInfo& info) {
  if (!info.etag.empty()) return info.etag;
  return info.mtime_unix != 0 ? "t" + std::to_string(info.mtime_unix) : "";
}

// Links in a local dataset folder to what would be part of it: named like shards or index.json,
// or to a folder holding shards. The posix store follows no link beneath its root
// (docs/storage.md), so it lists none of them. Walks at most 100,000 entries in all, into linked
// folders too but not through links in them.
struct LinkedShards {
  uint64_t count = 0;
  std::string first;  // relative to the folder; a linked folder ends in '/'
  // Of them, links to a file or folder outside the folder: what a reader of it misses. A link to
  // a shard or folder inside it (latest.tar, latest/) misses nothing, nor does a dangling one,
  // nor a link to a folder around the dataset's (up -> ..), which would read it twice.
  uint64_t outside = 0;
  std::string first_outside;

  // "N symbolic link(s) WHAT (first, ...) is/are not followed".
  static std::string Describe(uint64_t n, const std::string& one, const char* what) {
    return std::to_string(n) + " symbolic link" + (n > 1 ? "s " : " ") + what + " (" + one +
           (n > 1 ? ", ..." : "") + ") " + (n > 1 ? "are" : "is") + " not followed";
  }
};
constexpr char kLinkedAny[] = "named like shards or index.json or to folders holding shards";
constexpr char kLinkedOutside[] = "to shards or folders holding shards outside the folder";

bool IsShardOrIndexName(const std::string& name) {
  return IsWdsShardName(name) || name == kMdsIndexName;
}

// True if a regular file below `dir` (links not followed) is named like a shard or index.json;
// each entry looked at counts against `budget`.
bool HoldsShards(const std::filesystem::path& dir, int& budget) {
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(
      dir, std::filesystem::directory_options::skip_permission_denied, ec);
  const std::filesystem::recursive_directory_iterator end;
  for (; !ec && it != end && budget > 0; it.increment(ec), --budget) {
    std::error_code gone;
    if (it->is_regular_file(gone) && !it->is_symlink(gone) &&
        IsShardOrIndexName(it->path().filename().string())) {
      return true;
    }
  }
  return false;
}

LinkedShards FindLinkedShards(const ObjectStore& store) {
  LinkedShards out;
  const auto* posix = dynamic_cast<const PosixStore*>(&store);
  if (posix == nullptr) return out;
  const std::string& root = posix->root();
  // A folder it may not read is passed over, not the end of the walk.
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(
      root, std::filesystem::directory_options::skip_permission_denied, ec);
  const std::filesystem::recursive_directory_iterator end;
  for (int budget = 100000; !ec && it != end && budget > 0; it.increment(ec), --budget) {
    std::error_code gone;  // an entry removed meanwhile is no link
    if (!it->is_symlink(gone)) continue;
    const bool named = IsShardOrIndexName(it->path().filename().string());
    std::error_code missing;
    const std::filesystem::path target = std::filesystem::canonical(it->path(), missing);
    const bool folder = !named && !missing && std::filesystem::is_directory(target, missing);
    if (!named && !folder) continue;
    const bool inside = !missing && (LocalPathWithin(target.string(), root) ||
                                     (folder && LocalPathWithin(root, target.string())));
    // A folder of no shards is no part of a dataset; one inside is listed by its own name.
    if (folder && (inside || !HoldsShards(target, budget))) continue;
    const std::string rel =
        it->path().lexically_relative(root).string() + (folder ? "/" : std::string());
    if (out.count++ == 0) out.first = rel;
    if (inside || (!folder && (missing || !std::filesystem::is_regular_file(target, missing)))) {
      continue;
    }
    if (out.outside++ == 0) out.first_outside = rel;
  }
  return out;
}

}  // namespace

Result<DatasetLocation> LocateDataset(const std::string& url, const StoreOptions& options) {
  StoreOptions o = options;
  o.create_root = false;
  DatasetLocation d;
  d.url = url;
  if (IsWdsShardName(url)) {
    GANTRY_ASSIGN_OR_RETURN(auto parts, SplitObjectUrl(url));
    GANTRY_ASSIGN_OR_RETURN(d.store, OpenObjectStore(parts.first, o));
    d.format = DatasetFormat::kWebDataset;
    d.wds_shards.push_back(parts.second);
    Result<ObjectInfo> head = d.store->Head(parts.second);
    if (!head.ok()) return Status(head.status().code(), url + ": " + head.status().message());
    d.wds_shard_bytes.push_back(head->size);
    d.wds_shard_versions.push_back(ShardVersion(*head));
    return d;
  }
  GANTRY_ASSIGN_OR_RETURN(d.store, OpenObjectStore(url, o));
  Result<ObjectInfo> index = d.store->Head(kMdsIndexName);
  if (index.ok()) {
    d.format = DatasetFormat::kMds;
    d.mds_index_version = ShardVersion(*index);
    return d;
  }
  if (index.status().code() != StatusCode::kNotFound) {
    return Status(index.status().code(), url + ": " + index.status().message());
  }
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> shards, ListWdsShards(*d.store, ""));
  const LinkedShards links = FindLinkedShards(*d.store);
  if (shards.empty()) {
    return NotFound(url + ": no dataset here (neither index.json nor .tar shards)" +
                    (links.count == 0
                         ? std::string()
                         : "; " + LinkedShards::Describe(links.count, links.first, kLinkedAny) +
                               ": copy or hard-link the files, or give the folder "
                               "they are in"));
  }
  // Shards beside links to more outside the folder would be read without them: a part of the
  // dataset, silently.
  if (links.outside > 0) {
    return InvalidArgument(
        url + ": " + LinkedShards::Describe(links.outside, links.first_outside, kLinkedOutside) +
        ", so the dataset would be read without them: copy or hard-link "
        "the files, or remove the links");
  }
  d.format = DatasetFormat::kWebDataset;
  for (ObjectInfo& s : shards) {
    d.wds_shards.push_back(std::move(s.key));
    d.wds_shard_bytes.push_back(s.size);
    d.wds_shard_versions.push_back(ShardVersion(s));
  }
  return d;
}

// ---------------------------------------------------------------------------------------------

namespace {

std::string CompressionName(std::string_view shard) {
  if (EndsWith(shard, ".gz") || EndsWith(shard, ".tgz")) return "gzip";
  return "";
}

Result<DatasetSummary> InspectMds(DatasetLocation& d) {
  GANTRY_ASSIGN_OR_RETURN(MdsIndex index, ReadMdsIndex(*d.store, ""));
  DatasetSummary s;
  s.url = d.url;
  s.format = DatasetFormat::kMds;
  std::set<std::string> hashes;
  for (const MdsShardInfo& info : index.shards) {
    ShardSummary sh;
    sh.name = info.stored().basename;
    sh.samples = info.samples;
    sh.stored_bytes = info.stored().bytes;
    sh.raw_bytes = info.raw.bytes;
    sh.compression = info.compression;
    s.samples += sh.samples;
    s.stored_bytes += sh.stored_bytes;
    s.raw_bytes += sh.raw_bytes;
    s.shards.push_back(std::move(sh));
    for (const auto& [algo, digest] : info.raw.hashes) hashes.insert(algo);
    if (info.zip) {
      for (const auto& [algo, digest] : info.zip->hashes) hashes.insert(algo);
    }
    for (const MdsColumn& c : info.columns) {
      ColumnSummary* col = nullptr;
      for (ColumnSummary& e : s.columns) {
        if (e.name == c.name && e.encoding == c.encoding) col = &e;
      }
      if (col == nullptr) {
        s.columns.push_back(ColumnSummary{c.name, c.encoding, c.size, 0, 0});
        col = &s.columns.back();
      }
      col->samples += info.samples;
      if (c.size) col->bytes += *c.size * info.samples;
    }
  }
  s.hashes.assign(hashes.begin(), hashes.end());
  return s;
}

}  // namespace

Result<DatasetSummary> InspectDataset(DatasetLocation& d, const ReadLimits& limits,
                                      const DataProgress& progress) {
  if (d.format == DatasetFormat::kMds) return InspectMds(d);
  DatasetSummary s;
  s.url = d.url;
  s.format = DatasetFormat::kWebDataset;
  std::map<std::string, size_t> column_at;
  std::set<std::string> seen_folders;
  for (size_t i = 0; i < d.wds_shards.size(); ++i) {
    GANTRY_ASSIGN_OR_RETURN(WdsShard shard, ReadWdsShard(*d.store, d.wds_shards[i], limits));
    ShardSummary sh{shard.name(), shard.samples().size(), shard.stored_bytes(), shard.tar_bytes(),
                    CompressionName(shard.name())};
    s.samples += sh.samples;
    s.stored_bytes += sh.stored_bytes;
    s.raw_bytes += sh.raw_bytes;
    s.shards.push_back(std::move(sh));
    const std::string& key = d.wds_shards[i];
    const size_t slash = key.rfind('/');
    std::string folder = slash == std::string::npos ? "" : key.substr(0, slash + 1);
    if (seen_folders.insert(folder).second) s.folders.push_back(std::move(folder));
    for (const WdsSample& sample : shard.samples()) {
      for (const WdsField& f : sample.fields) {
        auto [it, inserted] = column_at.try_emplace(f.name, s.columns.size());
        if (inserted) s.columns.push_back(ColumnSummary{f.name, "", std::nullopt, 0, 0});
        s.columns[it->second].samples += 1;
        s.columns[it->second].bytes += f.bytes.size();
      }
    }
    if (progress) progress(i + 1, d.wds_shards.size());
  }
  return s;
}

Result<VerifyReport> VerifyDataset(DatasetLocation& d, const ReadLimits& limits,
                                   const DataProgress& progress) {
  VerifyReport r;
  if (d.format == DatasetFormat::kMds) {
    GANTRY_ASSIGN_OR_RETURN(MdsIndex index, ReadMdsIndex(*d.store, ""));
    MdsReadOptions options;
    options.limits = limits;
    options.verify_hashes = true;
    for (size_t i = 0; i < index.shards.size(); ++i) {
      const MdsShardInfo& info = index.shards[i];
      ++r.shards;
      Result<MdsShard> shard = ReadMdsShard(*d.store, "", info, options);
      Status s = shard.ok() ? shard->CheckAllSamples() : shard.status();
      if (s.ok()) {
        r.samples += shard->num_samples();
        r.bytes += info.stored().bytes;
        r.hashes_checked += info.raw.hashes.size() + (info.zip ? info.zip->hashes.size() : 0);
      } else {
        r.problems.push_back(std::move(s));
      }
      if (progress) progress(i + 1, index.shards.size());
    }
    return r;
  }
  for (size_t i = 0; i < d.wds_shards.size(); ++i) {
    ++r.shards;
    Result<WdsShard> shard = ReadWdsShard(*d.store, d.wds_shards[i], limits);
    if (shard.ok()) {
      r.samples += shard->samples().size();
      r.bytes += shard->stored_bytes();
    } else {
      r.problems.push_back(shard.status());
    }
    if (progress) progress(i + 1, d.wds_shards.size());
  }
  return r;
}

// ---------------------------------------------------------------------------------------------

namespace {

// One sample to pack: its key and fields in order, each a value as the input gave it.
struct InputValue {
  enum Kind { kBytes, kText, kInteger, kFloat } kind = kBytes;
  std::string bytes;  // kBytes, kText
  int64_t integer = 0;
  double real = 0;
};
struct InputSample {
  std::string key;
  std::string where;  // "m.jsonl:3" or the key, for errors
  std::vector<std::pair<std::string, InputValue>> fields;
};

// Walks the input, calling `sink` for each sample in order. Directory input is grouped by key
// (files of one key need not be adjacent in name order: "a.b" < "a.c/d.e" < "a.d").
class PackInput {
 public:
  static Result<std::unique_ptr<PackInput>> Open(const std::string& input,
                                                 const StoreOptions& options) {
    auto in = std::unique_ptr<PackInput>(new PackInput());
    StoreOptions o = options;
    o.create_root = false;
    if (EndsWith(input, ".jsonl")) {
      GANTRY_ASSIGN_OR_RETURN(auto parts, SplitObjectUrl(input));
      GANTRY_ASSIGN_OR_RETURN(in->store_, OpenObjectStore(parts.first, o));
      in->manifest_ = parts.second;
      GANTRY_ASSIGN_OR_RETURN(std::string text, in->store_->Get(parts.second));
      in->manifest_text_ = std::move(text);
      for (char c : in->manifest_text_) in->total_ += c == '\n' ? 1 : 0;
      return in;
    }
    GANTRY_ASSIGN_OR_RETURN(in->store_, OpenObjectStore(input, o));
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> files, in->store_->ListAll(""));
    if (files.empty()) return NotFound(input + ": no files to pack");
    for (const ObjectInfo& f : files) {
      auto [key, field] = SplitWdsName(f.key);
      if (key.empty()) {
        return InvalidArgument(input + ": file '" + f.key +
                               "' has no extension to name its field (expected <key>.<field>)");
      }
      auto& fields = in->groups_[key];
      for (const auto& [existing, name] : fields) {
        if (existing == field) {
          return InvalidArgument(input + ": files '" + name + "' and '" + f.key +
                                 "' give sample '" + key + "' field '" + field + "' twice");
        }
      }
      fields.emplace_back(field, f.key);
    }
    in->total_ = in->groups_.size();
    return in;
  }

  uint64_t total() const { return total_; }
  uint64_t input_bytes() const { return input_bytes_; }
  // The input folder's resolved path when it is a local folder (not a manifest), else "".
  std::string local_folder() const {
    const auto* posix = dynamic_cast<const PosixStore*>(store_.get());
    return manifest_.empty() && posix != nullptr ? posix->root() : "";
  }

  Status ForEach(const std::function<Status(InputSample&)>& sink, const DataProgress& progress) {
    uint64_t done = 0;
    if (!manifest_.empty()) {
      std::istringstream lines(manifest_text_);
      std::string line;
      uint64_t number = 0;
      while (std::getline(lines, line)) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        GANTRY_ASSIGN_OR_RETURN(InputSample s, ParseLine(line, number));
        GANTRY_RETURN_IF_ERROR(sink(s));
        if (progress) progress(++done, total_);
      }
      return Status::Ok();
    }
    for (auto& [key, fields] : groups_) {
      InputSample s;
      s.key = key;
      s.where = "sample '" + Shorten(key) + "'";
      for (const auto& [field, name] : fields) {
        GANTRY_ASSIGN_OR_RETURN(std::string bytes, store_->Get(name));
        input_bytes_ += bytes.size();
        s.fields.emplace_back(field, InputValue{InputValue::kBytes, std::move(bytes), 0, 0});
      }
      GANTRY_RETURN_IF_ERROR(sink(s));
      if (progress) progress(++done, total_);
    }
    return Status::Ok();
  }

 private:
  PackInput() = default;

  Result<InputSample> ParseLine(const std::string& line, uint64_t number) {
    const std::string at = manifest_ + ":" + std::to_string(number);
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument(at + ": not a JSON object");
    InputSample s;
    s.where = at;
    char fallback[32];
    std::snprintf(fallback, sizeof(fallback), "%09llu",
                  static_cast<unsigned long long>(number - 1));
    s.key = fallback;
    for (const auto& [name, v] : j.items()) {
      const std::string where = at + ": '" + Shorten(name) + "'";
      if (name == "__key__") {
        if (!v.is_string() || v.get<std::string>().empty()) {
          return InvalidArgument(where + " must be a non-empty string");
        }
        s.key = v.get<std::string>();
        continue;
      }
      InputValue value;
      if (v.is_string()) {
        value.kind = InputValue::kText;
        value.bytes = v.get<std::string>();
      } else if (v.is_number_integer()) {
        if (v.is_number_unsigned() &&
            v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
          return InvalidArgument(where + ": integer does not fit 64 bits signed");
        }
        value.kind = InputValue::kInteger;
        value.integer = v.get<int64_t>();
      } else if (v.is_number_float()) {
        value.kind = InputValue::kFloat;
        value.real = v.get<double>();
      } else if (v.is_object() && v.size() == 1 && v.contains("path") && v["path"].is_string()) {
        const std::string path = v["path"].get<std::string>();
        if (Status k = ValidateKey(path); !k.ok()) {
          return InvalidArgument(where + ": path: " + k.message());
        }
        Result<std::string> bytes = store_->Get(path);
        if (!bytes.ok())
          return Status(bytes.status().code(), where + ": " + bytes.status().message());
        value.bytes = std::move(*bytes);
      } else if (v.is_object() && v.size() == 1 && v.contains("b64") && v["b64"].is_string()) {
        GANTRY_ASSIGN_OR_RETURN(value.bytes, Base64Decode(v["b64"].get<std::string>(), where));
      } else {
        return InvalidArgument(where +
                               ": expected a string, a number, {\"path\": ...} or "
                               "{\"b64\": ...}");
      }
      input_bytes_ += value.bytes.size();
      s.fields.emplace_back(name, std::move(value));
    }
    if (s.fields.empty()) return InvalidArgument(at + ": a sample with no fields");
    return s;
  }

  std::unique_ptr<ObjectStore> store_;
  std::string manifest_;  // key of the manifest in store_, or empty for a folder
  std::string manifest_text_;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>>
      groups_;  // key -> (field, file)
  uint64_t total_ = 0;
  uint64_t input_bytes_ = 0;
};

std::string DefaultEncoding(const InputValue& v) {
  switch (v.kind) {
    case InputValue::kText:
      return "str";
    case InputValue::kInteger:
      return "int";
    case InputValue::kFloat:
      return "float64";
    case InputValue::kBytes:
      break;
  }
  return "bytes";
}

template <typename T>
std::string LittleEndian(T v) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &v, sizeof(T));  // x86-64 and aarch64 hosts are little-endian
  return out;
}

// The stored bytes of `v` in a column of `encoding`.
Result<std::string> EncodeMds(const InputValue& v, const std::string& encoding,
                              const std::string& at) {
  if (v.kind == InputValue::kBytes || v.kind == InputValue::kText) return v.bytes;
  auto range = [&](int64_t lo, uint64_t hi) -> Status {
    if (v.integer < lo || (v.integer > 0 && static_cast<uint64_t>(v.integer) > hi)) {
      return InvalidArgument(at + ": " + std::to_string(v.integer) + " does not fit " + encoding);
    }
    return Status::Ok();
  };
  if (v.kind == InputValue::kInteger) {
    if (encoding == "int" || encoding == "int64") return LittleEndian<int64_t>(v.integer);
    if (encoding == "int32") {
      GANTRY_RETURN_IF_ERROR(range(INT32_MIN, INT32_MAX));
      return LittleEndian<int32_t>(static_cast<int32_t>(v.integer));
    }
    if (encoding == "int16") {
      GANTRY_RETURN_IF_ERROR(range(INT16_MIN, INT16_MAX));
      return LittleEndian<int16_t>(static_cast<int16_t>(v.integer));
    }
    if (encoding == "int8") {
      GANTRY_RETURN_IF_ERROR(range(INT8_MIN, INT8_MAX));
      return LittleEndian<int8_t>(static_cast<int8_t>(v.integer));
    }
    if (encoding == "uint64") {
      GANTRY_RETURN_IF_ERROR(range(0, UINT64_MAX));
      return LittleEndian<uint64_t>(static_cast<uint64_t>(v.integer));
    }
    if (encoding == "uint32") {
      GANTRY_RETURN_IF_ERROR(range(0, UINT32_MAX));
      return LittleEndian<uint32_t>(static_cast<uint32_t>(v.integer));
    }
    if (encoding == "uint16") {
      GANTRY_RETURN_IF_ERROR(range(0, UINT16_MAX));
      return LittleEndian<uint16_t>(static_cast<uint16_t>(v.integer));
    }
    if (encoding == "uint8") {
      GANTRY_RETURN_IF_ERROR(range(0, UINT8_MAX));
      return LittleEndian<uint8_t>(static_cast<uint8_t>(v.integer));
    }
    if (encoding == "str" || encoding == "str_int") return std::to_string(v.integer);
  }
  const double real = v.kind == InputValue::kFloat ? v.real : static_cast<double>(v.integer);
  if (encoding == "float64") return LittleEndian<double>(real);
  if (encoding == "float32") return LittleEndian<float>(static_cast<float>(real));
  if (encoding == "str" || encoding == "str_float") return json(real).dump();
  return InvalidArgument(at + ": a number cannot be stored as '" + encoding + "'");
}

// A WebDataset member's bytes: numbers as decimal text (as webdataset's writer does for .cls).
std::string EncodeWds(const InputValue& v) {
  switch (v.kind) {
    case InputValue::kInteger:
      return std::to_string(v.integer);
    case InputValue::kFloat:
      return json(v.real).dump();
    default:
      return v.bytes;
  }
}

// A file of a dataset as a reader of its folder finds it: index.json and MDS shards in the
// folder itself, tar shards at any depth (LocateDataset lists them so).
bool IsDatasetFile(std::string_view key) {
  if (IsWdsShardName(key)) return true;
  if (key.find('/') != std::string_view::npos) return false;
  return key == kMdsIndexName ||
         (key.starts_with("shard.") && key.find(".mds") != std::string_view::npos);
}

// `rest` after `head` and at least one digit, or nullopt.
std::optional<std::string_view> AfterDigits(std::string_view key, std::string_view head) {
  if (!key.starts_with(head)) return std::nullopt;
  key.remove_prefix(head.size());
  size_t n = 0;
  while (n < key.size() && key[n] >= '0' && key[n] <= '9') ++n;
  if (n == 0) return std::nullopt;
  return key.substr(n);
}

// A file a pack writes, in the folder itself: shard-NNNNNN.tar or .tar.gz (WebDataset),
// shard.NNNNN.mds with its compression's suffix, and index.json (MDS). The only files
// --overwrite removes: a tar elsewhere in the folder (another dataset below it, the input's own
// files) is not a pack's to delete.
bool IsPackFile(std::string_view key) {
  if (key == kMdsIndexName) return true;
  if (std::optional<std::string_view> rest = AfterDigits(key, "shard-")) {
    return *rest == ".tar" || *rest == ".tar.gz";
  }
  std::optional<std::string_view> rest = AfterDigits(key, "shard.");
  if (!rest || !rest->starts_with(".mds")) return false;
  rest->remove_prefix(4);
  if (rest->empty()) return true;
  if ((*rest)[0] != '.' || rest->size() == 1) return false;
  for (char c : rest->substr(1)) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

Result<PackReport> PackInto(const PackOptions& options, PackInput* input, ObjectStore* store,
                            const DataProgress& progress) {
  PackReport report;
  if (options.format == DatasetFormat::kWebDataset) {
    WdsWriterOptions wo;
    wo.pattern = options.gzip ? "shard-%06d.tar.gz" : "shard-%06d.tar";
    wo.claim_first = !options.overwrite;
    wo.max_samples = options.shard_samples;
    wo.max_bytes = options.shard_bytes;
    GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<WdsWriter> w, WdsWriter::Create(*store, wo));
    GANTRY_RETURN_IF_ERROR(input->ForEach(
        [&](InputSample& s) -> Status {
          std::vector<std::pair<std::string, std::string>> fields;
          for (auto& [name, value] : s.fields) fields.emplace_back(name, EncodeWds(value));
          Status st = w->Write(s.key, fields);
          return st.ok() ? st : Status(st.code(), s.where + ": " + st.message());
        },
        progress));
    GANTRY_RETURN_IF_ERROR(w->Finish());
    report.samples = w->samples_written();
    report.shards = w->shards_written();
    report.input_bytes = input->input_bytes();
    return report;
  }
  // MDS needs its columns before the first sample: the encodings of the first sample (and the
  // overrides) fix them, and every later sample must have the same fields.
  std::unique_ptr<MdsWriter> w;
  uint64_t n = 0;
  GANTRY_RETURN_IF_ERROR(input->ForEach(
      [&](InputSample& s) -> Status {
        const std::string& at = s.where;
        std::map<std::string, std::string> row;
        if (w == nullptr) {
          MdsWriterOptions mo;
          mo.compression = options.compression;
          mo.hashes = options.hashes;
          mo.size_limit = options.shard_bytes;
          mo.claim_first = !options.overwrite;
          mo.columns["__key__"] = "str";
          for (const auto& [name, value] : s.fields) mo.columns[name] = DefaultEncoding(value);
          for (const auto& [name, encoding] : options.encodings) {
            if (mo.columns.count(name) == 0) {
              return InvalidArgument("--column " + name + ": the first sample has no such field");
            }
            mo.columns[name] = encoding;
          }
          GANTRY_ASSIGN_OR_RETURN(w, MdsWriter::Create(*store, std::move(mo)));
        }
        row["__key__"] = s.key;
        for (const auto& [name, value] : s.fields) {
          auto it = options.encodings.find(name);
          const std::string encoding =
              it != options.encodings.end() ? it->second : DefaultEncoding(value);
          GANTRY_ASSIGN_OR_RETURN(row[name],
                                  EncodeMds(value, encoding, at + " field '" + name + "'"));
        }
        Status st = w->Write(row);
        if (!st.ok()) return Status(st.code(), at + ": " + st.message());
        ++n;
        return Status::Ok();
      },
      progress));
  if (w == nullptr) return InvalidArgument(options.input + ": no samples to pack");
  GANTRY_RETURN_IF_ERROR(w->Finish());
  report.samples = n;
  for (const MdsShardInfo& s : w->index().shards) report.shards.push_back(s.stored().basename);
  report.shards.push_back(kMdsIndexName);
  report.input_bytes = input->input_bytes();
  return report;
}

// PackInto `store`, the folder `out`, minding a dataset already there: refused, or replaced
// with options.overwrite (its files the pack did not rewrite removed after).
Result<PackReport> PackOver(const PackOptions& options, const std::string& out, PackInput* input,
                            ObjectStore* store, const DataProgress& progress) {
  // A pack into a folder holding a dataset left both mixed: the new shards over the old, the
  // old ones past the new count still read, an index.json beside tar shards.
  std::vector<std::string> old;     // files a pack writes: --overwrite replaces them
  std::vector<std::string> others;  // other files a reader takes for the dataset's: never
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> there, store->ListAll(""));
  for (const ObjectInfo& o : there) {
    if (IsPackFile(o.key)) {
      old.push_back(o.key);
    } else if (IsDatasetFile(o.key)) {
      others.push_back(o.key);
    }
  }
  auto some = [](const std::vector<std::string>& keys) {
    return "'" + keys.front() + "'" +
           (keys.size() > 1 ? " and " + std::to_string(keys.size() - 1) + " more" : "");
  };
  if (!others.empty()) {
    return AlreadyExists(out + " holds dataset files that a pack does not write (" + some(others) +
                         "), which a reader of the folder would take for the dataset's: pack "
                         "into another folder");
  }
  if (!old.empty() && !options.overwrite) {
    return AlreadyExists(out + " already holds a dataset (" + some(old) +
                         "): pack into an empty folder, or overwrite it (--overwrite)");
  }
  // A link where a shard goes fails its create-only write as if another pack had it, and a
  // link to a folder of shards makes the packed folder one a reader refuses (LocateDataset).
  const LinkedShards links = FindLinkedShards(*store);
  if (links.count > 0) {
    return AlreadyExists(out + ": " + LinkedShards::Describe(links.count, links.first, kLinkedAny) +
                         " by the store, so a pack cannot write over them and a reader would "
                         "refuse the folder: remove them first");
  }
  // The old index goes first: a reader meanwhile finds no dataset rather than the old index
  // over new shards (DataLoss), and so does one after a pack that fails.
  if (options.overwrite && std::find(old.begin(), old.end(), kMdsIndexName) != old.end()) {
    GANTRY_RETURN_IF_ERROR(store->Delete(kMdsIndexName));
  }
  Result<PackReport> report = PackInto(options, input, store, progress);
  if (!report.ok() && report.status().code() == StatusCode::kAlreadyExists) {
    return Status(report.status().code(),
                  out + ": another pack is writing into this folder: " + report.status().message());
  }
  if (!report.ok() && options.overwrite && !old.empty()) {
    return Status(report.status().code(),
                  report.status().message() + " (" + out +
                      " now holds part of the new dataset and what is left of the old one: "
                      "pack it again, or remove it)");
  }
  if (report.ok() && options.overwrite) {
    const std::set<std::string> written(report->shards.begin(), report->shards.end());
    for (const std::string& key : old) {
      if (written.count(key) != 0) continue;
      Status gone = store->Delete(key);
      if (!gone.ok()) {
        return Status(gone.code(), out + ": the new dataset is written, but the old one's '" + key +
                                       "' could not be removed: " + gone.message());
      }
      report->removed.push_back(key);
    }
  }
  return report;
}

}  // namespace

Result<PackReport> PackDataset(const PackOptions& options, const std::string& out,
                               const StoreOptions& store_options, const DataProgress& progress) {
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<PackInput> input,
                          PackInput::Open(options.input, store_options));
  // Shards written among the files being packed are packed as samples by the next run, or
  // read back while they are being rewritten.
  if (LocalPathWithin(out, input->local_folder())) {
    return InvalidArgument("output " + out + " is the input folder " + options.input +
                           " or inside it: pack into a folder outside the input");
  }
  StoreOptions oo = store_options;
  oo.create_root = true;
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> store, OpenObjectStore(out, oo));
  Result<PackReport> report = PackOver(options, out, input.get(), store.get(), progress);
  // A packed folder is handed on (uploaded, listed, read by other tools): the posix store's
  // temp directory, empty once the writers are done (or never used: a refused pack), is not left
  // in it. Failing to remove it leaves the dataset as good as it was, so the result stands.
  if (auto* posix = dynamic_cast<PosixStore*>(store.get())) (void)posix->RemoveTempDirIfEmpty();
  return report;
}

}  // namespace gantry::data
