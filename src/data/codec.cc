// zstd, gzip and digests for the dataset formats (codec.h).
#include "data/codec.h"

#include <openssl/evp.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <memory>

namespace gantry::data::internal {
namespace {

// The output buffer grows by at most this much at a time, so a hostile stream that claims a
// huge size costs memory only as fast as it really produces bytes.
constexpr size_t kGrowStep = 4u << 20;

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

const EVP_MD* EvpFor(std::string_view algo) {
  struct Name {
    std::string_view python;
    const char* openssl;
  };
  static constexpr std::array<Name, 12> kNames = {{{"md5", "MD5"},
                                                   {"sha1", "SHA1"},
                                                   {"sha224", "SHA224"},
                                                   {"sha256", "SHA256"},
                                                   {"sha384", "SHA384"},
                                                   {"sha512", "SHA512"},
                                                   {"sha3_224", "SHA3-224"},
                                                   {"sha3_256", "SHA3-256"},
                                                   {"sha3_384", "SHA3-384"},
                                                   {"sha3_512", "SHA3-512"},
                                                   {"blake2b", "BLAKE2B-512"},
                                                   {"blake2s", "BLAKE2S-256"}}};
  for (const Name& n : kNames) {
    if (n.python == algo) return EVP_get_digestbyname(n.openssl);
  }
  return nullptr;
}

}  // namespace

Result<std::string> ZstdDecompress(std::string_view in, uint64_t max_out,
                                   const std::string& where) {
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) return ResourceExhausted(where + ": cannot allocate a zstd context");
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  size_t last = 1;  // ZSTD_decompressStream's hint: 0 once every frame is whole and flushed
  for (;;) {
    if (out.size() >= max_out) {
      // One byte of room tells "exactly max_out" from "more than max_out".
      std::array<char, 1> probe{};
      ZSTD_outBuffer o{probe.data(), probe.size(), 0};
      last = ZSTD_decompressStream(dctx.get(), &o, &input);
      if (ZSTD_isError(last)) {
        return DataLoss(where + ": damaged zstd data: " + ZSTD_getErrorName(last));
      }
      if (o.pos > 0) {
        return ResourceExhausted(where + ": zstd data decompresses to more than " +
                                 std::to_string(max_out) + " bytes");
      }
      if (input.pos == input.size) break;
      continue;
    }
    const size_t used = out.size();
    const size_t room = static_cast<size_t>(std::min<uint64_t>(kGrowStep, max_out - used));
    out.resize(used + room);
    ZSTD_outBuffer o{out.data() + used, room, 0};
    last = ZSTD_decompressStream(dctx.get(), &o, &input);
    out.resize(used + o.pos);
    if (ZSTD_isError(last)) {
      return DataLoss(where + ": damaged zstd data: " + ZSTD_getErrorName(last));
    }
    // Done, or out of input with room to spare (so zstd wants more: cut short).
    if (input.pos == input.size && (last == 0 || o.pos < room)) break;
  }
  if (last != 0) return DataLoss(where + ": zstd data is cut short");
  return out;
}

Result<std::string> ZstdCompress(std::string_view in, int level) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), level);
  if (ZSTD_isError(n)) return Internal(std::string("zstd compress: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

Result<std::string> GunzipBounded(std::string_view in, uint64_t max_out, const std::string& where) {
  z_stream zs{};
  // 15 + 16: gzip wrapper only (a zlib or raw stream is not a .gz file).
  if (inflateInit2(&zs, 15 + 16) != Z_OK) {
    return ResourceExhausted(where + ": cannot allocate a zlib stream");
  }
  std::unique_ptr<z_stream, decltype(&inflateEnd)> guard(&zs, inflateEnd);
  std::string out;
  size_t pos = 0;  // input bytes handed to zlib so far
  for (;;) {
    if (zs.avail_in == 0) {
      if (pos == in.size()) break;
      const size_t n = std::min<size_t>(in.size() - pos, 1u << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
      zs.avail_in = static_cast<uInt>(n);
      pos += n;
    }
    int rc = Z_OK;
    if (out.size() >= max_out) {
      // One byte of room tells "exactly max_out" from "more than max_out".
      unsigned char probe = 0;
      zs.next_out = &probe;
      zs.avail_out = 1;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (zs.avail_out == 0) {
        return ResourceExhausted(where + ": gzip data decompresses to more than " +
                                 std::to_string(max_out) + " bytes");
      }
    } else {
      const size_t used = out.size();
      const size_t room = static_cast<size_t>(std::min<uint64_t>(kGrowStep, max_out - used));
      out.resize(used + room);
      zs.next_out = reinterpret_cast<Bytef*>(out.data() + used);
      zs.avail_out = static_cast<uInt>(room);
      rc = inflate(&zs, Z_NO_FLUSH);
      out.resize(used + room - zs.avail_out);
    }
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0 && pos == in.size()) return out;
      // Another member follows (concatenated .gz files are one stream to gzip -d).
      if (inflateReset(&zs) != Z_OK) return Internal(where + ": inflateReset failed");
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) continue;  // needs more input
    if (rc != Z_OK) {
      return DataLoss(where + ": damaged gzip data: " + (zs.msg != nullptr ? zs.msg : "error"));
    }
  }
  return DataLoss(where + ": gzip data is cut short");
}

Result<std::string> Gzip(std::string_view in, int level) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Internal("deflateInit2 failed");
  }
  std::unique_ptr<z_stream, decltype(&deflateEnd)> guard(&zs, deflateEnd);
  std::string out(deflateBound(&zs, in.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) return Internal("deflate did not finish");
  out.resize(zs.total_out);
  return out;
}

bool IsKnownDigest(std::string_view algo) {
  return EvpFor(algo) != nullptr || algo == "xxh32" || algo == "xxh64" || algo == "xxh3_64" ||
         algo == "xxh128" || algo == "xxh3_128";
}

Result<std::string> HexDigest(std::string_view algo, std::string_view data) {
  if (const EVP_MD* md = EvpFor(algo); md != nullptr) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(data.data(), data.size(), out, &len, md, nullptr) != 1) {
      return Internal("digest " + std::string(algo) + " failed");
    }
    return Hex(out, len);
  }
  // python-xxhash's hexdigest() is the canonical (big-endian) form.
  if (algo == "xxh32") {
    XXH32_canonical_t c;
    XXH32_canonicalFromHash(&c, XXH32(data.data(), data.size(), 0));
    return Hex(c.digest, sizeof(c.digest));
  }
  if (algo == "xxh64") {
    XXH64_canonical_t c;
    XXH64_canonicalFromHash(&c, XXH64(data.data(), data.size(), 0));
    return Hex(c.digest, sizeof(c.digest));
  }
  if (algo == "xxh3_64") {
    XXH64_canonical_t c;
    XXH64_canonicalFromHash(&c, XXH3_64bits(data.data(), data.size()));
    return Hex(c.digest, sizeof(c.digest));
  }
  if (algo == "xxh128" || algo == "xxh3_128") {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data.data(), data.size()));
    return Hex(c.digest, sizeof(c.digest));
  }
  return Unimplemented("unknown hash algorithm '" + std::string(algo) + "'");
}

}  // namespace gantry::data::internal
