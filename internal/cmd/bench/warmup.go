package main

import (
	"context"
	"fmt"
	"strconv"
)

// warmupRun numbers the warm-up's runs, apart from every suite's.
const warmupRun = 700000

// warmEmulators runs rounds of a provision of ten and its release on a local world of its own,
// unmeasured, before any suite: what follows measures Hangar on warm emulators, as any benchmark
// measures after its warm-up. DynamoDB Local is a JVM, and for the first few hundred provisions
// after it starts its JIT compiler takes a tenth of a second of CPU per round of ten on top of the
// requests themselves, on a machine whose two cores the emulators, ten agents and the step
// already share; AWS has no such phase. Everything a round of Hangar's own does (a new step
// process, the agents' runner scripts) is measured afresh in every round regardless.
func warmEmulators(ctx context.Context, rounds int) error {
	if rounds == 0 {
		return nil
	}
	s, err := newStepRunner(ctx)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	defer s.close()
	for i := range rounds + 1 { // the first creates the instances the others reuse
		r := strconv.Itoa(warmupRun + i)
		if _, _, _, err := s.run(ctx, s.provisionBin, r, 10); err != nil {
			return fmt.Errorf("warm-up round %d: %w", i, err)
		}
		if _, _, _, err := s.run(ctx, s.relBin, r, 0); err != nil {
			return fmt.Errorf("warm-up round %d: %w", i, err)
		}
	}
	return nil
}
