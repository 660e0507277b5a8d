#include "gantry/common/text.h"

#include <gtest/gtest.h>

namespace gantry {
namespace {

TEST(EscapeMarkup, EscapesEveryMarkupCharacterAndKeepsTheRest) {
  EXPECT_EQ(EscapeMarkup("<a href=\"x\">Tom & Jerry's</a>"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
  EXPECT_EQ(EscapeMarkup("plain/key-01 ü"), "plain/key-01 ü");
  EXPECT_EQ(EscapeMarkup(""), "");
}

}  // namespace
}  // namespace gantry
