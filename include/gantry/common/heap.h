// Heap: how this process's allocator (glibc's malloc) serves large blocks.
//
// glibc serves a block of 128 KiB or more that its heap's free space cannot hold with an mmap
// of its own, and unmaps it on free, until a freed block that large teaches it to grow the
// heap for such sizes instead (its threshold adapts upwards, to 32 MiB at most). A DataLoader's training process receives every batch from its
// workers into fresh blocks in a pattern that never teaches it: each read of the workers' pipe
// asks for the whole remaining batch and shrinks the block to what arrived. So every batch of a
// few MiB lands in fresh pages, whose first touch is slow on VMs (docs/performance.md, "the
// first touch of a mapped page": 3.6-5.4 us per 4 KiB page): batches of four 1 MiB samples
// through two workers came at 240-830 samples/s in a new process, 1,150-1,310 once kept.
#pragma once

#include <cstddef>

namespace gantry {

// Makes blocks below `max_bytes` come from the heap, and keeps up to 2 x max_bytes free at the
// heap's top rather than giving it back at once (glibc's M_MMAP_THRESHOLD, M_TRIM_THRESHOLD;
// what its own adaptation reaches after freeing a block of max_bytes). Process-wide, for the
// life of the process; fixes the thresholds (glibc no longer adapts them). False where the
// allocator is not glibc's, or refuses (max_bytes above its limit of 32 MiB on 64-bit).
bool KeepLargeBlocksInHeap(size_t max_bytes);

// Blocks the allocator holds as mappings of their own (glibc's mallinfo2 hblks), or -1 where it
// cannot tell (another allocator): lets a test see where a block came from.
long MappedHeapBlocks();

}  // namespace gantry
