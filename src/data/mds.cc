// MosaicML Streaming MDS (mds.h).
#include "gantry/data/mds.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "data/codec.h"
#include "data/pyjson.h"

namespace gantry::data {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxIndexBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

uint32_t LoadU32(const char* p) {
  return static_cast<uint32_t>(static_cast<unsigned char>(p[0])) |
         static_cast<uint32_t>(static_cast<unsigned char>(p[1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(p[2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(p[3])) << 24;
}

void StoreU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The compression algorithm of "zstd:7" and its level (0: the default).
struct Compression {
  std::string algo;
  int level = 0;
};

Result<Compression> ParseCompression(const std::string& c, const std::string& where) {
  Compression out;
  const size_t colon = c.find(':');
  out.algo = c.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string lv = c.substr(colon + 1);
    auto [p, ec] = std::from_chars(lv.data(), lv.data() + lv.size(), out.level);
    if (ec != std::errc() || p != lv.data() + lv.size()) {
      return InvalidArgument(where + ": compression '" + c + "' has a bad level");
    }
  }
  return out;
}

// Reads a required field of `obj`, with the index and shard named in errors.
Result<const json*> Field(const json& obj, const char* name, const std::string& at) {
  auto it = obj.find(name);
  if (it == obj.end()) return InvalidArgument(at + ": missing field '" + name + "'");
  return &*it;
}

Result<uint64_t> Unsigned(const json& v, const std::string& what, const std::string& at) {
  if (!v.is_number_integer() ||
      (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return InvalidArgument(at + ": '" + what + "' is not a non-negative integer");
  }
  return v.get<uint64_t>();
}

Result<MdsFile> ParseFile(const json& v, const std::string& what, const std::string& at) {
  if (!v.is_object()) return InvalidArgument(at + ": '" + what + "' is not an object");
  MdsFile f;
  GANTRY_ASSIGN_OR_RETURN(const json* basename, Field(v, "basename", at + ": " + what));
  if (!basename->is_string())
    return InvalidArgument(at + ": " + what + ".basename is not a string");
  f.basename = basename->get<std::string>();
  // The basename becomes a key in the dataset's store: no "..", no absolute path.
  if (Status s = ValidateKey(f.basename); !s.ok()) {
    return InvalidArgument(at + ": " + what + ".basename: " + s.message());
  }
  GANTRY_ASSIGN_OR_RETURN(const json* bytes, Field(v, "bytes", at + ": " + what));
  GANTRY_ASSIGN_OR_RETURN(f.bytes, Unsigned(*bytes, what + ".bytes", at));
  if (auto h = v.find("hashes"); h != v.end() && !h->is_null()) {
    if (!h->is_object()) return InvalidArgument(at + ": " + what + ".hashes is not an object");
    for (const auto& [algo, digest] : h->items()) {
      if (!digest.is_string()) {
        return InvalidArgument(at + ": " + what + ".hashes." + algo + " is not a string");
      }
      f.hashes[algo] = digest.get<std::string>();
    }
  }
  return f;
}

Result<MdsShardInfo> ParseShard(const json& s, const std::string& at) {
  if (!s.is_object()) return InvalidArgument(at + ": not an object");
  MdsShardInfo info;
  GANTRY_ASSIGN_OR_RETURN(const json* format, Field(s, "format", at));
  if (!format->is_string()) return InvalidArgument(at + ": 'format' is not a string");
  if (*format != "mds") {
    return Unimplemented(at + ": shard format '" + format->get<std::string>() +
                         "' is not supported (only 'mds')");
  }
  if (auto v = s.find("version"); v != s.end() && *v != 2) {
    return InvalidArgument(at + ": shard version " + v->dump() + " is not 2");
  }
  GANTRY_ASSIGN_OR_RETURN(const json* names, Field(s, "column_names", at));
  GANTRY_ASSIGN_OR_RETURN(const json* encodings, Field(s, "column_encodings", at));
  GANTRY_ASSIGN_OR_RETURN(const json* sizes, Field(s, "column_sizes", at));
  if (!names->is_array() || !encodings->is_array() || !sizes->is_array() ||
      names->size() != encodings->size() || names->size() != sizes->size() || names->empty()) {
    return InvalidArgument(at +
                           ": column_names, column_encodings and column_sizes must be "
                           "arrays of one non-zero length");
  }
  for (size_t c = 0; c < names->size(); ++c) {
    const json& n = (*names)[c];
    const json& e = (*encodings)[c];
    const json& z = (*sizes)[c];
    if (!n.is_string() || !e.is_string()) {
      return InvalidArgument(at + ": column " + std::to_string(c) +
                             ": name or encoding is not a string");
    }
    MdsColumn col{n.get<std::string>(), e.get<std::string>(), std::nullopt};
    if (!z.is_null()) {
      GANTRY_ASSIGN_OR_RETURN(uint64_t size,
                              Unsigned(z, "column_sizes[" + std::to_string(c) + "]", at));
      if (size > kMaxU32) {
        return InvalidArgument(at + ": column '" + col.name + "' size " + std::to_string(size) +
                               " is larger than a shard can hold");
      }
      col.size = size;
    }
    info.columns.push_back(std::move(col));
  }
  if (auto c = s.find("compression"); c != s.end() && !c->is_null()) {
    if (!c->is_string()) return InvalidArgument(at + ": 'compression' is not a string");
    info.compression = c->get<std::string>();
  }
  if (auto h = s.find("hashes"); h != s.end() && !h->is_null()) {
    if (!h->is_array()) return InvalidArgument(at + ": 'hashes' is not an array");
    for (const json& a : *h) {
      if (!a.is_string()) return InvalidArgument(at + ": 'hashes' holds a non-string");
      info.hashes.push_back(a.get<std::string>());
    }
  }
  GANTRY_ASSIGN_OR_RETURN(const json* samples, Field(s, "samples", at));
  GANTRY_ASSIGN_OR_RETURN(info.samples, Unsigned(*samples, "samples", at));
  // The shard header counts samples in a u32: a larger claim cannot be a real shard.
  if (info.samples > kMaxU32 - 1) {
    return InvalidArgument(at + ": 'samples' is " + std::to_string(info.samples) +
                           ", more than an MDS shard can hold (2^32 - 2)");
  }
  if (auto l = s.find("size_limit"); l != s.end() && !l->is_null()) {
    GANTRY_ASSIGN_OR_RETURN(info.size_limit, Unsigned(*l, "size_limit", at));
  }
  GANTRY_ASSIGN_OR_RETURN(const json* raw, Field(s, "raw_data", at));
  GANTRY_ASSIGN_OR_RETURN(info.raw, ParseFile(*raw, "raw_data", at));
  if (auto z = s.find("zip_data"); z != s.end() && !z->is_null()) {
    GANTRY_ASSIGN_OR_RETURN(MdsFile zip, ParseFile(*z, "zip_data", at));
    info.zip = std::move(zip);
  }
  if (info.compression.empty() != !info.zip.has_value()) {
    return InvalidArgument(at + ": 'compression' and 'zip_data' must be set together");
  }
  // The header alone takes 4 * (samples + 2) bytes.
  if (info.raw.bytes < 4 * (info.samples + 2)) {
    return InvalidArgument(at + ": raw_data.bytes " + std::to_string(info.raw.bytes) +
                           " cannot hold " + std::to_string(info.samples) + " samples");
  }
  return info;
}

}  // namespace

Result<MdsIndex> ParseMdsIndex(std::string_view text, const std::string& where) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(where + ": not a JSON object");
  GANTRY_ASSIGN_OR_RETURN(const json* version, Field(doc, "version", where));
  if (*version != 2) {
    return InvalidArgument(where + ": index version " + version->dump() + " is not 2");
  }
  GANTRY_ASSIGN_OR_RETURN(const json* shards, Field(doc, "shards", where));
  if (!shards->is_array()) return InvalidArgument(where + ": 'shards' is not an array");
  MdsIndex index;
  index.shards.reserve(shards->size());
  for (size_t i = 0; i < shards->size(); ++i) {
    GANTRY_ASSIGN_OR_RETURN(
        MdsShardInfo info, ParseShard((*shards)[i], where + ": shards[" + std::to_string(i) + "]"));
    index.total_samples += info.samples;  // below 2^32 each, so no overflow below 2^32 shards
    index.shards.push_back(std::move(info));
  }
  return index;
}

Result<MdsIndex> ReadMdsIndex(ObjectStore& store, const std::string& prefix) {
  const std::string key = prefix + kMdsIndexName;
  const std::string where = store.url() + "/" + key;
  Result<ObjectInfo> info = store.Head(key);
  if (!info.ok()) return Status(info.status().code(), where + ": " + info.status().message());
  if (info->size > kMaxIndexBytes) {
    return InvalidArgument(where + ": " + std::to_string(info->size) +
                           " bytes is too large for an index");
  }
  Result<std::string> text = store.Get(key);
  if (!text.ok()) return Status(text.status().code(), where + ": " + text.status().message());
  return ParseMdsIndex(*text, where);
}

// ---------------------------------------------------------------------------------------------

Result<MdsShard> MdsShard::Parse(std::string raw, const MdsShardInfo& info, std::string where) {
  return Parse(ShardBytes::FromString(std::move(raw)), info, std::move(where));
}

Result<MdsShard> MdsShard::Parse(std::shared_ptr<const ShardBytes> bytes, const MdsShardInfo& info,
                                 std::string where) {
  MdsShard shard;
  shard.where_ = std::move(where);
  const std::string& w = shard.where_;
  const std::string_view raw = bytes->view();
  if (raw.size() < 4) return DataLoss(w + ": " + std::to_string(raw.size()) + " bytes, cut short");
  GANTRY_RETURN_IF_ERROR(bytes->Fill(0, 4));  // a shard not read yet (ShardBytes::OpenFile)
  const uint64_t n = LoadU32(raw.data());
  if (n != info.samples) {
    return DataLoss(w + ": holds " + std::to_string(n) + " samples, the index says " +
                    std::to_string(info.samples));
  }
  const uint64_t header = 4 + 4 * (n + 1);
  if (raw.size() < header) {
    return DataLoss(w + ": " + std::to_string(raw.size()) + " bytes cannot hold the offsets of " +
                    std::to_string(n) + " samples (cut short)");
  }
  GANTRY_RETURN_IF_ERROR(bytes->Fill(0, header));
  shard.raw_ = std::move(bytes);
  shard.num_samples_ = static_cast<uint32_t>(n);
  for (const MdsColumn& c : info.columns) shard.sizes_.push_back(c.size);
  uint64_t prev = header;
  for (uint32_t i = 0; i <= shard.num_samples_; ++i) {
    const uint64_t o = shard.Offset(i);
    if (o < prev) {
      return InvalidArgument(w + ": offset " + std::to_string(4 + 4 * uint64_t{i}) +
                             ": sample offset " + std::to_string(o) + " goes backwards");
    }
    prev = o;
  }
  if (prev > shard.raw_->size()) {
    return DataLoss(w + ": samples end at " + std::to_string(prev) + " but the file has " +
                    std::to_string(shard.raw_->size()) + " bytes (cut short)");
  }
  GANTRY_RETURN_IF_ERROR(shard.FillRecordHeads(header));
  return shard;
}

Status MdsShard::FillRecordHeads(uint64_t header) const {
  const ShardBytes& b = *raw_;
  if (b.complete()) return Status::Ok();
  // Samples smaller than a gap worth leaving on average: the shard is read whole, in one read.
  const uint64_t data = b.size() - header;
  if (num_samples_ == 0 || data / num_samples_ < b.min_gap()) {
    GANTRY_RETURN_IF_ERROR(b.Fill(header, data));
    return b.FillGapsBelow();  // complete: closes the file
  }
  // Each sample's column sizes (or, with none, its first bytes) are read, in runs that grow
  // over consecutive small samples; what is left between them are the large samples' bytes.
  uint64_t variable = 0;
  for (const auto& z : sizes_) variable += z ? 0 : 1;
  for (uint32_t i = 0; i < num_samples_; ++i) {
    const uint64_t begin = Offset(i), end = Offset(i + 1);
    if (end > begin) GANTRY_RETURN_IF_ERROR(b.Fill(begin, std::max<uint64_t>(4 * variable, 1)));
  }
  return b.FillGapsBelow();
}

uint32_t MdsShard::Offset(uint32_t i) const { return LoadU32(raw_->data() + 4 + 4 * uint64_t{i}); }

void MdsShard::Prefetch(uint32_t i, int step) const {
  if (i >= num_samples_) return;
  if (step == 0) {
    __builtin_prefetch(raw_->data() + 4 + 4 * uint64_t{i});
  } else if (step == 1) {
    // The offsets were checked when the shard was decoded: inside its bytes.
    __builtin_prefetch(raw_->data() + Offset(i));
  }
}

Result<std::vector<std::string_view>> MdsShard::Sample(uint32_t i) const {
  if (i >= num_samples_) {
    return OutOfRange(where_ + ": sample " + std::to_string(i) + " of " +
                      std::to_string(num_samples_));
  }
  const uint64_t begin = Offset(i), end = Offset(i + 1);
  const std::string_view s = raw_->view().substr(begin, end - begin);
  uint64_t variable = 0;
  for (const auto& z : sizes_) variable += z ? 0 : 1;
  // Made only for an error: formatting it for every sample was a string built and freed per
  // sample read.
  const auto at = [&] {
    return where_ + ": offset " + std::to_string(begin) + ": sample " + std::to_string(i);
  };
  if (s.size() < 4 * variable) return InvalidArgument(at() + ": too short for its column sizes");
  std::vector<std::string_view> out;
  out.reserve(sizes_.size());
  uint64_t pos = 4 * variable, v = 0;
  for (const auto& z : sizes_) {
    const uint64_t len = z ? *z : LoadU32(s.data() + 4 * v++);
    if (len > s.size() - pos) {
      return InvalidArgument(at() + ": column sizes add up to more than the sample's " +
                             std::to_string(s.size()) + " bytes");
    }
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  if (pos != s.size()) {
    return InvalidArgument(at() + ": column sizes add up to " + std::to_string(pos) +
                           " bytes, the sample has " + std::to_string(s.size()));
  }
  return out;
}

Status MdsShard::CheckAllSamples() const {
  for (uint32_t i = 0; i < num_samples_; ++i) GANTRY_RETURN_IF_ERROR(Sample(i).status());
  return Status::Ok();
}

namespace {

Status CheckHashes(const MdsFile& file, std::string_view bytes, const std::string& where) {
  for (const auto& [algo, want] : file.hashes) {
    Result<std::string> got = internal::HexDigest(algo, bytes);
    if (!got.ok()) return Unimplemented(where + ": " + got.status().message());
    if (*got != want) {
      return DataLoss(where + ": " + algo + " hash mismatch: index says " + want + ", file has " +
                      *got);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<MdsShard> ReadMdsShard(ObjectStore& store, const std::string& prefix,
                              const MdsShardInfo& info, const MdsReadOptions& options) {
  const MdsFile& stored = info.stored();
  const std::string key = prefix + stored.basename;
  const std::string where = "shard '" + key + "'";
  const uint64_t limit = options.limits.max_shard_bytes;
  if (stored.bytes > limit || info.raw.bytes > limit) {
    return ResourceExhausted(where + ": " + std::to_string(std::max(stored.bytes, info.raw.bytes)) +
                             " bytes is more than the limit of " + std::to_string(limit));
  }
  // The object's size first: a shard bigger than the index says is not fetched at all, so what
  // a read holds in memory is bounded by the index (and so by max_shard_bytes).
  Result<ObjectInfo> head = store.Head(key);
  if (!head.ok()) return Status(head.status().code(), where + ": " + head.status().message());
  if (head->size != stored.bytes) {
    return DataLoss(where + ": " + std::to_string(head->size) + " bytes, the index says " +
                    std::to_string(stored.bytes) +
                    (head->size < stored.bytes ? " (cut short)" : ""));
  }
  Result<std::string> bytes = store.Get(key);
  if (!bytes.ok()) {
    return Status(bytes.status().code(), where + ": " + bytes.status().message());
  }
  if (bytes->size() != stored.bytes) {
    return DataLoss(where + ": " + std::to_string(bytes->size()) + " bytes, the index says " +
                    std::to_string(stored.bytes) +
                    (bytes->size() < stored.bytes ? " (cut short)" : ""));
  }
  return DecodeMdsShard(std::move(*bytes), info, options, where);
}

Result<MdsShard> DecodeMdsShard(std::string stored, const MdsShardInfo& info,
                                const MdsReadOptions& options, const std::string& where) {
  return DecodeMdsShard(ShardBytes::FromString(std::move(stored)), info, options, where);
}

Result<MdsShard> DecodeMdsShard(std::shared_ptr<const ShardBytes> stored, const MdsShardInfo& info,
                                const MdsReadOptions& options, const std::string& where) {
  if (stored->size() != info.stored().bytes) {
    return DataLoss(where + ": " + std::to_string(stored->size()) + " bytes, the index says " +
                    std::to_string(info.stored().bytes) +
                    (stored->size() < info.stored().bytes ? " (cut short)" : ""));
  }
  // Hashes and decompression need every byte (a shard not read yet: ShardBytes::OpenFile).
  if (options.verify_hashes || info.zip) GANTRY_RETURN_IF_ERROR(stored->Fill(0, stored->size()));
  const std::string_view bytes = stored->view();
  if (options.verify_hashes && info.zip)
    GANTRY_RETURN_IF_ERROR(CheckHashes(*info.zip, bytes, where));
  std::shared_ptr<const ShardBytes> raw;
  if (info.zip) {
    GANTRY_ASSIGN_OR_RETURN(Compression c, ParseCompression(info.compression, where));
    if (c.algo != "zstd" && c.algo != "gz") {
      return Unimplemented(where + ": compression '" + info.compression +
                           "' is not supported (zstd and gz are)");
    }
    Result<std::string> out = c.algo == "zstd"
                                  ? internal::ZstdDecompress(bytes, info.raw.bytes, where)
                                  : internal::GunzipBounded(bytes, info.raw.bytes, where);
    // Decompression is bounded by the size the index records: more is damage, not a full disk.
    if (!out.ok() && out.status().code() == StatusCode::kResourceExhausted) {
      return DataLoss(where + ": decompresses to more than the " + std::to_string(info.raw.bytes) +
                      " bytes the index says");
    }
    if (!out.ok()) return out.status();
    if (out->size() != info.raw.bytes) {
      return DataLoss(where + ": decompresses to " + std::to_string(out->size()) +
                      " bytes, the index says " + std::to_string(info.raw.bytes));
    }
    raw = ShardBytes::FromString(std::move(*out));
  } else {
    raw = std::move(stored);
  }
  if (options.verify_hashes) GANTRY_RETURN_IF_ERROR(CheckHashes(info.raw, raw->view(), where));
  return MdsShard::Parse(std::move(raw), info, where);
}

// ---------------------------------------------------------------------------------------------

Result<std::optional<uint64_t>> MdsEncodingSize(std::string_view e) {
  struct Fixed {
    std::string_view name;
    uint64_t size;
  };
  static constexpr Fixed kScalars[] = {
      {"int", 8},    {"int8", 1},   {"int16", 2},  {"int32", 4},   {"int64", 8},   {"uint8", 1},
      {"uint16", 2}, {"uint32", 4}, {"uint64", 8}, {"float16", 2}, {"float32", 4}, {"float64", 8}};
  for (const Fixed& f : kScalars) {
    if (f.name == e) return std::optional<uint64_t>(f.size);
  }
  static constexpr std::string_view kVariable[] = {
      "bytes", "str",       "json",    "pkl",       "jpeg",        "png",
      "pil",   "jpegarray", "str_int", "str_float", "str_decimal", "ndarray"};
  for (std::string_view v : kVariable) {
    if (v == e) return std::optional<uint64_t>();
  }
  if (e.substr(0, 8) == "ndarray:") {
    const std::string_view rest = e.substr(8);
    const size_t colon = rest.find(':');
    const std::string_view dtype = rest.substr(0, colon);
    uint64_t item = 0;
    for (const Fixed& f : kScalars) {
      if (f.name == dtype && f.name != "int") item = f.size;
    }
    if (item == 0) return InvalidArgument("encoding '" + std::string(e) + "': unknown dtype");
    if (colon == std::string_view::npos) return std::optional<uint64_t>();
    uint64_t total = item;
    std::string_view shape = rest.substr(colon + 1);
    while (true) {
      const size_t comma = shape.find(',');
      const std::string_view dim = shape.substr(0, comma);
      uint64_t d = 0;
      auto [p, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), d);
      if (ec != std::errc() || p != dim.data() + dim.size() || d == 0 || total > kMaxU32 / d) {
        return InvalidArgument("encoding '" + std::string(e) + "': bad shape");
      }
      total *= d;
      if (comma == std::string_view::npos) break;
      shape.remove_prefix(comma + 1);
    }
    return std::optional<uint64_t>(total);
  }
  return InvalidArgument("unknown MDS encoding '" + std::string(e) + "'");
}

MdsWriter::MdsWriter(ObjectStore& store, MdsWriterOptions options)
    : store_(store), options_(std::move(options)) {}

MdsWriter::~MdsWriter() = default;

namespace {

// The settings Streaming's MDSWriter stores in every shard and index entry.
json ShardConfig(const std::vector<MdsColumn>& columns, const MdsWriterOptions& o) {
  json names = json::array(), encodings = json::array(), sizes = json::array();
  for (const MdsColumn& c : columns) {
    names.push_back(c.name);
    encodings.push_back(c.encoding);
    sizes.push_back(c.size ? json(*c.size) : json(nullptr));
  }
  json config = json::object();
  config["column_encodings"] = encodings;
  config["column_names"] = names;
  config["column_sizes"] = sizes;
  config["compression"] = o.compression.empty() ? json(nullptr) : json(o.compression);
  config["format"] = "mds";
  config["hashes"] = o.hashes;
  config["size_limit"] = o.size_limit == 0 ? json(nullptr) : json(o.size_limit);
  config["version"] = 2;
  return config;
}

}  // namespace

Result<std::unique_ptr<MdsWriter>> MdsWriter::Create(ObjectStore& store, MdsWriterOptions options) {
  if (options.columns.empty()) return InvalidArgument("an MDS dataset needs at least one column");
  std::unique_ptr<MdsWriter> w(new MdsWriter(store, std::move(options)));
  for (const auto& [name, encoding] : w->options_.columns) {
    if (name.empty()) return InvalidArgument("an MDS column name is empty");
    Result<std::optional<uint64_t>> size = MdsEncodingSize(encoding);
    if (!size.ok()) return InvalidArgument("column '" + name + "': " + size.status().message());
    w->columns_.push_back(MdsColumn{name, encoding, *size});
  }
  if (!w->options_.compression.empty()) {
    GANTRY_ASSIGN_OR_RETURN(Compression c, ParseCompression(w->options_.compression, "MDS writer"));
    if (c.algo != "zstd" || c.level < 0 || c.level > 22) {
      return InvalidArgument("compression '" + w->options_.compression +
                             "' is not supported for writing (zstd or zstd:1..22)");
    }
  }
  for (const std::string& h : w->options_.hashes) {
    if (!internal::IsKnownDigest(h)) return InvalidArgument("unknown hash algorithm '" + h + "'");
  }
  w->config_json_ = internal::PythonJsonDump(ShardConfig(w->columns_, w->options_));
  return w;
}

Status MdsWriter::Write(const std::map<std::string, std::string>& sample) {
  if (finished_) return FailedPrecondition("the MDS writer is finished");
  for (const auto& [name, value] : sample) {
    if (options_.columns.find(name) == options_.columns.end()) {
      return InvalidArgument("sample " + std::to_string(samples_) + ": unknown column '" + name +
                             "'");
    }
  }
  std::string head, body;
  for (const MdsColumn& c : columns_) {
    auto it = sample.find(c.name);
    if (it == sample.end()) {
      return InvalidArgument("sample " + std::to_string(samples_) + ": column '" + c.name +
                             "' is missing");
    }
    const std::string& v = it->second;
    if (c.size) {
      if (v.size() != *c.size) {
        return InvalidArgument("sample " + std::to_string(samples_) + ": column '" + c.name +
                               "' (" + c.encoding + ") needs " + std::to_string(*c.size) +
                               " bytes, got " + std::to_string(v.size()));
      }
    } else {
      if (v.size() > kMaxU32) {
        return InvalidArgument("sample " + std::to_string(samples_) + ": column '" + c.name +
                               "' is larger than 4 GiB");
      }
      StoreU32(head, static_cast<uint32_t>(v.size()));
    }
    body += v;
  }
  const uint64_t len = head.size() + body.size();
  const uint64_t n = sample_ends_.size();
  // The shard's size with this sample: count, offsets, config, samples.
  const uint64_t with = 4 + 4 * (n + 2) + config_json_.size() + samples_bytes_.size() + len;
  if (n > 0 && ((options_.size_limit != 0 && with > options_.size_limit) || n + 1 >= kMaxU32)) {
    GANTRY_RETURN_IF_ERROR(Flush());
  }
  if (4 + 4 * 2 + config_json_.size() + samples_bytes_.size() + len > kMaxU32) {
    return InvalidArgument("sample " + std::to_string(samples_) + " is too large for an MDS shard");
  }
  samples_bytes_ += head;
  samples_bytes_ += body;
  sample_ends_.push_back(samples_bytes_.size());
  ++samples_;
  return Status::Ok();
}

Status MdsWriter::Flush() {
  const uint64_t n = sample_ends_.size();
  std::string raw;
  const uint64_t first = 4 + 4 * (n + 1) + config_json_.size();
  raw.reserve(first + samples_bytes_.size());
  StoreU32(raw, static_cast<uint32_t>(n));
  StoreU32(raw, static_cast<uint32_t>(first));
  for (uint64_t end : sample_ends_) StoreU32(raw, static_cast<uint32_t>(first + end));
  raw += config_json_;
  raw += samples_bytes_;
  samples_bytes_.clear();
  sample_ends_.clear();

  char name[32];
  std::snprintf(name, sizeof(name), "shard.%05zu.mds", index_.shards.size());
  MdsShardInfo info;
  info.columns = columns_;
  info.compression = options_.compression;
  info.hashes = options_.hashes;
  info.samples = n;
  info.size_limit = options_.size_limit;
  info.raw.basename = name;
  info.raw.bytes = raw.size();
  for (const std::string& h : options_.hashes) {
    GANTRY_ASSIGN_OR_RETURN(info.raw.hashes[h], internal::HexDigest(h, raw));
  }
  if (options_.compression.empty()) {
    GANTRY_RETURN_IF_ERROR(store_.Put(options_.prefix + info.raw.basename, raw, PutFlags()));
  } else {
    GANTRY_ASSIGN_OR_RETURN(Compression c, ParseCompression(options_.compression, "MDS writer"));
    GANTRY_ASSIGN_OR_RETURN(std::string zip,
                            internal::ZstdCompress(raw, c.level == 0 ? 3 : c.level));
    MdsFile z;
    z.basename = info.raw.basename + "." + c.algo;
    z.bytes = zip.size();
    for (const std::string& h : options_.hashes) {
      GANTRY_ASSIGN_OR_RETURN(z.hashes[h], internal::HexDigest(h, zip));
    }
    GANTRY_RETURN_IF_ERROR(store_.Put(options_.prefix + z.basename, zip, PutFlags()));
    info.zip = std::move(z);
  }
  index_.total_samples += n;
  index_.shards.push_back(std::move(info));
  return Status::Ok();
}

Status MdsWriter::Finish() {
  if (finished_) return FailedPrecondition("the MDS writer is finished");
  finished_ = true;
  if (!sample_ends_.empty()) GANTRY_RETURN_IF_ERROR(Flush());
  json shards = json::array();
  for (const MdsShardInfo& s : index_.shards) {
    json entry = ShardConfig(columns_, options_);
    auto file = [](const MdsFile& f) {
      json hashes = json::object();
      for (const auto& [a, d] : f.hashes) hashes[a] = d;
      return json{{"basename", f.basename}, {"bytes", f.bytes}, {"hashes", hashes}};
    };
    entry["raw_data"] = file(s.raw);
    entry["samples"] = s.samples;
    entry["zip_data"] = s.zip ? file(*s.zip) : json(nullptr);
    shards.push_back(std::move(entry));
  }
  const json doc = {{"shards", shards}, {"version", 2}};
  return store_.Put(options_.prefix + kMdsIndexName, internal::PythonJsonDump(doc));
}

}  // namespace gantry::data
