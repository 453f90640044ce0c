package stress

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

// scale is how hard the suite pushes: the counts of every test. HANGAR_RELIABILITY chooses it
// (see doc.go): unset (or "short") the short form, "full" the full form.
type scale struct {
	Form string

	// TestRaces: RaceProvisions concurrent provisions of 1–3 instances each over a pool of
	// RaceIdle idle instances, RaceRounds times.
	RaceProvisions, RaceIdle, RaceRounds int

	// TestCrashes: CrashTrials killed steps over a pool of CrashIdle idle instances.
	CrashTrials, CrashIdle int

	// TestSoak: SoakCycles provision/release cycles of the whole pool of SoakPool instances.
	SoakCycles, SoakPool int

	// TestFaults: FaultCycles provision/release cycles through the fault-injecting proxies, over
	// a pool of FaultIdle idle instances.
	FaultCycles, FaultIdle int

	// TestPartitions: whether the agents of the provision that is given up on stay cut off for
	// good (the full form: provision then also waits out release's deregistration timeout before
	// it terminates them), or come back once provision has given up (the short form).
	DeadAgentsStayDead bool
}

var (
	// shortScale runs inside make test: the whole package in about two and a half minutes on a
	// busy two-core machine.
	shortScale = scale{Form: "short",
		RaceProvisions: 8, RaceIdle: 12, RaceRounds: 2,
		CrashTrials: 4, CrashIdle: 3,
		SoakCycles: 15, SoakPool: 5,
		FaultCycles: 3, FaultIdle: 3,
	}
	// fullScale is make test-reliability's. TestRaces cannot have the 50 provisions over 60 idle
	// instances the suite aims at: the test bed lends each simulated instance one of its 96 runner
	// users, shared with every test running on the machine (make test-reliability runs two
	// packages at once, and this package's other tests hold 15 to 20), and on two cores 60 agents
	// beside 50 provision processes make provisions time out on CPU rather than race. 20
	// provisions over 28 idle instances keeps the users within bounds and every offer contended.
	fullScale = scale{Form: "full",
		RaceProvisions: 20, RaceIdle: 28, RaceRounds: 20,
		CrashTrials: 30, CrashIdle: 4,
		SoakCycles: 200, SoakPool: 5,
		FaultCycles: 20, FaultIdle: 3,
		DeadAgentsStayDead: true,
	}
)

// baseSeed seeds every random choice of the suite (counts, kill points, injected faults), so a
// failure reproduces: each test derives its trial's seed as baseSeed + trial and names it in every
// failure. HANGAR_RELIABILITY_SEED replaces it.
const baseSeed uint64 = 20250611

// suite returns the scale and base seed chosen by the environment, skipping t when the
// suite is under -short, and failing it without the emulators or on a malformed setting.
func suite(t *testing.T) (scale, uint64) {
	t.Helper()
	testbed.Require(t) // skipped under -short; fails without the emulators, as every integration test
	sc, err := scaleFor(os.Getenv("HANGAR_RELIABILITY"))
	if err != nil {
		t.Fatal(err)
	}
	seed := baseSeed
	if v := os.Getenv("HANGAR_RELIABILITY_SEED"); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("HANGAR_RELIABILITY_SEED=%q: want a whole number", v)
		}
	}
	return sc, seed
}

func scaleFor(v string) (scale, error) {
	switch v {
	case "", "short":
		return shortScale, nil
	case "full":
		return fullScale, nil
	}
	return scale{}, fmt.Errorf("HANGAR_RELIABILITY=%q: want unset (the short form, as make test runs it) or full", v)
}

// since formats a duration for reports.
func since(start time.Time) string { return time.Since(start).Round(10 * time.Millisecond).String() }

// minParallel is the parallelism the suite runs its tests with unless -test.parallel is given:
// one slot per test. TestPartitions spends more than two minutes waiting out the product's own
// timeouts; at go test's default (GOMAXPROCS, two on the machines the suite targets) the four
// others would queue in one slot beside it. The tests mostly wait on agents, timers and the
// emulators, so running them all at once costs little beyond the load on the EC2 emulator.
const minParallel = 5

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if p := flag.Lookup("test.parallel"); p != nil && !explicit {
		if n, err := strconv.Atoi(p.Value.String()); err == nil && n < minParallel {
			_ = p.Value.Set(strconv.Itoa(minParallel))
		}
	}
	os.Exit(m.Run())
}
