// Structured output: what a request's output must match (a JSON schema, any JSON object, a regular expression or
// an EBNF grammar) and the compiled form the engine masks the logits with at every step. Plain values only: the
// mask engine (xgrammar) stays behind engine/grammar/grammar.h.
#pragma once

#include <string>
#include <string_view>

namespace tq::engine {

enum class ConstraintKind {
  kJsonObject,  // any JSON object (OpenAI response_format json_object)
  kJsonSchema,  // a JSON schema (docs/serving.md lists the keywords supported)
  kRegex,       // the whole output matches a regular expression
  kEbnf,        // an EBNF grammar (GBNF syntax) whose start rule is "root"
  kStructuralTag,  // an xgrammar structural tag (JSON): tool calls (engine/runner/tool_calls.h)
};

std::string_view ConstraintKindName(ConstraintKind kind);  // "json_object", ..., "ebnf", "structural_tag"

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string source;    // the schema as JSON text, the pattern or the grammar; unused for kJsonObject
  bool strict = false;   // kJsonSchema: objects take only the properties they list unless additionalProperties
                         // says otherwise
  int max_depth = 32;    // kJsonSchema: nesting of subschemas allowed (the server's limit)
};

// Compiled once per distinct spec (and cached by the engine); shared by every request that uses it. Defined in
// engine/grammar/grammar.h.
class CompiledConstraint;

}  // namespace tq::engine
