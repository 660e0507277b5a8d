#include "gantry/cache/tier_spec.h"

#include <gtest/gtest.h>

namespace gantry {
namespace {

TEST(TierSpec, UrlAloneGetsADefaultName) {
  Result<TierOptions> t = ParseTierSpec("file:///nvme/cache", 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->url, "file:///nvme/cache");
  EXPECT_EQ(t->name, "tier2");
  EXPECT_EQ(t->capacity_bytes, 0u);
  EXPECT_FALSE(t->durable);
  EXPECT_EQ(t->codec, Codec::kNone);
}

TEST(TierSpec, EverySetting) {
  Result<TierOptions> t =
      ParseTierSpec("s3://bkt/cache,name=s3,capacity=1.5G,durable,codec=zstd", 0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->url, "s3://bkt/cache");
  EXPECT_EQ(t->name, "s3");
  EXPECT_EQ(t->capacity_bytes, 3ull << 29);
  EXPECT_TRUE(t->durable);
  EXPECT_EQ(t->codec, Codec::kZstd);
  EXPECT_EQ(ParseTierSpec("file:///x,capacity=9M", 0)->capacity_bytes, 9u << 20);
  EXPECT_EQ(ParseTierSpec("file:///x,capacity=4096", 0)->capacity_bytes, 4096u);
  EXPECT_TRUE(ParseTierSpec("file:///x,durable,", 0)->durable);
}

// Regression: capacity=99999999999999999999G wrapped around to a small capacity.
TEST(TierSpec, CapacityTooLargeIsOutOfRangeNamingTheValue) {
  Result<TierOptions> t = ParseTierSpec("file:///x,capacity=99999999999999999999G", 0);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(t.status().message().find("99999999999999999999G"), std::string::npos)
      << t.status().message();
  EXPECT_EQ(ParseTierSpec("file:///x,capacity=16E", 0).status().code(), StatusCode::kOutOfRange);
}

TEST(TierSpec, MalformedSpecsNameTheProblem) {
  struct Case {
    const char* spec;
    const char* says;
  } cases[] = {
      {",durable", "has no URL"},
      {"file:///x,capacity=-1G", "negative"},
      {"file:///x,capacity=lots", "not a number"},
      {"file:///x,capacity=9Q", "unknown unit"},
      {"file:///x,codec=gzip", "gzip"},
      {"file:///x,fast", "unknown setting 'fast'"},
      {"file:///x,durable=yes", "unknown setting 'durable=yes'"},
      {"file:///x,name=", "name= is empty"},
      {"file:///x,durable,durable", "given twice"},
  };
  for (const Case& c : cases) {
    Result<TierOptions> t = ParseTierSpec(c.spec, 0);
    ASSERT_FALSE(t.ok()) << c.spec;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << c.spec;
    EXPECT_NE(t.status().message().find(c.says), std::string::npos)
        << c.spec << ": " << t.status().message();
  }
}

TEST(TierSpec, ListsNeedATierAndDistinctNames) {
  EXPECT_EQ(ParseTierSpecs({}).status().code(), StatusCode::kInvalidArgument);
  Result<std::vector<TierOptions>> two =
      ParseTierSpecs({"mem://a,capacity=1M", "file:///d,durable"});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ((*two)[0].name, "tier0");
  EXPECT_EQ((*two)[1].name, "tier1");
  Result<std::vector<TierOptions>> clash = ParseTierSpecs({"mem://a,name=x", "file:///d,name=x"});
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("'x'"), std::string::npos);
}

TEST(TierSpec, FormatParsesBack) {
  TierOptions t;
  t.url = "file:///nvme";
  t.name = "nvme";
  t.capacity_bytes = 123456789;
  t.durable = true;
  t.codec = Codec::kLz4;
  Result<TierOptions> back = ParseTierSpec(FormatTierSpec(t), 7);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->url, t.url);
  EXPECT_EQ(back->name, t.name);
  EXPECT_EQ(back->capacity_bytes, t.capacity_bytes);
  EXPECT_EQ(back->durable, t.durable);
  EXPECT_EQ(back->codec, t.codec);
}

}  // namespace
}  // namespace gantry
