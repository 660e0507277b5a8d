// Datasets by URL: locating either format (folder or single shard), inspect and verify on the
// fixtures, verify naming every damaged shard, and pack from folders and manifests.
#include "gantry/data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/test_support.h"
#include "data/test_util.h"
#include "gantry/data/mds.h"

namespace gantry::data {
namespace {

using test_support::TempDir;
using ::testing::ElementsAre;

void WriteFile(const std::string& path, const std::string& data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

void CopyWritable(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::recursive_directory_iterator(to)) {
    std::filesystem::permissions(e.path(), std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add);
  }
}

TEST(LocateDataset, FindsEitherFormatOrOneShard) {
  const std::string f = test::FixturesDir();
  Result<DatasetLocation> mds = LocateDataset(f + "/mds/zstd", {});
  ASSERT_TRUE(mds.ok()) << mds.status().ToString();
  EXPECT_EQ(mds->format, DatasetFormat::kMds);
  Result<DatasetLocation> wds = LocateDataset("file://" + f + "/wds/basic", {});
  ASSERT_TRUE(wds.ok());
  EXPECT_EQ(wds->format, DatasetFormat::kWebDataset);
  EXPECT_EQ(wds->wds_shards.size(), 5u);
  Result<DatasetLocation> one = LocateDataset(f + "/wds/gz/shard-000001.tar.gz", {});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->wds_shards, std::vector<std::string>{"shard-000001.tar.gz"});
  TempDir empty("gantry-ds");
  EXPECT_EQ(LocateDataset(empty.path(), {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LocateDataset(empty.sub("nope"), {}).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(empty.sub("nope")));  // nothing created by a read
  // A folder of links to shards holds nothing the store lists (it follows no link beneath its
  // root): NotFound says so, naming a link, rather than that there are no .tar files.
  std::filesystem::create_directories(empty.sub("links/sub"));
  std::filesystem::create_symlink(f + "/wds/basic/shard-000000.tar", empty.sub("links/a.tar"));
  std::filesystem::create_symlink(f + "/wds/basic/shard-000001.tar", empty.sub("links/sub/b.tar"));
  Result<DatasetLocation> links = LocateDataset(empty.sub("links"), {});
  EXPECT_EQ(links.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(links.status().message(), ::testing::HasSubstr("2 symbolic links"));
  EXPECT_THAT(links.status().message(), ::testing::AnyOf(::testing::HasSubstr("(a.tar, ...)"),
                                                         ::testing::HasSubstr("(sub/b.tar, ...)")));
  // Beside real shards, links to more outside the folder would have been left out of the
  // dataset, silently. A link to a shard inside it (latest.tar) and a dangling one miss nothing.
  std::filesystem::copy(f + "/wds/basic/shard-000002.tar", empty.sub("links/c.tar"));
  std::filesystem::create_symlink("c.tar", empty.sub("links/latest.tar"));
  std::filesystem::create_symlink("gone.tar", empty.sub("links/dangling.tar"));
  links = LocateDataset(empty.sub("links"), {});
  EXPECT_EQ(links.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(links.status().message(), ::testing::HasSubstr("would be read without them"));
  EXPECT_THAT(links.status().message(), ::testing::HasSubstr("2 symbolic links"));
  std::filesystem::remove(empty.sub("links/a.tar"));
  std::filesystem::remove(empty.sub("links/sub/b.tar"));
  links = LocateDataset(empty.sub("links"), {});
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  EXPECT_EQ(links->wds_shards, std::vector<std::string>{"c.tar"});
  // A link to a folder holding no shards is no part of a dataset.
  std::filesystem::create_directories(empty.sub("plain/sub"));
  std::filesystem::create_directories(empty.sub("notes"));
  std::ofstream(empty.sub("notes/README")) << "not a shard";
  std::filesystem::create_symlink(empty.sub("notes"), empty.sub("plain/sub/x"));
  Result<DatasetLocation> plain = LocateDataset(empty.sub("plain"), {});
  EXPECT_EQ(plain.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(plain.status().message(), ::testing::Not(::testing::HasSubstr("symbolic")));
}

// A dataset gathered from folders by links (train/ with part2 -> /mnt/more/part2) was read
// without the linked folders' shards, silently: the store lists nothing through a link.
TEST(LocateDataset, ALinkToAFolderOfShardsIsNeverLeftOutSilently) {
  const std::string f = test::FixturesDir();
  TempDir dir("gantry-ds");
  std::filesystem::create_directories(dir.sub("more/deep"));
  std::filesystem::copy(f + "/wds/basic/shard-000001.tar", dir.sub("more/deep/b.tar"));
  // Only a linked folder: NotFound names the link.
  std::filesystem::create_directories(dir.sub("train"));
  std::filesystem::create_directory_symlink(dir.sub("more"), dir.sub("train/part2"));
  Result<DatasetLocation> d = LocateDataset(dir.sub("train"), {});
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("1 symbolic link"));
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("(part2/)"));
  // Beside real shards: InvalidArgument, as for linked files.
  std::filesystem::create_directories(dir.sub("train/part1"));
  std::filesystem::copy(f + "/wds/basic/shard-000000.tar", dir.sub("train/part1/a.tar"));
  d = LocateDataset(dir.sub("train"), {});
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("(part2/)"));
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("would be read without them"));
  // A link to a folder inside the dataset's (latest -> part1) or around it (up -> ..) misses
  // nothing: the shards are listed by their own names.
  std::filesystem::remove(dir.sub("train/part2"));
  std::filesystem::create_directory_symlink("part1", dir.sub("train/latest"));
  std::filesystem::create_directory_symlink("..", dir.sub("train/part1/up"));
  d = LocateDataset(dir.sub("train"), {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->wds_shards, std::vector<std::string>{"part1/a.tar"});
}

TEST(InspectDataset, SummarisesFixtures) {
  const std::string f = test::FixturesDir();
  auto mds = LocateDataset(f + "/mds/hashed", {});
  ASSERT_TRUE(mds.ok());
  Result<DatasetSummary> s = InspectDataset(*mds, {}, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->samples, 1500u);
  EXPECT_EQ(s->shards.size(), 10u);
  EXPECT_EQ(s->stored_bytes, 925024u);  // the fixture README's total
  EXPECT_EQ(s->hashes, (std::vector<std::string>{"sha1", "xxh64"}));
  ASSERT_EQ(s->columns.size(), 5u);
  EXPECT_EQ(s->columns[4].name, "vec");
  EXPECT_EQ(s->columns[4].size, 64u);

  auto wds = LocateDataset(f + "/wds/images", {});
  ASSERT_TRUE(wds.ok());
  uint64_t calls = 0;
  s = InspectDataset(*wds, {}, [&](uint64_t done, uint64_t total) {
    ++calls;
    EXPECT_LE(done, total);
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->samples, 200u);
  EXPECT_EQ(calls, 3u);
  std::map<std::string, uint64_t> counts;
  for (const ColumnSummary& c : s->columns) counts[c.name] = c.samples;
  // i%3==0: cls+jpg; 1: cls+jpg+png; 2: cls+png (fixture README).
  EXPECT_EQ(counts["cls"], 200u);
  EXPECT_EQ(counts["jpg"], 134u);
  EXPECT_EQ(counts["png"], 133u);
}

TEST(InspectDataset, NamesEachFolderItsShardsLieInOnce) {
  // Keys in order interleave folders ("a/a" < "a/b/y" < "a/c"): each is named once, in the
  // order of its first shard.
  TempDir dir("gantry-ds");
  const std::string shard = test::FixturesDir() + "/wds/basic/shard-000000.tar";
  for (const char* key : {"a/a.tar", "a/b/y.tar", "a/c.tar", "z.tar"}) {
    std::filesystem::create_directories(std::filesystem::path(dir.sub(key)).parent_path());
    std::filesystem::copy(shard, dir.sub(key));
  }
  auto d = LocateDataset(dir.path(), {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  Result<DatasetSummary> s = InspectDataset(*d, {}, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->shards.size(), 4u);
  EXPECT_THAT(s->folders, ElementsAre("a/", "a/b/", ""));
  auto basic = LocateDataset(test::FixturesDir() + "/wds/basic", {});
  ASSERT_TRUE(basic.ok());
  s = InspectDataset(*basic, {}, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(s->folders, ElementsAre(""));
}

TEST(VerifyDataset, CleanFixturesVerify) {
  for (const char* d : {"mds/plain", "mds/zstd", "mds/hashed", "mds/jpeg", "wds/basic", "wds/gz",
                        "wds/tricky", "wds/images", "wds/ambiguous"}) {
    auto loc = LocateDataset(test::FixturesDir() + "/" + d, {});
    ASSERT_TRUE(loc.ok()) << d;
    Result<VerifyReport> r = VerifyDataset(*loc, {}, nullptr);
    ASSERT_TRUE(r.ok()) << d;
    EXPECT_TRUE(r->ok()) << d << ": " << r->problems.front().ToString();
    if (std::string(d) == "mds/hashed") {
      EXPECT_EQ(r->hashes_checked, 20u);
    }
  }
}

TEST(VerifyDataset, NamesEveryDamagedOrMissingShardAndChecksTheRest) {
  TempDir dir("gantry-ds");
  CopyWritable(test::FixturesDir() + "/mds/hashed", dir.sub("d"));
  std::string s4;
  {
    std::ifstream in(dir.sub("d/shard.00004.mds"), std::ios::binary);
    s4.assign(std::istreambuf_iterator<char>(in), {});
  }
  s4[s4.size() - 3] ^= 1;
  WriteFile(dir.sub("d/shard.00004.mds"), s4);
  std::filesystem::remove(dir.sub("d/shard.00007.mds"));
  auto loc = LocateDataset(dir.sub("d"), {});
  ASSERT_TRUE(loc.ok());
  Result<VerifyReport> r = VerifyDataset(*loc, {}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shards, 10u);
  ASSERT_EQ(r->problems.size(), 2u);
  EXPECT_EQ(r->problems[0].code(), StatusCode::kDataLoss);
  EXPECT_NE(r->problems[0].message().find("shard.00004.mds"), std::string::npos);
  EXPECT_EQ(r->problems[1].code(), StatusCode::kNotFound);
  EXPECT_NE(r->problems[1].message().find("shard.00007.mds"), std::string::npos);
  EXPECT_EQ(r->hashes_checked, 16u);  // the 8 good shards, two digests each

  CopyWritable(test::FixturesDir() + "/wds/basic", dir.sub("w"));
  std::filesystem::resize_file(dir.sub("w/shard-000002.tar"), 100000);
  auto wl = LocateDataset(dir.sub("w"), {});
  ASSERT_TRUE(wl.ok());
  r = VerifyDataset(*wl, {}, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->problems.size(), 1u);
  EXPECT_EQ(r->problems[0].code(), StatusCode::kDataLoss);
  EXPECT_NE(r->problems[0].message().find("shard-000002.tar"), std::string::npos);
  EXPECT_EQ(r->samples, 1550u);  // the other four shards
}

// Every entry of a folder, hidden ones too, sorted.
std::vector<std::string> Entries(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(PackDataset, FolderToBothFormats) {
  TempDir dir("gantry-ds");
  // Files of one key are not adjacent in name order ("a.b" < "a.c/d.e" < "a.d"): still one sample.
  WriteFile(dir.sub("in/a.b"), "ab");
  WriteFile(dir.sub("in/a.c/d.e"), "de");
  WriteFile(dir.sub("in/a.d"), "ad");
  WriteFile(dir.sub("in/img/x.JPG"), "jpegbytes");
  WriteFile(dir.sub("in/img/x.cls"), "3");
  PackOptions o;
  o.input = dir.sub("in");
  Result<PackReport> r = PackDataset(o, dir.sub("wds"), {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples, 3u);
  auto store = test::OpenDir(dir.sub("wds"));
  Result<WdsShard> shard = ReadWdsShard(*store, "shard-000000.tar", {});
  ASSERT_TRUE(shard.ok());
  ASSERT_EQ(shard->samples().size(), 3u);
  EXPECT_EQ(shard->samples()[0].key, "a");
  EXPECT_EQ(shard->samples()[0].Find("d")->bytes, "ad");
  EXPECT_EQ(shard->samples()[1].key, "a.c/d");
  EXPECT_EQ(shard->samples()[2].Find("jpg")->bytes, "jpegbytes");         // field lower-cased
  EXPECT_THAT(Entries(dir.sub("wds")), ElementsAre("shard-000000.tar"));  // no temp directory

  // MDS needs every sample to hold the same fields.
  o.format = DatasetFormat::kMds;
  r = PackDataset(o, dir.sub("mds"), {}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(Entries(dir.sub("mds")), ElementsAre());  // a failed pack leaves no temp directory
  std::filesystem::remove_all(dir.sub("in/a.c"));
  std::filesystem::remove(dir.sub("in/a.b"));
  std::filesystem::remove(dir.sub("in/a.d"));
  WriteFile(dir.sub("in/a.jpg"), "A");
  WriteFile(dir.sub("in/a.cls"), "1");
  o.compression = "zstd";
  o.hashes = {"sha1"};
  r = PackDataset(o, dir.sub("mds"), {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto loc = LocateDataset(dir.sub("mds"), {});
  ASSERT_TRUE(loc.ok());
  Result<VerifyReport> v = VerifyDataset(*loc, {}, nullptr);
  ASSERT_TRUE(v.ok() && v->ok());
  EXPECT_EQ(v->samples, 2u);
  EXPECT_EQ(v->hashes_checked, 2u);
  EXPECT_THAT(Entries(dir.sub("mds")), ElementsAre("index.json", "shard.00000.mds.zstd"));
}

// A pack into a folder that holds a dataset left both mixed: the new shards over the old, the
// old ones past the new count read as more samples, an index.json beside tar shards. It is
// refused, whatever the dataset's format, unless asked to overwrite, which then leaves only the
// new dataset. Two packs started together into one folder: one writes, the other fails, and
// the folder holds one pack's samples.
TEST(PackDataset, NeverMixedWithADatasetAlreadyThere) {
  TempDir dir("gantry-ds");
  for (int i = 0; i < 60; ++i) WriteFile(dir.sub("in/k" + std::to_string(i) + ".txt"), "t");
  WriteFile(dir.sub("out/README"), "not a dataset file");
  PackOptions o;
  o.input = dir.sub("in");
  o.shard_samples = 10;
  ASSERT_TRUE(PackDataset(o, dir.sub("out"), {}, nullptr).ok());  // other files are fine
  auto samples = [&](const std::string& url) -> uint64_t {
    auto loc = LocateDataset(url, {});
    if (!loc.ok()) return 0;
    Result<DatasetSummary> s = InspectDataset(*loc, {}, nullptr);
    return s.ok() ? s->samples : 0;
  };
  o.shard_samples = 25;
  Result<PackReport> r = PackDataset(o, dir.sub("out"), {}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(r.status().message().find("shard-000000.tar"), std::string::npos);
  EXPECT_EQ(samples(dir.sub("out")), 60u);                            // untouched: 6 shards of 10
  EXPECT_FALSE(std::filesystem::exists(dir.sub("out/.gantry-tmp")));  // nor a temp folder left
  PackOptions mds = o;
  mds.format = DatasetFormat::kMds;
  EXPECT_EQ(PackDataset(mds, dir.sub("out"), {}, nullptr).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_FALSE(std::filesystem::exists(dir.sub("out/index.json")));
  // A tar below the folder is read as the dataset's but is no pack's to delete: refused even
  // with overwrite, and left alone.
  WriteFile(dir.sub("nested/old/shard-000000.tar"), "");
  WriteFile(dir.sub("nested/x.tar"), "");
  for (bool overwrite : {false, true}) {
    PackOptions n = o;
    n.overwrite = overwrite;
    r = PackDataset(n, dir.sub("nested"), {}, nullptr);
    EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("a pack does not write"));
  }
  EXPECT_THAT(Entries(dir.sub("nested")), ElementsAre("old", "x.tar"));
  // A link where a shard goes would fail its first write as if another pack held it.
  std::filesystem::create_directories(dir.sub("linked"));
  std::filesystem::create_symlink(dir.sub("nowhere"), dir.sub("linked/shard-000000.tar"));
  r = PackDataset(o, dir.sub("linked"), {}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("symbolic link"));
  // So would a link to a folder of shards: a reader would refuse the packed folder.
  std::filesystem::create_directories(dir.sub("linkdir"));
  std::filesystem::create_directory_symlink(dir.sub("nested/old"), dir.sub("linkdir/more"));
  r = PackDataset(o, dir.sub("linkdir"), {}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("(more/)"));
  EXPECT_THAT(Entries(dir.sub("linkdir")), ElementsAre("more"));

  o.overwrite = true;
  r = PackDataset(o, dir.sub("out"), {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(r->removed, ElementsAre("shard-000003.tar", "shard-000004.tar", "shard-000005.tar"));
  EXPECT_EQ(samples(dir.sub("out")), 60u);  // 3 shards of 25, 25 and 10
  mds.overwrite = true;
  r = PackDataset(mds, dir.sub("out"), {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->removed.size(), 3u);
  EXPECT_THAT(Entries(dir.sub("out")), ElementsAre("README", "index.json", "shard.00000.mds"));
  EXPECT_EQ(samples(dir.sub("out")), 60u);
  // An overwrite that fails partway (sample k7 has a field the others lack) leaves no old
  // index over new shards: the folder holds no dataset, and the error says what it holds.
  WriteFile(dir.sub("in/k7.cls"), "3");
  mds.shard_bytes = 64;
  r = PackDataset(mds, dir.sub("out"), {}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("now holds part of the new dataset"));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("out/index.json")));
  EXPECT_EQ(LocateDataset(dir.sub("out"), {}).status().code(), StatusCode::kNotFound);
  std::filesystem::remove(dir.sub("in/k7.cls"));

  for (int round = 0; round < 5; ++round) {
    const std::string out = dir.sub("race" + std::to_string(round));
    o.overwrite = false;
    Result<PackReport> a = InvalidArgument("not run"), b = InvalidArgument("not run");
    std::thread ta([&] { a = PackDataset(o, out, {}, nullptr); });
    std::thread tb([&] { b = PackDataset(o, out, {}, nullptr); });
    ta.join();
    tb.join();
    SCOPED_TRACE(a.status().ToString() + " / " + b.status().ToString());
    EXPECT_EQ(a.ok() + b.ok(), 1);
    EXPECT_EQ((a.ok() ? b : a).status().code(), StatusCode::kAlreadyExists);
    EXPECT_EQ(samples(out), 60u);
  }
}

// Packing a folder into itself, or into a folder inside it, put the shards among the files
// being packed: the next pack of that folder packed them as samples (while rewriting them).
// Whatever path names the input, through ".." or a link, that is refused and nothing is written;
// a sibling folder, or one that only shares a name prefix, is fine.
TEST(PackDataset, NeverIntoItsOwnInputFolder) {
  TempDir dir("gantry-ds");
  WriteFile(dir.sub("data/in/a.txt"), "a");
  WriteFile(dir.sub("data/in/b.txt"), "b");
  std::filesystem::create_directory_symlink(dir.sub("data/in"), dir.sub("link"));
  PackOptions o;
  o.input = dir.sub("data/in");
  for (const std::string& out :
       {dir.sub("data/in"), dir.sub("data/in/"), dir.sub("data/in/shards"),
        dir.sub("data/in/new/deeper"), "file://" + dir.sub("data/in/shards"),
        dir.sub("data/../data/in/x"), dir.sub("link/shards"), dir.sub("link")}) {
    SCOPED_TRACE(out);
    Result<PackReport> r = PackDataset(o, out, {}, nullptr);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  o.input = dir.sub("link");  // the input named through the link
  EXPECT_EQ(PackDataset(o, dir.sub("data/in/shards"), {}, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir.sub("data/in/shards")));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("data/in/new")));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("data/in/shard-000000.tar")));
  for (const std::string& out : {dir.sub("data/in-shards"), dir.sub("data/out")}) {
    SCOPED_TRACE(out);
    Result<PackReport> r = PackDataset(o, out, {}, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->samples, 2u);
  }
}

TEST(PackDataset, ManifestValuesAndEncodings) {
  TempDir dir("gantry-ds");
  WriteFile(dir.sub("files/p.bin"), std::string("\x00\x01\x02", 3));
  WriteFile(
      dir.sub("m.jsonl"),
      R"({"__key__": "k0", "txt": "héllo", "cls": -3, "score": 0.5, "raw": {"b64": "AAEC"}, "f": {"path": "files/p.bin"}})"
      "\n\n"
      R"({"__key__": "k1", "txt": "", "cls": 7, "score": 2, "raw": {"b64": ""}, "f": {"path": "files/p.bin"}})"
      "\n");
  PackOptions o;
  o.format = DatasetFormat::kMds;
  o.input = dir.sub("m.jsonl");
  o.encodings = {{"cls", "int32"}, {"score", "float32"}};
  Result<PackReport> r = PackDataset(o, dir.sub("out"), {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto store = test::OpenDir(dir.sub("out"));
  Result<MdsIndex> index = ReadMdsIndex(*store, "");
  ASSERT_TRUE(index.ok());
  const auto& cols = index->shards[0].columns;
  std::vector<std::string> names;
  for (const auto& c : cols) names.push_back(c.name + ":" + c.encoding);
  EXPECT_EQ(names, (std::vector<std::string>{"__key__:str", "cls:int32", "f:bytes", "raw:bytes",
                                             "score:float32", "txt:str"}));
  Result<MdsShard> shard = ReadMdsShard(*store, "", index->shards[0], {});
  ASSERT_TRUE(shard.ok());
  auto row = *shard->Sample(0);
  EXPECT_EQ(row[0], "k0");
  int32_t cls = 0;
  std::memcpy(&cls, row[1].data(), 4);
  EXPECT_EQ(cls, -3);
  EXPECT_EQ(row[2], std::string("\x00\x01\x02", 3));
  EXPECT_EQ(row[3], std::string("\x00\x01\x02", 3));
  float score = 0;
  std::memcpy(&score, row[4].data(), 4);
  EXPECT_EQ(score, 0.5f);
  EXPECT_EQ(row[5], "héllo");
  std::memcpy(&score, (*shard->Sample(1))[4].data(), 4);
  EXPECT_EQ(score, 2.0f);

  // Bad lines name the manifest line.
  for (const std::string& bad :
       {std::string(R"({"cls": 300})"), std::string(R"({"x": {"path": "../etc/passwd"}})"),
        std::string(R"({"x": [1]})"), std::string("not json"),
        std::string(R"({"x": {"b64": "@@"}})")}) {
    WriteFile(dir.sub("bad.jsonl"), bad + "\n");
    PackOptions b;
    b.format = DatasetFormat::kMds;
    b.input = dir.sub("bad.jsonl");
    b.encodings = {{"cls", "int8"}};
    Result<PackReport> br = PackDataset(b, dir.sub("bad-out"), {}, nullptr);
    EXPECT_EQ(br.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(br.status().message().find("bad.jsonl:1"), std::string::npos)
        << bad << ": " << br.status().message();
  }
}

}  // namespace
}  // namespace gantry::data
