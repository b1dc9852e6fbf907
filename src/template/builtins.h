// Names of the filters and tests the interpreter implements (filters.cpp), checked by the
// parser so an unknown filter fails at parse time with its line:column, as in jinja2.
#pragma once
#include <string>

namespace moeflux::tpl {

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace moeflux::tpl
