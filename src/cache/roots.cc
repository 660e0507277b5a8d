#include "gantry/cache/roots.h"

#include <map>

#include "gantry/common/thread_annotations.h"

namespace gantry {
namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, std::shared_ptr<RootProvider>, std::less<>> providers GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: providers outlive static destructors
  return *r;
}

}  // namespace

void RegisterRootProvider(std::string kind, std::shared_ptr<RootProvider> provider) {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  r.providers[std::move(kind)] = std::move(provider);
}

std::shared_ptr<RootProvider> FindRootProvider(std::string_view kind) {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  auto it = r.providers.find(kind);
  return it == r.providers.end() ? nullptr : it->second;
}

std::vector<std::string> RegisteredRootKinds() {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  std::vector<std::string> kinds;
  for (const auto& [k, p] : r.providers) kinds.push_back(k);
  return kinds;
}

}  // namespace gantry
