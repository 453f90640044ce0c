package refresh_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// TestWarmPoolBySize: refresh fills the warm pool of a pool that chooses its types by size with
// types that fit; a pool whose requirements nothing fits is reported and left alone.
func TestWarmPoolBySize(t *testing.T) {
	e := newEnv(t)
	req := &pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 4, Max: 4}, MemoryMiB: pooldoc.Range{Min: 8192, Max: 8192}}
	require.NoError(t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) {
		d.InstanceTypes, d.InstanceRequirements = nil, req
		d.Warm = pooldoc.Warm{Schedules: []pooldoc.Schedule{{Name: "default", Hot: 2}}}
	}))
	rep := e.refresh(refresh.Config{})
	require.Equal(t, 2, rep.Pools[0].Launched)
	warming := e.inState(state.Created)
	require.Len(t, warming, 2)
	for _, in := range warming {
		require.Equal(t, 4, in.VCPU, in.InstanceType)
		require.Equal(t, 8192, in.MemoryMiB, in.InstanceType)
	}

	require.NoError(t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) {
		d.InstanceRequirements = &pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 2}, MemoryMiB: pooldoc.Range{Min: 1 << 20}}
	}))
	stack, deps := e.load()
	rep, err := refresh.Run(e.ctx, refresh.Config{Stack: e.Stack, Pools: stack.Pools}, deps)
	require.NoError(t, err)
	require.Empty(t, rep.Pools, "the pool is left out of the refresh")
	require.Len(t, rep.Errors, 1)
	require.Contains(t, rep.Errors[0], "instanceRequirements: no current-generation x64 instance type")
	require.Len(t, e.inState(state.Created), 2, "the pool's instances are left alone")
}
