// Command fake-runner is the stand-in GitHub Actions runner (see package fakerunner). It lives at
// <runner dir>/bin/fake-runner and is called by the stand-in config.sh and run.sh.
package main

import (
	"os"
	"path/filepath"

	"github.com/hangar-ci/hangar/internal/testkit/fakerunner"
)

func main() {
	exe, err := os.Executable()
	if err != nil {
		os.Exit(1)
	}
	root := filepath.Dir(filepath.Dir(exe)) // <root>/bin/fake-runner
	os.Exit(fakerunner.Main(root, os.Args[1:], os.Stdout, os.Stderr))
}
