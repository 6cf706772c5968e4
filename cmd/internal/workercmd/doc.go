// Package workercmd is graft's production worker process: the graft-worker
// command line (cobra), its configuration from flags and environment, and the
// run loop that applies migrations, opens the ledger and the store, dials
// Temporal, and polls the task queue until told to stop. cmd/worker is a
// three-line main around Main.
//
// Invariants:
//   - Configuration: a flag given on the command line wins over its
//     environment variable, which wins over the default. A bad value is a
//     usage error naming the flag or variable it came from, and exits 2
//     before anything is contacted.
//   - No credential is ever a flag or a log field: the database URL comes
//     only from DATABASE_URL and is logged redacted; S3 credentials come only
//     from the AWS SDK's standard chain (environment, shared files, instance
//     role) and are never read by this package.
//   - Shutdown on SIGTERM or SIGINT is graceful: polling stops, running
//     activities get up to --shutdown-timeout to finish and report, and only
//     then are the Temporal client and the ledger closed; the exit code is 0.
//     A second signal kills the process at once.
//   - Every startup failure names what was unreachable (the Temporal
//     address, the redacted database URL, the store) and exits non-zero
//     without hanging: dialing Temporal is bounded by --dial-timeout.
//   - /metrics serves graft's own metrics, the Temporal SDK's (through a
//     small adapter to Prometheus) and the Go runtime's; /healthz answers 200
//     only while the worker is polling and the ledger answers a ping.
//
// The exit codes are ExitOK, ExitFailure and ExitUsage.
package workercmd
