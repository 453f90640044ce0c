// Package faults stages, on top of the real emulators, the races and failures that tests of the
// control plane need: a state store under which another run takes an instance at the worst
// moment.
package faults
