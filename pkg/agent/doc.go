// Package agent is the instance agent: the only Hangar code on an EC2 instance. It turns one
// machine into a runner that serves many workflow runs, one after another:
//
//  1. init: check the unprivileged runner user, keep it off the instance metadata endpoint with
//     a firewall rule it proves, find the directories outside its home it may write to, remove
//     what an earlier agent left; once per spec, run the pool's pre-runner script and install
//     the GitHub runner (baked into the AMI, or downloaded and checked against its SHA-256),
//     root's and read-only; signal READY — or FAILED with the log tail, after which it takes no
//     work and the instance is terminated;
//  2. the reuse loop: notice a run assigned to its item (one DynamoDB request a second while
//     idle, heartbeats folded in), register a fresh copy of the runner with the run id as its
//     only label, signal REGISTERED, run it with a root-owned job-started hook that fails any
//     job of another run or repository before its first step; when the run lets go (runId
//     cleared), stop the runner, kill every process of the runner user, remove it from GitHub
//     with the remove token release left on the item (by pristine scripts), remove the run's
//     files, home, temporary files and the user's files in the other directories it may write
//     to, without following symlinks, signal DEREGISTERED — or FAILED if any of that failed, and
//     the instance is not reused; repeat. A failed registration signals REGISTER_FAILED and waits
//     again;
//  3. alongside: a deadline watchdog that terminates the instance past its threshold (plus a
//     grace) even when DynamoDB is unreachable, and a spot-notice watcher.
//
// The agent writes only its own attributes (package state's Agent); it never writes state, runId
// or threshold. It knows nothing of how it was started; cmd/agent builds its Config.
package agent
