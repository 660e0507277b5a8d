// Root providers: how the users of the chunk namespace (checkpoints today, datasets next) tell
// the chunk store's one garbage collector which chunks they still reference, without the
// collector (or any other user) knowing their key layout.
//
// A user registers a provider under a kind name once per process, and declares its kind in
// every namespace it writes roots to (ChunkStore::DeclareRootKind). GC marks from every
// registered provider, and refuses to sweep a namespace that declares a kind this process has
// no provider for: it could not tell that kind's live chunks from garbage.
//
// Thread-safe.
//
//   class CheckpointRoots : public RootProvider { ... };
//   RegisterRootProvider("ckpt", std::make_shared<CheckpointRoots>());
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cache/chunk.h"
#include "gantry/common/status.h"
#include "gantry/storage/object_store.h"

namespace gantry {

class RootProvider {
 public:
  virtual ~RootProvider() = default;
  // Passes every chunk id this kind's roots in `store` reference to `mark`. GC asks it of the
  // namespace's manifest tier, and of every other tier (a kind may keep roots there too: a
  // checkpoint save not yet durable keeps its record in the node-local tier). Any error stops
  // the GC with nothing deleted, so a root that cannot be read must be an error here, never
  // skipped silently.
  virtual Status MarkLive(ObjectStore& store, const std::function<void(const ChunkId&)>& mark) = 0;
  // What GC calls: MarkLive, where a kind that deliberately skips damaged roots (checkpoints do,
  // so that one bad manifest does not stop every GC) adds one line per skipped root to
  // `warnings`, naming it. The default marks through MarkLive and warns of nothing.
  virtual Status MarkLiveAndWarn(ObjectStore& store,
                                 const std::function<void(const ChunkId&)>& mark,
                                 std::vector<std::string>* warnings) {
    (void)warnings;
    return MarkLive(store, mark);
  }
};

// Registers `provider` for `kind` (one key segment: letters, digits, '-', '_'); registering
// a kind again replaces its provider.
void RegisterRootProvider(std::string kind, std::shared_ptr<RootProvider> provider);
// Null if no provider is registered for `kind`.
std::shared_ptr<RootProvider> FindRootProvider(std::string_view kind);
// Registered kinds, sorted.
std::vector<std::string> RegisteredRootKinds();

}  // namespace gantry
