package testbed

import (
	"os"
	"testing"
)

// HostEnv, set to 1, runs the host tests under -short too: `make test-host` sets it to run them
// alone.
const HostEnv = "HANGAR_HOST_TESTS"

// RequireRoot marks t a host test: one that needs root to change the machine itself (create users
// or give them files, make cgroups, write system directories), said by why. Under -short it is
// skipped unless HANGAR_HOST_TESTS=1; run by anyone but root it is skipped, naming the targets that
// run it, or fails when HANGAR_HOST_TESTS=1 asked for it.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	asked := os.Getenv(HostEnv) == "1"
	if testing.Short() && !asked {
		t.Skipf("host test (%s): skipped with -short; make test-host runs the host tests, as root", why)
	}
	if os.Geteuid() != 0 {
		if asked {
			t.Fatalf("host test (%s): needs root; run make test-host as root", why)
		}
		t.Skipf("host test (%s): needs root; make test-host (or make test) runs it, as root", why)
	}
}
