#include "gantry/common/parallel_copy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace gantry {
namespace {

// Pieces of random sizes (some empty) from a random source into a destination with a gap
// after each piece; returns the destination as it must be after the copy.
struct Job {
  std::string from;
  std::string to;
  std::string want;
  std::vector<CopyPiece> pieces;
};

Job MakeJob(uint32_t seed, int count, size_t max_piece) {
  std::mt19937_64 rng(seed);
  Job j;
  std::vector<std::pair<size_t, size_t>> at;  // (source offset, size)
  size_t from_size = 0, to_size = 0;
  for (int i = 0; i < count; ++i) {
    const size_t size = (i % 5 == 3) ? 0 : rng() % (max_piece + 1);
    at.emplace_back(from_size, size);
    from_size += size + rng() % 7;
  }
  j.from.resize(from_size);
  for (char& c : j.from) c = static_cast<char>(rng());
  std::vector<size_t> to_at;
  for (const auto& [offset, size] : at) {
    to_at.push_back(to_size);
    to_size += size + 3;  // the gap must stay untouched
  }
  j.to.assign(to_size, '\x5a');
  j.want = j.to;
  for (size_t i = 0; i < at.size(); ++i) {
    j.want.replace(to_at[i], at[i].second, j.from, at[i].first, at[i].second);
    j.pieces.push_back({j.to.data() + to_at[i], j.from.data() + at[i].first, at[i].second});
  }
  return j;
}

TEST(ParallelCopy, CopiesEveryPieceExactlyWithAnyNumberOfHelpers) {
  for (int helpers : {0, 1, 3}) {
    for (size_t min_share : {size_t{1}, size_t{64}, size_t{4096}, size_t{1} << 30}) {
      for (uint32_t seed = 1; seed <= 5; ++seed) {
        Job j = MakeJob(seed, 1 + static_cast<int>(seed) * 7, 20000);
        ParallelCopy copy(helpers);
        EXPECT_TRUE(copy.Run(j.pieces, min_share));
        ASSERT_EQ(j.to, j.want) << "helpers " << helpers << " min_share " << min_share << " seed "
                                << seed;
      }
    }
  }
}

TEST(ParallelCopy, SplitsOnePieceLargerThanEveryShare) {
  // One large sample, the shape of a batch of one: its bytes are split, not given to one thread.
  Job j = MakeJob(9, 1, 0);
  j.from.assign(3 << 20, '\0');
  for (size_t i = 0; i < j.from.size(); ++i) j.from[i] = static_cast<char>(i * 131 + 7);
  j.to.assign(j.from.size(), '\0');
  j.pieces = {{j.to.data(), j.from.data(), j.from.size()}};
  ParallelCopy copy(3);
  EXPECT_TRUE(copy.Run(j.pieces, 1 << 18));
  EXPECT_EQ(j.to, j.from);
}

TEST(ParallelCopy, NothingToCopyAndRepeatedJobs) {
  ParallelCopy copy(2);
  EXPECT_TRUE(copy.Run({}, 1));
  std::vector<CopyPiece> empty = {{nullptr, nullptr, 0}, {nullptr, nullptr, 0}};
  EXPECT_TRUE(copy.Run(empty, 1));
  for (uint32_t seed = 1; seed <= 50; ++seed) {  // the helpers are reused job after job
    Job j = MakeJob(seed, 40, 3000);
    EXPECT_TRUE(copy.Run(j.pieces, 256));
    ASSERT_EQ(j.to, j.want) << seed;
  }
}

// A file holding `bytes`, unlinked at once: the descriptor keeps it readable.
int TempFileWith(const std::string& bytes) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/pcopy-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return -1;
  unlink(path.c_str());
  if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(ParallelCopy, PiecesFromAFileAreReadStraightToTheirPlace) {
  // Every other piece comes from a file holding the same bytes as `from`, at the same offsets:
  // the result must not depend on which side a piece came from, split or not.
  for (int helpers : {0, 1, 3}) {
    for (size_t min_share : {size_t{1}, size_t{1} << 30}) {
      Job j = MakeJob(11, 60, 300000);
      const int fd = TempFileWith(j.from);
      ASSERT_GE(fd, 0);
      for (size_t i = 0; i < j.pieces.size(); i += 2) {
        j.pieces[i].fd = fd;
        j.pieces[i].file_offset = static_cast<uint64_t>(j.pieces[i].from - j.from.data());
        j.pieces[i].from = nullptr;
      }
      ParallelCopy copy(helpers);
      EXPECT_TRUE(copy.Run(j.pieces, min_share));
      EXPECT_EQ(j.to, j.want) << "helpers " << helpers << " min_share " << min_share;
      close(fd);
    }
  }
}

TEST(ParallelCopy, AFileShorterThanItsPieceFailsTheRun) {
  for (int helpers : {0, 2}) {
    const std::string bytes(1 << 20, 'q');
    const int fd = TempFileWith(bytes);
    ASSERT_GE(fd, 0);
    std::string to(2 << 20, '\0');
    std::string mem(1 << 20, 'm');
    // A piece from memory, then one reading past the file's end (cut short under the reader).
    std::vector<CopyPiece> pieces = {{to.data(), mem.data(), mem.size()},
                                     {to.data() + mem.size(), nullptr, 1 << 20, fd, 4096}};
    ParallelCopy copy(helpers);
    EXPECT_FALSE(copy.Run(pieces, 1 << 16)) << helpers;
    EXPECT_EQ(to.substr(0, mem.size()), mem);
    close(fd);
  }
}

// Start hands the job to the helpers and returns; Finish has the caller take what is left. The
// bytes are the same whichever side copied them, also when the caller finishes at once, late,
// or not at all (the Started's destructor finishes it).
TEST(ParallelCopy, AStartedJobIsFinishedByItsCaller) {
  for (int helpers : {0, 1, 3}) {
    ParallelCopy copy(helpers);
    for (int wait_us : {0, 2000}) {
      Job j = MakeJob(21 + wait_us, 80, 400000);
      ParallelCopy::Started started = copy.Start(j.pieces);
      EXPECT_TRUE(started.pending());
      if (wait_us > 0) usleep(wait_us);  // the helpers may have taken every unit by now
      if (helpers > 0 && wait_us > 0) {
        // The helpers copy it all on their own, without the caller.
        for (int i = 0; i < 10000 && !started.copied(); ++i) usleep(1000);
        ASSERT_TRUE(started.copied()) << "helpers " << helpers;
        EXPECT_EQ(j.to, j.want) << "helpers " << helpers << ", before Finish";
      }
      EXPECT_TRUE(ParallelCopy::Finish(started));
      EXPECT_FALSE(started.pending());
      EXPECT_EQ(j.to, j.want) << "helpers " << helpers << " wait " << wait_us;
      EXPECT_TRUE(ParallelCopy::Finish(started));  // finished already: nothing to do
    }
    Job j = MakeJob(5, 40, 300000);
    {
      ParallelCopy::Started started = copy.Start(j.pieces);
      ParallelCopy::Started moved = std::move(started);
      EXPECT_FALSE(started.pending());  // NOLINT(bugprone-use-after-move): moved from
      EXPECT_TRUE(moved.pending());
    }
    EXPECT_EQ(j.to, j.want) << "helpers " << helpers << ": finished by the destructor";
  }
  ParallelCopy::Started never;
  EXPECT_FALSE(never.pending());
  EXPECT_TRUE(ParallelCopy::Finish(never));
}

TEST(ParallelCopy, AStartedJobReadingPastAFilesEndFailsItsFinish) {
  for (int helpers : {0, 1}) {
    const int fd = TempFileWith(std::string(1 << 20, 'q'));
    ASSERT_GE(fd, 0);
    std::string to(2 << 20, '\0');
    std::vector<CopyPiece> pieces = {{to.data(), nullptr, 1 << 20, fd, 0},
                                     {to.data() + (1 << 20), nullptr, 1 << 20, fd, 4096}};
    ParallelCopy copy(helpers);
    ParallelCopy::Started started = copy.Start(pieces);
    EXPECT_FALSE(ParallelCopy::Finish(started)) << helpers;
    EXPECT_EQ(to.substr(0, 1 << 20), std::string(1 << 20, 'q'));
    close(fd);
  }
}

TEST(ParallelCopy, NegativeHelpersMeansNone) {
  ParallelCopy copy(-3);
  EXPECT_EQ(copy.helpers(), 0);
  Job j = MakeJob(4, 20, 1000);
  EXPECT_TRUE(copy.Run(j.pieces, 1));
  EXPECT_EQ(j.to, j.want);
  EXPECT_GE(ParallelCopy::DefaultHelpers(), 0);
  EXPECT_LE(ParallelCopy::DefaultHelpers(), 1);
}

}  // namespace
}  // namespace gantry
