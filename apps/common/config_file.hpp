#pragma once
// TOML config files for apps whose options have dotted names (--model.layers): a file's
// [model] section with `layers = 8` sets --model.layers. The file's settings go before the
// command line, so flags override the file. An unknown key, a key set twice, a list where
// one value belongs, or a malformed line is an error that names the file and the line.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <tessera/core/error.hpp>

#include "flag_errors.hpp"

namespace tessera::apps {

/// Where settings came from: the config file, if any, and the options it set.
struct ConfigSource {
  std::string path;
  std::vector<std::pair<std::string, int>> options;  // "--model.layers" and its line
  /// " (set in config file 'f', line 3)" when a flag parser's message is about an option the
  /// file set.
  std::string blame(const std::string& message) const {
    for (const auto& [o, line] : options)
      if (message.find(o + ":") != std::string::npos || message.find(o + " ") != std::string::npos)
        return " (set in config file '" + path + "'" + (line > 0 ? ", line " + std::to_string(line) : "") + ")";
    return {};
  }
};

namespace detail {
inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

/// A line without its comment: from a '#' outside quotes (a TOML string may hold one).
inline std::string before_comment(const std::string& line) {
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quote != 0) {
      if (ch == '\\' && quote == '"')
        ++i;  // an escaped character, a quote among them
      else if (ch == quote)
        quote = 0;
    } else if (ch == '"' || ch == '\'') {
      quote = ch;
    } else if (ch == '#') {
      return line.substr(0, i);
    }
  }
  return line;
}

/// A setting's value as TOML reads it: a string's text between its quotes, with a basic
/// string's escapes read (CLI11 keeps the backslashes, and cuts a value at any '#'), or a
/// bare value (a number, true or false) as written. `where` names the file, line and key.
inline std::string toml_value(const std::string& value, const std::string& where) {
  const char quote = value.front();
  if (quote != '"' && quote != '\'') return value;
  if (value.rfind(std::string(3, quote), 0) == 0)
    throw ConfigError(where + " is a multi-line string; give the value on one line, between single quotes");
  std::string text;
  std::size_t i = 1;
  for (; i < value.size() && value[i] != quote; ++i) {
    if (quote == '"' && value[i] == '\\' && i + 1 < value.size()) {
      const char e = value[++i];
      const std::string known = "\"\\bfnrt";
      const std::string means = "\"\\\b\f\n\r\t";
      const auto k = known.find(e);
      if (k == std::string::npos)
        throw ConfigError(where + " holds the escape '\\" + std::string(1, e) +
                          "', which this reader does not take; write the character itself, or put the value between "
                          "single quotes, where a backslash is a backslash");
      text += means[k];
    } else {
      text += value[i];
    }
  }
  if (i >= value.size()) throw ConfigError(where + " has no closing " + std::string(1, quote) + " to its string");
  if (!trim(value.substr(i + 1)).empty())
    throw ConfigError(where + " has '" + trim(value.substr(i + 1)) + "' after its string's closing quote");
  return text;
}

/// A setting of a config file: its line, and its value as TOML reads it.
struct Setting {
  int line = 0;
  std::string value;
};

/// Checks the lines of a config file for what CLI11's lenient reader lets through; returns
/// each setting ("model.layers") with its line and value.
inline std::map<std::string, Setting> check_lines(const std::string& path, std::istream& in) {
  std::map<std::string, Setting> seen;
  std::map<std::string, int> sections;
  std::string section, line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string text = trim(before_comment(line));
    if (text.empty()) continue;
    const std::string where = "config file '" + path + "', line " + std::to_string(number) + ": ";
    if (text.front() == '[') {
      if (text.back() != ']' || text.size() < 3)
        throw ConfigError(where + "'" + text + "' is not a section header; write [name]");
      if (text.rfind("[[", 0) == 0)
        throw ConfigError(where + "'" + text + "' is a TOML array of tables, which holds no settings; write [" +
                          trim(text.substr(text.find_first_not_of('['),
                                           text.find_last_not_of(']') + 1 - text.find_first_not_of('['))) +
                          "]");
      section = trim(text.substr(1, text.size() - 2));
      // TOML defines each table once: a second header would be read as the first's.
      if (const auto it = sections.find(section); it != sections.end())
        throw ConfigError(where + "section [" + section + "] appears twice (first on line " +
                          std::to_string(it->second) + "); put its settings under one header");
      sections[section] = number;
      continue;
    }
    const auto eq = text.find('=');
    if (eq == std::string::npos || trim(text.substr(0, eq)).empty())
      throw ConfigError(where + "'" + text + "' is not a setting; write name = value");
    // As CLI11 names it: quotes dropped, spaces kept ("layers" = 3 is model.layers; CLI11
    // does not take model . layers = 3 as model.layers, and refuses it by that name).
    std::string name;
    for (const char ch : trim(text.substr(0, eq)))
      if (ch != '"' && ch != '\'') name += ch;
    const std::string key = (section.empty() ? "" : section + ".") + name;
    const std::string value = trim(text.substr(eq + 1));
    if (value.empty()) throw ConfigError(where + "'" + key + "' has no value");
    if (value.front() == '[' || value.front() == '{')
      throw ConfigError(where + "'" + key + "' is given a list or a table; give one value");
    if (const auto it = seen.find(key); it != seen.end())
      throw ConfigError(where + "'" + key + "' is set twice (first on line " + std::to_string(it->second.line) + ")");
    seen[key] = Setting{number, toml_value(value, where + "'" + key + "'")};
  }
  return seen;
}
}  // namespace detail

/// Returns argv with the settings of the file named by --config FILE (or --config=FILE)
/// inserted right after the program name, and notes in `source` what the file set; throws
/// ConfigError for a missing file, a malformed one, or an unknown key.
inline std::vector<std::string> expand_config(int argc, char** argv, const CLI::App& app, ConfigSource& source) {
  std::vector<std::string> args(argv, argv + argc);
  std::string path;
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string given;
    if (args[i] == "--config" && i + 1 < args.size())
      given = args[i + 1];
    else if (args[i].rfind("--config=", 0) == 0)
      given = args[i].substr(9);
    else
      continue;
    // One file: a second would replace the first, whose settings would then be lost unsaid.
    if (!path.empty())
      throw ConfigError("--config is given twice ('" + path + "', then '" + given +
                        "'); give one config file, and the settings that differ as flags after it");
    // An empty name (an unset $CFG) is no file: running on the defaults would hide it.
    if (given.empty()) throw ConfigError("--config '' names no file; give the TOML file's path, or leave --config out");
    path = given;
  }
  if (path.empty()) return args;
  source.path = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("config file '" + path + "' is a directory; give the TOML file in it");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError("config file '" + path + "' cannot be read: " +
                      (!std::filesystem::exists(path, ec) ? std::string("there is no such file")
                       : errno != 0                       ? std::string(std::strerror(errno))
                                                          : std::string("it could not be opened")));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A UTF-8 byte-order mark, which some editors write, is no part of the first line.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  std::istringstream file(text);
  const auto lines = detail::check_lines(path, file);
  file.clear();
  file.seekg(0);
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(file);
  } catch (const CLI::Error& e) {
    throw ConfigError("config file '" + path + "': " + e.what());
  }
  std::vector<std::string> settings;
  for (const auto& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    // TOML allows spaces inside a header's brackets ("[ model ]"), which CLI11 keeps.
    std::string key;
    for (const auto& p : item.parents) key += detail::trim(p) + ".";
    key += detail::trim(item.name);
    const CLI::Option* option = nullptr;
    for (const CLI::Option* opt : app.get_options())
      for (const auto& name : opt->get_lnames())
        if (name == key) option = opt;
    const auto line = lines.find(key);
    if (option == nullptr || key == "config") {
      const std::string where = "config file '" + path + "'" +
                                (line != lines.end() ? ", line " + std::to_string(line->second.line) : std::string()) +
                                ": ";
      // tessera-bench-train takes tessera-train's files; the reverse, a file with the
      // benchmark's [bench] section, is not a typo of a training setting.
      bool has_bench = false;  // tessera-bench-train's own: a typo there is a typo
      for (const CLI::Option* opt : app.get_options())
        for (const auto& name : opt->get_lnames()) has_bench = has_bench || name.rfind("bench.", 0) == 0;
      if (key.rfind("bench.", 0) == 0 && !has_bench)
        throw ConfigError(where + "'" + key + "' is tessera-bench-train's setting, and " +
                          std::filesystem::path(argv[0]).filename().string() +
                          " takes none of [bench]; keep the benchmark's settings out of the file and give them to "
                          "tessera-bench-train on its command line (--" +
                          key + " ...)");
      const std::string near = key == "config" ? std::string() : closest_option(app, key);
      throw ConfigError(where + "unknown setting '" + key + "'" +
                        (near.empty() ? " (run with --help for the options)" : "; did you mean '" + near + "'?"));
    }
    // The file is blamed for what is wrong with its value only where the command line, whose
    // value would be kept (and checked) instead, does not give the option too.
    const bool on_command_line = std::any_of(args.begin() + 1, args.end(), [&](const std::string& a) {
      return a.size() > 1 && a[0] == '-' && option->check_name(a.substr(0, a.find('=')));
    });
    if (!on_command_line) source.options.emplace_back("--" + key, line != lines.end() ? line->second.line : 0);
    // The value as TOML reads it (check_lines), where CLI11's reader differs.
    std::vector<std::string> inputs = item.inputs;
    if (line != lines.end() && inputs.size() == 1) inputs.front() = line->second.value;
    // A flag takes its value after '=' ("quiet = true" is --quiet=true): given apart, the
    // value would be read as a stray argument.
    if (option->get_items_expected_max() == 0 && inputs.size() == 1) {
      settings.push_back("--" + key + "=" + inputs.front());
      continue;
    }
    settings.push_back("--" + key);
    for (const auto& value : inputs) settings.push_back(value);
  }
  args.insert(args.begin() + 1, settings.begin(), settings.end());
  return args;
}

}  // namespace tessera::apps
