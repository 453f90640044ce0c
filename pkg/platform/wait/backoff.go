package wait

import (
	"context"
	"time"
)

// Backoff is a jittered, capped exponential backoff: the n-th delay is spread over [d/2, d]
// (Jitter) of d = Initial × Factorⁿ, capped at Max (Initial too, when it is larger). The zero
// Factor is 2; a zero Max is Initial (a steady, jittered delay). A Backoff is used by one goroutine; copying an unused one is fine.
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	// Clock passes the delays (Real when nil).
	Clock Clock

	next time.Duration // the cap of the coming delay; zero before the first
}

// Next returns the coming delay, jittered, and grows the one after it.
func (b *Backoff) Next() time.Duration {
	top := b.Max
	if top <= 0 {
		top = b.Initial
	}
	if b.next == 0 {
		b.next = min(b.Initial, top)
	}
	d := b.next
	factor := b.Factor
	if factor <= 0 {
		factor = 2
	}
	grown := time.Duration(float64(d) * factor)
	if grown < d || grown > top { // overflow, or past the cap
		grown = top
	}
	b.next = grown
	return Jitter(d)
}

// Reset starts the backoff over: the coming delay is Initial's again.
func (b *Backoff) Reset() { b.next = 0 }

// Sleep waits the coming delay (Next) on its clock, or until ctx ends (returning its error).
func (b *Backoff) Sleep(ctx context.Context) error {
	if b.Clock != nil {
		return b.Clock.Sleep(ctx, b.Next())
	}
	return Sleep(ctx, b.Next())
}
