#pragma once
// --help in the apps' own words, the way argparse users (PyTorch, Megatron, DeepSpeed) read it:
//
//   --model.layers LAYERS                 number of Linear layers (default: 8)
//   --parallel.zero ZERO                  0: DDP ...; see docs/strategies.md (0 to 3; default: 0)
//
// in place of CLI11's "--model.layers UINT:INT in [1, 1073741824]=8"; the usage line first, and
// descriptions wrapped to the terminal ($COLUMNS, else 100 columns); the --section.name options
// under one heading per section (Training, Model, ...), as Megatron groups its arguments.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
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

/// Puts every --section.name option still in CLI11's default group under its section's heading
/// (--model.layers under "Model"); a section not named here keeps its name as the heading.
inline void group_by_section(CLI::App& app) {
  static const std::map<std::string, std::string> headings = {
      {"train", "Training"},       {"model", "Model"}, {"optim", "Optimizer"},    {"data", "Data"},
      {"parallel", "Parallelism"}, {"zero", "ZeRO"},   {"comm", "Communication"}, {"bench", "Benchmark"}};
  const std::string default_group = app.option_defaults()->get_group();
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_group() != default_group || opt->get_lnames().empty()) continue;
    const std::string& name = opt->get_lnames().front();
    const std::size_t dot = name.find('.');
    if (dot == std::string::npos) continue;
    const auto heading = headings.find(name.substr(0, dot));
    opt->group(heading != headings.end() ? heading->second : name.substr(0, dot));
  }
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
    return out + make_sections(app) + make_footer(app);
  }

  /// The groups in the order their first option was defined, one blank line apart (CLI11's
  /// make_groups puts two, and is not virtual in every CLI11 version).
  std::string make_sections(const CLI::App* app) const {
    std::string out;
    for (const std::string& group : app->get_groups()) {
      const auto opts = app->get_options(
          [&group](const CLI::Option* opt) { return opt->get_group() == group && opt->nonpositional(); });
      if (group.empty() || opts.empty()) continue;
      out += "\n" + group + ":\n";
      for (const CLI::Option* opt : opts) out += make_option(opt, false);
    }
    return out;
  }

  /// The footer, each of its lines wrapped as the descriptions are.
  std::string make_footer(const CLI::App* app) const override {
    std::istringstream lines(app->get_footer());
    std::string line, out;
    while (std::getline(lines, line)) out += wrap(line, width_) + "\n";
    return out;
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
