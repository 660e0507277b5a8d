// `gantry data` end to end: the real binary packs, inspects and verifies datasets, with the
// exit codes of docs/storage.md (0 ok, 1 damage, 2 usage, 3 missing or malformed input).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"
#include "common/test_support.h"

namespace gantry {
namespace {

using cli_test::Quote;
using cli_test::RunShell;
using test_support::TempDir;

const std::string kFixtures = std::string(GANTRY_SOURCE_DIR) + "/testdata/datasets";

cli_test::CliRun Gantry(const std::string& args, const TempDir& dir) {
  return RunShell(std::string(GANTRY_CLI) + " " + args, dir.sub("stderr"));
}

TEST(CliData, InspectAndVerifyFixtures) {
  TempDir dir("gantry-cli-data");
  auto r = Gantry("data inspect " + Quote(kFixtures + "/mds/zstd") + " --json --shards", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "mds");
  EXPECT_EQ(j["samples"], 2000);
  EXPECT_EQ(j["shards"], 7);
  EXPECT_EQ(j["stored_bytes"], 570644);  // the fixture README's total
  EXPECT_EQ(j["shard_list"][0]["compression"], "zstd");
  r = Gantry("data verify " + Quote(kFixtures + "/mds/hashed"), dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("20 hashes checked"), std::string::npos) << r.out;
  r = Gantry("data verify " + Quote(kFixtures + "/wds/gz/shard-000000.tar.gz") + " --json", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["samples"], 100);
}

TEST(CliData, InspectShowsShardsReadFromBelowTheDatasetsFolder) {
  // A copy of a shard left in a subfolder is read as more samples: inspect says where the
  // shards lie whenever any lies below the dataset's own folder.
  TempDir dir("gantry-cli-data");
  std::filesystem::copy(kFixtures + "/wds/basic", dir.sub("d"));
  auto r = Gantry("data inspect " + Quote(dir.sub("d")), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("folders:"), std::string::npos) << r.out;
  std::filesystem::create_directories(dir.sub("d/old"));
  std::filesystem::copy(dir.sub("d/shard-000000.tar"), dir.sub("d/old/shard-000000.tar"));
  r = Gantry("data inspect " + Quote(dir.sub("d")), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("samples:  2450\n"), std::string::npos) << r.out;  // shard 0: 450
  EXPECT_NE(r.out.find("folders:  2 (old/, ./): shards below the URL are read too"),
            std::string::npos)
      << r.out;
  r = Gantry("data inspect " + Quote(dir.sub("d")) + " --json", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["folders"], nlohmann::json::array({"old/", ""}));
}

TEST(CliData, ExitCodes) {
  TempDir dir("gantry-cli-data");
  std::filesystem::copy(kFixtures + "/mds/hashed", dir.sub("d"));
  std::filesystem::permissions(dir.sub("d/shard.00001.mds"), std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  {
    std::fstream f(dir.sub("d/shard.00001.mds"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put('\x5a');
  }
  auto r = Gantry("data verify " + Quote(dir.sub("d")), dir);
  EXPECT_EQ(r.code, 1) << r.out << r.err;  // a hash mismatch: damage
  EXPECT_NE(r.err.find("shard.00001.mds"), std::string::npos) << r.err;
  std::filesystem::remove(dir.sub("d/shard.00001.mds"));
  r = Gantry("data verify " + Quote(dir.sub("d")), dir);
  EXPECT_EQ(r.code, 3) << r.err;  // a missing shard: NotFound
  EXPECT_NE(r.err.find("shard.00001.mds"), std::string::npos) << r.err;
  r = Gantry("data inspect " + Quote(dir.sub("nothing-here")), dir);
  EXPECT_EQ(r.code, 3) << r.err;
  r = Gantry("data pack " + Quote(dir.sub("d")) + " " + Quote(dir.sub("o")) + " --shard-size 12Q",
             dir);
  EXPECT_EQ(r.code, 2) << r.err;  // usage
  r = Gantry("data pack " + Quote(dir.sub("d")) + " " + Quote(dir.sub("o")) + " --format parquet",
             dir);
  EXPECT_EQ(r.code, 3) << r.err;
}

TEST(CliData, PackThenReadWithPythonTarfile) {
  TempDir dir("gantry-cli-data");
  for (int i = 0; i < 5; ++i) {
    std::filesystem::create_directories(dir.sub("in/s"));
    std::ofstream(dir.sub("in/s/k" + std::to_string(i) + ".txt")) << "text " << i;
    std::ofstream(dir.sub("in/s/k" + std::to_string(i) + ".cls")) << i;
  }
  auto r = Gantry("data pack " + Quote(dir.sub("in")) + " " + Quote(dir.sub("out")) +
                      " --samples-per-shard 2 --json",
                  dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 5);
  ASSERT_EQ(j["files"].size(), 3u);
  r = RunShell(
      "/usr/bin/python3 -c \"import tarfile,sys; t=tarfile.open(sys.argv[1]); "
      "print(','.join(m.name+'='+t.extractfile(m).read().decode() for m in t))\" " +
          Quote(dir.sub("out/shard-000002.tar")),
      dir.sub("stderr"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "s/k4.cls=4,s/k4.txt=text 4\n");
  // Packed again into the same folder: refused (3), or replaced with --overwrite, the shard
  // past the new count removed.
  r = Gantry("data pack " + Quote(dir.sub("in")) + " " + Quote(dir.sub("out")) +
                 " --samples-per-shard 3",
             dir);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.err.find("--overwrite"), std::string::npos) << r.err;
  r = Gantry("data pack " + Quote(dir.sub("in")) + " " + Quote(dir.sub("out")) +
                 " --samples-per-shard 3 --overwrite --json",
             dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["removed"], nlohmann::json::array({"shard-000002.tar"}));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("out/shard-000002.tar")));
  r = Gantry("data pack " + Quote(dir.sub("in")) + " " + Quote(dir.sub("mds")) +
                 " --format mds --compression zstd --hash sha1 --column cls=str",
             dir);
  ASSERT_EQ(r.code, 0) << r.err;
  r = Gantry("data verify " + Quote(dir.sub("mds")) + " --json", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["hashes_checked"], 2);
}

}  // namespace
}  // namespace gantry
