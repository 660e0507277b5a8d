// DryRunStore: an ObjectStore overlay that keeps writes and deletes in memory and never changes
// the store below, so a maintenance operation (checkpoint retention and GC, chunk GC) can run
// its real code against it and report exactly what it would have written and removed.
//
// Reads see the overlay first: an object put in this dry run reads back its new bytes, one
// deleted in it is NotFound, everything else comes from the store below. The overlay records
// which keys were deleted and written, so a caller can report them.
//
//   auto dry = std::make_shared<DryRunStore>(std::move(durable));
//   options.durable_store = dry;              // the engine's GC runs unchanged
//   ... engine->CollectGarbage() ...
//   for (const std::string& k : dry->Deleted()) std::puts(k.c_str());
//
// Thread-safe (the overlay sits behind a mutex; the store below must be thread-safe itself).
// Overlay bytes live in memory: meant for small objects (manifests, pointers), not bulk data.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gantry/common/thread_annotations.h"
#include "gantry/storage/object_store.h"

namespace gantry {

class DryRunStore final : public ObjectStore {
 public:
  explicit DryRunStore(std::unique_ptr<ObjectStore> base);

  std::string_view backend() const override { return name_; }
  std::string url() const override { return base_->url(); }
  // The overlay itself checks for an existing key under its mutex.
  bool SupportsCreateIfAbsent() const override { return true; }

  Status Put(std::string_view key, std::string_view data, const PutOptions& options) override;
  using ObjectStore::Put;
  Result<std::string> Get(std::string_view key) override;
  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override;
  Result<ObjectInfo> Head(std::string_view key) override;
  // One page with everything: the overlay must merge and filter the whole listing anyway.
  Result<ListPage> List(std::string_view prefix, std::string_view page_token,
                        int max_keys) override;
  Status Delete(std::string_view key) override;

  // Keys deleted (and not written again) and keys written in this dry run, in key order.
  std::vector<std::string> Deleted() const EXCLUDES(mu_);
  std::vector<std::string> Written() const EXCLUDES(mu_);

 private:
  Status Gone(const char* op, std::string_view key) const;

  const std::unique_ptr<ObjectStore> base_;
  const std::string name_;
  mutable Mutex mu_;
  std::map<std::string, std::string, std::less<>> written_ GUARDED_BY(mu_);
  std::set<std::string, std::less<>> deleted_ GUARDED_BY(mu_);
};

}  // namespace gantry
