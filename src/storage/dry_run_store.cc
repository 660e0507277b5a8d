#include "gantry/storage/dry_run_store.h"

#include <ctime>

namespace gantry {

DryRunStore::DryRunStore(std::unique_ptr<ObjectStore> base)
    : base_(std::move(base)), name_("dry-run(" + std::string(base_->backend()) + ")") {}

Status DryRunStore::Put(std::string_view key, std::string_view data, const PutOptions& options) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  if (options.create_if_absent) {
    // Checked before taking the lock (Head may read the store below); a racing put inside one
    // dry run is not a case worth serializing the store below for.
    Result<ObjectInfo> there = Head(key);
    if (there.ok()) {
      return AlreadyExists(url() + ": put '" + std::string(key) + "': already exists");
    }
    if (there.status().code() != StatusCode::kNotFound) return there.status();
  }
  MutexLock lock(mu_);
  auto it = deleted_.find(key);
  if (it != deleted_.end()) deleted_.erase(it);
  written_.insert_or_assign(std::string(key), std::string(data));
  return Status::Ok();
}

Result<std::string> DryRunStore::Get(std::string_view key) {
  {
    MutexLock lock(mu_);
    auto it = written_.find(key);
    if (it != written_.end()) return it->second;
    if (deleted_.contains(key)) return Gone("get", key);
  }
  return base_->Get(key);
}

Result<std::string> DryRunStore::GetRange(std::string_view key, uint64_t offset, uint64_t length) {
  {
    MutexLock lock(mu_);
    auto it = written_.find(key);
    if (it != written_.end()) {
      if (offset > it->second.size()) {
        return OutOfRange(url() + ": get '" + std::string(key) + "': offset past the end");
      }
      return it->second.substr(offset, length == kToEnd ? std::string::npos : length);
    }
    if (deleted_.contains(key)) return Gone("get", key);
  }
  return base_->GetRange(key, offset, length);
}

Result<ObjectInfo> DryRunStore::Head(std::string_view key) {
  {
    MutexLock lock(mu_);
    auto it = written_.find(key);
    if (it != written_.end()) {
      return ObjectInfo{it->first, it->second.size(), static_cast<int64_t>(std::time(nullptr)), ""};
    }
    if (deleted_.contains(key)) return Gone("head", key);
  }
  return base_->Head(key);
}

Result<ListPage> DryRunStore::List(std::string_view prefix, std::string_view page_token,
                                   int max_keys) {
  ListPage page;
  if (!page_token.empty()) return page;
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> below, base_->ListAll(prefix));
  std::map<std::string, ObjectInfo> merged;
  MutexLock lock(mu_);
  for (ObjectInfo& o : below) {
    if (!deleted_.contains(o.key)) merged[o.key] = std::move(o);
  }
  const int64_t now = std::time(nullptr);
  for (const auto& [key, data] : written_) {
    if (key.starts_with(prefix)) merged[key] = ObjectInfo{key, data.size(), now, ""};
  }
  for (auto& [key, info] : merged) page.objects.push_back(std::move(info));
  return page;
}

Status DryRunStore::Delete(std::string_view key) {
  GANTRY_RETURN_IF_ERROR(ValidateKey(key));
  MutexLock lock(mu_);
  auto it = written_.find(key);
  if (it != written_.end()) written_.erase(it);
  deleted_.insert(std::string(key));
  return Status::Ok();
}

std::vector<std::string> DryRunStore::Deleted() const {
  MutexLock lock(mu_);
  return {deleted_.begin(), deleted_.end()};
}

std::vector<std::string> DryRunStore::Written() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, data] : written_) out.push_back(key);
  return out;
}

Status DryRunStore::Gone(const char* op, std::string_view key) const {
  return NotFound(url() + ": " + op + " '" + std::string(key) + "': deleted in this dry run");
}

}  // namespace gantry
