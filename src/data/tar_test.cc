// Tar reading and writing: round trips, archives made by GNU tar and Python's tarfile in every
// format they write, Gantry's archives read by tarfile, and hostile headers.
#include "gantry/data/tar.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "common/test_support.h"
#include "gantry/common/subprocess.h"
#include "gantry/data/webdataset.h"

namespace gantry::data {
namespace {

using test_support::TempDir;

std::map<std::string, std::string> RegularFiles(std::string_view archive) {
  Result<std::vector<TarMember>> members = ListTarMembers(archive, "t.tar");
  EXPECT_TRUE(members.ok()) << members.status().ToString();
  std::map<std::string, std::string> out;
  if (!members.ok()) return out;
  for (const TarMember& m : *members) {
    if (m.IsRegularFile()) out[m.name] = std::string(archive.substr(m.data_offset, m.size));
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

// Names that exercise every header path: exactly 100 bytes, longer than 100 (ustar prefix or
// pax or GNU 'L'), longer than 255 with a component over 100 bytes, non-ASCII, and empty files.
std::map<std::string, std::string> TrickyFiles() {
  std::map<std::string, std::string> f;
  f["plain.txt"] = "plain";
  f[std::string(96, 'a') + ".txt"] = "exactly 100";
  f["dir1/dir2/" + std::string(120, 'b') + ".bin"] = std::string(1000, '\x07');
  f[std::string(60, 'c') + "/" + std::string(60, 'd') + "/e.txt"] = "prefix split";
  f["deep/" + std::string(150, 'x') + "/" + std::string(110, 'y') + ".txt"] = "very long";
  f["unicode/café/naïve_Straße.txt"] = "ünïcødé";
  f["empty.bin"] = "";
  f["block/exact.bin"] = std::string(512, 'z');
  return f;
}

TEST(TarWriter, RoundTripsThroughTheReader) {
  TarWriter w(1700000000);
  const auto files = TrickyFiles();
  for (const auto& [name, data] : files) ASSERT_TRUE(w.Add(name, data).ok()) << name;
  const std::string tar = w.Finish();
  EXPECT_EQ(tar.size() % 10240, 0u);
  EXPECT_EQ(RegularFiles(tar), files);
}

TEST(TarWriter, RefusesNamesUnsafeToExtract) {
  TarWriter w;
  for (const char* bad : {"", "/etc/passwd", "../up.txt", "a/../../b.txt", "./x.txt"}) {
    Status s = w.Add(bad, "x");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(w.Add(std::string("a\0b", 3), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.size(), 0u);  // nothing was written
}

TEST(TarWriter, PythonTarfileReadsGantryArchives) {
  TempDir dir("gantry-tar");
  TarWriter w;
  const auto files = TrickyFiles();
  for (const auto& [name, data] : files) ASSERT_TRUE(w.Add(name, data).ok());
  WriteFile(dir.sub("g.tar"), w.Finish());
  // tarfile lists name -> hex of the bytes; any header it disagrees with fails here.
  const std::string code =
      "import json,sys,tarfile\n"
      "t=tarfile.open(sys.argv[1])\n"
      "print(json.dumps({m.name: t.extractfile(m).read().hex() for m in t if m.isfile()}))\n";
  Result<std::string> out = RunAndCapture({"/usr/bin/python3", "-c", code, dir.sub("g.tar")});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const nlohmann::json got = nlohmann::json::parse(*out);
  ASSERT_EQ(got.size(), files.size());
  for (const auto& [name, data] : files) {
    ASSERT_TRUE(got.contains(name)) << name;
    std::string hex;
    for (unsigned char c : data) {
      char b[3];
      std::snprintf(b, sizeof(b), "%02x", c);
      hex += b;
    }
    EXPECT_EQ(got[name].get<std::string>(), hex) << name;
  }
}

class ExternalTar : public testing::TestWithParam<std::string> {};

// Archives of the same files from GNU tar (gnu, posix/pax, ustar formats) and Python's tarfile
// (GNU, PAX, USTAR formats) all read back to the same files.
TEST_P(ExternalTar, ReadsArchivesOtherToolsWrite) {
  TempDir dir("gantry-tar");
  std::map<std::string, std::string> files = TrickyFiles();
  const bool ustar = GetParam().find("ustar") != std::string::npos;
  if (ustar) {
    // ustar holds names up to 255 bytes split at a '/' into 155 + 100 only; no non-ASCII.
    files.erase("deep/" + std::string(150, 'x') + "/" + std::string(110, 'y') + ".txt");
    files.erase("dir1/dir2/" + std::string(120, 'b') + ".bin");
    files.erase("unicode/café/naïve_Straße.txt");
  }
  for (const auto& [name, data] : files) WriteFile(dir.sub("src/" + name), data);
  std::vector<std::string> names;
  for (const auto& [name, data] : files) names.push_back(name);
  const std::string out = dir.sub("x.tar");
  std::vector<std::string> argv;
  if (GetParam().rfind("gnutar-", 0) == 0) {
    argv = {"/usr/bin/tar", "--format=" + GetParam().substr(7), "-C", dir.sub("src"), "-cf", out};
    argv.insert(argv.end(), names.begin(), names.end());
  } else {
    const std::string code =
        "import sys,tarfile\n"
        "fmt={'gnu':tarfile.GNU_FORMAT,'pax':tarfile.PAX_FORMAT,'ustar':tarfile.USTAR_FORMAT}"
        "[sys.argv[1]]\n"
        "with tarfile.open(sys.argv[2],'w',format=fmt) as t:\n"
        "  for n in sys.argv[4:]: t.add(sys.argv[3]+'/'+n, arcname=n)\n";
    argv = {"/usr/bin/python3", "-c", code, GetParam().substr(8), out, dir.sub("src")};
    argv.insert(argv.end(), names.begin(), names.end());
  }
  Result<std::string> run = RunAndCapture(argv);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::string tar = ReadFile(out);
  EXPECT_EQ(RegularFiles(tar), files);
  // And as a WebDataset shard: every file has an extension, so each is one field.
  Result<WdsShard> shard = WdsShard::Parse(tar, "x.tar", {});
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  size_t fields = 0;
  for (const WdsSample& s : shard->samples()) fields += s.fields.size();
  EXPECT_EQ(fields, files.size());
}

INSTANTIATE_TEST_SUITE_P(All, ExternalTar,
                         testing::Values("gnutar-gnu", "gnutar-posix", "gnutar-ustar",
                                         "tarfile-gnu", "tarfile-pax", "tarfile-ustar"),
                         [](const testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// ---- hostile archives: each a clean error naming the archive and offset -------------------

// A ustar header with `size_field` (12 bytes) as given and a correct checksum.
std::string Header(const std::string& name, const std::string& size_field, char type = '0') {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(h.data() + 100, "0000444", 7);
  std::memcpy(h.data() + 124, size_field.data(), std::min<size_t>(size_field.size(), 12));
  std::memcpy(h.data() + 136, "00000000000", 11);
  h[156] = type;
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

std::string Octal(uint64_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "%011llo", static_cast<unsigned long long>(v));
  return std::string(b, 11) + std::string(1, '\0');
}

TEST(TarHostile, MemberLargerThanTheFileIsDataLossNamingTheOffset) {
  std::string tar = Header("a.txt", Octal(5)) + std::string(512, 'x');
  tar += Header("b.txt", Octal(1ull << 40)) + std::string(512, 'y');  // claims 1 TiB
  Result<std::vector<TarMember>> r = ListTarMembers(tar, "evil.tar");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("evil.tar: offset 1024"), std::string::npos)
      << r.status().message();
}

TEST(TarHostile, NegativeBase256SizeIsInvalidArgument) {
  std::string size(12, '\xff');
  Result<std::vector<TarMember>> r = ListTarMembers(Header("a.txt", size), "neg.tar");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("neg.tar: offset 0"), std::string::npos);
}

TEST(TarHostile, OverflowingSizesAreInvalidArgument) {
  std::string base256(12, '\x7f');
  base256[0] = '\x80';  // 2^88 - 1: does not fit 64 bits
  EXPECT_EQ(ListTarMembers(Header("a.txt", base256), "t").status().code(),
            StatusCode::kInvalidArgument);
  std::string huge(12, '\0');
  huge[0] = '\x80';
  huge[4] = '\x7f';  // fits 64 bits but past 2^62: too large to be real
  EXPECT_EQ(ListTarMembers(Header("a.txt", huge), "t").status().code(),
            StatusCode::kInvalidArgument);
  // 12 octal digits (2^36 - 1) fit; past the end of the file that is truncation.
  EXPECT_EQ(ListTarMembers(Header("a.txt", "777777777777"), "t").status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(ListTarMembers(Header("a.txt", "12x4\0"), "t").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(TarHostile, PaxSizeAndRecordsAreChecked) {
  auto pax = [](const std::string& records) {
    std::string data = records;
    data.resize((records.size() + 511) / 512 * 512, '\0');
    return Header("././@PaxHeader", Octal(records.size()), 'x') + data;
  };
  // A pax size past the end of the file.
  std::string tar = pax("28 size=1000000000000000000\n") + Header("a.txt", Octal(0));
  EXPECT_EQ(ListTarMembers(tar, "t").status().code(), StatusCode::kDataLoss);
  // A length that runs past the record data, and one that is not a number.
  EXPECT_EQ(ListTarMembers(pax("99 path=x\n") + Header("a.txt", Octal(0)), "t").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ListTarMembers(pax("1x path=x\n") + Header("a.txt", Octal(0)), "t").status().code(),
            StatusCode::kInvalidArgument);
  // A good one renames the member.
  Result<std::vector<TarMember>> ok =
      ListTarMembers(pax("14 path=ab.cd\n") + Header("x", Octal(0)), "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->at(0).name, "ab.cd");
}

TEST(TarHostile, DamagedHeaderAndTruncationAreDataLoss) {
  std::string tar = Header("a.txt", Octal(3)) + std::string(512, 'x');
  std::string damaged = tar;
  damaged[10] ^= 1;
  EXPECT_EQ(ListTarMembers(damaged, "t").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ListTarMembers(tar.substr(0, 300), "t").status().code(), StatusCode::kDataLoss);
  // Cut inside the padding after a member's whole data: still cut short (it was accepted before).
  EXPECT_EQ(ListTarMembers(tar.substr(0, 600), "t").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ListTarMembers(std::string(700, 'q'), "t").status().code(), StatusCode::kDataLoss);
}

// Headers of random bytes (every byte of the block, high ones included, outside the fields the
// reader parses), each checksummed by a plain byte-by-byte sum: accepted with the unsigned sum
// (POSIX) or the signed one (old tars), refused one off either way. The reader sums 16 bytes at
// a time; a lane it missed or a byte read with the wrong sign fails here.
TEST(TarHostile, TheHeaderChecksumIsTheSumOfEveryByteEitherSigned) {
  std::mt19937 rnd(11);
  int signed_checked = 0;
  for (int n = 0; n < 300; ++n) {
    std::string h(512, '\0');
    for (char& c : h) c = static_cast<char>(rnd());
    const std::string size = Octal(0);
    std::memcpy(h.data() + 124, size.data(), size.size());
    h[156] = '0';
    std::memset(h.data() + 148, ' ', 8);
    int64_t unsigned_sum = 0, signed_sum = 0;
    for (char c : h) {
      unsigned_sum += static_cast<unsigned char>(c);
      signed_sum += static_cast<signed char>(c);
    }
    const auto with = [&](int64_t sum) {
      std::string t = h;
      char field[32];
      std::snprintf(field, sizeof field, "%06llo", static_cast<unsigned long long>(sum));
      std::memcpy(t.data() + 148, field, 7);  // six digits (sums stay below 8^6) and a NUL
      t[155] = ' ';
      return t;
    };
    EXPECT_TRUE(ListTarMembers(with(unsigned_sum), "t").ok()) << n;
    const Result<std::vector<TarMember>> off = ListTarMembers(with(unsigned_sum + 1), "t");
    EXPECT_EQ(off.status().code(), StatusCode::kDataLoss) << n;
    EXPECT_NE(off.status().message().find("checksum mismatch"), std::string::npos) << n;
    if (signed_sum > 0) {  // an octal field holds no negative sum
      ++signed_checked;
      EXPECT_TRUE(ListTarMembers(with(signed_sum), "t").ok()) << n;
      EXPECT_EQ(ListTarMembers(with(signed_sum - 1), "t").status().code(), StatusCode::kDataLoss)
          << n;
    }
  }
  // Random bytes sum to about 0 signed, so about half the headers test that convention.
  EXPECT_GT(signed_checked, 50);
}

TEST(TarHostile, DotDotAndAbsoluteNamesAreJustNames) {
  TempDir dir("gantry-tar");
  std::string tar = Header("../../escape.txt", Octal(4)) + std::string("evil") +
                    std::string(508, '\0') + Header("/etc/evil.txt", Octal(0));
  const auto files = RegularFiles(tar);
  EXPECT_EQ(files.at("../../escape.txt"), "evil");
  EXPECT_EQ(files.at("/etc/evil.txt"), "");
  EXPECT_FALSE(std::filesystem::exists("../../escape.txt"));
}

TEST(TarHostile, EndsAtZeroBlockOrEndOfBytes) {
  std::string tar = Header("a.txt", Octal(1)) + std::string(512, 'x');
  EXPECT_EQ(RegularFiles(tar).size(), 1u);  // no end-of-archive blocks: tarfile accepts it too
  EXPECT_EQ(RegularFiles(tar + std::string(1024, '\0') + "garbage after the end").size(), 1u);
}

}  // namespace
}  // namespace gantry::data
