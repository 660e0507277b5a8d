// WebDataset shards (webdataset.h).
#include "gantry/data/webdataset.h"

#include <algorithm>
#include <cstdio>

#include "data/codec.h"
#include "gantry/data/tar.h"

namespace gantry::data {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsGzipName(std::string_view name) { return EndsWith(name, ".gz") || EndsWith(name, ".tgz"); }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// A top-level "__name__" member holds metadata, not a sample field (WebDataset's meta rule).
bool IsMetaMember(std::string_view name) {
  return name.find('/') == std::string_view::npos && name.size() >= 4 &&
         name.substr(0, 2) == "__" && EndsWith(name, "__");
}

// "%06d" and the like: one conversion, digits for the width, nothing else a printf would read.
bool ValidPattern(std::string_view p) {
  const size_t pct = p.find('%');
  if (pct == std::string_view::npos || p.find('%', pct + 1) != std::string_view::npos) return false;
  size_t i = pct + 1;
  while (i < p.size() && p[i] >= '0' && p[i] <= '9' && i - pct <= 2) ++i;
  return i < p.size() && p[i] == 'd';
}

}  // namespace

const WdsField* WdsSample::Find(std::string_view field) const {
  for (const WdsField& f : fields) {
    if (f.name == field) return &f;
  }
  return nullptr;
}

namespace {

// SplitWdsName's parts as views into `member`, the field not yet lower-cased: what Parse needs
// to find a member's sample without making a string for each of its members.
std::pair<std::string_view, std::string_view> SplitWdsNameView(std::string_view member) {
  const size_t slash = member.rfind('/');
  const size_t last = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = member.find('.', last);
  // webdataset's base_plus_ext: at least one character before the dot in the last component.
  if (dot == std::string_view::npos || dot == last) return {};
  return {member.substr(0, dot), member.substr(dot + 1)};
}

}  // namespace

std::pair<std::string, std::string> SplitWdsName(std::string_view member) {
  const auto [key, field] = SplitWdsNameView(member);
  return {std::string(key), Lower(field)};
}

Result<WdsShard> WdsShard::Parse(std::string stored, std::string name, const ReadLimits& limits) {
  return Parse(ShardBytes::FromString(std::move(stored)), std::move(name), limits);
}

Result<WdsShard> WdsShard::Parse(std::shared_ptr<const ShardBytes> stored, std::string name,
                                 const ReadLimits& limits) {
  WdsShard shard;
  shard.name_ = std::move(name);
  shard.stored_bytes_ = stored->size();
  if (IsGzipName(shard.name_)) {
    GANTRY_RETURN_IF_ERROR(stored->Fill(0, stored->size()));  // a shard not read yet
    GANTRY_ASSIGN_OR_RETURN(
        std::string tar,
        internal::GunzipBounded(stored->view(), limits.max_shard_bytes, shard.name_));
    shard.tar_ = ShardBytes::FromString(std::move(tar));
  } else {
    shard.tar_ = std::move(stored);
  }
  const std::string_view tar = shard.tar_->view();
  // A shard not read yet (ShardBytes::OpenFile) reads its headers here, and the members too
  // small to be worth a read of their own; the large ones stay in the file until used.
  const ShardBytes& bytes = *shard.tar_;
  GANTRY_ASSIGN_OR_RETURN(
      std::vector<TarMember> members,
      bytes.complete() ? ListTarMembers(tar, shard.name_)
                       : ListTarMembers(tar, shard.name_, [&bytes](uint64_t offset, uint64_t n) {
                           return bytes.Fill(offset, n);
                         }));
  GANTRY_RETURN_IF_ERROR(bytes.FillGapsBelow());
  // Every shard's samples are grouped on the read-ahead's threads, beside the training loop:
  // a member costs no allocation beyond its field's (its name moves, its key is compared as a
  // view, the samples are reserved once). Measured in docs/performance.md.
  shard.samples_.reserve(members.size());
  for (TarMember& m : members) {
    if (!m.IsRegularFile() || IsMetaMember(m.name)) continue;
    const auto [key, raw_field] = SplitWdsNameView(m.name);
    if (key.empty()) continue;
    if (shard.samples_.empty() || shard.samples_.back().key != key) {
      shard.samples_.push_back(WdsSample{std::string(key), {}});
    }
    WdsSample& s = shard.samples_.back();
    std::string field = Lower(raw_field);
    if (s.Find(field) != nullptr) {
      return InvalidArgument(shard.name_ + ": offset " + std::to_string(m.header_offset) +
                             ": member '" + m.name + "' repeats field '" + field + "' of sample '" +
                             s.key + "'");
    }
    const std::string_view bytes = tar.substr(m.data_offset, m.size);
    s.fields.push_back(WdsField{std::move(field), std::move(m.name), bytes});
  }
  // Samples of several members each leave most of the reservation unused: given back, as the
  // shard is held for as long as it is read.
  if (shard.samples_.capacity() > 2 * shard.samples_.size()) shard.samples_.shrink_to_fit();
  return shard;
}

bool IsWdsShardName(std::string_view key) {
  return EndsWith(key, ".tar") || EndsWith(key, ".tar.gz") || EndsWith(key, ".tgz");
}

Result<std::vector<ObjectInfo>> ListWdsShards(ObjectStore& store, std::string_view prefix) {
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> all, store.ListAll(prefix));
  std::vector<ObjectInfo> shards;
  for (ObjectInfo& o : all) {
    if (IsWdsShardName(o.key)) shards.push_back(std::move(o));
  }
  std::sort(shards.begin(), shards.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return shards;
}

Result<WdsShard> ReadWdsShard(ObjectStore& store, const std::string& key,
                              const ReadLimits& limits) {
  Result<ObjectInfo> info = store.Head(key);
  if (!info.ok()) {
    return Status(info.status().code(), "shard '" + key + "': " + info.status().message());
  }
  if (info->size > limits.max_shard_bytes) {
    return ResourceExhausted("shard '" + key + "' is " + std::to_string(info->size) +
                             " bytes, more than the limit of " +
                             std::to_string(limits.max_shard_bytes));
  }
  Result<std::string> bytes = store.Get(key);
  if (!bytes.ok()) {
    return Status(bytes.status().code(), "shard '" + key + "': " + bytes.status().message());
  }
  return WdsShard::Parse(std::move(*bytes), key, limits);
}

// ---------------------------------------------------------------------------------------------

struct WdsWriter::State {
  explicit State(int64_t mtime) : tar(mtime) {}
  TarWriter tar;
  uint64_t samples_in_shard = 0;
  std::string last_key;
  bool finished = false;
};

WdsWriter::WdsWriter(ObjectStore& store, WdsWriterOptions options)
    : store_(store),
      options_(std::move(options)),
      state_(std::make_unique<State>(options_.mtime)) {}

WdsWriter::~WdsWriter() = default;

Result<std::unique_ptr<WdsWriter>> WdsWriter::Create(ObjectStore& store, WdsWriterOptions options) {
  if (!ValidPattern(options.pattern) || !IsWdsShardName(options.pattern)) {
    return InvalidArgument("shard name pattern '" + options.pattern +
                           "' must hold one %d (e.g. shard-%06d.tar) and end in .tar, .tar.gz or "
                           ".tgz");
  }
  return std::unique_ptr<WdsWriter>(new WdsWriter(store, std::move(options)));
}

Status WdsWriter::Write(std::string_view key,
                        const std::vector<std::pair<std::string, std::string>>& fields) {
  State& st = *state_;
  if (st.finished) return FailedPrecondition("the WebDataset writer is finished");
  const std::string k(key);
  if (key.empty()) return InvalidArgument("sample key is empty");
  const size_t slash = key.rfind('/');
  const std::string_view last = key.substr(slash == std::string_view::npos ? 0 : slash + 1);
  if (last.empty() || last.find('.') != std::string_view::npos) {
    return InvalidArgument("sample key '" + k +
                           "': its last component must be non-empty and hold no '.' (the reader "
                           "would split the key there)");
  }
  if (IsMetaMember(key)) return InvalidArgument("sample key '" + k + "' is a metadata name");
  if (k == st.last_key) {
    return InvalidArgument("sample key '" + k +
                           "' repeats the previous sample's (the reader would merge them)");
  }
  if (fields.empty()) return InvalidArgument("sample '" + k + "' has no fields");
  uint64_t bytes = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string& f = fields[i].first;
    if (f.empty() || f != Lower(f) || f.find('/') != std::string::npos) {
      return InvalidArgument("sample '" + k + "': field '" + f +
                             "' must be non-empty, lower-case and hold no '/'");
    }
    for (size_t j = 0; j < i; ++j) {
      if (fields[j].first == f) {
        return InvalidArgument("sample '" + k + "': field '" + f + "' is given twice");
      }
    }
    bytes += 3 * kTarBlock + fields[i].second.size();  // headers (a pax one, maybe) and data
  }
  if (st.samples_in_shard > 0 &&
      ((options_.max_samples != 0 && st.samples_in_shard >= options_.max_samples) ||
       (options_.max_bytes != 0 && st.tar.size() + bytes > options_.max_bytes))) {
    GANTRY_RETURN_IF_ERROR(Flush());
  }
  for (const auto& [field, data] : fields) {
    GANTRY_RETURN_IF_ERROR(st.tar.Add(k + "." + field, data));
  }
  ++st.samples_in_shard;
  ++samples_;
  st.last_key = k;
  return Status::Ok();
}

Status WdsWriter::Flush() {
  State& st = *state_;
  char name[512];
  std::snprintf(name, sizeof(name), options_.pattern.c_str(), static_cast<int>(shards_.size()));
  const std::string key = options_.prefix + name;
  std::string tar = st.tar.Finish();
  if (IsGzipName(key)) {
    GANTRY_ASSIGN_OR_RETURN(tar, internal::Gzip(tar, 6));
  }
  const PutOptions put{.create_if_absent = options_.claim_first && shards_.empty()};
  GANTRY_RETURN_IF_ERROR(store_.Put(key, tar, put));
  shards_.push_back(key);
  st.samples_in_shard = 0;
  return Status::Ok();
}

Status WdsWriter::Finish() {
  State& st = *state_;
  if (st.finished) return FailedPrecondition("the WebDataset writer is finished");
  st.finished = true;
  if (st.samples_in_shard > 0) GANTRY_RETURN_IF_ERROR(Flush());
  return Status::Ok();
}

}  // namespace gantry::data
