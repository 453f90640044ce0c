// Package config reads and validates the one file a Hangar deployment is described by
// (docs/configuration.md): the stack, the repositories allowed to use it, the refresh schedule,
// the GitHub App of label-routed jobs (app, jobs.go) and the pools. Pool settings are checked by
// the same code that checks the pool documents the stack publishes (pkg/contract/pooldoc), so the two
// cannot disagree.
package config
