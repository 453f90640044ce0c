package state_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestRunnerNamesOfJobs: a label-routed job's runner name, for a stack whose name is cut, fits
// GitHub's 64 characters and reads back to its instance and key.
func TestRunnerNamesOfJobs(t *testing.T) {
	t.Parallel()
	runners := state.RunnerNamesOf("a-stack-name-longer-than-sixteen")
	for _, key := range []string{names.JobKey(7, 0), names.JobKey(29871234567, 0), names.JobKey(5, 3)} {
		name := runners.Name("i-0123456789abcdef0", key)
		require.LessOrEqual(t, len(name), 64)
		id, back, ok := runners.Parse(name)
		require.True(t, ok)
		require.Equal(t, "i-0123456789abcdef0", id)
		require.Equal(t, key, back)
	}
}
