package refresh_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// bySize is a document change: the pool chooses its x64 types by vCPU and memory.
func bySize(vcpu, memory map[string]int) func(doc map[string]any) {
	return func(doc map[string]any) {
		delete(doc, "instanceTypes")
		doc["instanceRequirements"] = map[string]any{"arch": "x64", "vcpu": vcpu, "memoryMiB": memory}
	}
}

// TestWarmPoolBySize: refresh fills the warm pool of a pool that chooses its types by size with
// types that fit; a pool whose requirements nothing fits is reported and left alone.
func TestWarmPoolBySize(t *testing.T) {
	t.Parallel()
	r := newRig(t, bySize(map[string]int{"min": 4, "max": 4}, map[string]int{"min": 8192, "max": 8192}), warm(2, 0))
	r.EC2.Catalog = fake.CatalogTypes()

	rep := r.refresh(refresh.Config{})
	require.Equal(t, 2, rep.Pools[0].Launched)
	warming := r.inState(state.Created)
	require.Len(t, warming, 2)
	for _, in := range warming {
		require.Equal(t, 4, in.VCPU, in.InstanceType)
		require.Equal(t, 8192, in.MemoryMiB, in.InstanceType)
		require.Contains(t, []string{"c6i.xlarge", "c7i.xlarge"}, in.InstanceType, "a current-generation x64 type of that size")
	}

	r.update(bySize(map[string]int{"min": 2, "max": 2}, map[string]int{"min": 1 << 20}))
	rep = r.run(refresh.Config{}, r.deps())
	require.Empty(t, rep.Pools, "the pool is left out of the refresh")
	require.Len(t, rep.Errors, 1)
	require.Contains(t, rep.Errors[0], "instanceRequirements: no current-generation x64 instance type")
	require.Len(t, r.inState(state.Created), 2, "the pool's instances are left alone")
	require.Equal(t, 1, r.EC2.Calls("CreateFleet"))
}
