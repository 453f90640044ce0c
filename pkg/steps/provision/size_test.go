package provision_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// TestPoolBySize: a pool that chooses its types by vCPU and memory launches the smallest types
// that fit, resolved from EC2 when the step loads the document.
func TestPoolBySize(t *testing.T) {
	req := &pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 4}, MemoryMiB: pooldoc.Range{Min: 8192, Max: 16384}, MaxTypes: 3}
	e := newEnv(t, localenv.Options{Requirements: req})
	require.Empty(t, e.Doc.InstanceTypes, "the published document names no types")

	res := e.mustProvision("8101", 3)
	require.Len(t, e.ec2.fleetReqs, 1)
	var overrideTypes []string
	for _, ov := range e.ec2.fleetReqs[0].LaunchTemplateConfigs[0].Overrides {
		if t := string(ov.InstanceType); !slices.Contains(overrideTypes, t) {
			overrideTypes = append(overrideTypes, t)
		}
	}
	require.Len(t, overrideTypes, 3, "at most maxTypes types: %v", overrideTypes)
	for _, it := range e.items(ids(res)) {
		require.Contains(t, overrideTypes, it.InstanceType)
		require.True(t, req.VCPU.Contains(it.VCPU), "%s has %d vCPU", it.InstanceType, it.VCPU)
		require.True(t, req.MemoryMiB.Contains(it.MemoryMiB), "%s has %d MiB", it.InstanceType, it.MemoryMiB)
		require.Equal(t, 2, it.VCPU, "the smallest fitting types first")
	}
}
