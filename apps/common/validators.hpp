#pragma once
// Flag validators whose messages say what a value must be, in words (CLI11's own ranges print
// 1.797e308 as 309 digits and 1e-12 as 0.000000); their descriptions are what --help shows
// beside the default (help_format.hpp).

#include <CLI/CLI.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <tessera/core/error.hpp>

namespace tessera::apps {

/// A range of whole numbers as --help shows it: "0 to 3", "at least 2", or nothing where the
/// top is only a guard against overflow and the bottom is 0 or 1.
inline std::string range_words(long long lo, long long hi) {
  if (hi < (1ll << 30)) return std::to_string(lo) + " to " + std::to_string(hi);
  return lo > 1 ? "at least " + std::to_string(lo) : std::string();
}

/// A whole number from lo to hi, in decimal; attach it with ->transform(), not ->check(). It
/// gives the number on to CLI11 as plain decimal digits: CLI11 reads "010" as octal (8) and
/// "09" as no number, where a user means 10 and 9.
inline CLI::Validator whole(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        const std::string range = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
        if (text.empty() || end == text.c_str() || *end != '\0')
          return "'" + text + "' is not a whole number; give " + range;
        if (errno == ERANGE || v < lo || v > hi) return "must be " + range + ", not " + text;
        text = std::to_string(v);
        return {};
      },
      range_words(lo, hi));
}

/// A real number for which in_range(v) holds; otherwise "must be <requirement>, not <text>".
template <class InRange>
CLI::Validator real(InRange in_range, const std::string& requirement, const std::string& description) {
  return CLI::Validator(
      [in_range, requirement](std::string& text) -> std::string {
        // Hexadecimal ("0x10", which strtod reads as 16) is no number a flag takes; nor are
        // "inf" and "nan", refused below with the range.
        if (text.find_first_of("xXpP") != std::string::npos)
          return "'" + text + "' is not a number; give it in decimal (0.001 or 1e-3)";
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        // "16GB", "5s": the option's name says its unit.
        if (!text.empty() && end != text.c_str() && std::isalpha(static_cast<unsigned char>(*end)) &&
            std::tolower(static_cast<unsigned char>(*end)) != 'e')  // "1e" is a number cut short
          return "'" + text + "' is not a number; give the number alone (--help gives the option's unit)";
        if (text.empty() || end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        // Beyond a double's range ("1e-400" reads as 0, "1e400" as infinity).
        if (errno == ERANGE)
          return "'" + text + "' is beyond the numbers a double holds (about 2.2e-308 to 1.8e308 in size)";
        if (!std::isfinite(v) || !in_range(v)) return "must be " + requirement + ", not " + text;
        return {};
      },
      description);
}

/// A real number above 0 and at most hi.
inline CLI::Validator positive(double hi) {
  const std::string bound =
      hi == std::floor(hi) && hi < 1e15 ? std::to_string(static_cast<long long>(hi)) : CLI::detail::to_string(hi);
  return real([hi](double v) { return v > 0 && v <= hi; }, "above 0 and at most " + bound, "above 0, at most " + bound);
}

/// A real number of 0 or more.
inline CLI::Validator non_negative() {
  return real([](double v) { return v >= 0; }, "0 or more", "0 or more");
}

/// A real number from 0 up to, but not including, 1 (a decay factor such as momentum).
inline CLI::Validator fraction() {
  return real([](double v) { return v >= 0 && v < 1; }, "0 or more and below 1", "0 or more, below 1");
}

/// A file to write: a name, not an empty string (a script's `--metrics "$OUT"` with OUT unset
/// would otherwise turn the output off in silence). `instead` says what else to give.
inline CLI::Validator file_name(const std::string& instead = "give one, or leave the option out") {
  return CLI::Validator(
      [instead](std::string& text) -> std::string {
        return text.empty() ? "'' is no file name; " + instead : std::string();
      },
      "");
}

/// "a, b or c".
inline std::string either(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

/// One of `names`, in any case (taken lower-cased), or of `aliases`; otherwise "'x' is not
/// <what>; use a, b or c<note>" (without `what`: "'x' is not a, b or c<note>"). --help shows
/// the names as the option's choices. A wrong name is then a usage error, found while the
/// command line is read, as a number out of its range is.
inline CLI::Validator one_of(std::vector<std::string> names, const std::string& what,
                             std::vector<std::string> aliases = {}, const std::string& note = "") {
  std::string shown = "{";
  for (std::size_t i = 0; i < names.size(); ++i) shown += (i ? "," : "") + names[i];
  shown += "}";
  return CLI::Validator(
      [names, aliases, what, note](std::string& text) -> std::string {
        std::string lower = text;
        for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        for (const auto* list : {&names, &aliases})
          for (const auto& name : *list)
            if (lower == name) {
              text = lower;
              return {};
            }
        return "'" + text + "' is not " + (what.empty() ? "" : what + "; use ") + either(names) + note;
      },
      shown);
}

/// A value that `parse`, the library's own reader of it, accepts; otherwise the message of
/// the ConfigError it throws. The value is kept as typed, for the parser to read again.
template <class Parse>
CLI::Validator parsed_by(Parse parse) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          (void)parse(text);
          return {};
        } catch (const ConfigError& e) {
          return e.message();
        }
      },
      "");
}

/// For every single-value option of `app` that keeps the last of several values (TakeLast),
/// its validators judge only that last value: CLI11 otherwise checks every value given, so
/// `-g 2 -g 1` was refused for the 2 it then drops. (CLI11 numbers the dropped values below
/// 0; a validator applied to index 0 skips them.)
inline void validate_kept_values_only(CLI::App& app) {
  for (CLI::Option* option : app.get_options({})) {
    if (option->get_multi_option_policy() != CLI::MultiOptionPolicy::TakeLast || option->get_items_expected_max() != 1)
      continue;
    for (int i = 0;; ++i) {
      try {
        option->get_validator(i)->application_index(0);
      } catch (const CLI::OptionNotFound&) {
        break;
      }
    }
  }
}

}  // namespace tessera::apps
