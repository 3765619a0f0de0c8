#pragma once
// Flag validators whose messages say what a value must be, in words (CLI11's own ranges print
// 1.797e308 as 309 digits and 1e-12 as 0.000000).

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace tessera::apps {

/// A whole number from lo to hi.
inline CLI::Validator whole(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        const std::string range = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
        if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE)
          return "'" + text + "' is not a whole number; give " + range;
        if (v < lo || v > hi) return "must be " + range + ", not " + text;
        return {};
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

/// A real number above 0 and at most hi.
inline CLI::Validator positive(double hi) {
  return CLI::Validator(
      [hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        if (!(v > 0) || v > hi) return "must be above 0 and at most " + CLI::detail::to_string(hi) + ", not " + text;
        return {};
      },
      "NUMBER > 0");
}

/// A real number of 0 or more.
inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        if (!(v >= 0)) return "must be 0 or more, not " + text;
        return {};
      },
      "NUMBER >= 0");
}

/// A real number from 0 up to, but not including, 1 (a decay factor such as momentum).
inline CLI::Validator fraction() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        if (!(v >= 0 && v < 1)) return "must be 0 or more and below 1, not " + text;
        return {};
      },
      "NUMBER in [0, 1)");
}

}  // namespace tessera::apps
