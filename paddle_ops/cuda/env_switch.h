// The kernels' on/off switches read from the environment (docs/ENV.md), parsed as the Python
// package parses its own (flashmask_paddle/_env.py, flag): 1/true/on/yes and 0/false/off/no in
// any case, so that a switch means the same whichever side reads it.
#pragma once

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace flashmask {

enum class EnvSwitch { kUnset, kOff, kOn };

// Unset: kUnset (the caller's default); empty: off, as in Python. Any other value than the words
// above throws, naming the variable: a misspelt switch must not silently keep the default.
inline EnvSwitch env_switch(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return EnvSwitch::kUnset;
  std::string text(raw);
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (text == "1" || text == "true" || text == "on" || text == "yes") return EnvSwitch::kOn;
  if (text.empty() || text == "0" || text == "false" || text == "off" || text == "no") return EnvSwitch::kOff;
  throw std::invalid_argument(std::string("flashmask: ") + name +
                              " must be one of 1, true, on, yes, 0, false, off, no; got '" + raw + "'");
}

}  // namespace flashmask
