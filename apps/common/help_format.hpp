#pragma once
// --help in the apps' own words, the way argparse users (PyTorch, Megatron, DeepSpeed) read it:
//
//   --model.layers LAYERS                 number of Linear layers (default: 8)
//   --parallel.zero ZERO                  0: DDP ...; see docs/strategies.md (0 to 3; default: 0)
//
// in place of CLI11's "--model.layers UINT:INT in [1, 1073741824]=8"; the usage line first, and
// descriptions wrapped to the terminal ($COLUMNS, else 100 columns).

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::apps {

/// CLI11's type name of an option, "BASE:validator:validator", taken apart: the base type
/// (INT, UINT, FLOAT, BOOLEAN, TEXT), the choices of a set ("{1f1b,gpipe}", empty if none) and
/// the other validators' descriptions (a range in words, e.g. "0 to 3"; empty if none).
struct OptionType {
  std::string base, choices, range;
};

inline OptionType option_type(const CLI::Option& opt) {
  OptionType t;
  std::stringstream parts(opt.get_type_name());
  std::string part;
  std::getline(parts, t.base, ':');
  while (std::getline(parts, part, ':')) {
    if (part.empty()) continue;
    std::string& into = part.front() == '{' ? t.choices : t.range;
    into += (into.empty() ? "" : ", ") + part;
  }
  return t;
}

/// What an option's value is, in words, for error messages: "a whole number", "a number", ...
inline std::string value_kind(const CLI::Option& opt) {
  const OptionType t = option_type(opt);
  if (t.base == "INT" || t.base == "UINT") return "a whole number";
  if (t.base == "FLOAT") return "a number";
  if (t.base == "BOOLEAN") return "true or false";
  if (!t.choices.empty()) return "one of " + t.choices;
  return "a value it takes";
}

/// The placeholder for an option's value: its own option_text() if it has one (FILE), the
/// choices of a set, true|false, or else its long name's last part in capitals, as argparse
/// writes it (--train.steps STEPS, -b,--minbytes MINBYTES).
inline std::string metavar(const CLI::Option& opt) {
  if (!opt.get_option_text().empty()) return opt.get_option_text();
  const OptionType t = option_type(opt);
  if (!t.choices.empty()) return t.choices;
  if (t.base == "BOOLEAN") return "true|false";
  std::string name = opt.get_lnames().empty() ? opt.get_name() : opt.get_lnames().front();
  name = name.substr(name.find_last_of('.') + 1);
  for (char& c : name) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

/// `text` cut into lines of at most `width` characters at spaces (a longer word keeps its line).
inline std::string wrap(const std::string& text, std::size_t width) {
  std::istringstream words(text);
  std::string word, out, line;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() {
    const char* columns = std::getenv("COLUMNS");
    const long c = columns != nullptr ? std::strtol(columns, nullptr, 10) : 0;
    width_ = c >= 60 ? static_cast<std::size_t>(c) : 100;
    column_width(width_ >= 100 ? 40 : 30);  // a longer name has its own line
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    std::string out = make_usage(app, name) + "\n";
    if (!app->get_description().empty()) out += wrap(app->get_description(), width_) + "\n";
    return out + make_groups(app, mode) + make_footer(app);
  }

  std::string make_option_opts(const CLI::Option* opt) const override {
    return opt->get_expected_max() == 0 ? std::string() : " " + metavar(*opt);  // a flag takes none
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = opt->get_description();
    std::vector<std::string> notes;
    if (opt->get_expected_max() != 0) {
      const OptionType t = option_type(*opt);
      if (!t.range.empty()) notes.push_back(t.range);
      if (!opt->get_default_str().empty()) notes.push_back("default: " + opt->get_default_str());
    }
    for (std::size_t i = 0; i < notes.size(); ++i) desc += (i == 0 ? " (" : "; ") + notes[i];
    if (!notes.empty()) desc += ")";
    return wrap(desc, std::max<std::size_t>(width_ - get_column_width(), 30));
  }

 private:
  std::size_t width_ = 100;
};

}  // namespace tessera::apps
