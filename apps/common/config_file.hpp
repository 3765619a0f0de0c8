#pragma once
// TOML config files for apps whose options have dotted names (--model.layers): a file's
// [model] section with `layers = 8` sets --model.layers. The file's settings go before the
// command line, so flags override the file. An unknown key is an error, not silence.

#include <CLI/CLI.hpp>

#include <fstream>
#include <string>
#include <vector>

#include <tessera/core/error.hpp>

namespace tessera::apps {

/// Returns argv with the settings of the file named by --config FILE (or --config=FILE)
/// inserted right after the program name; throws ConfigError for a missing file or key.
inline std::vector<std::string> expand_config(int argc, char** argv, const CLI::App& app) {
  std::vector<std::string> args(argv, argv + argc);
  std::string path;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size())
      path = args[i + 1];
    else if (args[i].rfind("--config=", 0) == 0)
      path = args[i].substr(9);
  }
  if (path.empty()) return args;
  std::ifstream file(path);
  if (!file) throw ConfigError("config file '" + path + "' cannot be read");
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(file);
  } catch (const CLI::Error& e) {
    throw ConfigError("config file '" + path + "': " + e.what());
  }
  std::vector<std::string> settings;
  for (const auto& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    std::string key;
    for (const auto& p : item.parents) key += p + ".";
    key += item.name;
    bool known = false;
    for (const CLI::Option* opt : app.get_options())
      for (const auto& name : opt->get_lnames()) known = known || name == key;
    if (!known || key == "config")
      throw ConfigError("config file '" + path + "': unknown setting '" + key + "' (run with --help for the options)");
    settings.push_back("--" + key);
    for (const auto& value : item.inputs) settings.push_back(value);
  }
  args.insert(args.begin() + 1, settings.begin(), settings.end());
  return args;
}

}  // namespace tessera::apps
