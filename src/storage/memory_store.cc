// The memory backend: a sorted map of immutable shared buffers behind one mutex.
#include "gantry/storage/memory_store.h"

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "gantry/common/thread_annotations.h"

namespace gantry {
namespace {

struct Entry {
  std::shared_ptr<const std::string> data;
  int64_t mtime_unix = 0;
  uint64_t version = 0;
};

struct SharedState {
  Mutex mu;
  std::map<std::string, Entry, std::less<>> objects GUARDED_BY(mu);
  uint64_t next_version GUARDED_BY(mu) = 1;
};

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class MemoryStore final : public ObjectStore {
 public:
  MemoryStore(std::string name, std::shared_ptr<SharedState> state)
      : name_(std::move(name)), state_(std::move(state)) {}

  std::string_view backend() const override { return "memory"; }
  std::string url() const override { return "mem://" + name_; }
  bool SupportsCreateIfAbsent() const override { return true; }

  Status Put(std::string_view key, std::string_view data, const PutOptions& options) override {
    GANTRY_RETURN_IF_ERROR(ValidateKey(key).WithContext(Where("put", key)));
    // Copy outside the lock: a big put must not stall every other caller.
    auto buf = std::make_shared<const std::string>(data);
    MutexLock lock(state_->mu);
    auto it = state_->objects.find(key);
    if (it != state_->objects.end()) {
      if (options.create_if_absent) {
        return AlreadyExists(Where("put", key) + ": already exists");
      }
      it->second = Entry{std::move(buf), NowUnix(), state_->next_version++};
    } else {
      state_->objects.emplace(std::string(key),
                              Entry{std::move(buf), NowUnix(), state_->next_version++});
    }
    return Status::Ok();
  }

  Result<std::string> Get(std::string_view key) override {
    GANTRY_ASSIGN_OR_RETURN(Entry e, Find("get", key));
    return std::string(*e.data);
  }

  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override {
    GANTRY_ASSIGN_OR_RETURN(Entry e, Find("get", key));
    const uint64_t size = e.data->size();
    if (offset > size) {
      return OutOfRange(Where("get", key) + ": offset " + std::to_string(offset) +
                        " is past the end (size " + std::to_string(size) + ")");
    }
    const uint64_t n = std::min(length, size - offset);
    return e.data->substr(offset, n);
  }

  Result<ObjectInfo> Head(std::string_view key) override {
    GANTRY_ASSIGN_OR_RETURN(Entry e, Find("head", key));
    return Info(std::string(key), e);
  }

  Result<ListPage> List(std::string_view prefix, std::string_view page_token,
                        int max_keys) override {
    if (max_keys <= 0) max_keys = 1000;
    ListPage page;
    MutexLock lock(state_->mu);
    auto it = page_token.empty() || page_token < prefix ? state_->objects.lower_bound(prefix)
                                                        : state_->objects.upper_bound(page_token);
    for (; it != state_->objects.end() && it->first.starts_with(prefix); ++it) {
      if (static_cast<int>(page.objects.size()) == max_keys) {
        page.next_token = page.objects.back().key;
        break;
      }
      page.objects.push_back(Info(it->first, it->second));
    }
    return page;
  }

  Status Delete(std::string_view key) override {
    GANTRY_RETURN_IF_ERROR(ValidateKey(key).WithContext(Where("delete", key)));
    MutexLock lock(state_->mu);
    auto it = state_->objects.find(key);
    if (it != state_->objects.end()) state_->objects.erase(it);
    return Status::Ok();
  }

 private:
  std::string Where(const char* op, std::string_view key) const {
    return url() + ": " + op + " '" + std::string(key) + "'";
  }

  // A copy of the entry (a shared_ptr, so cheap) taken under the lock.
  Result<Entry> Find(const char* op, std::string_view key) {
    GANTRY_RETURN_IF_ERROR(ValidateKey(key).WithContext(Where(op, key)));
    MutexLock lock(state_->mu);
    auto it = state_->objects.find(key);
    if (it == state_->objects.end()) return NotFound(Where(op, key) + ": no such object");
    return it->second;
  }

  static ObjectInfo Info(std::string key, const Entry& e) {
    ObjectInfo info;
    info.key = std::move(key);
    info.size = e.data->size();
    info.mtime_unix = e.mtime_unix;
    info.etag = "v" + std::to_string(e.version);
    return info;
  }

  const std::string name_;
  const std::shared_ptr<SharedState> state_;
};

}  // namespace

std::unique_ptr<ObjectStore> OpenMemoryStore(const std::string& name) {
  // Leaked on purpose: named stores live for the whole process, and a static map with a
  // destructor would race with stores used from detached threads at exit.
  static Mutex* registry_mu = new Mutex;
  static auto* registry = new std::map<std::string, std::shared_ptr<SharedState>>;
  std::shared_ptr<SharedState> state;
  {
    MutexLock lock(*registry_mu);
    std::shared_ptr<SharedState>& slot = (*registry)[name];
    if (!slot) slot = std::make_shared<SharedState>();
    state = slot;
  }
  return std::make_unique<MemoryStore>(name, std::move(state));
}

std::unique_ptr<ObjectStore> NewMemoryStore() {
  static std::atomic<uint64_t> counter{0};
  std::string name = "private-" + std::to_string(counter.fetch_add(1));
  return std::make_unique<MemoryStore>(std::move(name), std::make_shared<SharedState>());
}

}  // namespace gantry
