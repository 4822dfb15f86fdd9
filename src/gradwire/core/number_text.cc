#include "gradwire/core/number_text.h"

#include <cstdio>

namespace gradwire {

std::string format_tenths(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

std::string format_parameter(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace gradwire
