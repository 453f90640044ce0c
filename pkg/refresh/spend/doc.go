// Package spend publishes what runs cost as CloudWatch metrics: per pool and repository, the
// run records (pkg/contract/state, docs/design.md §12) that ended since it last published, each counted
// once however many refreshes run at the same moment.
package spend
