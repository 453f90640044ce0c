package operator

import (
	"context"
	"sync"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// PoolStatus is what one pool holds right now.
type PoolStatus struct {
	Pool string `json:"pool"`
	// Drained says the pool is closed to reuse (hangar drain).
	Drained bool `json:"drained"`
	// Idle instances wait, running, for a claim; Warming are warm instances still being created;
	// Booting are created for a run and not yet registered; Claimed and Running serve runs;
	// Stopped are idle instances kept stopped.
	Idle     int `json:"idle"`
	Warming  int `json:"warming"`
	Booting  int `json:"booting"`
	Claimed  int `json:"claimed"`
	Running  int `json:"running"`
	Stopped  int `json:"stopped"`
	Live     int `json:"live"`
	Offers   int `json:"offers"`
	InFlight int `json:"offersInFlight"`
	// DeadLetters are messages of the pool's dead-letter queue: offers no claimer could parse.
	DeadLetters int `json:"deadLetters"`
	// Target is the warm size in force now (the matching schedule of the pool's warm section).
	Target pooldoc.Target `json:"warmTarget"`
	// SpecHash is the pool's current launch spec; OnSpec counts the live instances launched
	// from it: an image or type change rolls out as OnSpec reaches Live.
	SpecHash string `json:"specHash"`
	OnSpec   int    `json:"onSpec"`
	// Errors are what could not be read (the counts it affects are then zero).
	Errors []string `json:"errors,omitempty"`
}

// JobsStatus is the stack's jobs queue: label-routed jobs on their way to the dispatcher, and
// those it gave up on.
type JobsStatus struct {
	// Waiting are visible messages (jobs, checks and sweeps not yet taken); InFlight those the
	// dispatcher holds; DeadLetters the jobs it gave up on after ten tries.
	Waiting     int `json:"waiting"`
	InFlight    int `json:"inFlight"`
	DeadLetters int `json:"deadLetters"`
}

// Jobs reads the stack's jobs queue and its dead letters; nil when no pool serves label-routed
// jobs.
func (i *Operator) Jobs(ctx context.Context) (*JobsStatus, error) {
	for _, doc := range i.d.Stack.Pools {
		if j := doc.Jobs; j != nil && j.QueueURL != "" {
			c, err := i.d.Queues.QueueCounts(ctx, "the jobs queue", j.QueueURL, j.DeadLetterQueueURL)
			if err != nil {
				return nil, err
			}
			return &JobsStatus{Waiting: c.Offers, InFlight: c.InFlight, DeadLetters: c.DeadLetters}, nil
		}
	}
	return nil, nil
}

// Status reads every named pool (all of the stack's when none), in parallel: its instances
// counted by state through the table's index, its queue's and dead-letter queue's counts, its
// warm target now and how far its current spec has rolled out. Per pool, what cannot be read is
// reported in Errors; only an unknown pool is an error.
func (i *Operator) Status(ctx context.Context, pools ...string) ([]PoolStatus, error) {
	docs, err := i.pools(pools)
	if err != nil {
		return nil, err
	}
	out := make([]PoolStatus, len(docs))
	now := i.d.Now()
	var wg sync.WaitGroup
	for k, doc := range docs {
		wg.Go(func() {
			ps := PoolStatus{Pool: doc.Name, Drained: doc.Drained, Target: doc.Warm.TargetAt(now), SpecHash: doc.SpecHash}
			if doc.Drained {
				ps.Target = pooldoc.Target{Schedule: "drained"}
			}
			if c, err := i.d.Store.Census(ctx, doc.Name); err != nil {
				ps.Errors = append(ps.Errors, err.Error())
			} else {
				ps.Idle, ps.Claimed, ps.Running, ps.Stopped = c.ByState[state.Idle], c.ByState[state.Claimed], c.ByState[state.Running], c.ByState[state.Stopped]
				ps.Booting = c.CreatedForRun
				ps.Warming = c.ByState[state.Created] - c.CreatedForRun
				ps.Live = c.Live()
				ps.OnSpec = c.BySpec[doc.SpecHash]
			}
			if q, err := i.d.Queues.Counts(ctx, doc.Name); err != nil {
				ps.Errors = append(ps.Errors, err.Error())
			} else {
				ps.Offers, ps.InFlight, ps.DeadLetters = q.Offers, q.InFlight, q.DeadLetters
			}
			out[k] = ps
		})
	}
	wg.Wait()
	return out, nil
}
