package catalog

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Stats counts what the ledger sent to Postgres since the catalog was opened: the figures
// a benchmark divides by its operations to say what one operation costs the ledger
// (docs/benchmarks.md). Counting is always on; it costs an atomic add per statement.
type Stats struct {
	// Statements is every round trip: queries, execs, the BEGIN, COMMIT, ROLLBACK,
	// SAVEPOINT and RELEASE a transaction sends, and each batch of statements sent
	// together in one round trip (pipelined: pipeline).
	Statements int64
	// Transactions is explicit transactions (BEGINs) plus statements sent outside one,
	// each its own implicit transaction.
	Transactions int64
	// Savepoints is SAVEPOINTs sent inside transactions.
	Savepoints int64
	// Flushes is the commits that wait for Postgres to flush its WAL: every COMMIT of a
	// transaction that did not turn synchronous_commit off (InTxRecoverable), and every
	// statement outside a transaction that is not a SELECT. A read alone flushes nothing.
	Flushes int64
}

// Sub returns s minus an earlier snapshot.
func (s Stats) Sub(before Stats) Stats {
	return Stats{Statements: s.Statements - before.Statements, Transactions: s.Transactions - before.Transactions,
		Savepoints: s.Savepoints - before.Savepoints, Flushes: s.Flushes - before.Flushes}
}

// Stats returns the counts so far.
func (c *Catalog) Stats() Stats {
	return Stats{Statements: c.stats.statements.Load(), Transactions: c.stats.transactions.Load(),
		Savepoints: c.stats.savepoints.Load(), Flushes: c.stats.flushes.Load()}
}

// counter is the pgx tracer behind Stats.
type counter struct {
	statements, transactions, savepoints, flushes atomic.Int64
}

const (
	inTxKey = "graft.in_tx"
	// noFlushKey marks a transaction that turned synchronous_commit off.
	noFlushKey = "graft.no_flush"
)

func (n *counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	n.statements.Add(1)
	sql := strings.TrimSpace(data.SQL)
	word := firstWord(sql) // "BEGIN; SET LOCAL …" begins a transaction too
	custom := conn.PgConn().CustomData()
	inTx, _ := custom[inTxKey].(bool)
	noFlush := strings.Contains(strings.ToLower(sql), "synchronous_commit to off")
	switch word {
	case "begin":
		custom[inTxKey], custom[noFlushKey] = true, noFlush
		n.transactions.Add(1)
	case "commit", "rollback":
		if off, _ := custom[noFlushKey].(bool); !off && word == "commit" {
			n.flushes.Add(1)
		}
		custom[inTxKey], custom[noFlushKey] = false, false
	case "savepoint":
		n.savepoints.Add(1)
	default:
		switch {
		case inTx && noFlush:
			custom[noFlushKey] = true
		case !inTx:
			n.transactions.Add(1)
			if word != "select" {
				n.flushes.Add(1)
			}
		}
	}
	return ctx
}

func (n *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch as one round trip; batches are sent only inside a
// transaction, so they begin, commit and flush nothing.
func (n *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	n.statements.Add(1)
	return ctx
}

func (n *counter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if firstWord(data.SQL) == "savepoint" {
		n.savepoints.Add(1)
	}
}

func (n *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// firstWord is a statement's first word, lower case, without a trailing ';'.
func firstWord(sql string) string {
	word, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
	return strings.ToLower(strings.TrimSuffix(word, ";"))
}
