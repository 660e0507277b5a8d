// Heap: glibc's thresholds for large blocks (include/gantry/common/heap.h).
#include "gantry/common/heap.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// Sanitizers bring allocators of their own: glibc's thresholds would change nothing there, and
// its counts would not see their blocks. GCC says so with __SANITIZE_*__, clang (14 at least)
// only through __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GANTRY_HEAP_IS_GLIBC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define GANTRY_HEAP_IS_GLIBC 0
#endif
#endif
#if !defined(GANTRY_HEAP_IS_GLIBC) && defined(__GLIBC__)
#define GANTRY_HEAP_IS_GLIBC 1
#elif !defined(GANTRY_HEAP_IS_GLIBC)
#define GANTRY_HEAP_IS_GLIBC 0
#endif

namespace gantry {

bool KeepLargeBlocksInHeap(size_t max_bytes) {
#if GANTRY_HEAP_IS_GLIBC
  constexpr size_t kMax = size_t{32} << 20;  // glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
  if (max_bytes == 0 || max_bytes > kMax) return false;
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(max_bytes)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * max_bytes)) == 1;
#else
  (void)max_bytes;
  return false;
#endif
}

long MappedHeapBlocks() {
#if GANTRY_HEAP_IS_GLIBC && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  return static_cast<long>(mallinfo2().hblks);
#else
  return -1;
#endif
}

}  // namespace gantry
