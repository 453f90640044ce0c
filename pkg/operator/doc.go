// Package operator is the operator's side of a deployed stack, acting with the operator's own
// credentials. It answers from the stack's own state: what every pool holds right now (Status) and
// what one instance is or was doing (Instance), which runs held what (Runs) and what it cost
// (Cost). It reads through the table's indexes (no Scan) and the pools' queues; the one change it
// makes is Drain and Undrain, which close a pool to reuse and open it again. The command line
// (cmd/hangar) renders what it returns.
package operator
