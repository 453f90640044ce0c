// Package pooldoc is the pool document the CDK stack publishes for every pool (docs/design.md
// §9): where the pool's queue, launch template and table are, what it launches, its timeouts and
// its warm-pool schedule. Provision, refresh and the agent read it; Parse applies defaults and
// validates every field, naming the field and the bad value.
package pooldoc
