package state_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestJobKeys: a label-routed job's key never collides with a run id, fits a runner name, and
// reads back.
func TestJobKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		job        int64
		redispatch int
		key        string
	}{{7, 0, "j7"}, {29871234567, 0, "j29871234567"}, {5, 3, "j5r3"}} {
		key := names.JobKey(tc.job, tc.redispatch)
		require.Equal(t, tc.key, key)
		job, n, ok := names.ParseJobKey(key)
		require.True(t, ok)
		require.Equal(t, tc.job, job)
		require.Equal(t, tc.redispatch, n)
		require.NoError(t, names.ValidateAssignmentKey(key))
		require.Error(t, names.ValidateRunID(key), "a job key is no run id")
		names := state.RunnerNamesOf("a-stack-name-longer-than-sixteen")
		name := names.Name("i-0123456789abcdef0", key)
		require.LessOrEqual(t, len(name), 64)
		id, back, ok := names.Parse(name)
		require.True(t, ok)
		require.Equal(t, "i-0123456789abcdef0", id)
		require.Equal(t, key, back)
	}
	for _, bad := range []string{"j", "j0", "j01", "jx", "j1r0", "j1r10", "j123456789012345678", "k1", "42x", ""} {
		_, _, ok := names.ParseJobKey(bad)
		require.False(t, ok, bad)
		require.False(t, names.IsJobKey(bad), bad)
	}
	require.NoError(t, names.ValidateAssignmentKey("42"))
	require.ErrorContains(t, names.ValidateAssignmentKey("j0"), "j<job id>")
	require.Equal(t, "job 7 (j7)", names.Describe("j7"))
	require.Equal(t, "run 42", names.Describe("42"))
}
