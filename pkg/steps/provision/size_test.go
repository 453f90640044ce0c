package provision_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// TestPoolBySize: a pool that chooses its types by vCPU and memory launches the smallest types
// that fit, resolved from EC2's catalogue before anything is launched.
func TestPoolBySize(t *testing.T) {
	t.Parallel()
	req := &pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 4}, MemoryMiB: pooldoc.Range{Min: 8192, Max: 16384}, MaxTypes: 3}
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) {
		delete(doc, "instanceTypes")
		doc["instanceRequirements"] = req
	}))
	w.EC2.Catalog = fake.CatalogTypes()
	require.Empty(t, w.Doc.InstanceTypes, "the published document names no types")

	res := mustRun(t, w, "8101", 3)
	fleets := w.EC2.Fleets()
	require.Len(t, fleets, 1)
	var overrideTypes []string
	for _, ov := range fleets[0].LaunchTemplateConfigs[0].Overrides {
		if t := string(ov.InstanceType); !slices.Contains(overrideTypes, t) {
			overrideTypes = append(overrideTypes, t)
		}
	}
	require.Len(t, overrideTypes, 3, "at most maxTypes types: %v", overrideTypes)
	for _, id := range resultIDs(res) {
		it := w.Store.Item(id)
		require.Contains(t, overrideTypes, it.InstanceType)
		require.True(t, req.VCPU.Contains(it.VCPU), "%s has %d vCPU", it.InstanceType, it.VCPU)
		require.True(t, req.MemoryMiB.Contains(it.MemoryMiB), "%s has %d MiB", it.InstanceType, it.MemoryMiB)
		require.Equal(t, 2, it.VCPU, "the smallest fitting types first")
	}
	requireHeld(t, w, "8101", resultIDs(res)...)
}
