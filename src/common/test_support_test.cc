// The shared test payload generator: the same bytes for the same seed, other bytes for another
// seed, and any slice of a stream equal to the same slice of the whole (tests stream gigabytes
// in pieces and compare checksums with what they read back).
#include "common/test_support.h"

#include <gtest/gtest.h>

#include <string>

namespace gantry::test_support {
namespace {

TEST(RandomBytes, SameSeedSameBytesOtherSeedOtherBytes) {
  EXPECT_EQ(RandomBytes(1000, 7), RandomBytes(1000, 7));
  EXPECT_NE(RandomBytes(1000, 7), RandomBytes(1000, 8));
  EXPECT_EQ(RandomBytes(0, 7), "");
  // A prefix of a longer run of the same stream.
  EXPECT_EQ(RandomBytes(1000, 7), RandomBytes(1013, 7).substr(0, 1000));
  // Pinned: the first word is SplitMix64's first output for seed 0, little-endian.
  EXPECT_EQ(RandomBytes(8, 0), std::string("\xaf\xcd\x1d\x7b\x39\xa8\x20\xe2", 8));
}

TEST(FillRandomBytes, AnySliceEqualsTheSameSliceOfTheWhole) {
  const std::string whole = RandomBytes(100, 3);
  for (size_t offset : {0, 1, 7, 8, 9, 15, 16, 63}) {
    for (size_t n : {0, 1, 7, 8, 9, 20}) {
      std::string slice(n, '\0');
      FillRandomBytes(3, offset, slice);
      EXPECT_EQ(slice, whole.substr(offset, n)) << offset << "+" << n;
    }
  }
}

TEST(RandomBytes, DoesNotRepeatOrStick) {
  const std::string s = RandomBytes(1 << 16, 1);
  int counts[256] = {};
  for (char c : s) ++counts[static_cast<unsigned char>(c)];
  for (int count : counts) {
    EXPECT_GT(count, 128);  // 256 expected per value
    EXPECT_LT(count, 384);
  }
  EXPECT_EQ(s.find(s.substr(0, 64), 1), std::string::npos);
}

}  // namespace
}  // namespace gantry::test_support
