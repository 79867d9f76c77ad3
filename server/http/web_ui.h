// The built-in page (server/http/web/index.html, compiled into the binary by server/CMakeLists.txt).
#pragma once

#include <string_view>

namespace tq::server {

std::string_view WebUiPage();  // the whole HTML document, UTF-8

}  // namespace tq::server
