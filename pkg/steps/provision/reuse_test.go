package provision_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestReuseScope: an instance that served a run of repository A is given to a run of another
// repository only as far as the pool's reuse scope allows; an instance that cannot be given
// stays idle, unwritten, and offered for runs that may have it.
func TestReuseScope(t *testing.T) {
	t.Parallel()
	const sameOwner, otherOwner = "octo/other", "acme/app" // fakeRepo is octo/app
	tests := []struct {
		reuse  state.Reuse
		next   string // the repository of the second run
		reuse2 bool   // whether the second run gets the first run's instance
	}{
		{state.ReuseRepository, sameOwner, false},
		{state.ReuseRepository, fakeRepo, true},
		{state.ReuseOwner, sameOwner, true},
		{state.ReuseOwner, otherOwner, false},
		{state.ReuseAny, otherOwner, true},
	}
	for _, tc := range tests {
		t.Run(string(tc.reuse)+" then "+tc.next, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["reuse"] = string(tc.reuse) }))
			first := mustRun(t, w, "7701", 1)
			fakeRelease(t, w, "7701")
			used := first.Instances[0].ID
			it := w.Store.Item(used)
			require.Equal(t, state.Idle, it.State)
			require.Equal(t, []string{fakeRepo}, it.ServedRepos)
			require.Equal(t, []string{used}, w.Offered(t))

			cfg := fakeConfig(w, "7702", 1)
			cfg.Repository = tc.next
			res, err := fakeRun(t, w, cfg)
			require.NoError(t, err)
			requireHeld(t, w, "7702", resultIDs(res)...)
			if tc.reuse2 {
				require.Equal(t, 1, res.Reused, "warnings: %v", res.Warnings)
				require.Equal(t, used, res.Instances[0].ID, "the instance A used serves the next run")
				require.Equal(t, tc.next, w.Store.Item(used).Repo)
			} else {
				require.Equal(t, 1, res.Created, "a fresh instance for the other repository")
				require.NotEqual(t, used, res.Instances[0].ID)
				back := w.Store.Item(used)
				require.Equal(t, state.Idle, back.State, "A's instance is left alone")
				require.Equal(t, it.Version, back.Version, "not written")
				require.Equal(t, []string{used}, w.Offered(t), "and still offered, to A's runs")
			}
			fakeRelease(t, w, "7702")
		})
	}
}
