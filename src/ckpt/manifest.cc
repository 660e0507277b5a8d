#include "gantry/ckpt/manifest.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace gantry::ckpt {
namespace {

using nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  uint64_t size;
};
constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kInt8, "int8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kUInt8, "uint8", 1},
    {DType::kBool, "bool", 1},
    {DType::kComplex64, "complex64", 8},
    {DType::kComplex128, "complex128", 16},
}};

constexpr std::string_view kFormat = "gantry-checkpoint";
// Manifests of more tensors than this are written compact (ToJson).
constexpr size_t kIndentedTensors = 1000;

// Field access that turns nlohmann's exceptions into messages naming the document and field.
class Reader {
 public:
  explicit Reader(std::string_view what) : what_(what) {}
  Status Error(const std::string& field, const std::string& why) const {
    return InvalidArgument("checkpoint manifest '" + std::string(what_) + "': " + field + ": " +
                           why);
  }
  template <typename T>
  Result<T> Get(const json& obj, const char* key, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end()) return Error(path + key, "missing");
    try {
      return it->template get<T>();
    } catch (const json::exception&) {
      return Error(path + key, "wrong type (" + std::string(it->type_name()) + ")");
    }
  }
  Result<const json*> Array(const json& obj, const char* key, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end()) return Error(path + key, "missing");
    if (!it->is_array()) return Error(path + key, "not an array");
    return &*it;
  }

 private:
  std::string_view what_;
};

json SliceToJson(const SliceRecord& s) {
  json chunks = json::array();
  for (const ChunkRef& c : s.chunks) {
    json ref = {{"id", c.id.ToHex()}, {"size", c.size}};
    if (c.offset != 0) ref["offset"] = c.offset;  // omitted when 0, as version 1 wrote refs
    chunks.push_back(std::move(ref));
  }
  return {{"rank", s.rank},
          {"row_offset", s.row_offset},
          {"rows", s.rows},
          {"nbytes", s.nbytes},
          {"chunks", std::move(chunks)}};
}

// Checks that a tensor's slices are sorted, inside its rows, sized right, chunked right, inside
// their chunks (a pack's ref within the pack), and (in a checkpoint) tile the rows exactly.
Status CheckSlices(const Reader& r, const TensorRecord& t, const std::string& path,
                   const CheckpointManifest& m) {
  const CheckpointManifest::Kind kind = m.kind;
  const int world_size = m.world_size;
  const uint64_t chunk_size = m.chunk_size;
  const int64_t global_rows = GlobalRows(t.global_shape);
  const uint64_t row_bytes = RowBytes(t.dtype, t.global_shape);
  int64_t next_row = 0;
  for (size_t i = 0; i < t.slices.size(); ++i) {
    const SliceRecord& s = t.slices[i];
    const std::string sp = path + "slices[" + std::to_string(i) + "].";
    if (s.rank < 0 || s.rank >= world_size) return r.Error(sp + "rank", "outside the world");
    if (s.row_offset < 0 || s.rows < 0 || s.row_offset + s.rows > global_rows) {
      return r.Error(sp + "rows", "rows " + std::to_string(s.row_offset) + "+" +
                                      std::to_string(s.rows) + " outside the global shape " +
                                      ShapeString(t.global_shape));
    }
    if (s.nbytes != static_cast<uint64_t>(s.rows) * row_bytes) {
      return r.Error(sp + "nbytes", "is " + std::to_string(s.nbytes) + ", rows and dtype give " +
                                        std::to_string(static_cast<uint64_t>(s.rows) * row_bytes));
    }
    uint64_t sum = 0;
    for (size_t c = 0; c < s.chunks.size(); ++c) {
      const ChunkRef& ref = s.chunks[c];
      const uint64_t size = ref.size;
      const std::string cp = sp + "chunks[" + std::to_string(c) + "].";
      if (size == 0 || size > chunk_size || (c + 1 < s.chunks.size() && size != chunk_size)) {
        return r.Error(cp + "size", "bad chunk size " + std::to_string(size));
      }
      // A chunk that is not a pack holds exactly this ref's bytes.
      const PackRecord* pack = m.FindPack(ref.id);
      const uint64_t stored = pack != nullptr ? pack->size : size;
      if (ref.offset > stored || size > stored - ref.offset) {
        return r.Error(cp + "offset",
                       "bytes " + std::to_string(ref.offset) + "+" + std::to_string(size) +
                           " reach outside chunk " + ref.id.ToHex() + " of " +
                           std::to_string(stored) + " bytes" +
                           (pack != nullptr ? " (a pack)" : " (not a pack: offset must be 0)"));
      }
      sum += size;
    }
    if (sum != s.nbytes) return r.Error(sp + "chunks", "sizes do not add up to nbytes");
    if (kind == CheckpointManifest::Kind::kCheckpoint) {
      if (s.row_offset != next_row) {
        return r.Error(sp + "row_offset", "slices do not tile the rows (expected row " +
                                              std::to_string(next_row) + ")");
      }
      next_row = s.row_offset + s.rows;
    }
  }
  if (kind == CheckpointManifest::Kind::kPart && t.slices.size() != 1) {
    return r.Error(path + "slices", "a part holds exactly one slice per tensor");
  }
  if (kind == CheckpointManifest::Kind::kCheckpoint && next_row != global_rows) {
    return r.Error(path + "slices", "slices cover rows [0, " + std::to_string(next_row) + ") of " +
                                        std::to_string(global_rows));
  }
  return Status::Ok();
}

}  // namespace

Result<DType> ParseDType(std::string_view name) {
  std::string known;
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) return d.dtype;
    known += known.empty() ? "" : ", ";
    known += d.name;
  }
  return InvalidArgument("unknown dtype '" + std::string(name) + "' (known: " + known + ")");
}

const char* DTypeName(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].name; }
uint64_t DTypeSize(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].size; }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t GlobalRows(const std::vector<int64_t>& global_shape) {
  return global_shape.empty() ? 1 : global_shape[0];
}

uint64_t RowBytes(DType dtype, const std::vector<int64_t>& global_shape) {
  uint64_t n = DTypeSize(dtype);
  for (size_t i = 1; i < global_shape.size(); ++i) n *= static_cast<uint64_t>(global_shape[i]);
  return n;
}

Status ValidateJobName(std::string_view job) {
  if (job.empty() || job.size() > 128 || job == "." || job == "..") {
    return InvalidArgument("job name '" + std::string(job) + "': must be 1-128 characters");
  }
  for (char c : job) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return InvalidArgument("job name '" + std::string(job) +
                             "': only letters, digits, '-', '_' and '.' are allowed");
    }
  }
  return Status::Ok();
}

uint64_t CheckpointManifest::TotalBytes() const {
  uint64_t n = 0;
  for (const TensorRecord& t : tensors) {
    for (const SliceRecord& s : t.slices) n += s.nbytes;
  }
  return n;
}

const PackRecord* CheckpointManifest::FindPack(const ChunkId& id) const {
  auto it = std::lower_bound(packs.begin(), packs.end(), id,
                             [](const PackRecord& p, const ChunkId& i) { return p.id < i; });
  return it != packs.end() && it->id == id ? &*it : nullptr;
}

std::vector<PackRecord> CheckpointManifest::StoredChunks() const {
  std::vector<PackRecord> out;
  for (const ChunkId& id : ChunkIds()) out.push_back({id, 0});
  std::unordered_map<ChunkId, uint64_t, ChunkIdHash> sizes;
  for (const TensorRecord& t : tensors) {
    for (const SliceRecord& s : t.slices) {
      for (const ChunkRef& c : s.chunks) sizes.try_emplace(c.id, c.size);
    }
  }
  for (PackRecord& c : out) {
    const PackRecord* pack = FindPack(c.id);
    c.size = pack != nullptr ? pack->size : sizes[c.id];
  }
  return out;
}

const TensorRecord* CheckpointManifest::FindTensor(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorRecord& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

std::vector<ChunkId> CheckpointManifest::ChunkIds() const {
  std::unordered_set<ChunkId, ChunkIdHash> seen;
  std::vector<ChunkId> ids;
  for (const TensorRecord& t : tensors) {
    for (const SliceRecord& s : t.slices) {
      for (const ChunkRef& c : s.chunks) {
        if (seen.insert(c.id).second) ids.push_back(c.id);
      }
    }
  }
  return ids;
}

std::string CheckpointManifest::ToJson() const {
  json tensors_json = json::array();
  for (const TensorRecord& t : tensors) {
    json slices = json::array();
    for (const SliceRecord& s : t.slices) slices.push_back(SliceToJson(s));
    tensors_json.push_back({{"name", t.name},
                            {"dtype", DTypeName(t.dtype)},
                            {"global_shape", t.global_shape},
                            {"slices", std::move(slices)}});
  }
  json ranks_json = json::array();
  for (const RankRecord& r : ranks) {
    json structure = json::parse(r.structure_json, nullptr, /*allow_exceptions=*/false);
    ranks_json.push_back({{"rank", r.rank},
                          {"structure", structure.is_discarded() ? json() : structure},
                          {"bytes_total", r.bytes_total},
                          {"bytes_written", r.bytes_written},
                          {"chunks_total", r.chunks_total},
                          {"chunks_written", r.chunks_written}});
  }
  json metadata = json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
  // Version 1 when nothing is packed: builds that read only version 1 still read it.
  json doc = {{"format", kFormat},
              {"version", packs.empty() ? 1 : kManifestVersion},
              {"kind", kind == Kind::kPart ? "part" : "checkpoint"},
              {"job", job},
              {"step", step},
              {"world_size", world_size},
              {"chunk_size", chunk_size},
              {"created_unix", created_unix},
              {"tags", tags},
              {"metadata", metadata.is_object() ? metadata : json::object()},
              {"run", run_id},
              {"ranks", std::move(ranks_json)},
              {"tensors", std::move(tensors_json)}};
  if (!packs.empty()) {
    std::vector<PackRecord> sorted = packs;
    std::sort(sorted.begin(), sorted.end(),
              [](const PackRecord& a, const PackRecord& b) { return a.id < b.id; });
    // Two packs of equal bytes (a save of repeated small tensors) are one chunk.
    sorted.erase(std::unique(sorted.begin(), sorted.end(),
                             [](const PackRecord& a, const PackRecord& b) { return a.id == b.id; }),
                 sorted.end());
    json packs_json = json::array();
    for (const PackRecord& p : sorted)
      packs_json.push_back({{"id", p.id.ToHex()}, {"size", p.size}});
    doc["packs"] = std::move(packs_json);
  }
  // The checksum covers the document as dumped without it (keys sorted, so the reader can
  // reproduce the bytes from the parsed document).
  doc["checksum"] = HashChunk(doc.dump()).ToHex();
  // Indented for people to read; a large state compact, where indentation alone doubled the
  // size of a 100k-tensor manifest (readers parse either; the checksum is over the compact form).
  return (tensors.size() > kIndentedTensors ? doc.dump() : doc.dump(1)) + "\n";
}

Result<CheckpointManifest> CheckpointManifest::FromJson(std::string_view text,
                                                        std::string_view what) {
  Reader r(what);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return r.Error("document", "not valid JSON (truncated or damaged?)");
  if (!doc.is_object()) return r.Error("document", "not a JSON object");
  GANTRY_ASSIGN_OR_RETURN(std::string format, r.Get<std::string>(doc, "format", ""));
  if (format != kFormat)
    return r.Error("format", "is '" + format + "', expected " + "'gantry-checkpoint'");
  GANTRY_ASSIGN_OR_RETURN(int version, r.Get<int>(doc, "version", ""));
  if (version < 1 || version > kManifestVersion) {
    return r.Error("version", "is " + std::to_string(version) +
                                  "; this build reads versions 1 to " +
                                  std::to_string(kManifestVersion));
  }
  GANTRY_ASSIGN_OR_RETURN(std::string checksum, r.Get<std::string>(doc, "checksum", ""));
  doc.erase("checksum");
  if (HashChunk(doc.dump()).ToHex() != checksum) {
    return r.Error("checksum", "does not match the content (the manifest was modified)");
  }

  CheckpointManifest m;
  GANTRY_ASSIGN_OR_RETURN(std::string kind, r.Get<std::string>(doc, "kind", ""));
  if (kind == "part") {
    m.kind = Kind::kPart;
  } else if (kind != "checkpoint") {
    return r.Error("kind", "is '" + kind + "', expected 'part' or 'checkpoint'");
  }
  GANTRY_ASSIGN_OR_RETURN(m.job, r.Get<std::string>(doc, "job", ""));
  GANTRY_ASSIGN_OR_RETURN(m.step, r.Get<int64_t>(doc, "step", ""));
  GANTRY_ASSIGN_OR_RETURN(m.world_size, r.Get<int>(doc, "world_size", ""));
  GANTRY_ASSIGN_OR_RETURN(m.chunk_size, r.Get<uint64_t>(doc, "chunk_size", ""));
  GANTRY_ASSIGN_OR_RETURN(m.created_unix, r.Get<int64_t>(doc, "created_unix", ""));
  GANTRY_ASSIGN_OR_RETURN(m.tags, r.Get<std::vector<std::string>>(doc, "tags", ""));
  if (m.step < 0) return r.Error("step", "negative");
  if (m.world_size < 1) return r.Error("world_size", "must be at least 1");
  if (m.chunk_size == 0) return r.Error("chunk_size", "must be positive");
  auto run = doc.find("run");
  if (run != doc.end()) {
    if (!run->is_string()) return r.Error("run", "not a string");
    m.run_id = run->get<std::string>();
  }
  auto meta = doc.find("metadata");
  m.metadata_json = meta != doc.end() && meta->is_object() ? meta->dump() : "{}";

  GANTRY_ASSIGN_OR_RETURN(const json* ranks, r.Array(doc, "ranks", ""));
  std::set<int> seen_ranks;
  for (size_t i = 0; i < ranks->size(); ++i) {
    const json& rj = (*ranks)[i];
    const std::string path = "ranks[" + std::to_string(i) + "].";
    if (!rj.is_object()) return r.Error(path, "not an object");
    RankRecord rr;
    GANTRY_ASSIGN_OR_RETURN(rr.rank, r.Get<int>(rj, "rank", path));
    if (rr.rank < 0 || rr.rank >= m.world_size || !seen_ranks.insert(rr.rank).second) {
      return r.Error(path + "rank", "outside the world or repeated");
    }
    auto st = rj.find("structure");
    rr.structure_json = st != rj.end() ? st->dump() : "null";
    GANTRY_ASSIGN_OR_RETURN(rr.bytes_total, r.Get<uint64_t>(rj, "bytes_total", path));
    GANTRY_ASSIGN_OR_RETURN(rr.bytes_written, r.Get<uint64_t>(rj, "bytes_written", path));
    GANTRY_ASSIGN_OR_RETURN(rr.chunks_total, r.Get<uint64_t>(rj, "chunks_total", path));
    GANTRY_ASSIGN_OR_RETURN(rr.chunks_written, r.Get<uint64_t>(rj, "chunks_written", path));
    m.ranks.push_back(std::move(rr));
  }
  const size_t expected_ranks = m.kind == Kind::kPart ? 1 : static_cast<size_t>(m.world_size);
  if (m.ranks.size() != expected_ranks) {
    return r.Error("ranks", "has " + std::to_string(m.ranks.size()) + " entries, expected " +
                                std::to_string(expected_ranks));
  }

  if (auto packs = doc.find("packs"); packs != doc.end()) {
    if (version < 2) return r.Error("packs", "not part of version " + std::to_string(version));
    if (!packs->is_array()) return r.Error("packs", "not an array");
    for (size_t i = 0; i < packs->size(); ++i) {
      const json& pj = (*packs)[i];
      const std::string path = "packs[" + std::to_string(i) + "].";
      if (!pj.is_object()) return r.Error(path, "not an object");
      GANTRY_ASSIGN_OR_RETURN(std::string hex, r.Get<std::string>(pj, "id", path));
      Result<ChunkId> id = ChunkId::FromHex(hex);
      if (!id.ok()) return r.Error(path + "id", id.status().message());
      GANTRY_ASSIGN_OR_RETURN(uint64_t size, r.Get<uint64_t>(pj, "size", path));
      if (size == 0 || size > m.chunk_size) {
        return r.Error(path + "size", "bad pack size " + std::to_string(size));
      }
      m.packs.push_back({*id, size});
    }
    std::sort(m.packs.begin(), m.packs.end(),
              [](const PackRecord& a, const PackRecord& b) { return a.id < b.id; });
    for (size_t i = 1; i < m.packs.size(); ++i) {
      if (m.packs[i].id == m.packs[i - 1].id) {
        return r.Error("packs", "chunk " + m.packs[i].id.ToHex() + " listed twice");
      }
    }
  }

  GANTRY_ASSIGN_OR_RETURN(const json* tensors, r.Array(doc, "tensors", ""));
  for (size_t i = 0; i < tensors->size(); ++i) {
    const json& tj = (*tensors)[i];
    const std::string path = "tensors[" + std::to_string(i) + "].";
    if (!tj.is_object()) return r.Error(path, "not an object");
    TensorRecord t;
    GANTRY_ASSIGN_OR_RETURN(t.name, r.Get<std::string>(tj, "name", path));
    GANTRY_ASSIGN_OR_RETURN(std::string dtype, r.Get<std::string>(tj, "dtype", path));
    Result<DType> parsed = ParseDType(dtype);
    if (!parsed.ok()) return r.Error(path + "dtype", parsed.status().message());
    t.dtype = *parsed;
    GANTRY_ASSIGN_OR_RETURN(t.global_shape, r.Get<std::vector<int64_t>>(tj, "global_shape", path));
    for (int64_t d : t.global_shape) {
      if (d < 0) return r.Error(path + "global_shape", "negative dimension");
    }
    GANTRY_ASSIGN_OR_RETURN(const json* slices, r.Array(tj, "slices", path));
    for (size_t k = 0; k < slices->size(); ++k) {
      const json& sj = (*slices)[k];
      const std::string sp = path + "slices[" + std::to_string(k) + "].";
      if (!sj.is_object()) return r.Error(sp, "not an object");
      SliceRecord s;
      GANTRY_ASSIGN_OR_RETURN(s.rank, r.Get<int>(sj, "rank", sp));
      GANTRY_ASSIGN_OR_RETURN(s.row_offset, r.Get<int64_t>(sj, "row_offset", sp));
      GANTRY_ASSIGN_OR_RETURN(s.rows, r.Get<int64_t>(sj, "rows", sp));
      GANTRY_ASSIGN_OR_RETURN(s.nbytes, r.Get<uint64_t>(sj, "nbytes", sp));
      GANTRY_ASSIGN_OR_RETURN(const json* chunks, r.Array(sj, "chunks", sp));
      for (size_t c = 0; c < chunks->size(); ++c) {
        const json& cj = (*chunks)[c];
        const std::string cp = sp + "chunks[" + std::to_string(c) + "].";
        if (!cj.is_object()) return r.Error(cp, "not an object");
        GANTRY_ASSIGN_OR_RETURN(std::string hex, r.Get<std::string>(cj, "id", cp));
        Result<ChunkId> id = ChunkId::FromHex(hex);
        if (!id.ok()) return r.Error(cp + "id", id.status().message());
        GANTRY_ASSIGN_OR_RETURN(uint64_t size, r.Get<uint64_t>(cj, "size", cp));
        uint64_t offset = 0;
        if (cj.contains("offset")) {
          GANTRY_ASSIGN_OR_RETURN(offset, r.Get<uint64_t>(cj, "offset", cp));
        }
        s.chunks.push_back({*id, size, offset});
      }
      t.slices.push_back(std::move(s));
    }
    GANTRY_RETURN_IF_ERROR(CheckSlices(r, t, path, m));
    if (!m.tensors.empty() && !(m.tensors.back().name < t.name)) {
      return r.Error(path + "name", "tensors not sorted by name or repeated");
    }
    m.tensors.push_back(std::move(t));
  }
  return m;
}

Result<CheckpointManifest> MergeParts(std::vector<CheckpointManifest> parts) {
  if (parts.empty()) return InvalidArgument("merge: no parts");
  std::sort(parts.begin(), parts.end(),
            [](const CheckpointManifest& a, const CheckpointManifest& b) {
              return a.ranks.front().rank < b.ranks.front().rank;
            });
  const CheckpointManifest& first = parts.front();
  CheckpointManifest m;
  m.kind = CheckpointManifest::Kind::kCheckpoint;
  m.job = first.job;
  m.step = first.step;
  m.world_size = first.world_size;
  m.chunk_size = first.chunk_size;
  m.created_unix = first.created_unix;
  m.tags = first.tags;
  m.metadata_json = first.metadata_json;
  m.run_id = first.run_id;
  const std::string where = "checkpoint " + m.job + " step " + std::to_string(m.step) + ": ";
  if (parts.size() != static_cast<size_t>(m.world_size)) {
    return InvalidArgument(where + std::to_string(parts.size()) + " parts for a world of " +
                           std::to_string(m.world_size));
  }
  std::map<std::string, TensorRecord> tensors;
  std::map<ChunkId, uint64_t> packs;  // each rank packs its own small slices
  for (size_t i = 0; i < parts.size(); ++i) {
    CheckpointManifest& p = parts[i];
    if (p.kind != CheckpointManifest::Kind::kPart || p.ranks.size() != 1 ||
        p.ranks.front().rank != static_cast<int>(i)) {
      return InvalidArgument(where + "part " + std::to_string(i) + " is missing or repeated");
    }
    if (p.run_id != m.run_id) {
      return InvalidArgument(where + "rank " + std::to_string(i) + "'s part is from run '" +
                             p.run_id + "', rank 0's from run '" + m.run_id + "'");
    }
    if (p.world_size != m.world_size || p.chunk_size != m.chunk_size || p.step != m.step ||
        p.job != m.job) {
      return InvalidArgument(where + "rank " + std::to_string(i) +
                             " disagrees on world size, chunk size, step or job");
    }
    m.created_unix = std::max(m.created_unix, p.created_unix);
    m.ranks.push_back(std::move(p.ranks.front()));
    for (const PackRecord& pack : p.packs) {
      // One id is one content, so one size; a disagreement is a damaged part.
      auto [it, fresh] = packs.try_emplace(pack.id, pack.size);
      if (!fresh && it->second != pack.size) {
        return InvalidArgument(where + "rank " + std::to_string(i) + " lists pack " +
                               pack.id.ToHex() + " with a different size than an earlier rank");
      }
    }
    for (TensorRecord& t : p.tensors) {
      auto [it, fresh] = tensors.try_emplace(t.name);
      TensorRecord& merged = it->second;
      if (fresh) {
        merged.name = t.name;
        merged.dtype = t.dtype;
        merged.global_shape = t.global_shape;
      } else if (merged.dtype != t.dtype || merged.global_shape != t.global_shape) {
        return InvalidArgument(where + "tensor '" + t.name + "': rank " + std::to_string(i) +
                               " saved " + DTypeName(t.dtype) + " " + ShapeString(t.global_shape) +
                               ", an earlier rank " + DTypeName(merged.dtype) + " " +
                               ShapeString(merged.global_shape));
      }
      for (SliceRecord& s : t.slices) merged.slices.push_back(std::move(s));
    }
  }
  for (auto& [name, t] : tensors) {
    // Replicated tensors (the same rows saved by several ranks, e.g. a bias every data-parallel
    // rank holds) keep the lowest rank's copy; other overlaps are an error.
    std::stable_sort(
        t.slices.begin(), t.slices.end(),
        [](const SliceRecord& a, const SliceRecord& b) { return a.row_offset < b.row_offset; });
    std::vector<SliceRecord> kept;
    // A rank holding no rows of a tensor overlaps nothing; keep one empty slice only when the
    // tensor has no rows at all.
    const bool all_empty = std::all_of(t.slices.begin(), t.slices.end(),
                                       [](const SliceRecord& s) { return s.rows == 0; });
    std::erase_if(t.slices, [&](const SliceRecord& s) { return s.rows == 0 && !all_empty; });
    if (all_empty && t.slices.size() > 1) t.slices.resize(1);
    for (SliceRecord& s : t.slices) {
      if (!kept.empty() && s.row_offset < kept.back().row_offset + kept.back().rows) {
        if (s.row_offset == kept.back().row_offset && s.rows == kept.back().rows) continue;
        return InvalidArgument(where + "tensor '" + name + "': rank " + std::to_string(s.rank) +
                               " and rank " + std::to_string(kept.back().rank) +
                               " saved overlapping rows");
      }
      kept.push_back(std::move(s));
    }
    int64_t next = 0;
    for (const SliceRecord& s : kept) {
      if (s.row_offset != next) break;
      next += s.rows;
    }
    if (next != GlobalRows(t.global_shape)) {
      return InvalidArgument(where + "tensor '" + name + "': the ranks' slices cover rows [0, " +
                             std::to_string(next) + ") of " +
                             std::to_string(GlobalRows(t.global_shape)) +
                             " (a gap or a missing slice)");
    }
    t.slices = std::move(kept);
    m.tensors.push_back(std::move(t));
  }
  // Packs no kept slice refers to (a rank's replicated small rows lost to a lower rank's copy)
  // are left out: GC marks from refs, and an unreferenced pack would only mislead a reader.
  std::unordered_set<ChunkId, ChunkIdHash> referenced;
  for (const ChunkId& id : m.ChunkIds()) referenced.insert(id);
  for (const auto& [id, size] : packs) {
    if (referenced.contains(id)) m.packs.push_back({id, size});
  }
  return m;
}

}  // namespace gantry::ckpt
