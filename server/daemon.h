// `tqserve serve`: loads the model, runs the HTTP and gRPC front ends over one engine, and drains on SIGTERM or
// SIGINT (stop admitting, let in-flight requests finish up to server.drain_timeout_s, cancel the rest, exit 0).
#pragma once

#include "config/config.h"

namespace tq::server {

// Returns the process exit code: 0 after a clean drain, 1 when start-up fails (the reason is logged).
int RunDaemon(const config::Config& config);

}  // namespace tq::server
