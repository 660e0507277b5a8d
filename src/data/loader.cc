// Shard sources for MDS and WebDataset, and the iterator that reads one slot's samples in the
// global order (loader.h).
#include "gantry/data/loader.h"

#include <algorithm>

#include "gantry/data/mds.h"

namespace gantry::data {
namespace {

class MdsLoaded final : public LoadedShard {
 public:
  MdsLoaded(MdsShard shard, const MdsShardInfo& info)
      : shard_(std::move(shard)), columns_(info.columns) {
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].name == "__key__") key_column_ = c;
    }
  }
  uint64_t size() const override { return shard_.num_samples(); }
  Status Get(uint64_t i, std::string& key, std::vector<SampleField>& fields) const override {
    GANTRY_ASSIGN_OR_RETURN(std::vector<std::string_view> cols,
                            shard_.Sample(static_cast<uint32_t>(i)));
    fields.clear();
    for (size_t c = 0; c < cols.size(); ++c) {
      fields.push_back({columns_[c].name, columns_[c].encoding, cols[c]});
    }
    key = key_column_ < cols.size() ? std::string(cols[key_column_]) : std::string();
    return Status::Ok();
  }

 private:
  MdsShard shard_;
  // A copy: the fields' names and encodings point into it, and a Sample keeps this shard (not
  // the source) alive.
  std::vector<MdsColumn> columns_;
  size_t key_column_ = SIZE_MAX;
};

class MdsSource final : public ShardSource {
 public:
  MdsSource(DatasetLocation dataset, MdsIndex index, const ShardSourceOptions& options)
      : dataset_(std::move(dataset)), index_(std::move(index)) {
    options_.limits = options.limits;
    options_.verify_hashes = options.verify_hashes;
    for (const MdsShardInfo& s : index_.shards) samples_.push_back(s.samples);
  }
  DatasetFormat format() const override { return DatasetFormat::kMds; }
  const std::vector<uint64_t>& shard_samples() const override { return samples_; }
  std::string ShardName(uint32_t shard) const override {
    return index_.shards[shard].stored().basename;
  }
  Result<std::shared_ptr<const LoadedShard>> Read(uint32_t shard) override {
    const MdsShardInfo& info = index_.shards[shard];
    GANTRY_ASSIGN_OR_RETURN(MdsShard parsed, ReadMdsShard(*dataset_.store, "", info, options_));
    return std::shared_ptr<const LoadedShard>(std::make_shared<MdsLoaded>(std::move(parsed), info));
  }

 private:
  DatasetLocation dataset_;
  MdsIndex index_;
  MdsReadOptions options_;
  std::vector<uint64_t> samples_;
};

class WdsLoaded final : public LoadedShard {
 public:
  explicit WdsLoaded(WdsShard shard) : shard_(std::move(shard)) {}
  uint64_t size() const override { return shard_.samples().size(); }
  Status Get(uint64_t i, std::string& key, std::vector<SampleField>& fields) const override {
    const WdsSample& s = shard_.samples()[i];
    key = s.key;
    fields.clear();
    for (const WdsField& f : s.fields) fields.push_back({f.name, {}, f.bytes});
    return Status::Ok();
  }

 private:
  WdsShard shard_;
};

class WdsSource final : public ShardSource {
 public:
  WdsSource(DatasetLocation dataset, std::vector<uint64_t> samples, const ReadLimits& limits)
      : dataset_(std::move(dataset)), samples_(std::move(samples)), limits_(limits) {}
  DatasetFormat format() const override { return DatasetFormat::kWebDataset; }
  const std::vector<uint64_t>& shard_samples() const override { return samples_; }
  std::string ShardName(uint32_t shard) const override { return dataset_.wds_shards[shard]; }
  Result<std::shared_ptr<const LoadedShard>> Read(uint32_t shard) override {
    GANTRY_ASSIGN_OR_RETURN(WdsShard parsed,
                            ReadWdsShard(*dataset_.store, dataset_.wds_shards[shard], limits_));
    if (parsed.samples().size() != samples_[shard]) {
      return DataLoss(dataset_.url + ": shard " + dataset_.wds_shards[shard] + " holds " +
                      std::to_string(parsed.samples().size()) + " samples, not the " +
                      std::to_string(samples_[shard]) + " the order was built on");
    }
    return std::shared_ptr<const LoadedShard>(std::make_shared<WdsLoaded>(std::move(parsed)));
  }

 private:
  DatasetLocation dataset_;
  std::vector<uint64_t> samples_;
  ReadLimits limits_;
};

}  // namespace

Result<std::unique_ptr<ShardSource>> OpenShardSource(DatasetLocation dataset,
                                                     const ShardSourceOptions& options) {
  if (dataset.format == DatasetFormat::kMds) {
    GANTRY_ASSIGN_OR_RETURN(MdsIndex index, ReadMdsIndex(*dataset.store, ""));
    return std::unique_ptr<ShardSource>(
        std::make_unique<MdsSource>(std::move(dataset), std::move(index), options));
  }
  std::vector<uint64_t> samples = options.wds_shard_samples;
  if (!samples.empty() && samples.size() != dataset.wds_shards.size()) {
    return InvalidArgument(dataset.url + ": " + std::to_string(samples.size()) +
                           " shard sample counts given for " +
                           std::to_string(dataset.wds_shards.size()) + " shards");
  }
  if (samples.empty()) {
    for (const std::string& key : dataset.wds_shards) {
      GANTRY_ASSIGN_OR_RETURN(WdsShard shard, ReadWdsShard(*dataset.store, key, options.limits));
      samples.push_back(shard.samples().size());
    }
  }
  return std::unique_ptr<ShardSource>(
      std::make_unique<WdsSource>(std::move(dataset), std::move(samples), options.limits));
}

const SampleField* Sample::Find(std::string_view name) const {
  for (const SampleField& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Result<SampleIterator> SampleIterator::Create(ShardSource& source, const EpochOrder& order,
                                              const Slot& slot, uint64_t start) {
  if (order.num_shards() != source.shard_samples().size()) {
    return InvalidArgument("the order has " + std::to_string(order.num_shards()) +
                           " shards; the dataset has " +
                           std::to_string(source.shard_samples().size()));
  }
  GANTRY_ASSIGN_OR_RETURN(SlotPositions positions,
                          SlotPositions::Create(slot, start, order.size()));
  return SampleIterator(source, order, positions);
}

Result<bool> SampleIterator::Next(Sample& out) {
  if (next_ >= positions_.size()) {
    held_.clear();
    return false;
  }
  const uint64_t p = positions_[next_];
  // Positions only move forward, and so do their windows: a shard that ends before this
  // window's first shard-order position is never needed again this epoch.
  const uint64_t window_start = order_.WindowStart(p);
  for (auto it = held_.begin(); it != held_.end();) {
    if (order_.ShardEnd(order_.RankOfShard(it->first)) <= window_start) {
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  const SampleRef ref = order_.At(p);
  auto it = held_.find(ref.shard);
  if (it == held_.end()) {
    GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedShard> shard, source_->Read(ref.shard));
    ++shards_read_;
    if (shard->size() != source_->shard_samples()[ref.shard]) {
      return DataLoss("shard " + source_->ShardName(ref.shard) + " holds " +
                      std::to_string(shard->size()) + " samples, not the " +
                      std::to_string(source_->shard_samples()[ref.shard]) + " its index says");
    }
    it = held_.emplace(ref.shard, std::move(shard)).first;
    max_held_ = std::max(max_held_, held_.size());
  }
  out.position = p;
  out.ref = ref;
  out.shard = it->second;
  GANTRY_RETURN_IF_ERROR(it->second->Get(ref.index, out.key, out.fields));  // names the shard
  ++next_;
  return true;
}

}  // namespace gantry::data
