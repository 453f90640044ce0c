package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// The image contract (docs/configuration.md, "The image"): what the agent, and the runner it
// starts, need of the instance's image. Init checks every piece before it changes anything, and
// names each one missing in a single failure, so that an image is fixed once, not piece by piece.

// ErrImageContract is matched by Init's failure when the image lacks what Hangar needs.
var ErrImageContract = errors.New(state.ImageContractFailure)

// libraryDirs are where the runner's shared libraries are looked for, as the dynamic linker
// looks on the distributions Hangar supports (Debian and Ubuntu's multiarch, Amazon Linux's lib64).
var libraryDirs = []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
	"/usr/lib64", "/lib64", "/usr/lib", "/lib"}

// runnerLibraries are the libraries GitHub's runner (a .NET program) loads, by file name prefix,
// each with the package that brings it on Debian, Ubuntu and Amazon Linux.
var runnerLibraries = []struct{ prefix, what string }{
	{"libicuuc.so", "libicu (libicu72 on Debian 12, libicu74 on Ubuntu 24.04, libicu on Amazon Linux 2023): the runner's .NET runtime"},
	{"libssl.so", "OpenSSL's libssl: the runner's TLS to GitHub"},
	{"libz.so", "zlib: the runner's .NET runtime"},
}

// checkImage returns ErrImageContract naming every piece of the contract the instance lacks:
// cgroup v2 with cgroup.kill (root is the agent's cgroup), iptables with the owner and cgroup
// matches (unless the pool lets runs reach the metadata endpoint), git, and the runner's
// libraries.
func checkImage(ctx context.Context, cfg Config, u *runnerUser, root string) error {
	var missing []string
	if !killsCgroups(root) {
		missing = append(missing, "cgroup v2 with cgroup.kill (Linux 5.14 or later, the unified hierarchy): every run is contained, and ended, in a cgroup")
	}
	if !cfg.Runner.MetadataAccess {
		if why := iptablesMatches(ctx, cfg.Iptables, u); why != "" {
			missing = append(missing, "iptables with the owner and cgroup matches ("+why+"): the firewall that keeps runs off the instance's metadata and role")
		}
	}
	if _, err := resolveTool("git", u); err != nil {
		missing = append(missing, "git: actions/checkout and the runner fetch repositories with it")
	}
	for _, lib := range runnerLibraries {
		if !hasLibrary(lib.prefix) {
			missing = append(missing, lib.what)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w (docs/configuration.md, \"The image\"): %s", ErrImageContract, strings.Join(missing, "; "))
	}
	return nil
}

// killsCgroups reports whether the cgroup root (the agent's cgroup) has cgroup.kill, the file
// that ends every process of a cgroup at once; the top of the hierarchy has none of its own, and
// then a cgroup below it answers for the kernel.
func killsCgroups(root string) bool {
	has := func(dir string) bool {
		fi, err := os.Stat(filepath.Join(dir, "cgroup.kill"))
		return err == nil && fi.Mode().IsRegular() // cgroupfs's files are regular and report no size
	}
	if has(root) {
		return true
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		return false // not a cgroup v2 directory at all
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() {
			return has(filepath.Join(root, e.Name()))
		}
	}
	return false
}

// iptablesMatches says what is wrong with iptables ("" when nothing): the program must be there
// and load the owner and cgroup match extensions.
func iptablesMatches(ctx context.Context, iptables string, u *runnerUser) string {
	p, err := resolveTool(iptables, u)
	if err != nil {
		return "no " + iptables + " on " + rootPath
	}
	for _, m := range []string{"owner", "cgroup"} {
		if out, err := rootCommand(ctx, p, "-m", m, "-h").CombinedOutput(); err != nil {
			return fmt.Sprintf("%s -m %s: %v: %s", p, m, err, state.LastLine(string(out)))
		}
	}
	return ""
}

// hasLibrary reports whether a non-empty regular file whose name starts with prefix is in one of
// libraryDirs (a symbolic link counts as what it points to).
func hasLibrary(prefix string) bool {
	for _, dir := range libraryDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) && regularFile(filepath.Join(dir, e.Name())) {
				return true
			}
		}
	}
	return false
}

// regularFile reports whether path is (or links to) a regular file that is not empty.
func regularFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}
