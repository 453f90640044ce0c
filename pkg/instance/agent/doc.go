// Package agent is the instance agent: the only Hangar code on an EC2 instance. It turns one
// machine into a runner that serves many workflow runs, one after another:
//
//  1. init: check the unprivileged runner user (no subordinate ids unless the pool allows user
//     namespaces), make the jobs cgroup that contains every run, keep the runs off the instance
//     metadata endpoint with firewall rules (by cgroup and by uid) it proves, deny at and cron to
//     the runner user, find the directories outside its home it may write to, remove what an
//     earlier agent left; once per spec, run the pool's pre-runner script and install the GitHub
//     runner (baked into the AMI, or downloaded and checked against its SHA-256), root's and
//     read-only; signal READY — or FAILED with the log tail, after which it takes no work and
//     the instance is terminated;
//  2. the reuse loop: notice a run assigned to its item (one DynamoDB request a second while
//     idle, heartbeats folded in), register a fresh copy of the runner with the run id as its
//     only label, every process of it started inside the run's cgroup with user namespaces
//     refused, signal REGISTERED, run it with a root-owned job-started hook that fails any job
//     of another run or repository before its first step; when the run lets go (runId cleared),
//     stop the runner, kill the jobs cgroup as a whole and every process of the runner user,
//     clear what outlives processes (IPC, at jobs, crontab, keyrings), remove the run's files,
//     home, temporary files and the user's files in the other directories it may write to,
//     without following symlinks, check that nothing of the run is left, signal DEREGISTERED —
//     or FAILED if any of that failed, and the instance is not reused; repeat. A failed
//     registration signals REGISTER_FAILED and waits again. Release, not the agent, removes the
//     runner from GitHub;
//  3. alongside: a deadline watchdog that terminates the instance past its threshold (plus a
//     grace) even when DynamoDB is unreachable, and a spot-notice watcher.
//
// The agent writes only its own attributes (package state's Agent); it never writes state, runId
// or threshold. It knows nothing of how it was started; cmd/agent builds its Config.
package agent
