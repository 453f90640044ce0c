// Package agent is the instance agent: the only Hangar code on an EC2 instance. It turns one
// machine into a runner that serves many workflow runs, one after another:
//
//  1. one-time init: run the pool's pre-runner script, install the GitHub runner (baked into the
//     AMI, or downloaded and checked against its SHA-256), signal READY — or FAILED with the log
//     tail, after which it takes no work and the instance is terminated;
//  2. the reuse loop: notice a run assigned to its item (one DynamoDB request a second while
//     idle, heartbeats folded in), register the runner with the run id as its only label,
//     signal REGISTERED, run it; when the run lets go (runId cleared), stop the runner, remove it
//     from GitHub with the remove token release left on the item, wipe the work directory,
//     signal DEREGISTERED; repeat. A failed registration signals REGISTER_FAILED and waits again;
//  3. alongside: a deadline watchdog that terminates the instance past its threshold (plus a
//     grace) even when DynamoDB is unreachable, and a spot-notice watcher.
//
// The agent writes only its own attributes (package state's Agent); it never writes state, runId
// or threshold. It knows nothing of how it was started; cmd/agent builds its Config.
package agent
