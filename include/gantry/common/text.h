// Small text helpers shared across modules. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace gantry {

// Escapes & < > " ' as character references, so `text` can sit in HTML or XML text or in a
// quoted attribute. The apostrophe becomes &#39;, which both HTML and XML accept (&apos; is
// not HTML 4).
std::string EscapeMarkup(std::string_view text);

}  // namespace gantry
