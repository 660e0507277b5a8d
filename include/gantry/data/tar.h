// POSIX tar archives held in memory: a reader that lists the members of a whole archive and a
// writer that builds one. This is the container of WebDataset shards (webdataset.h).
//
// The reader understands what the tools that write shards emit: ustar headers (with the
// 155-byte prefix), POSIX.1-2001 pax extended headers ('x'; 'g' is parsed and ignored), GNU
// long names ('L'; 'K' long link names are skipped) and GNU base-256 sizes. Member names are
// only names to it: "../x" or "/etc/passwd" come back as given, nothing is ever written to a
// file system. Every header field is checked before it is used, so a hostile archive (a size
// past the end, a negative or overflowing size, a broken pax record) is a clean error:
//   DataLoss         a header checksum mismatch, or a member that runs past the end (truncated)
//   InvalidArgument  a malformed field (size, pax record)
// each naming the archive and the header's byte offset. Memory: the member list only (at most
// one entry per 512-byte block of the archive).
//
//   GANTRY_ASSIGN_OR_RETURN(std::vector<TarMember> members, ListTarMembers(bytes, "s.tar"));
//   for (const TarMember& m : members) Use(m.name, bytes.substr(m.data_offset, m.size));
//
// Pure functions and a value-type writer; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"

namespace gantry::data {

inline constexpr uint64_t kTarBlock = 512;

struct TarMember {
  std::string name;            // pax path, else GNU long name, else ustar prefix + "/" + name
  char type = '0';             // typeflag: '0' (or '\0', '7') regular file, '5' directory, ...
  uint64_t header_offset = 0;  // the member's own ustar header (after any pax/GNU headers)
  uint64_t data_offset = 0;    // where its bytes start in the archive
  uint64_t size = 0;           // bytes (the pax "size" record when there is one)
  bool IsRegularFile() const { return type == '0' || type == '\0' || type == '7'; }
};

// The members of `archive` (an uncompressed tar), in archive order, up to the end-of-archive
// block (or the end of the bytes, which Python's tarfile also accepts). `where` names the archive
// in errors.
Result<std::vector<TarMember>> ListTarMembers(std::string_view archive, const std::string& where);
// The same over an archive whose bytes are not all there yet (ShardBytes::OpenFile): `fill` is
// asked for each header block, and for the data of the headers that describe the next member
// (pax, GNU long names), before they are read; regular members' data is never asked for.
using TarFill = std::function<Status(uint64_t offset, uint64_t n)>;
Result<std::vector<TarMember>> ListTarMembers(std::string_view archive, const std::string& where,
                                              const TarFill& fill);

// Builds an archive in memory: ustar headers, with a pax 'x' header carrying the name when it
// is longer than 100 bytes or not ASCII, and the size when it does not fit 11 octal digits (as
// Python's tarfile in its default pax format does). Regular files only, mode 0444, uid and gid 0.
class TarWriter {
 public:
  // `mtime`: seconds since the Unix epoch stamped on every member (0 keeps output reproducible).
  explicit TarWriter(int64_t mtime = 0) : mtime_(mtime) {}

  // Appends a regular file. InvalidArgument for an empty name, a NUL byte, an absolute name or
  // a "." or ".." component: names that would be unsafe for `tar -x` are refused here.
  Status Add(std::string_view name, std::string_view data);
  // Bytes so far (headers and data, without the end-of-archive blocks).
  uint64_t size() const { return buf_.size(); }
  // The archive: the members, two zero blocks, then zeros up to a multiple of 10240 bytes (the
  // record size tar and tarfile use). Leaves the writer empty.
  std::string Finish();

 private:
  void AppendHeader(std::string_view name, char type, uint64_t size);

  int64_t mtime_;
  std::string buf_;
};

}  // namespace gantry::data
