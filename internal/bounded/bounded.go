// Package bounded runs independent pieces of work at once, never more than a
// limit at a time: the store and the ledger are asked in parallel, but bounded.
package bounded

import (
	"errors"
	"sync"
)

// Each calls fn(i) for every i below n, at most limit at a time, and waits for them all.
func Each(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// EachErr is Each for work that can fail: it returns the errors of every fn, joined.
func EachErr(n, limit int, fn func(i int) error) error {
	errs := make([]error, n)
	Each(n, limit, func(i int) { errs[i] = fn(i) })
	return errors.Join(errs...)
}
