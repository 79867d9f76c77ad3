// The option table: one row per option (name, flag, env var, help, typed field with default and range), bound to
// the members of one Config. Adding an option = adding a member to config.h and a row to option_table.cc.
#pragma once

#include <vector>

#include "config/config.h"
#include "config/option.h"

namespace tq::config {

// Rows bound to `config`'s members; every field starts at its default. `config` must outlive the rows.
std::vector<Option> BuildOptionTable(Config* config);

}  // namespace tq::config
