// Package conncfg holds the connection settings graft's two commands share:
// how graft-worker (cmd/internal/workercmd) and graft (cmd/starter) reach
// Temporal, the store and the ledger. It owns those settings' flags,
// variables, defaults and checks, and opens the connections they describe.
//
// Invariants:
//   - One environment configures both commands: each shared flag has the
//     same name, variable and default in each.
//   - A flag on the command line wins over its variable, which wins over the
//     default; an empty variable counts as unset unless the caller says
//     otherwise for that flag.
//   - Every check names the setting as the operator gave it ("--s3-prefix",
//     "GRAFT_S3_PREFIX"), or as "--flag (or VARIABLE)" when neither set it.
//   - No credential is a flag: the database URL comes only from DATABASE_URL
//     and its parse errors carry no password (pgconn redacts it); S3
//     credentials come only from the AWS SDK's standard chain.
//   - DialTimeout bounds dialing Temporal and the store's first listing.
package conncfg
