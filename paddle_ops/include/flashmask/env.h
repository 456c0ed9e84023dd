// The library's settings read from the environment (docs/ENV.md lists them all): on/off switches,
// parsed as the Python package parses its own (flashmask_paddle/_env.py, flag: 1/true/on/yes and
// 0/false/off/no in any case, surrounding whitespace ignored, empty meaning unset), whole numbers,
// and names from a fixed list. Any other value is refused with an ArgError naming the variable, so
// that a misspelt setting never silently keeps the default.
#pragma once

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "flashmask/check.h"

namespace flashmask {

// The variable's value without surrounding whitespace; false when unset or blank.
inline bool env_text(const char* name, std::string* text) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return false;
  std::string s(raw);
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t first = 0;
  while (first < s.size() && space(s[first])) ++first;
  *text = s.substr(first);
  return !text->empty();
}

[[noreturn]] inline void bad_env_value(const char* name, const std::string& text, const std::string& expected) {
  throw ArgError(std::string("flashmask: ") + name + " must be " + expected + "; got '" + text + "'");
}

// One of `choices` (compared without regard to case): its position from 1; unset or blank: 0.
inline int env_choice(const char* name, std::initializer_list<const char*> choices) {
  std::string text;
  if (!env_text(name, &text)) return 0;
  std::string lower = text, listed;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  int position = 0;
  for (const char* choice : choices) {
    ++position;
    if (lower == choice) return position;
    listed += (listed.empty() ? "" : ", ") + std::string(choice);
  }
  bad_env_value(name, text, "one of " + listed);
}

enum class EnvSwitch { kUnset, kOff, kOn };

inline EnvSwitch env_switch(const char* name) {
  // The first four spellings are on, the last four off.
  const int given = env_choice(name, {"1", "true", "on", "yes", "0", "false", "off", "no"});
  return given == 0 ? EnvSwitch::kUnset : given <= 4 ? EnvSwitch::kOn : EnvSwitch::kOff;
}

// A whole number of at least `min_value`; unset or blank: `fallback`.
inline int env_int(const char* name, int fallback, int min_value) {
  std::string text;
  if (!env_text(name, &text)) return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  // env_text trimmed the text, so strtol's own skipping of leading whitespace never applies.
  if (errno != 0 || *end != '\0' || value < min_value || value > INT_MAX)
    bad_env_value(name, text, "a whole number from " + std::to_string(min_value));
  return int(value);
}

}  // namespace flashmask
