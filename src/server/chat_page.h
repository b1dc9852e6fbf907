// The chat page `moeflux serve` answers GET / with (chat_page.cpp).
#pragma once

namespace moeflux {

const char* chat_page_html();

}  // namespace moeflux
