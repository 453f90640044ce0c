package provision_test

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestRacingProvisions: 10 provisions race over 15 pooled instances; no instance serves two runs
// and every provision gets what it asked for (19 in all: the pool's 15, and 4 created).
func TestRacingProvisions(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	for range 15 {
		w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "7600"})
	}

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		owner  = map[string]string{}
		errs   []error
		total  int
		reused int
	)
	for i := range 10 {
		run := fmt.Sprint(7601 + i)
		n := 1 + i%3
		total += n
		wg.Go(func() {
			res, err := fakeRun(t, w, fakeConfig(w, run, n))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("run %s: %w", run, err))
				return
			}
			if len(res.Instances) != n {
				errs = append(errs, fmt.Errorf("run %s got %d of %d", run, len(res.Instances), n))
			}
			reused += res.Reused
			for _, x := range res.Instances {
				if prev, dup := owner[x.ID]; dup {
					errs = append(errs, fmt.Errorf("%s given to runs %s and %s", x.ID, prev, run))
				}
				owner[x.ID] = run
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, owner, total)
	require.LessOrEqual(t, reused, 15, "no more reused than the pool had")
	for _, id := range slices.Sorted(maps.Keys(owner)) {
		it := w.Store.Item(id)
		require.Equal(t, owner[id], it.RunID, "%s is held by the run that was told it has it", id)
		require.Equal(t, state.Running, it.State, id)
	}
}
