// Package workercmd is graft's production worker process: the graft-worker
// command line, its configuration (cmd/internal/conncfg's settings and the
// worker's own), and the run loop that applies migrations, opens the ledger
// and the store, dials Temporal, and polls the task queue until told to stop.
// cmd/worker is a main around Main.
//
// Invariants:
//   - A bad setting is a usage error (ExitUsage) naming its flag or variable,
//     before anything is contacted. No credential is a flag or a log field:
//     the database URL is logged redacted, S3 credentials are the AWS SDK's.
//   - SIGTERM or SIGINT stops gracefully: polling stops, running activities
//     get up to --shutdown-timeout, then the Temporal client and the ledger
//     close, and the exit code is 0. A second signal kills the process.
//   - A startup failure names what was unreachable and exits non-zero
//     without hanging: --dial-timeout bounds dialing Temporal.
//   - /metrics serves graft's, the Temporal SDK's and the Go runtime's
//     metrics; /healthz answers 200 only while the worker polls and the
//     ledger answers a ping.
package workercmd
