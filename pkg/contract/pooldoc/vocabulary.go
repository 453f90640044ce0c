package pooldoc

import (
	"fmt"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// ValidateMarket checks a market name.
func ValidateMarket(m string) error {
	switch m {
	case MarketSpot, MarketOnDemand, MarketSpotFallback:
		return nil
	}
	return fmt.Errorf("%q: want %s, %s or %s", m, MarketSpot, MarketOnDemand, MarketSpotFallback)
}

// UsageClassOf returns the usage class every instance launched in market has (state.UsageSpot or
// state.UsageOnDemand), or "" for spot-fallback, whose instances may be either.
func UsageClassOf(market string) string {
	switch market {
	case MarketSpot:
		return state.UsageSpot
	case MarketOnDemand:
		return state.UsageOnDemand
	}
	return ""
}
