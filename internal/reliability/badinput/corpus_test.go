package badinput

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/stretchr/testify/require"
)

// Categories of the corpus.
const (
	catInput   = "action input"
	catPoolDoc = "pool document"
	catMessage = "pool message"
	catItem    = "item shape"
	catEvent   = "Lambda event"
)

// badCase is one entry of the corpus.
type badCase struct {
	category, name string
	run            func(t *testing.T)
}

// minCorpus is the least the corpus may hold.
const minCorpus = 40

// corpus gathers every case of every category.
func corpus(w *world, poison []poisonCase) []badCase {
	var out []badCase
	for _, c := range stepCases(w) {
		out = append(out, badCase{catInput, c.name, w.stepRun(c)})
	}
	for _, c := range poolDocCases() {
		out = append(out, badCase{catPoolDoc, c.name, w.poolDocRun(c)})
	}
	for _, c := range poison {
		out = append(out, badCase{catMessage, c.name, w.poisonRun(c)})
	}
	for _, c := range itemCases() {
		out = append(out, badCase{catItem, c.name, w.itemRun(c)})
	}
	out = append(out, badCase{catItem, "unknown state in a pool's idle index, read by refresh", w.refreshItemRun})
	for _, c := range agentCases() {
		out = append(out, badCase{catItem, "agent: " + c.name, w.agentRun(c)})
	}
	for _, c := range eventCases(w) {
		out = append(out, badCase{catEvent, c.name, w.eventRun(c)})
	}
	return out
}

// TestBadInput runs the corpus in one local world, then checks that nothing was lost.
func TestBadInput(t *testing.T) {
	testbed.Require(t)
	start := time.Now()
	poison := poisonCases()
	w := newWorld(t, poison)
	t.Logf("world up, with two idle instances, in %s", time.Since(start).Round(time.Millisecond))

	cases := corpus(w, poison)
	byCat := map[string]int{}
	for _, c := range cases {
		byCat[c.category]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(byCat)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, byCat[k]))
	}
	t.Logf("bad-input corpus: %d cases (%s)", len(cases), strings.Join(parts, ", "))
	require.GreaterOrEqual(t, len(cases), minCorpus, "the corpus has shrunk")
	names := map[string]bool{}
	for _, c := range cases {
		name := c.category + "/" + c.name
		require.False(t, names[name], "duplicate case %s", name)
		names[name] = true
		t.Run(name, c.run)
	}
	w.nothingLost(t)
	t.Logf("corpus done in %s", time.Since(start).Round(time.Millisecond))
}
