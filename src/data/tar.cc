// Tar reading and writing (tar.h).
#include "gantry/data/tar.h"

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

namespace gantry::data {
namespace {

// ustar header fields: offset and length.
constexpr size_t kNameOff = 0, kNameLen = 100;
constexpr size_t kModeOff = 100;
constexpr size_t kUidOff = 108, kGidOff = 116;
constexpr size_t kSizeOff = 124, kSizeLen = 12;
constexpr size_t kMtimeOff = 136;
constexpr size_t kChksumOff = 148, kChksumLen = 8;
constexpr size_t kTypeOff = 156;
constexpr size_t kMagicOff = 257;
constexpr size_t kPrefixOff = 345, kPrefixLen = 155;
constexpr uint64_t kRecord = 10240;
// The largest member size we accept: anything bigger cannot be in memory anyway, and keeping
// sizes below 2^62 makes every offset sum below overflow-free.
constexpr uint64_t kMaxMemberSize = uint64_t{1} << 62;

std::string At(const std::string& where, uint64_t offset) {
  return where + ": offset " + std::to_string(offset);
}

// Where a header is, for error messages: formatted only when a message is made, since a shard
// of small samples has thousands of headers and none of them is usually wrong.
struct HeaderAt {
  const std::string& where;
  uint64_t offset;
  std::string str() const { return At(where, offset); }
};

// The bytes of a NUL-terminated (or full-width) field.
std::string_view CString(const char* p, size_t len) {
  const void* nul = std::memchr(p, '\0', len);
  return std::string_view(p, nul == nullptr ? len : static_cast<const char*>(nul) - p);
}

// A numeric header field: octal digits between optional leading spaces and a space or NUL
// terminator, or GNU base-256 (high bit of the first byte set) for values octal cannot hold.
Result<uint64_t> ParseNumber(const char* p, size_t len, const char* what, const HeaderAt& at) {
  const auto b0 = static_cast<unsigned char>(p[0]);
  if (b0 & 0x80) {
    if (b0 == 0xff) return InvalidArgument(at.str() + ": " + what + " is negative (base-256)");
    uint64_t v = b0 & 0x7f;
    for (size_t i = 1; i < len; ++i) {
      if (v > (std::numeric_limits<uint64_t>::max() >> 8)) {
        return InvalidArgument(at.str() + ": " + what + " overflows 64 bits (base-256)");
      }
      v = (v << 8) | static_cast<unsigned char>(p[i]);
    }
    return v;
  }
  size_t i = 0;
  while (i < len && p[i] == ' ') ++i;
  uint64_t v = 0;
  bool digits = false;
  for (; i < len && p[i] != '\0' && p[i] != ' '; ++i) {
    if (p[i] < '0' || p[i] > '7') {
      return InvalidArgument(at.str() + ": " + what + " is not an octal number");
    }
    if (v > (std::numeric_limits<uint64_t>::max() >> 3)) {
      return InvalidArgument(at.str() + ": " + what + " overflows 64 bits");
    }
    v = (v << 3) | static_cast<uint64_t>(p[i] - '0');
    digits = true;
  }
  for (; i < len; ++i) {
    if (p[i] != '\0' && p[i] != ' ') {
      return InvalidArgument(at.str() + ": " + what + " is not an octal number");
    }
  }
  if (!digits) return uint64_t{0};  // an all-NUL field reads as 0, as in GNU tar
  return v;
}

bool IsZeroBlock(const char* p) {
  return std::all_of(p, p + kTarBlock, [](char c) { return c == '\0'; });
}

// The sum of a header's 512 bytes read as unsigned, and the count of those of 128 or more
// (each of which reads 256 less as signed). SSE2's sum of absolute differences adds 16 bytes in
// one instruction: a plain loop of 64-bit sums, which GCC does not vectorise at -O2, cost the
// read-ahead's thread 0.17 us of a 4 KiB sample's 0.9 (docs/performance.md).
struct BlockSums {
  uint64_t unsigned_sum = 0;
  uint64_t high = 0;
};

BlockSums SumBlock(const char* h) {
  BlockSums s;
#if defined(__SSE2__) && defined(__x86_64__)
  const __m128i zero = _mm_setzero_si128();
  const __m128i ones = _mm_set1_epi8(1);
  __m128i sum = zero, high = zero;
  for (size_t i = 0; i < kTarBlock; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    sum = _mm_add_epi64(sum, _mm_sad_epu8(v, zero));
    high = _mm_add_epi64(high, _mm_sad_epu8(_mm_and_si128(_mm_srli_epi16(v, 7), ones), zero));
  }
  s.unsigned_sum = static_cast<uint64_t>(_mm_cvtsi128_si64(sum)) +
                   static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sum, sum)));
  s.high = static_cast<uint64_t>(_mm_cvtsi128_si64(high)) +
           static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(high, high)));
#else
  for (size_t i = 0; i < kTarBlock; ++i) {
    const auto b = static_cast<unsigned char>(h[i]);
    s.unsigned_sum += b;
    s.high += b >> 7;
  }
#endif
  return s;
}

// Checks the header checksum: the sum of the header bytes with the checksum field read as
// spaces, unsigned (POSIX) or signed (some old tars).
Status CheckChecksum(const char* h, const HeaderAt& at) {
  Result<uint64_t> stored_or = ParseNumber(h + kChksumOff, kChksumLen, "checksum", at);
  if (!stored_or.ok()) {
    return DataLoss(at.str() + ": no tar header checksum (not a tar archive, or damaged)");
  }
  const auto stored = static_cast<int64_t>(*stored_or);
  // Summed over the whole block, then the checksum field counted as spaces.
  const BlockSums block = SumBlock(h);
  auto unsigned_sum = static_cast<int64_t>(block.unsigned_sum);
  auto signed_sum = unsigned_sum - 256 * static_cast<int64_t>(block.high);
  for (size_t i = kChksumOff; i < kChksumOff + kChksumLen; ++i) {
    unsigned_sum += ' ' - static_cast<int64_t>(static_cast<unsigned char>(h[i]));
    signed_sum += ' ' - static_cast<int64_t>(static_cast<signed char>(h[i]));
  }
  if (stored != unsigned_sum && stored != signed_sum) {
    return DataLoss(at.str() + ": tar header checksum mismatch (not a tar archive, or damaged)");
  }
  return Status::Ok();
}

struct PaxRecords {
  std::optional<std::string> path;
  std::optional<uint64_t> size;
};

// Records "LEN KEY=VALUE\n", LEN counting the whole record in bytes.
Result<PaxRecords> ParsePax(std::string_view data, const std::string& at) {
  PaxRecords out;
  while (!data.empty()) {
    if (data.front() == '\0') break;  // some writers pad the block with NULs
    size_t sp = data.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp > 20) {
      return InvalidArgument(at + ": malformed pax record (no length)");
    }
    uint64_t len = 0;
    for (size_t i = 0; i < sp; ++i) {
      if (data[i] < '0' || data[i] > '9') {
        return InvalidArgument(at + ": malformed pax record length");
      }
      len = len * 10 + static_cast<uint64_t>(data[i] - '0');
    }
    if (len <= sp + 1 || len > data.size() || data[len - 1] != '\n') {
      return InvalidArgument(at + ": pax record length " + std::to_string(len) +
                             " does not fit its data");
    }
    const std::string_view record = data.substr(sp + 1, len - sp - 2);
    const size_t eq = record.find('=');
    if (eq == std::string_view::npos) return InvalidArgument(at + ": pax record without '='");
    const std::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      out.path = std::string(value);
    } else if (key == "size") {
      uint64_t v = 0;
      if (value.empty() || value.size() > 19) {
        return InvalidArgument(at + ": pax size '" + std::string(value) + "' is not a size");
      }
      for (char c : value) {
        if (c < '0' || c > '9') {
          return InvalidArgument(at + ": pax size '" + std::string(value) + "' is not a size");
        }
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      out.size = v;
    }
    data.remove_prefix(len);
  }
  return out;
}

uint64_t PadToBlock(uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

}  // namespace

Result<std::vector<TarMember>> ListTarMembers(std::string_view archive, const std::string& where) {
  return ListTarMembers(archive, where, nullptr);
}

Result<std::vector<TarMember>> ListTarMembers(std::string_view archive, const std::string& where,
                                              const TarFill& fill) {
  std::vector<TarMember> members;
  std::optional<std::string> long_name;  // from a GNU 'L' header, for the next member
  PaxRecords pax;                        // from a pax 'x' header, for the next member
  uint64_t off = 0;
  while (off < archive.size()) {
    if (archive.size() - off < kTarBlock) {
      return DataLoss(At(where, off) + ": archive is cut short inside a header block");
    }
    if (fill) GANTRY_RETURN_IF_ERROR(fill(off, kTarBlock));
    const char* h = archive.data() + off;
    if (IsZeroBlock(h)) return members;  // end of archive
    const HeaderAt at{where, off};
    // Headers sit a member apart, each on a page the hardware prefetcher does not cross to, so
    // reading one is a cache miss per line: the next header's lines are fetched while this one
    // is checked (docs/performance.md). The size is parsed before the checksum for that, its
    // error reported after it (a damaged header is a checksum error first).
    Result<uint64_t> size_or = ParseNumber(h + kSizeOff, kSizeLen, "size", at);
    if (size_or.ok() && *size_or <= archive.size() - off - kTarBlock) {
      const uint64_t n = off + kTarBlock + PadToBlock(*size_or);
      if (n <= archive.size() && archive.size() - n >= kTarBlock) {
        for (size_t line = 0; line < kTarBlock; line += 64) {
          __builtin_prefetch(archive.data() + n + line, 0, 0);
        }
      }
    }
    GANTRY_RETURN_IF_ERROR(CheckChecksum(h, at));
    GANTRY_ASSIGN_OR_RETURN(uint64_t size, std::move(size_or));
    const char type = h[kTypeOff];
    const bool extension = type == 'x' || type == 'g' || type == 'L' || type == 'K';
    if (!extension && pax.size) size = *pax.size;
    if (size > kMaxMemberSize) {
      return InvalidArgument(at.str() + ": member size " + std::to_string(size) + " is too large");
    }
    const uint64_t data_offset = off + kTarBlock;
    if (size > archive.size() - data_offset) {
      return DataLoss(at.str() + ": member claims " + std::to_string(size) +
                      " bytes but the archive " + "ends after " +
                      std::to_string(archive.size() - data_offset) + " (truncated or damaged)");
    }
    const std::string_view data = archive.substr(data_offset, size);
    if (fill && (type == 'x' || type == 'g' || type == 'L')) {
      GANTRY_RETURN_IF_ERROR(fill(data_offset, size));
    }
    // The data's padding to a whole block must be there too: a file cut inside it is cut short
    // (GNU tar and tarfile both refuse it), even though this member's bytes are whole.
    const uint64_t next = data_offset + PadToBlock(size);
    if (next > archive.size()) {
      return DataLoss(at.str() + ": archive is cut short inside the padding of member data");
    }
    switch (type) {
      case 'x': {
        GANTRY_ASSIGN_OR_RETURN(pax, ParsePax(data, at.str()));
        break;
      }
      case 'g':
        GANTRY_RETURN_IF_ERROR(ParsePax(data, at.str()).status());  // checked, not applied
        break;
      case 'L':
        long_name = std::string(CString(data.data(), data.size()));
        break;
      case 'K':
        break;
      default: {
        TarMember m;
        if (pax.path) {
          m.name = *pax.path;
        } else if (long_name) {
          m.name = *long_name;
        } else {
          const std::string_view name = CString(h + kNameOff, kNameLen);
          // The prefix field is POSIX ustar's ("ustar\0"); old GNU tars keep times there.
          const bool posix = std::memcmp(h + kMagicOff, "ustar\0", 6) == 0;
          const std::string_view prefix = posix ? CString(h + kPrefixOff, kPrefixLen) : "";
          m.name =
              prefix.empty() ? std::string(name) : std::string(prefix) + "/" + std::string(name);
        }
        m.type = type;
        m.header_offset = off;
        m.data_offset = data_offset;
        m.size = size;
        members.push_back(std::move(m));
        pax = PaxRecords{};
        long_name.reset();
        break;
      }
    }
    off = next;
  }
  return members;
}

namespace {

void PutOctal(char* field, size_t len, uint64_t v) {
  // len-1 digits, zero-padded, then NUL.
  for (size_t i = len - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  field[len - 1] = '\0';
}

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string PaxRecord(std::string_view key, std::string_view value) {
  // The length counts its own digits, so find the fixed point.
  const size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

}  // namespace

void TarWriter::AppendHeader(std::string_view name, char type, uint64_t size) {
  char h[kTarBlock] = {};
  std::memcpy(h + kNameOff, name.data(), std::min(name.size(), kNameLen));
  PutOctal(h + kModeOff, 8, 0444);
  PutOctal(h + kUidOff, 8, 0);
  PutOctal(h + kGidOff, 8, 0);
  PutOctal(h + kSizeOff, kSizeLen, size);
  PutOctal(h + kMtimeOff, 12, static_cast<uint64_t>(std::max<int64_t>(mtime_, 0)));
  h[kTypeOff] = type;
  std::memcpy(h + kMagicOff,
              "ustar\0"
              "00",
              8);
  std::memset(h + kChksumOff, ' ', kChksumLen);
  uint64_t sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  // Six digits, NUL, space: the layout tar and tarfile write.
  PutOctal(h + kChksumOff, 7, sum);
  h[kChksumOff + 7] = ' ';
  buf_.append(h, kTarBlock);
}

Status TarWriter::Add(std::string_view name, std::string_view data) {
  if (name.empty()) return InvalidArgument("tar member name is empty");
  if (name.find('\0') != std::string_view::npos) {
    return InvalidArgument("tar member name contains a NUL byte");
  }
  if (name.front() == '/') {
    return InvalidArgument("tar member name '" + std::string(name) + "' is absolute");
  }
  for (size_t start = 0; start <= name.size();) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    if (part == "." || part == "..") {
      return InvalidArgument("tar member name '" + std::string(name) + "' has a '" +
                             std::string(part) + "' component");
    }
    start = end + 1;
  }
  // Octal in 11 digits holds sizes below 8 GiB.
  const bool big = data.size() >= (uint64_t{1} << 33);
  const bool long_name = name.size() > kNameLen || !IsAscii(name);
  if (big || long_name) {
    std::string records;
    if (long_name) records += PaxRecord("path", name);
    if (big) records += PaxRecord("size", std::to_string(data.size()));
    AppendHeader("././@PaxHeader", 'x', records.size());
    buf_ += records;
    buf_.append(PadToBlock(records.size()) - records.size(), '\0');
  }
  // The fallback name in the ustar header: readers that ignore pax see the first 100 bytes.
  AppendHeader(long_name ? name.substr(0, kNameLen) : name, '0', big ? 0 : data.size());
  buf_.append(data);
  buf_.append(PadToBlock(data.size()) - data.size(), '\0');
  return Status::Ok();
}

std::string TarWriter::Finish() {
  buf_.append(2 * kTarBlock, '\0');
  buf_.append((kRecord - buf_.size() % kRecord) % kRecord, '\0');
  std::string out;
  out.swap(buf_);
  return out;
}

}  // namespace gantry::data
