package faults

// Request is one valid request the Store received.
type Request struct {
	Op   Op
	Key  string   // the request's key; a list's prefix; "" for a delete_batch
	Keys []string // a delete_batch's keys
	// Fault is the fault the rule named Rule gave; Status a Refuse's.
	Fault  Mode
	Rule   string
	Status int
	body   []byte   // a put's, for rules that select on it
	keys   []string // the keys rules select on
	// Sent: the request went on (a held put is in flight); false only after
	// FailBeforeSend or a Delay cut short by the context.
	Sent bool
}

// Tally counts requests: attempted, sent, and by fault (None included).
type Tally struct {
	Attempted int
	Sent      int
	Faults    map[Mode]int
}

func (t *Tally) add(r *Request) {
	t.Attempted++
	if r.Sent {
		t.Sent++
	}
	if t.Faults == nil {
		t.Faults = make(map[Mode]int)
	}
	t.Faults[r.Fault]++
}

// Counts is a Tally per operation.
type Counts map[Op]Tally

// Requests returns every request since the Store was made or ResetCounts
// (which long runs should call), in order of arrival.
func (s *Store) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.log))
	for i, r := range s.log {
		out[i] = *r
	}
	return out
}

// Counts returns a Tally for every operation received at least once.
func (s *Store) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(Counts)
	for _, r := range s.log {
		t := c[r.Op]
		t.add(r)
		c[r.Op] = t
	}
	return c
}

// Count returns the Tally of op.
func (s *Store) Count(op Op) Tally {
	return s.CountMatching(Rule{Op: op})
}

// CountMatching returns the Tally of the requests sel's selection fields
// select, e.g. CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: "g/refs/"}).Sent.
func (s *Store) CountMatching(sel Rule) Tally {
	sel.Mode = None // a Hold mode would narrow the selection to puts
	s.mu.Lock()
	defer s.mu.Unlock()
	var t Tally
	for _, r := range s.log {
		if sel.selects(r.Op, r.keys, r.body) {
			t.add(r)
		}
	}
	return t
}

// ResetCounts forgets the requests so far; rules keep their own counts.
func (s *Store) ResetCounts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}
