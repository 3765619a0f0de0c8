#pragma once
// What a flag parser's error means, in the app's words: an unknown option names the one the
// user probably meant (--model.layer -> --model.layers, --steps -> --train.steps), a missing
// value says so, and a value that is not true or false says what is. Other CLI11 messages
// pass through.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "help_format.hpp"

namespace tessera::apps {

namespace detail {
/// Edits (insert, delete, replace, swap two neighbours) that turn a into b.
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}
}  // namespace detail

/// The option (long name, without dashes) that `name` most likely meant: one whose last
/// dotted part is `name` (steps -> train.steps), else the nearest within a few typing
/// errors; empty when none is close.
inline std::string closest_option(const CLI::App& app, std::string name) {
  name.erase(0, name.find_first_not_of('-'));
  name = name.substr(0, name.find('='));
  if (name.empty()) return {};
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options())
    for (const auto& n : opt->get_lnames()) names.push_back(n);
  // A name's last dotted part: "model.steps" (a key under the wrong section) finds
  // train.steps as "steps" does.
  const auto last_part = [](const std::string& n) { return n.substr(n.rfind('.') + 1); };
  for (const auto& n : names)
    if (n != name && n.find('.') != std::string::npos && last_part(n) == last_part(name)) return n;
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(1, std::min<std::size_t>(3, name.size() / 4)) + 1;
  for (const auto& n : names)
    if (const auto d = detail::edit_distance(name, n); d < best_distance) {
      best_distance = d;
      best = n;
    }
  return best;
}

/// The message for a flag parser's error, with a hint where one helps.
inline std::string explain(const CLI::ParseError& e, const CLI::App& app) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const std::vector<std::string> extra = app.remaining();
    for (const auto& arg : extra)
      if (arg.size() > 1 && arg[0] == '-') {
        const std::string near = closest_option(app, arg);
        return "unknown option '" + arg.substr(0, arg.find('=')) + "'" +
               (near.empty() ? std::string() : "; did you mean --" + near + "?");
      }
    if (!extra.empty()) {
      const std::string& arg = extra.front();
      const bool toml = arg.size() > 5 && arg.compare(arg.size() - 5, 5, ".toml") == 0;
      return "unexpected argument '" + arg + "': options are given as --name value" +
             (toml && app.get_option_no_throw("--config") != nullptr ? "; a config file as --config " + arg : "");
    }
    return what;
  }
  // "--stepfactor excludes --stepbytes": each named as the user may have typed it.
  if (dynamic_cast<const CLI::ExcludesError*>(&e) != nullptr) {
    const auto at = what.find(" excludes ");
    if (at != std::string::npos) {
      const auto both_names = [&](const std::string& name) {
        const CLI::Option* opt = app.get_option_no_throw(name);
        return opt != nullptr && !opt->get_snames().empty() ? "-" + opt->get_snames().front() + "/" + name : name;
      };
      return both_names(what.substr(0, at)) + " and " + both_names(what.substr(at + 10)) +
             " cannot be given together; give one";
    }
  }
  const auto colon = what.find(": ");
  const std::string option = colon == std::string::npos ? std::string() : what.substr(0, colon);
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && what.size() > 8 &&
      what.compare(what.size() - 8, 8, " missing") == 0 && !option.empty()) {
    // Named by both names where it has a short one too (-J/--json), as a refused value is.
    const CLI::Option* opt = app.get_option_no_throw(option);
    return (opt != nullptr && !opt->get_snames().empty() ? "-" + opt->get_snames().front() + "/" : std::string()) +
           option + " needs a value";
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
    // "Could not convert: --name = value" for a true/false option given something else.
    const std::string prefix = "Could not convert: ";
    const auto eq = what.find(" = ");
    if (what.rfind(prefix, 0) == 0 && eq != std::string::npos) {
      const std::string name = what.substr(prefix.size(), eq - prefix.size());
      const CLI::Option* opt = app.get_option_no_throw(name);
      if (opt != nullptr && opt->get_type_name() == "BOOLEAN")
        return name + ": '" + what.substr(eq + 3) + "' is not true or false (nor on/off, yes/no, 1/0)";
      return name + ": '" + what.substr(eq + 3) + "' is not " + (opt ? value_kind(*opt) : "a value it takes");
    }
  }
  // A value refused by the option's check: CLI11 names the option by its long name, and an
  // option that has a short one too (-b, --minbytes) is named by both, as argparse does.
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr && !option.empty())
    if (const CLI::Option* opt = app.get_option_no_throw(option); opt != nullptr && !opt->get_snames().empty())
      return "-" + opt->get_snames().front() + "/" + option + what.substr(colon);
  return what;
}

}  // namespace tessera::apps
