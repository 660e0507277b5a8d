#include "gantry/sim/failures.h"

#include <cmath>
#include <map>
#include <string>

#include "gantry/common/units.h"

namespace gantry {
namespace {

// "k=v,k=v" into a map; InvalidArgument for an item without '=' or a key given twice.
Result<std::map<std::string, std::string>> SplitSpec(std::string_view spec, std::string_view what) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view item = spec.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return InvalidArgument(std::string(what) + ": '" + std::string(item) + "' is not key=value");
    }
    const std::string key(item.substr(0, eq));
    if (!out.emplace(key, std::string(item.substr(eq + 1))).second) {
      return InvalidArgument(std::string(what) + ": '" + key + "' given twice");
    }
  }
  return out;
}

Result<Duration> DurationValue(std::string_view what, const std::string& key,
                               const std::string& value) {
  Result<int64_t> d = ParseDurationSeconds(value);
  if (!d.ok()) {
    return Status(d.status().code(), std::string(what) + ": " + key + ": " + d.status().message());
  }
  return *d;
}

Result<double> NumberValue(std::string_view what, const std::string& key, const std::string& value,
                           double lo, double hi) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !std::isfinite(v) || v < lo || v > hi) {
    return InvalidArgument(std::string(what) + ": " + key + ": '" + value +
                           "' is not a number in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

Result<FailureModel> ParseFailureModel(std::string_view spec) {
  constexpr std::string_view kWhat = "--failures";
  GANTRY_ASSIGN_OR_RETURN(auto kv, SplitSpec(spec, kWhat));
  FailureModel m;
  m.enabled = true;
  bool have_mtbf = false;
  for (const auto& [key, value] : kv) {
    if (key == "mtbf") {
      GANTRY_ASSIGN_OR_RETURN(m.mtbf, DurationValue(kWhat, key, value));
      if (m.mtbf <= 0) return InvalidArgument("--failures: mtbf must be positive");
      have_mtbf = true;
    } else if (key == "repair") {
      GANTRY_ASSIGN_OR_RETURN(m.repair, DurationValue(kWhat, key, value));
    } else if (key == "dist") {
      if (value == "exponential") {
        m.distribution = FailureModel::Distribution::kExponential;
      } else if (value == "weibull") {
        m.distribution = FailureModel::Distribution::kWeibull;
      } else {
        return InvalidArgument("--failures: dist: '" + value +
                               "' is not a distribution (exponential, weibull)");
      }
    } else if (key == "shape") {
      GANTRY_ASSIGN_OR_RETURN(m.weibull_shape, NumberValue(kWhat, key, value, 0.05, 20));
    } else if (key == "health") {
      GANTRY_ASSIGN_OR_RETURN(m.health_fraction, NumberValue(kWhat, key, value, 0, 1));
    } else if (key == "spares") {
      GANTRY_ASSIGN_OR_RETURN(double s, NumberValue(kWhat, key, value, 0, 1 << 20));
      if (s != std::floor(s)) return InvalidArgument("--failures: spares: not a whole number");
      m.spares = static_cast<int>(s);
    } else if (key == "seed") {
      GANTRY_ASSIGN_OR_RETURN(double s, NumberValue(kWhat, key, value, 0, 9.007199254740992e15));
      if (s != std::floor(s)) return InvalidArgument("--failures: seed: not a whole number");
      m.seed = static_cast<uint64_t>(s);
    } else {
      return InvalidArgument("--failures: unknown key '" + key +
                             "' (known: mtbf, repair, dist, shape, health, spares, seed)");
    }
  }
  if (!have_mtbf) return InvalidArgument("--failures: mtbf is required (e.g. mtbf=30d)");
  return m;
}

Result<CheckpointModel> ParseCheckpointModel(std::string_view spec) {
  constexpr std::string_view kWhat = "--checkpoint-model";
  if (spec == "none") return CheckpointModel{0, 0};
  GANTRY_ASSIGN_OR_RETURN(auto kv, SplitSpec(spec, kWhat));
  CheckpointModel m;
  for (const auto& [key, value] : kv) {
    if (key == "interval") {
      GANTRY_ASSIGN_OR_RETURN(m.interval, DurationValue(kWhat, key, value));
    } else if (key == "restart") {
      GANTRY_ASSIGN_OR_RETURN(m.restart_cost, DurationValue(kWhat, key, value));
    } else {
      return InvalidArgument("--checkpoint-model: unknown key '" + key +
                             "' (known: interval, restart; or 'none')");
    }
  }
  return m;
}

Duration NodeFailureStream::NextUptime() {
  // Inverse transform of a uniform in (0, 1]: never log(0).
  const double u = 1.0 - rng_.Uniform();
  const double mean = static_cast<double>(model_->mtbf);
  double t = 0;
  if (model_->distribution == FailureModel::Distribution::kWeibull) {
    // Scale chosen so that the mean is the MTBF: mean = scale * Gamma(1 + 1/k).
    const double k = model_->weibull_shape;
    const double scale = mean / std::tgamma(1.0 + 1.0 / k);
    t = scale * std::pow(-std::log(u), 1.0 / k);
  } else {
    t = -mean * std::log(u);
  }
  constexpr double kMax = 1e15;  // far past any trace, and no overflow converting it
  return std::max<Duration>(1, static_cast<Duration>(std::min(t, kMax)));
}

bool NodeFailureStream::NextIsHealthEvent() {
  return model_->health_fraction > 0 && rng_.Uniform() < model_->health_fraction;
}

Duration NodeFailureStream::NextRepair() {
  if (model_->repair <= 0) return 0;
  const double u = 1.0 - rng_.Uniform();
  const double t = -static_cast<double>(model_->repair) * std::log(u);
  return std::max<Duration>(1, static_cast<Duration>(std::min(t, 1e15)));
}

}  // namespace gantry
