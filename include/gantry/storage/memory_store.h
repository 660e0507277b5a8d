// MemoryStore: an ObjectStore that keeps objects in process memory.
//
// The fastest tier and the hermetic stand-in for the others in tests. Stores opened under the
// same name ("mem://NAME" or OpenMemoryStore("NAME")) share one process-wide map, so two
// components given the same URL see the same objects; NewMemoryStore() makes a private one.
// Objects live until deleted (or, for private stores, until the last handle goes). Thread-safe:
// a mutex guards the map, and values are immutable shared buffers, so a reader never sees a
// partial put and large gets copy outside the lock.
#pragma once

#include <memory>
#include <string>

#include "gantry/storage/object_store.h"

namespace gantry {

// A handle on the process-wide store called `name` (created empty on first use).
std::unique_ptr<ObjectStore> OpenMemoryStore(const std::string& name);

// A private store that nothing else can open; its url() is "mem://" + a unique name.
std::unique_ptr<ObjectStore> NewMemoryStore();

}  // namespace gantry
