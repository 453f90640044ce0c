package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLease: a lease held is refused to another holder until it runs out; one that runs further
// than the asker's ttl from now, which no honest holder of that lease could have written (a
// forged one), is taken over at once.
func TestLease(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	ok, err := s.Lease(ctx, "cap/x", "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Lease(ctx, "cap/x", "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "held")
	require.NoError(t, s.ReleaseLease(ctx, "cap/x", "a"))
	ok, err = s.Lease(ctx, "cap/x", "b", time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "released")

	ok, err = s.Lease(ctx, "cap/y", "forger", 1000*time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Lease(ctx, "cap/y", "c", time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "a lease running far beyond the lease's own ttl blocks no one")
}
