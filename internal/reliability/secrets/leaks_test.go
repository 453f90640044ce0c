package secrets

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/stretchr/testify/require"
)

// TestNoTokenLeaks runs the full cycle and scans every place it left text in for the tokens it
// used: none may appear, the state table included.
func TestNoTokenLeaks(t *testing.T) {
	t.Run("scanner finds a planted token", checkScanner)
	testbed.Require(t)
	start := time.Now()
	w := newWorld(t)
	w.cycle(t)
	w.masked(t)

	var sources []source
	for _, gather := range []func(*testing.T) []source{w.stepSources, w.agentSources, w.lambdaSources, w.ec2Sources,
		w.queueSources, w.tableSources, w.otherSources, w.diskSources, w.snapshotSources} {
		sources = append(sources, gather(t)...)
	}
	var listing strings.Builder
	for _, s := range sources {
		fmt.Fprintf(&listing, "\n  %s (%d bytes)", s.name, len(s.text))
	}
	t.Logf("sources:%s", listing.String())
	tokens := w.tokens()
	leaks := scan(sources, tokens)
	for _, l := range leaks {
		t.Errorf("leak: %s", l)
	}
	require.Empty(t, leaks)
	t.Logf("scanned %d sources for %d tokens (the admin token, %d issued by the stand-in): no leak; %s in all",
		len(sources), len(tokens), len(tokens)-1, time.Since(start).Round(time.Millisecond))
}
