// Package agent is the instance agent: the only Hangar code on an EC2 instance. It turns one
// machine into a runner that serves many workflow runs, one after another:
//
//  1. init: wait for its own item, ready the host (Host.Init), remove what an earlier agent left;
//     once per spec, run the pool's pre-runner script and install the GitHub runner (baked into
//     the AMI, or downloaded and checked against its SHA-256); signal READY, or FAILED with the
//     log tail, after which it takes no work and the instance is terminated;
//  2. the reuse loop: notice a run assigned to its item (its doorbell rings; safety reads catch a
//     lost ring), acknowledge it, register a fresh copy of the runner with the run id as its
//     label, signal REGISTERED; when the run lets go, stop the runner, end the run on the host
//     (Host.Scrub) and signal DEREGISTERED, or FAILED when anything of the run may be left, and
//     the instance is not reused. A failed registration signals REGISTER_FAILED and waits again;
//     a label-routed job runs a just-in-time runner the same way;
//  3. alongside: heartbeats folded into its reads, a deadline watchdog that terminates the
//     instance past its threshold (plus a grace) even when DynamoDB is unreachable, and a
//     spot-notice watcher.
//
// What keeps one run from the next is package host's, which the agent reaches through the Host
// interface it declares, so that the loop is tested on fakes. Downloading and installing the
// runner stay here: like the pre-runner script, they follow the pool document and run once per
// spec before any run; the host only makes the install root's and read-only, which is what keeps
// runs from changing it. The agent writes only its own attributes (package state's Agent), never
// state, runId or threshold; cmd/agent builds its Config and wires the host.
package agent
