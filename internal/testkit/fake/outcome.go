package fake

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/pool"
)

// RequireOutcome returns instance id's outcome of a give-back, failing t unless there is one and
// its result is result.
func RequireOutcome(t *testing.T, outcomes []pool.Outcome, id, result string) pool.Outcome {
	t.Helper()
	for _, o := range outcomes {
		if o.ID == id {
			require.Equal(t, result, o.Result, "%s: %s", id, o.Reason)
			return o
		}
	}
	t.Fatalf("no outcome for %s in %+v", id, outcomes)
	return pool.Outcome{}
}
