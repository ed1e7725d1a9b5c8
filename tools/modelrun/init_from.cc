#include "tools/modelrun/init_from.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <set>

#include "runtime/session/checkpoint.h"

namespace modelrun {

namespace rt = modelc::rt;

std::string init_from(rt::Session& s, const std::string& path, const std::vector<std::string>& only) {
  const rt::Checkpoint c = rt::load_checkpoint(path);
  struct Target {
    std::string name;
    bool buffer;
  };
  std::vector<Target> model;
  for (const std::string& n : s.param_names()) model.push_back({n, false});
  for (const std::string& n : s.buffer_names()) model.push_back({n, true});
  auto matches = [](const std::string& pattern, const std::string& name) {
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  };
  for (const std::string& p : only) {
    bool any = false;
    for (const Target& t : model) any |= matches(p, t.name);
    if (!any)
      throw rt::CheckpointError(fmt::format("--init-only '{}' matches no parameter or buffer of model '{}' (its "
                                            "names are like '{}')", p, s.program().model,
                                            model.empty() ? std::string("?") : model.front().name));
  }
  std::set<std::string> taken;
  std::vector<std::string> missing;
  for (const Target& t : model) {
    bool wanted = only.empty();
    for (const std::string& p : only) wanted |= matches(p, t.name);
    if (!wanted) continue;
    const rt::HostTensor* v = c.find(t.name);
    if (!v) {
      missing.push_back(t.name);
      continue;
    }
    const rt::HostTensor have = t.buffer ? s.buffer(t.name) : s.param(t.name);
    if (v->type != have.type || v->shape != have.shape)
      throw rt::CheckpointError(fmt::format("{}: tensor '{}' is {}{}, but the model's {} '{}' is {}{}", path, t.name,
                                            modelc::dtype_name(v->type), v->shape_str(), t.buffer ? "buffer" : "parameter",
                                            t.name, modelc::dtype_name(have.type), have.shape_str()));
    if (t.buffer) s.set_buffer(t.name, *v);
    else s.set_param(t.name, *v);
    taken.insert(t.name);
  }
  if (!missing.empty())
    throw rt::CheckpointError(fmt::format("{}: has no tensor {} of model '{}'{}", path, fmt::join(missing, ", "),
                                          s.program().model,
                                          only.empty() ? " (pass --init-only PATTERN to take only some tensors)" : ""));
  size_t ignored = 0;
  for (const auto& [name, t] : c.tensors) ignored += taken.count(name) == 0;
  return fmt::format("initialised {} of the model's {} parameters and buffers from {}{}", taken.size(), model.size(),
                     path, ignored ? fmt::format(" ({} other tensors of the file, such as optimizer state, not taken)", ignored) : "");
}

}  // namespace modelrun
