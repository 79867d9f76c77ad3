// The JSON-schema subset structured output supports, checked before compiling: a schema that uses a keyword the
// mask engine would ignore is refused, never silently loosened.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tq::engine {

// OK when every keyword of `schema` (at any depth) is supported and nesting is at most `max_depth`; otherwise
// invalid_argument naming the keyword and its JSON pointer, e.g. "unsupported JSON schema keyword 'not' at
// /properties/a".
Status CheckJsonSchema(const nlohmann::ordered_json& schema, int max_depth);

}  // namespace tq::engine
