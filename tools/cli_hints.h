// What modelc and modelrun add to a command-line error: the flag nearest a mistyped one.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "compiler/support/suggest.h"

namespace modelc_tools {

// " (did you mean '--steps'?)" for the first unknown flag of `app`'s parse (of the subcommand
// it parsed, if any) that is near a flag of that command, else "".
inline std::string flag_hint(const CLI::App& app) {
  std::vector<const CLI::App*> apps = {&app};
  for (const CLI::App* sub : app.get_subcommands()) apps.push_back(sub);
  std::vector<std::string> flags;
  for (const CLI::App* a : apps)
    for (const CLI::Option* o : a->get_options()) {
      for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
      for (const std::string& n : o->get_snames()) flags.push_back("-" + n);
    }
  for (std::string arg : app.remaining(true)) {
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg = arg.substr(0, arg.find('='));
    std::string best = modelc::closest_name(arg, flags);
    if (!best.empty()) return fmt::format(" (did you mean '{}'?)", best);
  }
  return "";
}

}  // namespace modelc_tools
