// Package conncfg holds the connection settings graft's two commands share:
// how graft-worker (cmd/internal/workercmd) and graft (cmd/starter) reach
// Temporal, the store and the ledger. It owns those settings' flags, their
// environment variables, their defaults and their checks, and it opens the
// connections they describe, so both commands configure and connect alike.
//
// Invariants:
//   - One environment configures both commands: every shared flag has the
//     same name, variable and default in each.
//   - A flag given on the command line wins over its environment variable,
//     which wins over the default; an empty variable counts as unset unless
//     the caller says otherwise for that flag.
//   - Every check names the offending setting the way the operator gave it
//     ("--s3-prefix", "GRAFT_S3_PREFIX"), or as "--flag (or VARIABLE)" when
//     neither set it.
//   - No credential is ever a flag: the database URL comes only from
//     DATABASE_URL, and its parse errors carry no password (pgconn redacts
//     it); S3 credentials come only from the AWS SDK's standard chain.
//   - Connecting is bounded by DialTimeout: dialing Temporal and the store's
//     first listing give up after it.
package conncfg
