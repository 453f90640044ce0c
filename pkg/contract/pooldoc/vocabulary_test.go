package pooldoc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

func TestMarkets(t *testing.T) {
	t.Parallel()
	require.Equal(t, state.UsageSpot, pooldoc.UsageClassOf(pooldoc.MarketSpot))
	require.Equal(t, state.UsageOnDemand, pooldoc.UsageClassOf(pooldoc.MarketOnDemand))
	require.Empty(t, pooldoc.UsageClassOf(pooldoc.MarketSpotFallback), "either usage class")
	require.NoError(t, pooldoc.ValidateMarket("spot-fallback"))
	require.ErrorContains(t, pooldoc.ValidateMarket("reserved"), `"reserved": want spot, on-demand or spot-fallback`)
}
