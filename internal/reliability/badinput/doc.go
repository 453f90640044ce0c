// Package badinput is the bad-input corpus of Hangar's reliability suite: a table of malformed,
// hostile or merely wrong inputs, each fed to the part of Hangar that reads it as it would be in
// production, in one local world on the AWS emulators (internal/testkit/localenv):
//
//   - action inputs, given to the real provision and release step binaries and hangar refresh;
//   - pool documents, parsed by pkg/contract/pooldoc and read by the provision step from SSM;
//   - pool messages (poison), parsed by pkg/pool/offers and sent to a pool's queue ahead of a provision;
//   - item shapes, written into the state table and read by pkg/contract/state, the release step and an
//     agent;
//   - Lambda events, handed to the real refresh function through the local Lambda.
//
// For every case the test asserts that the refusal names the input (the field or variable) and
// the form it accepts, that the step binaries and the refresh function made no mutating AWS call
// (their traffic goes through counting proxies, internal/testkit/awsproxy) and asked GitHub for
// nothing, and that nothing was lost: the pool's idle instances are still idle, untouched, and
// offered exactly once at the end.
//
// It runs in make test with the emulators' endpoints loaded; like every integration test it is
// skipped under -short and fails without them (internal/testkit/testbed.Require).
package badinput
