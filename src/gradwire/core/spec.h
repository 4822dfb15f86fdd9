// Spec strings: `name[:key=value[,key=value]...]`, e.g. `topk:density=0.01,ef=1`.
//
// A Spec is parsed once; consumers read typed values with defaults through SpecReader,
// which remembers which keys were read so that finish() can reject unknown keys with a
// message listing the valid ones. Values are validated where they are read (range checks
// belong to the consumer, which knows them).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace gradwire {

struct Spec {
  std::string name;
  std::map<std::string, std::string> params;  // ordered, so to_string() is canonical

  // Throws ConfigError on empty names, missing '=', empty keys or repeated keys.
  static Spec parse(const std::string& text);
  std::string to_string() const;
};

class SpecReader {
 public:
  // `what` names the kind of thing for messages ("codec", "strategy").
  SpecReader(const Spec& spec, std::string what);

  double get_double(const std::string& key, double fallback);
  // Like get_double, and requires lo <= value <= hi.
  double get_double_in(const std::string& key, double fallback, double lo, double hi);
  long long get_int(const std::string& key, long long fallback);
  long long get_int_in(const std::string& key, long long fallback, long long lo, long long hi);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key, const std::string& fallback);
  bool has(const std::string& key) const { return spec_.params.count(key) != 0; }

  // Throws ConfigError if the spec has keys nobody asked for, listing the known keys.
  void finish() const;

 private:
  const std::string* find(const std::string& key);
  [[noreturn]] void bad_value(const std::string& key, const std::string& why) const;

  const Spec& spec_;
  std::string what_;
  std::set<std::string> known_;
};

// "a, b, c" — for messages that list what exists.
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

}  // namespace gradwire
