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
	// Statements is every round trip: queries, execs, and the BEGIN, COMMIT, ROLLBACK,
	// SAVEPOINT and RELEASE a transaction sends.
	Statements int64
	// Transactions is explicit transactions (BEGINs) plus statements sent outside one,
	// each its own implicit transaction.
	Transactions int64
	// Savepoints is SAVEPOINTs sent inside transactions.
	Savepoints int64
}

// Sub returns s minus an earlier snapshot.
func (s Stats) Sub(before Stats) Stats {
	return Stats{Statements: s.Statements - before.Statements, Transactions: s.Transactions - before.Transactions,
		Savepoints: s.Savepoints - before.Savepoints}
}

// Stats returns the counts so far.
func (c *Catalog) Stats() Stats {
	return Stats{Statements: c.stats.statements.Load(), Transactions: c.stats.transactions.Load(),
		Savepoints: c.stats.savepoints.Load()}
}

// counter is the pgx tracer behind Stats.
type counter struct {
	statements, transactions, savepoints atomic.Int64
}

const inTxKey = "graft.in_tx"

func (n *counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	n.statements.Add(1)
	sql := strings.TrimSpace(data.SQL)
	word, _, _ := strings.Cut(sql, " ")
	custom := conn.PgConn().CustomData()
	inTx, _ := custom[inTxKey].(bool)
	switch strings.ToLower(word) {
	case "begin":
		custom[inTxKey] = true
		n.transactions.Add(1)
	case "commit", "rollback":
		custom[inTxKey] = false
	case "savepoint":
		n.savepoints.Add(1)
	default:
		if !inTx {
			n.transactions.Add(1)
		}
	}
	return ctx
}

func (n *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
