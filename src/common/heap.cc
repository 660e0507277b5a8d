// Heap: glibc's thresholds for large blocks (include/gantry/common/heap.h).
#include "gantry/common/heap.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gantry {

bool KeepLargeBlocksInHeap(size_t max_bytes) {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Sanitizers bring allocators of their own: glibc's thresholds would change nothing there.
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
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && \
    (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  return static_cast<long>(mallinfo2().hblks);
#else
  return -1;
#endif
}

}  // namespace gantry
