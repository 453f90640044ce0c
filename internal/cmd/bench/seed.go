package main

import "time"

// fleet-actions/ec2-runner-pool-manager, measured on the same emulators for the same operations:
// the figures the ratio column compares with.
const (
	seedWarm1        = 670 * time.Millisecond
	seedWarm10       = 810 * time.Millisecond
	seedRelease      = 10200 * time.Millisecond
	seedColdOverhead = 10200 * time.Millisecond
)

// seedWarmRequests is its AWS requests per warm provision of n: 6 + 7N.
func seedWarmRequests(n int) float64 { return float64(6 + 7*n) }
