// Package secrets is the token-leak check of Hangar's reliability suite. It runs a full cycle in
// one local world on the AWS emulators (internal/testkit/localenv): a cold provision, jobs on the
// run's runners through the GitHub stand-in, a release, a warm provision, jobs, a release and the
// refresh step. Then it scans everything the cycle left where someone other than the token's
// holder could read it, for the tokens it used: the admin token the steps were given
// (localenv.AdminToken) and every registration token the GitHub stand-in issued (and any remove
// token, though release mints none and no item may carry one), recorded on their way to the
// steps through a proxy in front of the stand-in's API.
//
// The places scanned: the step binaries' combined output (the ::add-mask:: commands that mask
// the tokens aside), their step summaries and outputs, every agent's log and DynamoDB requests
// (from the fleet simulator), the refresh Lambda's output (its EMF metric lines included), the
// jobs' output (their environment), the instances' user data, the launch template's versions,
// the instances' and volumes' EC2 tags and descriptions, every message of the stack's queues
// (received with a visibility timeout of 0, so none is consumed), the stack's pool documents,
// the GitHub stand-in's runners, every file the simulated instances hold, every write the steps
// made to the state table, and the state table itself. No token may be in the table at all, not
// even sealed: no write names an attribute for a secret, and no item holds one (tokens ride the
// instances' doorbells, whose messages the agents consume: a doorbell still
// holding one at the end is found by the queue scan). A sub-check plants a token in a sample text
// and proves the scanner finds it.
//
// It runs in make test with the emulators' endpoints loaded; like every integration test it is
// skipped under -short and fails without them (internal/testkit/testbed.Require).
package secrets
