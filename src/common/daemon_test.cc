// The daemons' shared flag checks: where a file may be kept, and who may read a secret.
#include "gantry/common/daemon.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/test_support.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(CheckWritablePath, AFileToCreateOrRewriteInAFolderThatTakesNewFiles) {
  test_support::TempDir tmp;
  EXPECT_TRUE(CheckWritablePath(tmp.sub("state.db")).ok());  // not there yet: created
  Write(tmp.sub("state.db"), "x");
  EXPECT_TRUE(CheckWritablePath(tmp.sub("state.db")).ok());
  fs::create_directory_symlink(tmp.path(), tmp.sub("link"));
  EXPECT_TRUE(CheckWritablePath(
                  tmp.sub("link/../" + fs::path(tmp.path()).filename().string() + "/state.db"))
                  .ok());

  const Status missing = CheckWritablePath(tmp.sub("no/such/state.db"));
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  EXPECT_NE(missing.message().find(tmp.sub("no/such")), std::string::npos) << missing.message();
  // A file where the folder should be, and a folder where the file should be.
  EXPECT_EQ(CheckWritablePath(tmp.sub("state.db/inner")).code(), StatusCode::kFailedPrecondition);
  fs::create_directory(tmp.sub("adir"));
  const Status dir = CheckWritablePath(tmp.sub("adir"));
  EXPECT_EQ(dir.code(), StatusCode::kFailedPrecondition) << dir.ToString();
  EXPECT_NE(dir.message().find("no regular file"), std::string::npos) << dir.message();
  EXPECT_EQ(CheckWritablePath("").code(), StatusCode::kInvalidArgument);
}

TEST(CheckSecretFileMode, OnlyItsOwnerMayRead) {
  test_support::TempDir tmp;
  const std::string token = tmp.sub("token");
  Write(token, "secret\n");
  ASSERT_EQ(::chmod(token.c_str(), 0600), 0);
  EXPECT_TRUE(CheckSecretFileMode(token).ok());
  ASSERT_EQ(::chmod(token.c_str(), 0400), 0);
  EXPECT_TRUE(CheckSecretFileMode(token).ok());
  for (const mode_t mode : {0640, 0604, 0644, 0660}) {
    ASSERT_EQ(::chmod(token.c_str(), mode), 0);
    const Status s = CheckSecretFileMode(token);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << mode;
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(s.message().find(std::string("mode ") + octal), std::string::npos) << s.message();
  }
  EXPECT_EQ(CheckSecretFileMode(tmp.sub("none")).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gantry
