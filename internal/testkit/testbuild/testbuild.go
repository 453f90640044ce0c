// Package testbuild builds the project's binaries for tests, benchmarks and the demo that run
// them as processes (the agent under the fleet simulator, the stand-in runner), once per process.
// They are the local world's builds: built with the localworld tag (Tags), which lets them talk
// to the plain-http GitHub stand-in on a loopback address. Production builds the binaries as
// releases are, without it.
package testbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Tags are the build tags of the local world's binaries: what the Makefile's test, bench and
// demo targets give go, and never make build, dist or infra-assets.
const Tags = "localworld"

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Binary builds the main package pkg for a test, failing it when the build fails.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	p, err := Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ProductionBinary builds the main package pkg as a release is built (without Tags), for a
// test that shows what a release refuses, failing the test when the build fails.
func ProductionBinary(t testing.TB, pkg string) string {
	t.Helper()
	p, err := build(pkg, "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Build builds the main package pkg (an import path such as
// github.com/hangar-ci/hangar/cmd/agent) with CGO_ENABLED=0 and the local world's Tags and
// returns the binary's path. Later calls for the same package return the same binary.
func Build(pkg string) (string, error) { return build(pkg, Tags) }

// build builds pkg with tags (none: a release build), once per package and tags.
func build(pkg, tags string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	key := pkg + " " + tags
	if p, ok := built[key]; ok {
		return p, nil
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "hangar-testbuild-")
		if err != nil {
			return "", err
		}
		// Others may run the binaries: the agent runs itself as its runner user (a probe).
		if err := os.Chmod(d, 0o755); err != nil {
			return "", err
		}
		dir = d // left for the OS to clean: other tests of this process may still run the binaries
	}
	name := filepath.Base(pkg)
	if tags == "" {
		name += "-production"
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(goTool(), "build", "-tags", tags, "-o", out, pkg)
	cmd.Dir = ModuleRoot() // built in this module, whichever module's test asks (the CDK app's does)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	built[key] = out
	return out, nil
}

// ModuleRoot is the repository's root: the directory of the module this package is in.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// goTool is the go command: the one on PATH, or $GOROOT/bin/go.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}
