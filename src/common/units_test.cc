#include "gantry/common/units.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "gantry/common/progress.h"

namespace gantry {
namespace {

TEST(ParseBytes, PlainNumbersAndBinaryUnits) {
  EXPECT_EQ(*ParseBytes("0"), 0u);
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("512B"), 512u);
  EXPECT_EQ(*ParseBytes("4K"), 4096u);
  EXPECT_EQ(*ParseBytes("4k"), 4096u);
  EXPECT_EQ(*ParseBytes("16M"), 16u << 20);
  EXPECT_EQ(*ParseBytes("16MiB"), 16u << 20);
  EXPECT_EQ(*ParseBytes("16MB"), 16u << 20);
  EXPECT_EQ(*ParseBytes("16Mi"), 16u << 20);
  EXPECT_EQ(*ParseBytes("100G"), 100ull << 30);
  EXPECT_EQ(*ParseBytes("2T"), 2ull << 40);
  EXPECT_EQ(*ParseBytes("1P"), 1ull << 50);
  EXPECT_EQ(*ParseBytes("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseBytes("0.5K"), 512u);
}

TEST(ParseBytes, TheLargestValueFitsAndOneMoreIsOutOfRange) {
  EXPECT_EQ(*ParseBytes("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*ParseBytes("15E"), 15ull << 60);
  for (const char* big : {"18446744073709551616", "16E", "99999999999999999999G",
                          "99999999999999999999999999999999999999999999999999"}) {
    Result<uint64_t> r = ParseBytes(big);
    ASSERT_FALSE(r.ok()) << big;
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << big;
    EXPECT_NE(r.status().message().find(big), std::string::npos) << r.status().message();
  }
}

TEST(ParseBytes, MalformedIsInvalidArgument) {
  for (const char* bad : {"", "-1", "-1G", "G", "abc", "12X", "12 G", "1.5", "1GG", "1Kx", ".K"}) {
    Result<uint64_t> r = ParseBytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(*ParseBytes("1.0"), 1u);  // a whole number written with a fraction is fine
}

TEST(ParseDurationSeconds, UnitsAndSums) {
  EXPECT_EQ(*ParseDurationSeconds("0"), 0);
  EXPECT_EQ(*ParseDurationSeconds("3600"), 3600);
  EXPECT_EQ(*ParseDurationSeconds("90s"), 90);
  EXPECT_EQ(*ParseDurationSeconds("15m"), 900);
  EXPECT_EQ(*ParseDurationSeconds("1h"), 3600);
  EXPECT_EQ(*ParseDurationSeconds("1H"), 3600);
  EXPECT_EQ(*ParseDurationSeconds("1h30m"), 5400);
  EXPECT_EQ(*ParseDurationSeconds("2d"), 172800);
  EXPECT_EQ(*ParseDurationSeconds("1w"), 604800);
  EXPECT_EQ(*ParseDurationSeconds("10min"), 600);
}

TEST(ParseDurationSeconds, MalformedAndOverflow) {
  for (const char* bad : {"", "-5", "h", "1.5h", "10ms", "1h30", "1y", "abc"}) {
    Result<int64_t> r = ParseDurationSeconds(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  Result<int64_t> big = ParseDurationSeconds("99999999999999999999w");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ParseDurationSeconds("9223372036854775807").value(), INT64_MAX);
  EXPECT_EQ(ParseDurationSeconds("9223372036854775808").status().code(), StatusCode::kOutOfRange);
}

TEST(FormatBytes, HumanUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(812), "812 B");
  EXPECT_EQ(FormatBytes(64 << 10), "64.0 KiB");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(FormatBytes(UINT64_MAX), "16.0 EiB");
}

TEST(FormatDurationSeconds, LargestUnitsFirst) {
  EXPECT_EQ(FormatDurationSeconds(0), "0s");
  EXPECT_EQ(FormatDurationSeconds(45), "45s");
  EXPECT_EQ(FormatDurationSeconds(3600), "1h");
  EXPECT_EQ(FormatDurationSeconds(5400), "1h30m");
  EXPECT_EQ(FormatDurationSeconds(2 * 86400 + 3 * 3600 + 1), "2d3h1s");
  EXPECT_EQ(FormatDurationSeconds(-60), "-1m");
  // What FormatDurationSeconds writes, ParseDurationSeconds reads back.
  for (int64_t s : {0, 1, 59, 61, 3599, 3601, 86399, 90061, 1234567}) {
    EXPECT_EQ(*ParseDurationSeconds(FormatDurationSeconds(s)), s) << s;
  }
}

TEST(ProgressBar, RendersBarPercentAndBytes) {
  EXPECT_EQ(ProgressBar::Render("sim", 0, ProgressBar::kFraction, 0, 0),
            "sim [                              ]   0%");
  EXPECT_EQ(ProgressBar::Render("sim", 50, ProgressBar::kFraction, 0, 0),
            "sim [===============               ]  50%");
  EXPECT_EQ(ProgressBar::Render("get", 100, ProgressBar::kBytes, 1 << 20, 1 << 20),
            "get [==============================] 100%  1.00 MiB / 1.00 MiB");
}

// What `drive` writes to a memory stream (a bar it makes there, over the bar's whole life).
std::string DrawnBy(const std::function<void(std::FILE*)>& drive) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  if (out == nullptr) return "open_memstream failed";
  drive(out);
  std::fclose(out);
  std::string text(buf, len);
  std::free(buf);
  return text;
}

// Draws only when the percent changes, and erases the line when it goes away.
TEST(ProgressBar, RedrawsOnPercentChangeAndErasesAtTheEnd) {
  const std::string text = DrawnBy([](std::FILE* out) {
    ProgressBar bar("put", true, ProgressBar::kBytes, out);
    auto cb = bar.Callback();
    ASSERT_TRUE(static_cast<bool>(cb));
    cb(0, 1000);
    cb(1, 1000);  // still 0%
    cb(500, 1000);
    cb(1000, 1000);
  });
  size_t redraws = 0;
  for (size_t p = text.find("\r\033[Kput"); p != std::string::npos;
       p = text.find("\r\033[Kput", p + 1)) {
    ++redraws;
  }
  EXPECT_EQ(redraws, 3u) << text;
  EXPECT_NE(text.find(" 50%"), std::string::npos);
  EXPECT_TRUE(text.ends_with("\r\033[K")) << text;
}

TEST(ProgressBar, DisabledDrawsNothing) {
  const std::string text = DrawnBy([](std::FILE* out) {
    ProgressBar bar("sim", false, ProgressBar::kFraction, out);
    EXPECT_FALSE(static_cast<bool>(bar.Callback()));
    bar.UpdateFraction(0.5);
    bar.Update(1, 2);
  });
  EXPECT_EQ(text, "");
}

}  // namespace
}  // namespace gantry
