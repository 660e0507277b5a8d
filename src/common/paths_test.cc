// LocalPathWithin: whole components, links and ".." resolved, other stores never local.
#include "gantry/common/paths.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/test_support.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

TEST(LocalPathWithin, ComparesResolvedWholeComponents) {
  test_support::TempDir tmp;
  const std::string d = tmp.path();
  fs::create_directories(d + "/data/in");
  fs::create_directories(d + "/data/in-other");
  fs::create_directory_symlink(d + "/data/in", d + "/link");
  const std::string in = d + "/data/in";
  for (const std::string& p :
       {in, in + "/", in + "/x", in + "/not/yet/made", "file://" + in + "/x",
        d + "/data/../data/in/x", d + "/link", d + "/link/x", d + "/data/in/./x"}) {
    EXPECT_TRUE(LocalPathWithin(p, in)) << p;
    EXPECT_TRUE(LocalPathWithin(p, d + "/link")) << p;  // the folder named through the link
  }
  for (const std::string& p : {d + "/data", d + "/data/in-other", d + "/data/in-other/x",
                               d + "/data/inx", d + "/data/in/../out", "s3://b" + in,
                               std::string("mem://x"), "http://h" + in, std::string()}) {
    EXPECT_FALSE(LocalPathWithin(p, in)) << p;
  }
  EXPECT_FALSE(LocalPathWithin(in, ""));
  EXPECT_TRUE(LocalPathWithin(in, "/"));
}

}  // namespace
}  // namespace gantry
