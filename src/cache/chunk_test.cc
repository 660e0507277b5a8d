#include "gantry/cache/chunk.h"

#include <gtest/gtest.h>

#include "common/test_support.h"

namespace gantry {
namespace {

using test_support::RandomBytes;

std::string Compressible(size_t n) {
  std::string s;
  while (s.size() < n) s += "gantry checkpoint shard 0001 of 0128; ";
  s.resize(n);
  return s;
}

TEST(ChunkId, HashOfEmptyInputMatchesPublishedXxh3_128) {
  // The XXH3-128 of zero bytes, as xxhsum -H2 prints it: pins the hash and the hex order.
  EXPECT_EQ(HashChunk("").ToHex(), "99aa06d3014798d86001c324468d497f");
}

TEST(ChunkId, HexRoundTripAndStrictParsing) {
  ChunkId id = HashChunk("hello");
  Result<ChunkId> back = ChunkId::FromHex(id.ToHex());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, id);
  EXPECT_FALSE(ChunkId::FromHex("abc").ok());
  std::string upper = id.ToHex();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  if (upper != id.ToHex()) {
    EXPECT_FALSE(ChunkId::FromHex(upper).ok());
  }
  EXPECT_FALSE(ChunkId::FromHex(std::string(31, '0') + "g").ok());
}

TEST(ChunkId, KeyLayoutFansOutOnTheFirstFourHexDigits) {
  ChunkId id{0xabcdef0123456789ull, 0x0011223344556677ull};
  EXPECT_EQ(ChunkKey(id), "chunks/ab/cd/abcdef01234567890011223344556677");
  Result<ChunkId> back = ChunkIdFromKey(ChunkKey(id));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, id);
  EXPECT_FALSE(ChunkIdFromKey("chunks/ab/ce/abcdef01234567890011223344556677").ok());
  EXPECT_FALSE(ChunkIdFromKey("manifests/x").ok());
  EXPECT_FALSE(ChunkIdFromKey("chunks/ab/cd/abcdef01234567890011223344556677.tmp").ok());
}

TEST(Chunk, RoundTripsWithEveryCodec) {
  for (Codec codec : {Codec::kNone, Codec::kLz4, Codec::kZstd}) {
    for (const std::string& data : {std::string(), RandomBytes(100000, 1), Compressible(300000)}) {
      ChunkId id = HashChunk(data);
      std::string stored = EncodeChunk(data, codec);
      Result<std::string> back = DecodeChunk(stored, id);
      ASSERT_TRUE(back.ok()) << CodecName(codec) << ": " << back.status().ToString();
      EXPECT_EQ(*back, data);
      Result<ChunkHeader> h = ParseChunkHeader(stored);
      ASSERT_TRUE(h.ok());
      EXPECT_EQ(h->raw_length, data.size());
      EXPECT_EQ(h->checksum, id);
    }
  }
}

TEST(Chunk, CompressesCompressibleDataAndStoresRandomDataRaw) {
  std::string text = Compressible(1 << 20);
  EXPECT_LT(EncodeChunk(text, Codec::kZstd).size(), text.size() / 10);
  EXPECT_LT(EncodeChunk(text, Codec::kLz4).size(), text.size() / 5);
  std::string noise = RandomBytes(1 << 16, 2);
  std::string stored = EncodeChunk(noise, Codec::kZstd);
  EXPECT_EQ(stored.size(), kChunkHeaderSize + noise.size());
  EXPECT_EQ(ParseChunkHeader(stored)->codec, Codec::kNone);  // compression did not pay
}

TEST(Chunk, EveryFlippedBitIsDetected) {
  for (Codec codec : {Codec::kNone, Codec::kLz4, Codec::kZstd}) {
    std::string data = codec == Codec::kNone ? RandomBytes(4096, 3) : Compressible(8192);
    ChunkId id = HashChunk(data);
    const std::string stored = EncodeChunk(data, codec);
    // Every byte of the header (except the reserved field), and a spread of payload bytes.
    for (size_t pos = 0; pos < stored.size(); pos += pos < kChunkHeaderSize ? 1 : 97) {
      if (pos == 6 || pos == 7) continue;  // reserved: not interpreted
      for (int bit : {0, 7}) {
        std::string bad = stored;
        bad[pos] = static_cast<char>(bad[pos] ^ (1 << bit));
        Result<std::string> got = DecodeChunk(bad, id);
        ASSERT_FALSE(got.ok()) << CodecName(codec) << " byte " << pos << " bit " << bit;
        EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
        EXPECT_NE(got.status().message().find("corrupt chunk " + id.ToHex()), std::string::npos);
      }
    }
  }
}

TEST(Chunk, TruncationAndWrongIdAreErrors) {
  std::string data = RandomBytes(1000, 4);
  ChunkId id = HashChunk(data);
  std::string stored = EncodeChunk(data, Codec::kNone);
  EXPECT_FALSE(DecodeChunk(stored.substr(0, stored.size() - 1), id).ok());
  EXPECT_FALSE(DecodeChunk(stored.substr(0, 10), id).ok());
  EXPECT_FALSE(DecodeChunk(stored, HashChunk("other")).ok());
  // Unverified decoding (memory tiers) still checks the header against the id.
  EXPECT_FALSE(DecodeChunk(stored, HashChunk("other"), /*verify_hash=*/false).ok());
}

TEST(Chunk, SplitIntoFixedSizeChunks) {
  std::string data = RandomBytes(10, 5);
  auto parts = SplitChunks(data, 4);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].size(), 4u);
  EXPECT_EQ(parts[2].size(), 2u);
  EXPECT_EQ(std::string(parts[0]) + std::string(parts[1]) + std::string(parts[2]), data);
  EXPECT_TRUE(SplitChunks("", 4).empty());
}

TEST(Codec, ParsesNames) {
  EXPECT_EQ(*ParseCodec("zstd"), Codec::kZstd);
  EXPECT_EQ(*ParseCodec("lz4"), Codec::kLz4);
  EXPECT_EQ(*ParseCodec("none"), Codec::kNone);
  EXPECT_FALSE(ParseCodec("gzip").ok());
}

}  // namespace
}  // namespace gantry
