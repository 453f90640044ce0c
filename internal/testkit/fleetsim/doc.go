// Package fleetsim turns the instances the EC2 emulator (moto) launches into real running
// agents, for tests and the local demo; it is never shipped. For every instance tagged with the
// simulator's stack it starts:
//
//   - an EC2 metadata mock (amazon-ec2-metadata-mock, IMDSv2 only) serving that instance's
//     identity, type, zone and lifecycle, and a spot interruption notice on demand (Interrupt);
//   - a DynamoDB proxy in front of DynamoDB Local that counts and records the agent's requests,
//     and can be cut to make DynamoDB unreachable for that instance alone (SetDynamoDB), and an
//     SQS proxy for its doorbell that counts and can be cut likewise (SetSQS); both are
//     internal/testkit/awsproxy;
//   - the agent binary, with its own runner and work directories.
//
// It stops the agent when the instance is stopped or terminated, restarts it when the instance
// starts again, and turns an agent's power-off (its shutdown command) into a termination, as the
// launch template's shutdown behaviour does on EC2.
//
// It leaves no process behind: a failed start stops what it had started; stopping an agent kills
// everything the agent started too, in whatever process group (each agent runs under a small shim,
// this package's own program re-executed, see shimEnv); and should the simulator's process die
// without stopping them (a panic, a test timeout, SIGKILL), its mocks and agents get a
// parent-death signal and die with it, the agents' runners and scripts too. That part is
// Linux-only, as is the test world.
package fleetsim
