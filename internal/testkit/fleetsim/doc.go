// Package fleetsim turns the instances the EC2 emulator (moto) launches into real running
// agents, for tests and the local demo; it is never shipped. For every instance tagged with the
// simulator's stack it starts:
//
//   - an EC2 metadata mock (amazon-ec2-metadata-mock, IMDSv2 only) serving that instance's
//     identity, type, zone and lifecycle, and a spot interruption notice on demand (Interrupt);
//   - a DynamoDB proxy in front of DynamoDB Local that counts and records the agent's requests,
//     and can be cut to make DynamoDB unreachable for that instance alone (SetDynamoDB);
//   - the agent binary, with its own runner and work directories.
//
// It stops the agent when the instance is stopped or terminated, restarts it when the instance
// starts again, and turns an agent's power-off (its shutdown command) into a termination, as the
// launch template's shutdown behaviour does on EC2.
package fleetsim
