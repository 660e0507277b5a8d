#include "gantry/common/heap.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gantry {
namespace {

// Whether a fresh block of `bytes` is a mapping of its own, in a child process whose thresholds
// start where a new process's do (128 KiB: what this process's earlier frees taught glibc
// plays no part), after KeepLargeBlocksInHeap(keep) when keep > 0: the exit status is 1 for a
// mapping, 0 for a heap block, 2 when the count cannot be read.
int BlockIsMappedInChild(size_t bytes, size_t keep) {
  const pid_t pid = fork();
  if (pid == 0) {
    // And whatever free space the parent left at the top of its heap, which would serve any
    // block that fits, is given back first.
    if (mallopt(M_MMAP_THRESHOLD, 128 << 10) != 1 || mallopt(M_TRIM_THRESHOLD, 128 << 10) != 1) {
      _exit(4);
    }
    malloc_trim(0);
    if (keep > 0 && !KeepLargeBlocksInHeap(keep)) _exit(3);
    const long before = MappedHeapBlocks();
    // Through a volatile pointer: the compiler may not drop a block nobody reads.
    void* volatile p = std::malloc(bytes);
    std::memset(p, 1, 4096);
    const long after = MappedHeapBlocks();
    std::free(p);
    _exit(before < 0 ? 2 : (after > before ? 1 : 0));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(Heap, LargeBlocksComeFromTheHeapOnceKept) {
  if (MappedHeapBlocks() < 0) GTEST_SKIP() << "not glibc's allocator (a sanitizer build)";
  constexpr size_t kBlock = size_t{24} << 20;
  EXPECT_EQ(BlockIsMappedInChild(kBlock, 0), 1);  // a new process's threshold: a mapping
  EXPECT_EQ(BlockIsMappedInChild(kBlock, size_t{32} << 20), 0);
  EXPECT_EQ(BlockIsMappedInChild(kBlock, size_t{8} << 20), 1);  // above the kept size
}

TEST(Heap, RefusesWhatGlibcCannotKeep) {
  if (MappedHeapBlocks() < 0) GTEST_SKIP() << "not glibc's allocator (a sanitizer build)";
  EXPECT_FALSE(KeepLargeBlocksInHeap(0));
  EXPECT_FALSE(KeepLargeBlocksInHeap((size_t{32} << 20) + 1));
}

}  // namespace
}  // namespace gantry
