package pooldoc_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

func TestValidateTag(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, value, want string }{
		{"team", "ci", ""},
		{"cost center/team:a@b", "x", ""},
		{"hangar:pool", "x", "reserved for Hangar"},
		{"HANGAR:run", "x", "reserved for Hangar"},
		{"aws:cloudformation", "x", `does not start with "aws:"`},
		{"", "x", "want a tag key"},
		{"bad*key", "x", "want a tag key"},
		{strings.Repeat("k", 129), "x", "want a tag key"},
		{"long", strings.Repeat("v", 257), "longer than 256"},
	}
	for _, tc := range tests {
		err := names.ValidateTag(tc.key, tc.value)
		if tc.want == "" {
			require.NoError(t, err, tc.key)
		} else {
			require.ErrorContains(t, err, tc.want, tc.key)
		}
	}
}

func TestValidateLabel(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"linux", "gpu.a10", "x_y-z", strings.Repeat("a", 64)} {
		require.NoError(t, names.ValidateLabel(ok), ok)
	}
	for _, bad := range []string{"", "has space", "a,b", strings.Repeat("a", 65), "ünï"} {
		require.ErrorContains(t, names.ValidateLabel(bad), "want 1 to 64", bad)
	}
	require.ErrorContains(t, names.ValidateLabel("12345"), "could name another run")
}

func TestMarkets(t *testing.T) {
	t.Parallel()
	require.Equal(t, state.UsageSpot, pooldoc.UsageClassOf(pooldoc.MarketSpot))
	require.Equal(t, state.UsageOnDemand, pooldoc.UsageClassOf(pooldoc.MarketOnDemand))
	require.Empty(t, pooldoc.UsageClassOf(pooldoc.MarketSpotFallback), "either usage class")
	require.NoError(t, pooldoc.ValidateMarket("spot-fallback"))
	require.ErrorContains(t, pooldoc.ValidateMarket("reserved"), `"reserved": want spot, on-demand or spot-fallback`)
}
