// Package stress is Hangar's reliability suite. It drives a whole local Hangar (the emulators,
// the GitHub stand-in and real agents under the fleet simulator: internal/testkit/localenv)
// through the action's real step binaries (provision, release, hangar refresh; built with
// testbuild), as workflows and the refresh schedule would, and checks outcomes only: EC2 in the
// emulator, the items of the state table, the offers of the pool queue, the runners of the GitHub
// stand-in, the agents' processes. It holds no code of its own, only tests:
//
//   - TestRaces: concurrent provisions of 1–3 instances each over a pool of idle instances, round
//     after round. No instance is given to two provisions; items, runners and their run labels
//     agree; a provision that fails leaves nothing held once its run is released; after every
//     release the pool offers each idle instance exactly once and every item is idle.
//   - TestCrashes: the provision, release or refresh step is SIGKILLed at a seeded point (a delay
//     of 0–1.5 s, or the moment it reaches a phase seen from outside: its first claim written, its
//     first instance launched, its first instance given back, the refresh function invoked); then
//     release and refresh run. The world converges: every instance EC2 runs has a live item that
//     agrees with it, nothing stays claimed or created past its threshold, after one refresh no
//     offer points at an instance that is not idle, and a release after a killed provision gives
//     everything back. The time from the kill to a consistent world is reported per trial, with
//     the max.
//   - TestSoak: provision/release cycles of a pool of 5. No instance leaks; the agents' resident
//     memory, open files and threads (the stand-in for goroutines: the agent has no debug
//     endpoint) do not grow between the first and the last tenth of the cycles beyond a small
//     slack (+3 MiB, +2 files, +2 threads); at the end the pool offers each idle instance once.
//   - TestFaults: fault-injecting proxies (internal/testkit/awsproxy) in front of the AWS emulator
//     and DynamoDB for the step binaries, 10% of requests throttled or failing with HTTP 500 and
//     20–50 ms added to each: provision/release cycles still succeed within their deadlines,
//     and faults were injected. An agent cut off from DynamoDB for a few seconds, idle and while
//     serving a run, then serves the next provision normally and keeps its instance.
//   - TestPartitions: an agent cut off from DynamoDB past its deadline (warming, and serving a run
//     past its max-runtime) terminates its instance by itself; a provision whose agents never
//     answer gives its claims back at its registration timeout, exits non-zero within its bound
//     (which includes release's 2-minute wait for deregistrations that never come), names the
//     instances it gave up on, and leaves nothing held by its run.
//
// # Short and full forms
//
// HANGAR_RELIABILITY chooses the counts (config_test.go), and every test logs the ones it uses:
//
//	                                 short (unset: make test)   full (HANGAR_RELIABILITY=full)
//	TestRaces      provisions/idle   8 over 12, 2 rounds         20 over 28, 20 rounds
//	TestCrashes    trials (pool)     4 (3 idle)                  30 (4 idle)
//	TestSoak       cycles (pool)     15 (5)                      200 (5)
//	TestFaults     cycles (pool)     3 (3 idle)                  20 (3 idle)
//	TestPartitions dead agents       come back after the give-up stay cut off
//
// The full form of TestRaces cannot have the 50 provisions over 60 idle instances the suite
// aims at: every simulated instance holds one of the test bed's 96 runner users (shared with any
// other test on the machine), and on two cores 60 agents beside 50 provision processes make
// provisions time out on CPU rather than race; 20 over 28 keeps the users within bounds and
// every offer contended.
//
// On two cores with freshly started emulators the short form takes about three minutes (its
// longest test, TestPartitions, waits out more than two minutes of the product's own timeouts)
// and the full form about 12 (TestSoak is its longest). Both slow down as the EC2 emulator fills:
// every world's fleet simulator asks it for the world's instances five times a second, and the
// emulator's cost for that grows with every instance it holds, including those other tests leave
// running. Each world here terminates its instances when it closes.
//
// The suite raises go test's parallelism to 5 unless -test.parallel is given (TestMain): its
// tests mostly wait, and at the default (GOMAXPROCS) four of them would queue beside
// TestPartitions' long wait.
//
// # Seeds
//
// Every random choice (provision sizes, kill points, injected faults) comes from a seed derived
// from one base seed (printed by every test; HANGAR_RELIABILITY_SEED replaces it), and every
// failure names its seed and round or trial. A seed fixes the choices, not the interleaving of
// the processes, so a failure reproduces as the same scenario, not always the same schedule. A
// crash trial runs alone with the form, the base seed and its number:
//
//	HANGAR_RELIABILITY=full HANGAR_RELIABILITY_SEED=20250611 go test -run 'TestCrashes/trial_08_' ./internal/reliability/stress/
//
// The suite is skipped under -short; otherwise it needs the emulators (make testbed-up) with
// their endpoints in the environment (.cache/testbed/endpoints.env), as every integration test.
package stress
