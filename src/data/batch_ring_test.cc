// BatchRing: blocks written by the producer read in place through another mapping, space reused
// lowest first once nothing refers to it, a held block never written over, descriptors that name
// no block refused, a producer and a consumer on two threads, and the producer's pages mapped at
// creation.
#include "gantry/data/batch_ring.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "common/test_support.h"

namespace gantry::data {
namespace {

using test_support::TempDir;

constexpr uint64_t kCap = BatchRing::kMinCapacity;  // 64 KiB

// Every byte of block `seq` is a function of seq and its index, so a block written over by
// another shows.
void Fill(const BatchRing::Block& b) {
  for (uint64_t i = 0; i < b.size; ++i) b.data[i] = static_cast<char>((b.seq * 131 + i) & 0xff);
}
bool Intact(const BatchRing::Block& b) {
  for (uint64_t i = 0; i < b.size; ++i) {
    if (b.data[i] != static_cast<char>((b.seq * 131 + i) & 0xff)) return false;
  }
  return true;
}

TEST(BatchRing, AConsumerReadsTheProducersBlockInPlaceAndItsSpaceComesBack) {
  TempDir dir;
  auto made = BatchRing::Create(dir.sub("ring"), kCap);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::shared_ptr<BatchRing> producer = *made;
  auto opened = BatchRing::Open(dir.sub("ring"));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<BatchRing> consumer = *opened;
  EXPECT_TRUE(producer->producer());
  EXPECT_FALSE(consumer->producer());
  EXPECT_EQ(consumer->producer_pid(), getpid());
  EXPECT_EQ(consumer->capacity(), kCap);

  std::optional<BatchRing::Block> b = producer->Allocate(1000);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->seq, 1u);
  Fill(*b);
  producer->Ref(b->offset);    // a descriptor sent
  producer->Unref(b->offset);  // the producer's own reference dropped
  auto adopted = consumer->Adopt(b->offset, b->seq, b->size);
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  EXPECT_NE(adopted->data, b->data);  // another mapping of the same bytes
  EXPECT_TRUE(Intact(*adopted));
  EXPECT_GT(producer->used_bytes(), 0u);
  consumer->Unref(adopted->offset);
  EXPECT_EQ(producer->used_bytes(), 0u);
  // Space given back: a block as large as the ring allows fits now.
  EXPECT_TRUE(producer->Allocate(kCap - 64 - BatchRing::kRecordBytes).has_value());
  // A consumer never allocates.
  EXPECT_FALSE(consumer->Allocate(10).has_value());
}

TEST(BatchRing, AHeldBlockIsNeverWrittenOverAndTheLowestFreeSpaceIsTakenFirst) {
  TempDir dir;
  std::shared_ptr<BatchRing> ring = *BatchRing::Create(dir.sub("ring"), kCap);
  std::vector<BatchRing::Block> blocks;
  while (auto b = ring->Allocate(8000)) {
    Fill(*b);
    blocks.push_back(*b);
  }
  ASSERT_EQ(blocks.size(), 8u);  // 8 x (8000 + 64 rounded) fits in 64 KiB less the header
  EXPECT_EQ(blocks[0].offset, 64u);
  // Every block but one in the middle dropped: the space around it is reused, never its own.
  const BatchRing::Block held = blocks[3];
  for (const BatchRing::Block& b : blocks) {
    if (b.offset != held.offset) ring->Unref(b.offset);
  }
  std::vector<BatchRing::Block> again;
  while (auto b = ring->Allocate(8000)) {
    Fill(*b);
    again.push_back(*b);
  }
  ASSERT_EQ(again.size(), 7u);
  EXPECT_EQ(again[0].offset, blocks[0].offset);  // the lowest gap first
  for (const BatchRing::Block& b : again) {
    EXPECT_TRUE(b.offset + 64 + b.size <= held.offset || b.offset >= held.offset + 64 + held.size)
        << b.offset;
    EXPECT_GT(b.seq, held.seq);
  }
  EXPECT_TRUE(Intact(held));
  // Too large for the ring at all.
  EXPECT_FALSE(ring->Allocate(kCap).has_value());
  EXPECT_FALSE(ring->Allocate(UINT64_MAX - 10).has_value());
}

TEST(BatchRing, BlocksOfMixedSizesDroppedOutOfOrderStayIntact) {
  TempDir dir;
  std::shared_ptr<BatchRing> ring = *BatchRing::Create(dir.sub("ring"), kCap);
  std::mt19937_64 rnd(7);
  std::deque<BatchRing::Block> live;
  uint64_t made = 0;
  uint64_t refused = 0;
  uint64_t wrapped = 0;  // allocations below the one before
  uint64_t last_offset = 0;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && rnd() % 3 == 0) {
      // Drop a random live block (mostly old ones, sometimes a new one).
      const size_t i = rnd() % 4 == 0 ? rnd() % live.size() : 0;
      ASSERT_TRUE(Intact(live[i])) << "block " << live[i].seq << " written over";
      ring->Unref(live[i].offset);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const uint64_t size = rnd() % 12000;
    std::optional<BatchRing::Block> b = ring->Allocate(size);
    if (!b) {
      ++refused;
      continue;
    }
    if (b->offset < last_offset) ++wrapped;
    last_offset = b->offset;
    ++made;
    Fill(*b);
    live.push_back(*b);
  }
  for (const BatchRing::Block& b : live) {
    ASSERT_TRUE(Intact(b));
    ring->Unref(b.offset);
  }
  EXPECT_EQ(ring->used_bytes(), 0u);
  EXPECT_GT(made, 5000u);
  EXPECT_GT(refused, 0u);
  EXPECT_GT(wrapped, 100u);
}

TEST(BatchRing, ADescriptorThatNamesNoBlockIsRefused) {
  TempDir dir;
  std::shared_ptr<BatchRing> ring = *BatchRing::Create(dir.sub("ring"), kCap);
  std::shared_ptr<BatchRing> other = *BatchRing::Open(dir.sub("ring"));
  BatchRing::Block b = *ring->Allocate(100);
  EXPECT_TRUE(other->Adopt(b.offset, b.seq, b.size).ok());
  EXPECT_EQ(other->Adopt(b.offset, b.seq + 1, b.size).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(other->Adopt(b.offset, b.seq, b.size + 1).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(other->Adopt(b.offset + 64, b.seq, b.size).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(other->Adopt(b.offset + 1, b.seq, b.size).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(other->Adopt(0, b.seq, b.size).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(other->Adopt(kCap, b.seq, b.size).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(other->Adopt(b.offset, b.seq, kCap).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(other->Adopt(b.offset, b.seq, UINT64_MAX).status().code(), StatusCode::kDataLoss);
  // Dropped, then reused by a block of the same size: the old descriptor does not read it.
  ring->Unref(b.offset);
  BatchRing::Block reused = *ring->Allocate(100);
  EXPECT_EQ(reused.offset, b.offset);
  EXPECT_EQ(other->Adopt(b.offset, b.seq, b.size).status().code(), StatusCode::kDataLoss);
  ring->Unref(reused.offset);
  EXPECT_EQ(other->Adopt(reused.offset, reused.seq, reused.size).status().code(),
            StatusCode::kDataLoss);
}

TEST(BatchRing, CreateRefusesAnExistingFileAndOpenRefusesWhatIsNotARing) {
  TempDir dir;
  std::ofstream(dir.sub("taken")) << "something";
  EXPECT_EQ(BatchRing::Create(dir.sub("taken"), kCap).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(BatchRing::Create(dir.sub("small"), kCap - 64).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir.sub("small")));
  EXPECT_EQ(BatchRing::Open(dir.sub("taken")).status().code(), StatusCode::kDataLoss);
  std::filesystem::resize_file(dir.sub("taken"), kCap);
  EXPECT_EQ(BatchRing::Open(dir.sub("taken")).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(BatchRing::Open(dir.sub("none")).status().code(), StatusCode::kNotFound);
}

TEST(BatchRing, TheProducerRemovesItsFileAndAConsumerKeepsReading) {
  TempDir dir;
  auto producer = *BatchRing::Create(dir.sub("ring"), kCap);
  auto consumer = *BatchRing::Open(dir.sub("ring"));
  BatchRing::Block b = *producer->Allocate(5000);
  Fill(b);
  producer.reset();
  EXPECT_FALSE(std::filesystem::exists(dir.sub("ring")));
  auto adopted = consumer->Adopt(b.offset, b.seq, b.size);
  ASSERT_TRUE(adopted.ok());
  EXPECT_TRUE(Intact(*adopted));
  consumer.reset();  // only unmaps
}

TEST(BatchRing, AProducerAndAConsumerOnTwoThreads) {
  TempDir dir;
  auto producer = *BatchRing::Create(dir.sub("ring"), kCap);
  auto consumer = *BatchRing::Open(dir.sub("ring"));
  std::mutex mu;
  std::deque<BatchRing::Block> sent;  // descriptors in flight (the pipe)
  constexpr int kBlocks = 3000;
  std::thread produce([&] {
    std::mt19937_64 rnd(3);
    for (int i = 0; i < kBlocks;) {
      std::optional<BatchRing::Block> b = producer->Allocate(rnd() % 9000);
      if (!b) {
        std::this_thread::yield();
        continue;
      }
      Fill(*b);
      producer->Ref(b->offset);
      producer->Unref(b->offset);
      const std::lock_guard lock(mu);
      sent.push_back(*b);
      ++i;
    }
  });
  int got = 0;
  int broken = 0;
  while (got < kBlocks) {
    std::optional<BatchRing::Block> d;
    {
      const std::lock_guard lock(mu);
      if (!sent.empty()) {
        d = sent.front();
        sent.pop_front();
      }
    }
    if (!d) {
      std::this_thread::yield();
      continue;
    }
    auto b = consumer->Adopt(d->offset, d->seq, d->size);
    if (!b.ok() || !Intact(*b)) ++broken;
    if (b.ok()) consumer->Unref(b->offset);
    ++got;
  }
  produce.join();
  EXPECT_EQ(broken, 0);
  EXPECT_EQ(producer->used_bytes(), 0u);
}

// Resident kB of this process's mapping that holds `address` (from /proc/self/smaps), or -1.
long ResidentKiB(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0;
    unsigned long end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {  // a mapping's first line
      inside = begin <= at && at < end;
      continue;
    }
    long kib = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %ld kB", &kib) == 1) return kib;
  }
  return -1;
}

TEST(BatchRing, TheProducersPagesAreMappedWhenItIsMade) {
  // MADV_POPULATE_WRITE came with Linux 5.14; before it the ring works, page by page.
  void* probe = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool can = madvise(probe, 4096, MADV_POPULATE_WRITE) == 0;
  munmap(probe, 4096);
  if (!can) GTEST_SKIP() << "this kernel cannot populate a mapping";
  TempDir dir;
  constexpr uint64_t kRing = uint64_t{8} << 20;
  auto producer = *BatchRing::Create(dir.sub("ring"), kRing);
  std::optional<BatchRing::Block> b = producer->Allocate(100);  // touches its first page only
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(ResidentKiB(b->data), static_cast<long>(kRing >> 10));
  // A consumer's mapping is left to fill as it reads.
  auto consumer = *BatchRing::Open(dir.sub("ring"));
  auto adopted = consumer->Adopt(b->offset, b->seq, b->size);
  ASSERT_TRUE(adopted.ok());
  EXPECT_LT(ResidentKiB(adopted->data), static_cast<long>(kRing >> 10));
}

}  // namespace
}  // namespace gantry::data
