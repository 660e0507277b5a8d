// The cluster spec's power section: the model it builds, and errors that name the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "gantry/cluster/cluster.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

// Two racks of two nodes with 4 H100 each (70 W idle, 700 W busy), 100 W per node besides.
// With node_watts 100 a rack draws 2 x (100 + 4 x 70) = 760 W idle, the cluster 1520 W.
std::string Spec(const std::string& power, const std::string& gpu_type =
                                               "{name: H100, memory_gb: 80, idle_watts: 70, "
                                               "busy_watts: 700}") {
  return "name: p\nlevels: [rack]\ngpu_types: [" + gpu_type +
         "]\n"
         "topology:\n"
         "  - {name: rack, level: rack, repeat: 2, nodes: [{count: 2, gpu_type: H100, gpus: "
         "4}]}\n" +
         power;
}

Result<Cluster> Parse(const std::string& text) { return ParseClusterSpec(text, "p.yaml"); }

TEST(PowerSpec, ParsesCapsNodeWattsAndCappedClock) {
  auto c = Parse(
      Spec("power:\n"
           "  cap_watts: 5000\n"
           "  node_watts: 100\n"
           "  domains:\n"
           "    - {level: rack, cap_watts: 3000}\n"
           "    - {name: rack-1, cap_watts: 2000}\n"  // below the level's cap: the lower holds
           "  capped_clock: {watts_factor: 0.5, slowdown: 1.25}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const PowerSpec& p = c->power();
  EXPECT_EQ(p.cap_watts, 5000);
  EXPECT_EQ(p.node_watts, 100);
  ASSERT_EQ(c->domains().size(), 2u);
  EXPECT_EQ(p.domain_cap_watts, (std::vector<double>{3000, 2000}));
  EXPECT_TRUE(p.has_caps());
  EXPECT_TRUE(p.capped_clock());
  EXPECT_EQ(p.capped_slowdown, 1.25);
  EXPECT_EQ(c->BusyWatts(0), 350);  // 700 x 0.5
  EXPECT_EQ(c->IdleWatts(), 1520);
  EXPECT_EQ(c->IdleWatts(0), 760);
}

TEST(PowerSpec, CappedWattsNeverGoBelowIdle) {
  auto c = Parse(Spec("power: {capped_clock: {watts_factor: 0.05, slowdown: 3}}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->BusyWatts(0), 70);  // 700 x 0.05 = 35 < 70 idle
  EXPECT_FALSE(c->power().has_caps());
}

TEST(PowerSpec, NoPowerSectionMeansNoCapsAndFullClocks) {
  auto c = Parse(Spec(""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->power().has_caps());
  EXPECT_FALSE(c->power().capped_clock());
  EXPECT_EQ(c->BusyWatts(0), 700);
  EXPECT_EQ(c->IdleWatts(), 16 * 70);
}

TEST(PowerSpec, KnownGpuTypesDefaultTheirWatts) {
  auto c = Parse(Spec("", "{name: h100, memory_gb: 80}"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->gpu_types()[0].idle_watts, 70);
  EXPECT_EQ(c->gpu_types()[0].busy_watts, 700);
  // Given watts win over the catalog's.
  auto d = Parse(Spec("", "{name: H100, memory_gb: 80, busy_watts: 650}"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->gpu_types()[0].busy_watts, 650);
  EXPECT_EQ(d->gpu_types()[0].idle_watts, 70);
}

struct BadCase {
  std::string power;
  std::string want;  // in the error message
  std::string gpu_type = "{name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}";
};

TEST(PowerSpec, ErrorsNameTheField) {
  const std::vector<BadCase> cases = {
      {"power: {watts: 5}\n", "field 'watts': unknown field in the power section"},
      {"power: {cap_watts: 0}\n", "field 'cap_watts': must be above 0"},
      {"power: {cap_watts: lots}\n", "field 'cap_watts': expected a number"},
      {"power: {node_watts: -5}\n", "field 'node_watts': must be at least"},
      {"power: {domains: [{cap_watts: 900}]}\n", "field 'name': give a domain's name or a level"},
      {"power: {domains: [{name: rack-0, level: rack, cap_watts: 900}]}\n", "not both"},
      {"power: {domains: [{name: rack-7, cap_watts: 900}]}\n",
       "field 'name': no domain is named \"rack-7\""},
      {"power: {domains: [{level: row, cap_watts: 900}]}\n",
       "field 'level': unknown level \"row\" (levels: rack)"},
      {"power: {domains: [{level: rack}]}\n", "field 'cap_watts': required field is missing"},
      {"power: {domains: [{level: rack, cap_watts: 900, x: 1}]}\n", "field 'x': unknown field"},
      {"power: {capped_clock: {watts_factor: 1.5, slowdown: 1}}\n",
       "field 'watts_factor': must be above 0 and at most 1"},
      {"power: {capped_clock: {watts_factor: 0.5, slowdown: 0.5}}\n",
       "field 'slowdown': must be at least 1"},
      {"power: {capped_clock: {watts_factor: 0.5}}\n", "field 'slowdown': required field"},
      // Idle draw: 16 x 70 = 1120 W; a rack 560 W.
      {"power: {cap_watts: 1000}\n",
       "the cluster's cap (1000 W) is below what it draws idle (1120 W)"},
      {"power: {domains: [{name: rack-1, cap_watts: 559.5}]}\n",
       "the cap of domain 'rack-1' (559.5 W) is below what it draws idle (560 W)"},
      {"", "field 'idle_watts': required field is missing in a gpu_types entry of a type Gantry",
       "{name: X9, memory_gb: 8, busy_watts: 100}"},
  };
  for (const BadCase& bc : cases) {
    auto c = Parse(Spec(bc.power, bc.gpu_type));
    ASSERT_FALSE(c.ok()) << bc.power;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bc.power;
    EXPECT_THAT(c.status().message(), HasSubstr(bc.want)) << bc.power;
    EXPECT_THAT(c.status().message(), HasSubstr("p.yaml")) << bc.power;
  }
}

}  // namespace
}  // namespace gantry
