// The library's settings read from the environment (docs/ENV.md lists them all): on/off switches,
// parsed as the Python package parses its own (flashmask_paddle/_env.py, flag: 1/true/on/yes and
// 0/false/off/no in any case), and whole numbers. A value that is neither is refused naming the
// variable, so that a misspelt setting never silently keeps the default.
#pragma once

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace flashmask {

[[noreturn]] inline void bad_env_value(const char* name, const char* raw, const char* expected) {
  throw std::invalid_argument(std::string("flashmask: ") + name + " must be " + expected + "; got '" + raw + "'");
}

enum class EnvSwitch { kUnset, kOff, kOn };

// Unset: kUnset (the caller's default); empty: off, as in Python.
inline EnvSwitch env_switch(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return EnvSwitch::kUnset;
  std::string text(raw);
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (text == "1" || text == "true" || text == "on" || text == "yes") return EnvSwitch::kOn;
  if (text.empty() || text == "0" || text == "false" || text == "off" || text == "no") return EnvSwitch::kOff;
  bad_env_value(name, raw, "one of 1, true, on, yes, 0, false, off, no");
}

// A whole number of at least `min_value`; unset or empty: `fallback`.
inline int env_int(const char* name, int fallback, int min_value) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(raw, &end, 10);
  if (errno != 0 || *end != '\0' || value < min_value || value > INT_MAX)
    bad_env_value(name, raw, ("a whole number from " + std::to_string(min_value)).c_str());
  return int(value);
}

}  // namespace flashmask
