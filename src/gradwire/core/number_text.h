// Numbers as text for messages, reports and canonical specs, one spelling each.
#pragma once

#include <string>

namespace gradwire {

// "%.1f": times in ms or s, changes in percent ("12.5").
std::string format_tenths(double value);

// "%g": a parameter in a canonical spec, so that 0.50 and 0.5 read the same ("0.5").
std::string format_parameter(double value);

}  // namespace gradwire
