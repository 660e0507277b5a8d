#include "gantry/cache/chunk.h"

#include <lz4.h>
#include <xxhash.h>
#include <zstd.h>

#include <cstring>

namespace gantry {
namespace {

constexpr char kMagic[4] = {'G', 'C', 'H', 'K'};
constexpr uint8_t kVersion = 1;

void PutLe64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is rejected on purpose: one spelling per id, one key per chunk
}

Status Corrupt(const ChunkId& id, const std::string& why) {
  return DataLoss("corrupt chunk " + id.ToHex() + ": " + why);
}

}  // namespace

std::string ChunkId::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(hi >> (60 - 4 * i)) & 0xf];
    out[16 + i] = kDigits[(lo >> (60 - 4 * i)) & 0xf];
  }
  return out;
}

Result<ChunkId> ChunkId::FromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return InvalidArgument("chunk id '" + std::string(hex) + "': want 32 lowercase hex digits");
  }
  ChunkId id;
  for (int i = 0; i < 32; ++i) {
    int v = HexValue(hex[i]);
    if (v < 0) {
      return InvalidArgument("chunk id '" + std::string(hex) + "': want 32 lowercase hex digits");
    }
    uint64_t& half = i < 16 ? id.hi : id.lo;
    half = (half << 4) | static_cast<uint64_t>(v);
  }
  return id;
}

ChunkId HashChunk(std::string_view data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return ChunkId{h.high64, h.low64};
}

std::string ChunkKey(const ChunkId& id) {
  std::string hex = id.ToHex();
  return std::string(kChunkPrefix) + hex.substr(0, 2) + "/" + hex.substr(2, 2) + "/" + hex;
}

Result<ChunkId> ChunkIdFromKey(std::string_view key) {
  // "chunks/ab/cd/" + 32 hex
  if (key.size() != kChunkPrefix.size() + 6 + 32 ||
      key.substr(0, kChunkPrefix.size()) != kChunkPrefix) {
    return InvalidArgument("not a chunk key: '" + std::string(key) + "'");
  }
  std::string_view hex = key.substr(kChunkPrefix.size() + 6);
  GANTRY_ASSIGN_OR_RETURN(ChunkId id, ChunkId::FromHex(hex));
  if (ChunkKey(id) != key) return InvalidArgument("not a chunk key: '" + std::string(key) + "'");
  return id;
}

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kLz4:
      return "lz4";
    case Codec::kZstd:
      return "zstd";
  }
  return "?";
}

Result<Codec> ParseCodec(std::string_view name) {
  if (name == "none") return Codec::kNone;
  if (name == "lz4") return Codec::kLz4;
  if (name == "zstd") return Codec::kZstd;
  return InvalidArgument("unknown codec '" + std::string(name) + "' (want none, lz4 or zstd)");
}

namespace {
void WriteHeader(char* out, Codec codec, uint64_t raw_length, const ChunkId& id) {
  std::memcpy(out, kMagic, 4);
  out[4] = static_cast<char>(kVersion);
  out[5] = static_cast<char>(codec);
  out[6] = out[7] = 0;
  PutLe64(out + 8, raw_length);
  PutLe64(out + 16, id.hi);
  PutLe64(out + 24, id.lo);
}
}  // namespace

std::string RawChunkHeader(const ChunkId& id, uint64_t raw_length) {
  std::string out(kChunkHeaderSize, '\0');
  WriteHeader(out.data(), Codec::kNone, raw_length, id);
  return out;
}

std::string EncodeChunk(std::string_view raw, Codec codec, int level) {
  return EncodeChunkWithId(raw, HashChunk(raw), codec, level);
}

std::string EncodeChunkWithId(std::string_view raw, const ChunkId& id, Codec codec, int level) {
  std::string out(kChunkHeaderSize, '\0');
  size_t payload = 0;
  if (codec == Codec::kLz4 && raw.size() <= static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
    int bound = LZ4_compressBound(static_cast<int>(raw.size()));
    out.resize(kChunkHeaderSize + static_cast<size_t>(bound));
    int n = LZ4_compress_default(raw.data(), out.data() + kChunkHeaderSize,
                                 static_cast<int>(raw.size()), bound);
    payload = n > 0 ? static_cast<size_t>(n) : 0;
  } else if (codec == Codec::kZstd) {
    size_t bound = ZSTD_compressBound(raw.size());
    out.resize(kChunkHeaderSize + bound);
    size_t n = ZSTD_compress(out.data() + kChunkHeaderSize, bound, raw.data(), raw.size(), level);
    payload = ZSTD_isError(n) ? 0 : n;
  }
  if (codec == Codec::kNone || payload == 0 || payload >= raw.size()) {
    codec = Codec::kNone;
    out.resize(kChunkHeaderSize + raw.size());
    if (!raw.empty()) std::memcpy(out.data() + kChunkHeaderSize, raw.data(), raw.size());
  } else {
    out.resize(kChunkHeaderSize + payload);
  }
  WriteHeader(out.data(), codec, raw.size(), id);
  return out;
}

Result<ChunkHeader> ParseChunkHeader(std::string_view stored) {
  if (stored.size() < kChunkHeaderSize) {
    return DataLoss("corrupt chunk: " + std::to_string(stored.size()) +
                    " bytes, shorter than the 32-byte header");
  }
  if (std::memcmp(stored.data(), kMagic, 4) != 0) return DataLoss("corrupt chunk: bad magic");
  ChunkHeader h;
  h.version = static_cast<uint8_t>(stored[4]);
  if (h.version != kVersion) {
    return DataLoss("corrupt chunk: unknown format version " + std::to_string(h.version));
  }
  uint8_t codec = static_cast<uint8_t>(stored[5]);
  if (codec > static_cast<uint8_t>(Codec::kZstd)) {
    return DataLoss("corrupt chunk: unknown codec " + std::to_string(codec));
  }
  h.codec = static_cast<Codec>(codec);
  h.raw_length = GetLe64(stored.data() + 8);
  h.checksum = ChunkId{GetLe64(stored.data() + 16), GetLe64(stored.data() + 24)};
  return h;
}

Result<uint64_t> DecodedLength(std::string_view stored, const ChunkId& id) {
  Result<ChunkHeader> parsed = ParseChunkHeader(stored);
  if (!parsed.ok()) return Corrupt(id, parsed.status().message());
  const ChunkHeader& h = *parsed;
  if (h.checksum != id) return Corrupt(id, "header names chunk " + h.checksum.ToHex());
  const uint64_t payload = stored.size() - kChunkHeaderSize;
  // A rotted length field must not make us allocate terabytes: no codec expands more than
  // this (zstd's maximum ratio is far lower; lz4's is 255).
  if (h.raw_length > (payload + 1) * 4096 && h.codec != Codec::kNone) {
    return Corrupt(id, "implausible raw length " + std::to_string(h.raw_length));
  }
  if (h.codec == Codec::kNone && payload != h.raw_length) {
    return Corrupt(
        id, "length " + std::to_string(payload) + ", header says " + std::to_string(h.raw_length));
  }
  return h.raw_length;
}

Status DecodeChunkInto(std::string_view stored, const ChunkId& id, char* out, uint64_t out_size,
                       bool verify_hash) {
  GANTRY_ASSIGN_OR_RETURN(uint64_t raw_length, DecodedLength(stored, id));
  if (raw_length != out_size) {
    return Corrupt(id, "decodes to " + std::to_string(raw_length) + " bytes, expected " +
                           std::to_string(out_size));
  }
  const Codec codec = static_cast<Codec>(static_cast<uint8_t>(stored[5]));
  std::string_view payload = stored.substr(kChunkHeaderSize);
  switch (codec) {
    case Codec::kNone:
      if (raw_length > 0) std::memcpy(out, payload.data(), raw_length);
      break;
    case Codec::kLz4: {
      if (raw_length > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE)) {
        return Corrupt(id, "lz4 raw length too large");
      }
      int n = LZ4_decompress_safe(payload.data(), out, static_cast<int>(payload.size()),
                                  static_cast<int>(raw_length));
      if (n < 0 || static_cast<uint64_t>(n) != raw_length) {
        return Corrupt(id,
                       "lz4 payload does not decode to " + std::to_string(raw_length) + " bytes");
      }
      break;
    }
    case Codec::kZstd: {
      size_t n = ZSTD_decompress(out, raw_length, payload.data(), payload.size());
      if (ZSTD_isError(n) || n != raw_length) {
        return Corrupt(id,
                       "zstd payload does not decode to " + std::to_string(raw_length) + " bytes");
      }
      break;
    }
  }
  if (!verify_hash) return Status::Ok();
  ChunkId actual = HashChunk(std::string_view(out, raw_length));
  if (actual != id) return Corrupt(id, "content hashes to " + actual.ToHex());
  return Status::Ok();
}

Result<std::string> DecodeChunk(std::string_view stored, const ChunkId& id, bool verify_hash) {
  GANTRY_ASSIGN_OR_RETURN(uint64_t raw_length, DecodedLength(stored, id));
  std::string raw(raw_length, '\0');
  GANTRY_RETURN_IF_ERROR(DecodeChunkInto(stored, id, raw.data(), raw.size(), verify_hash));
  return raw;
}

std::vector<std::string_view> SplitChunks(std::string_view data, uint64_t chunk_size) {
  std::vector<std::string_view> out;
  if (chunk_size == 0) chunk_size = kDefaultChunkSize;
  out.reserve(data.size() / chunk_size + 1);
  for (uint64_t off = 0; off < data.size(); off += chunk_size) {
    out.push_back(data.substr(off, chunk_size));
  }
  return out;
}

}  // namespace gantry
