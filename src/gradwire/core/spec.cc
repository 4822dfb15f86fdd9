#include "gradwire/core/spec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "gradwire/core/error.h"

namespace gradwire {
namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

}  // namespace

Spec Spec::parse(const std::string& text) {
  Spec spec;
  const auto colon = text.find(':');
  spec.name = trim(text.substr(0, colon));
  if (spec.name.empty()) throw ConfigError("empty name in spec '" + text + "'");
  if (colon == std::string::npos) return spec;
  const std::string rest = text.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    const auto comma = rest.find(',', start);
    const std::string item =
        trim(rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const auto eq = item.find('=');
    if (eq == std::string::npos || trim(item.substr(0, eq)).empty()) {
      throw ConfigError("malformed parameter '" + item + "' in spec '" + text +
                        "': expected key=value");
    }
    const std::string key = trim(item.substr(0, eq));
    if (!spec.params.emplace(key, trim(item.substr(eq + 1))).second) {
      throw ConfigError("parameter '" + key + "' given twice in spec '" + text + "'");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return spec;
}

std::string Spec::to_string() const {
  std::string out = name;
  char sep = ':';
  for (const auto& [key, value] : params) {
    out += sep + key + "=" + value;
    sep = ',';
  }
  return out;
}

SpecReader::SpecReader(const Spec& spec, std::string what) : spec_(spec), what_(std::move(what)) {}

const std::string* SpecReader::find(const std::string& key) {
  known_.insert(key);
  auto it = spec_.params.find(key);
  return it == spec_.params.end() ? nullptr : &it->second;
}

void SpecReader::bad_value(const std::string& key, const std::string& why) const {
  throw ConfigError(what_ + " '" + spec_.name + "': parameter " + key + "=" + spec_.params.at(key) +
                    " " + why);
}

double SpecReader::get_double(const std::string& key, double fallback) {
  const std::string* text = find(key);
  if (!text) return fallback;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0' || errno != 0 || !std::isfinite(value)) {
    bad_value(key, "is not a finite number");
  }
  return value;
}

double SpecReader::get_double_in(const std::string& key, double fallback, double lo, double hi) {
  const double value = get_double(key, fallback);
  if (!(value >= lo && value <= hi)) {
    bad_value(key, "is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

long long SpecReader::get_int(const std::string& key, long long fallback) {
  const std::string* text = find(key);
  if (!text) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno != 0) bad_value(key, "is not an integer");
  return value;
}

long long SpecReader::get_int_in(const std::string& key, long long fallback, long long lo,
                                 long long hi) {
  const long long value = get_int(key, fallback);
  if (value < lo || value > hi) {
    bad_value(key, "is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

bool SpecReader::get_bool(const std::string& key, bool fallback) {
  const std::string* text = find(key);
  if (!text) return fallback;
  if (*text == "1" || *text == "true" || *text == "on" || *text == "yes") return true;
  if (*text == "0" || *text == "false" || *text == "off" || *text == "no") return false;
  bad_value(key, "is not a boolean (use 1/0, true/false, on/off)");
}

std::string SpecReader::get_string(const std::string& key, const std::string& fallback) {
  const std::string* text = find(key);
  return text ? *text : fallback;
}

void SpecReader::finish() const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : spec_.params) {
    if (!known_.count(key)) unknown.push_back(key);
  }
  if (unknown.empty()) return;
  std::vector<std::string> known(known_.begin(), known_.end());
  throw ConfigError(
      what_ + " '" + spec_.name + "' has no parameter " + join(unknown) +
      (known.empty() ? "; it takes no parameters" : "; its parameters are: " + join(known)));
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

}  // namespace gradwire
