package faults

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"time"
)

// Probabilities are the chances (each in [0, 1], summing to at most 1) that a
// request a Seeded rule selects gets each fault.
type Probabilities struct {
	FailBeforeSend  float64
	ApplyLoseAnswer float64
	Hold            float64 // on another operation than a put the draw means no fault
	// Refuse maps an HTTP status (400..599) to its chance, e.g. {503: 0.1}.
	Refuse   map[int]float64
	Delay    float64
	DelayFor time.Duration // a Delay's sleep; defaults to 10ms
}

// schedule is a seeded rule's immutable choice function.
type schedule struct {
	seed     int64
	outcomes []outcome // cumulative
	delayFor time.Duration
}

type outcome struct {
	upTo   float64 // this outcome when the draw is below upTo
	mode   Mode
	status int
}

// Seeded returns a rule whose fault for a request depends only on the seed,
// the operation, the key (a delete_batch's keys) and how many requests of
// that operation on that key it selected before: a seed replays the same
// faults whatever the interleaving across keys. Narrow it with its selection
// fields; Mode, Status and Delay are ignored. It panics on probabilities
// outside [0, 1] or summing above 1, or a Refuse status outside 400..599.
func Seeded(seed int64, p Probabilities) Rule {
	sch := &schedule{seed: seed, delayFor: cmp.Or(max(p.DelayFor, 0), 10*time.Millisecond)}
	sum := 0.0
	addOutcome := func(chance float64, mode Mode, status int) {
		if chance < 0 || chance > 1 || math.IsNaN(chance) {
			panic(fmt.Sprintf("faults: seeded: probability of %s %v outside [0, 1]", mode, chance))
		}
		if chance == 0 {
			return
		}
		sum += chance
		sch.outcomes = append(sch.outcomes, outcome{upTo: sum, mode: mode, status: status})
	}
	addOutcome(p.FailBeforeSend, FailBeforeSend, 0)
	addOutcome(p.ApplyLoseAnswer, ApplyLoseAnswer, 0)
	addOutcome(p.Hold, Hold, 0)
	for _, st := range slices.Sorted(maps.Keys(p.Refuse)) { // map order must not change the schedule
		if st < 400 || st > 599 {
			panic(fmt.Sprintf("faults: seeded: Refuse status %d outside 400..599", st))
		}
		addOutcome(p.Refuse[st], Refuse, st)
	}
	addOutcome(p.Delay, Delay, 0)
	if sum > 1+1e-9 {
		panic(fmt.Sprintf("faults: seeded: probabilities sum to %v, above 1", sum))
	}
	return Rule{Name: fmt.Sprintf("seeded(%d)", seed), seeded: sch}
}

// choose returns the fault of the nth request (from 1) of opKey.
func (sch *schedule) choose(op Op, opKey string, n int) (Mode, int, time.Duration) {
	u := sch.draw(opKey, n)
	for _, o := range sch.outcomes {
		if u < o.upTo {
			switch {
			case o.mode == Hold && op != OpPut:
				return None, 0, 0
			case o.mode == Delay:
				return Delay, 0, sch.delayFor
			}
			return o.mode, o.status, 0
		}
	}
	return None, 0, 0
}

// draw maps (seed, opKey, n) to [0, 1) with FNV-1a and the splitmix64
// finalizer: stable across runs, processes and Go versions.
func (sch *schedule) draw(opKey string, n int) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(sch.seed))
	h.Write(b[:])
	h.Write([]byte(opKey))
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
