// Package fleet creates EC2 instances for a pool with EC2 Fleet (CreateFleet, type instant): one
// request for N instances, with every (instance type × subnet) of the pool as overrides, so AWS
// picks a type and zone with capacity.
//
// Capacity errors (InsufficientInstanceCapacity, spot price, and kin) take that type and zone out
// and try again with the rest; spot with on-demand fallback switches market when spot is out
// everywhere; when nothing is left it backs off (capped, jittered) and tries everything again,
// within the caller's deadline. Partial fulfilment keeps what launched and asks for the rest.
// Permanent errors (a bad AMI, a missing role, no permission) fail at once with a message that
// says what to fix. Every response's instances are handed to the caller before anything else
// happens, so that they get their state items even if the process dies a moment later.
package fleet
