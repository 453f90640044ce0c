// Package inspect answers an operator's questions about a deployed stack from the stack's own
// state, read with the operator's credentials: what every pool holds right now (Status) and
// what one instance is or was doing (Instance). It only reads, through the table's indexes (no
// Scan) and the pools' queues; the command line (cmd/hangar) renders what it returns.
package inspect
