//go:build tools

// Package tools pins the versions of the developer tools the Makefile builds (golangci-lint), in a
// module of its own so that they never enter the product's dependencies.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
