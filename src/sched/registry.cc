// The plugin registry (registry.h): name tables per extension point.
#include "gantry/sched/registry.h"

namespace gantry {

template <class Plugin>
Status PluginRegistry::Point<Plugin>::Add(std::string name, PluginFactory<Plugin> factory) {
  for (const auto& [n, f] : entries) {
    if (n == name)
      return AlreadyExists(std::string(what) + " '" + name + "' is already registered");
  }
  entries.emplace_back(std::move(name), std::move(factory));
  return Status::Ok();
}

template <class Plugin>
Result<std::unique_ptr<Plugin>> PluginRegistry::Point<Plugin>::Create(
    const std::string& name, const PluginArgs& args, const PluginContext& ctx) const {
  for (const auto& [n, factory] : entries) {
    if (n == name) return factory(args, ctx);
  }
  std::string known;
  for (const auto& [n, f] : entries) known += (known.empty() ? "" : ", ") + n;
  return NotFound("unknown " + std::string(what) + " '" + name +
                  "' (known: " + (known.empty() ? "none" : known) + ")");
}

template <class Plugin>
std::vector<std::string> PluginRegistry::Point<Plugin>::names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : entries) out.push_back(n);
  return out;
}

const PluginRegistry& PluginRegistry::Builtin() {
  static const PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();  // never destroyed: plugins may be created at exit
    RegisterBuiltinPlugins(*r);
    return r;
  }();
  return *registry;
}

Status PluginRegistry::AddPriority(std::string name, PluginFactory<PriorityFactor> factory) {
  return priority_.Add(std::move(name), std::move(factory));
}
Status PluginRegistry::AddAdmission(std::string name, PluginFactory<AdmissionPlugin> factory) {
  return admission_.Add(std::move(name), std::move(factory));
}
Status PluginRegistry::AddPlacement(std::string name, PluginFactory<PlacementPlugin> factory) {
  return placement_.Add(std::move(name), std::move(factory));
}
Status PluginRegistry::AddScore(std::string name, PluginFactory<ScorePlugin> factory) {
  return score_.Add(std::move(name), std::move(factory));
}
Status PluginRegistry::AddPreemption(std::string name, PluginFactory<PreemptionPlugin> factory) {
  return preemption_.Add(std::move(name), std::move(factory));
}

Result<std::unique_ptr<PriorityFactor>> PluginRegistry::CreatePriority(
    const std::string& name, const PluginArgs& args, const PluginContext& ctx) const {
  return priority_.Create(name, args, ctx);
}
Result<std::unique_ptr<AdmissionPlugin>> PluginRegistry::CreateAdmission(
    const std::string& name, const PluginArgs& args, const PluginContext& ctx) const {
  return admission_.Create(name, args, ctx);
}
Result<std::unique_ptr<PlacementPlugin>> PluginRegistry::CreatePlacement(
    const std::string& name, const PluginArgs& args, const PluginContext& ctx) const {
  return placement_.Create(name, args, ctx);
}
Result<std::unique_ptr<ScorePlugin>> PluginRegistry::CreateScore(const std::string& name,
                                                                 const PluginArgs& args,
                                                                 const PluginContext& ctx) const {
  return score_.Create(name, args, ctx);
}
Result<std::unique_ptr<PreemptionPlugin>> PluginRegistry::CreatePreemption(
    const std::string& name, const PluginArgs& args, const PluginContext& ctx) const {
  return preemption_.Create(name, args, ctx);
}

std::vector<std::pair<std::string, std::vector<std::string>>> PluginRegistry::Names() const {
  return {
      {"priority", priority_.names()},
      {"admission", admission_.names()},
      {"placement", placement_.names()},
      {"score", score_.names()},
      {"backfill", {"none", "easy", "conservative"}},  // engine modes, not plugins
      {"preemption", preemption_.names()},
  };
}

}  // namespace gantry
