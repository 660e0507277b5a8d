// Reading profiles files (docs/formats/profiles.md): what a mistyped or repeated field does.
#include "gantry/sched/profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace gantry {
namespace {

using ::testing::HasSubstr;

constexpr const char* kTwoProfiles = R"(profiles:
  a:
    priority: [{plugin: age, weight: 1}]
    admission: [quota, {plugin: power, args: {reserve: true}}]
    placement: first-fit
  b:
    placement: best-fit
)";

TEST(ParseProfiles, ReadsEachProfileOnce) {
  auto p = ParseProfiles(kTwoProfiles, "p.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].name, "a");
  EXPECT_EQ((*p)[0].placement.name, "first-fit");
  ASSERT_EQ((*p)[0].admission.size(), 2u);
  EXPECT_EQ((*p)[0].admission[1].name, "power");
  EXPECT_EQ((*p)[1].name, "b");
  EXPECT_EQ((*p)[1].placement.name, "best-fit");
}

// yaml-cpp keeps both entries of a repeated key, and the parser took one of them silently: a
// plugin argument given twice ran with the second value, a profile given twice was listed
// twice. Each is now an error naming the field and both lines.
TEST(ParseProfiles, AKeyGivenTwiceIsAnError) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"profiles:\n  a:\n    admission: [{plugin: power, args: {reserve: true, reserve: false}}]\n",
       "p.yaml:3:55: field 'profiles.a.admission[0].args.reserve': given twice (first at line 3)"},
      {"profiles:\n  a:\n    placement: first-fit\n  a:\n    placement: best-fit\n",
       "p.yaml:4:3: field 'profiles.a': given twice (first at line 2)"},
      {"profiles:\n  a:\n    placement: first-fit\n    placement: best-fit\n",
       "p.yaml:4:5: field 'profiles.a.placement': given twice (first at line 3)"},
      {"profiles:\n  a:\n    backfill: {mode: easy, max_jobs: 5, max_jobs: 500}\n",
       "p.yaml:3:41: field 'profiles.a.backfill.max_jobs': given twice (first at line 3)"},
      {"profiles: {}\nprofiles: {a: {placement: first-fit}}\n",
       "p.yaml:2:1: field 'profiles': given twice (first at line 1)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto p = ParseProfiles(c.yaml, "p.yaml");
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(p.status().message(), c.message);
  }
}

TEST(ParseProfiles, NestingIsBounded) {
  std::string deep = "profiles:\n  a:\n    description: ";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  deep += "\n";
  auto p = ParseProfiles(deep, "p.yaml");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("nested more than 64 levels deep"));
}

// Aliases let a few lines name a huge tree (each level repeating the one below nine times):
// the check of every map visits nodes up to a bound instead of walking 9^9 of them.
TEST(ParseProfiles, AliasesCannotMakeTheCheckWalkForEver) {
  std::string yaml = "x0: &x0 [a, a, a, a, a, a, a, a, a]\n";
  for (int i = 1; i <= 9; ++i) {
    const std::string prev = "*x" + std::to_string(i - 1);
    yaml += "x" + std::to_string(i) + ": &x" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) yaml += (k ? ", " : "") + prev;
    yaml += "]\n";
  }
  yaml += "profiles:\n  a:\n    description: *x9\n";
  auto p = ParseProfiles(yaml, "p.yaml");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("more than 100000 values"));
}

TEST(ParseProfiles, BelowShareFirstTakesOnlyItsThreeValues) {
  for (const char* value : {"none", "backfill", "all"}) {
    auto p = ParseProfiles(std::string("profiles:\n  a:\n    backfill: {mode: easy, "
                                       "below_share_first: ") +
                               value + "}\n",
                           "p.yaml");
    ASSERT_TRUE(p.ok()) << value << ": " << p.status().ToString();
  }
  auto p = ParseProfiles("profiles:\n  a:\n    backfill: {mode: easy, below_share_first: most}\n",
                         "p.yaml");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("unknown value 'most' (known: none, backfill, all)"));
}

}  // namespace
}  // namespace gantry
