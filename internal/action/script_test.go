package action_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

// releaseServer serves release assets as GitHub serves them, under
// /<owner>/<repo>/releases/download/<tag>/<file>, and counts the requests for each.
type releaseServer struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte // path -> body
	hits  map[string]int
}

func newReleaseServer(t *testing.T) *releaseServer {
	s := &releaseServer{files: map[string][]byte{}, hits: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hits[r.URL.Path]++
		b, ok := s.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

// publish puts a release: each asset, and a checksums file listing sums (the assets' own unless
// overridden).
func (s *releaseServer) publish(tag string, assets map[string][]byte, sums map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list strings.Builder
	for name, body := range assets {
		s.files["/hangar-ci/hangar/releases/download/"+tag+"/"+name] = body
		sum, ok := sums[name]
		if !ok {
			h := sha256.Sum256(body)
			sum = hex.EncodeToString(h[:])
		}
		fmt.Fprintf(&list, "%s  %s\n", sum, name)
	}
	s.files["/hangar-ci/hangar/releases/download/"+tag+"/checksums.txt"] = []byte(list.String())
}

func (s *releaseServer) count(tag, file string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits["/hangar-ci/hangar/releases/download/"+tag+"/"+file]
}

// asset is the name the script downloads on this machine for a mode: refresh is hangar's.
func asset(mode string) string {
	if mode == "refresh" {
		return fmt.Sprintf("hangar-%s-%s", runtime.GOOS, runtime.GOARCH)
	}
	return fmt.Sprintf("hangar-%s-%s-%s", mode, runtime.GOOS, runtime.GOARCH)
}

// fakeBinary is a stand-in step binary: it says who it is and with which arguments, and leaves a
// mark, so a test can tell whether it ran.
func fakeBinary(name string) []byte {
	return []byte("#!/bin/sh\necho \"" + name + " ran with [$*]\"\ntouch \"$MARKS/" + name + "\"\n")
}

// script runs scripts/action.sh as the composite step does, with env on top of a clean
// environment (PATH without Go unless withGo), from an action directory at actionPath.
type scriptRun struct {
	t                   *testing.T
	actionPath, toolDir string
	marks               string
	withGo              bool
}

func newScriptRun(t *testing.T) *scriptRun {
	return &scriptRun{t: t, actionPath: root, toolDir: t.TempDir(), marks: t.TempDir()}
}

func (r *scriptRun) run(env ...string) (string, int) {
	r.t.Helper()
	path := noGoPath(r.t)
	if r.withGo {
		path = os.Getenv("PATH")
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "action.sh"))
	cmd.Env = append(testbed.Environ("HANGAR_", "GITHUB_", "INPUT_", "AWS_", "RUNNER_", "PATH"),
		append([]string{"PATH=" + path, "HANGAR_ACTION_PATH=" + r.actionPath, "RUNNER_TOOL_CACHE=" + r.toolDir,
			"RUNNER_TEMP=" + r.t.TempDir(), "MARKS=" + r.marks}, env...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	require.NoError(r.t, err)
	return string(out), 0
}

func (r *scriptRun) ran(name string) bool {
	_, err := os.Stat(filepath.Join(r.marks, name))
	return err == nil
}

// noGoPath is a PATH with the tools the script needs (bash, curl, coreutils) and no Go.
func noGoPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"bash", "sh", "curl", "uname", "awk", "cut", "sha256sum", "mkdir", "chmod", "mv", "cp", "rm", "touch", "cat", "env"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err, "the script needs %s", tool)
		require.NoError(t, os.Symlink(p, filepath.Join(dir, tool)))
	}
	return dir
}

// TestDownloadVerifyCache: a release's binary is downloaded, verified against the release's
// checksums file, kept in the tool cache and run; the next step runs it from the cache (the
// checksums file fetched again, the binary not); a cached binary that no longer matches is
// replaced by a verified download before anything runs.
func TestDownloadVerifyCache(t *testing.T) {
	t.Parallel()
	srv := newReleaseServer(t)
	srv.publish("v1.2.3", map[string][]byte{asset("provision"): fakeBinary("provision"), asset("refresh"): fakeBinary("hangar")}, nil)
	r := newScriptRun(t)
	env := []string{"HANGAR_VERSION=v1.2.3", "HANGAR_RELEASE_URL=" + srv.URL + "/hangar-ci/hangar/releases/download"}

	out, code := r.run(append(env, "HANGAR_MODE=provision")...)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "provision ran with []")
	require.Contains(t, out, "verified, SHA-256")
	cached := filepath.Join(r.toolDir, "hangar", "v1.2.3", runtime.GOOS+"-"+runtime.GOARCH, asset("provision"))
	require.FileExists(t, cached)
	require.Equal(t, 1, srv.count("v1.2.3", asset("provision")))

	out, code = r.run(append(env, "HANGAR_MODE=provision")...)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "from the tool cache")
	require.Equal(t, 1, srv.count("v1.2.3", asset("provision")), "the cached binary is used")
	require.Equal(t, 2, srv.count("v1.2.3", "checksums.txt"), "the checksums file is fetched for every run")

	// An earlier job on a shared machine replaced the cached binary.
	require.NoError(t, os.WriteFile(cached, []byte("#!/bin/sh\ntouch \"$MARKS/planted\"\n"), 0o755))
	out, code = r.run(append(env, "HANGAR_MODE=provision")...)
	require.Equal(t, 0, code, out)
	require.False(t, r.ran("planted"), "the planted binary must not run")
	require.Contains(t, out, "provision ran with []")
	require.Equal(t, 2, srv.count("v1.2.3", asset("provision")), "downloaded again")

	// refresh runs the hangar binary's refresh command.
	out, code = r.run(append(env, "HANGAR_MODE=refresh")...)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "hangar ran with [refresh]")
	require.Equal(t, 1, srv.count("v1.2.3", "hangar-"+runtime.GOOS+"-"+runtime.GOARCH))
}

// TestChecksumMismatchStops: a download whose SHA-256 is not the one the release lists stops the
// step with a clear error; it is neither run nor cached, and the step does not fall back to
// building from source.
func TestChecksumMismatchStops(t *testing.T) {
	t.Parallel()
	srv := newReleaseServer(t)
	srv.publish("v1.2.3", map[string][]byte{asset("release"): fakeBinary("release")},
		map[string]string{asset("release"): strings.Repeat("ab", 32)})
	r := newScriptRun(t)
	r.withGo = true
	out, code := r.run("HANGAR_MODE=release", "HANGAR_VERSION=v1.2.3", "HANGAR_RELEASE_URL="+srv.URL+"/hangar-ci/hangar/releases/download")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "::error title=Hangar::checksum mismatch for "+asset("release")+" of release v1.2.3: the release's checksums.txt lists "+strings.Repeat("ab", 32))
	require.False(t, r.ran("release"))
	require.NotContains(t, out, "Building")
	require.NoFileExists(t, filepath.Join(r.toolDir, "hangar", "v1.2.3", runtime.GOOS+"-"+runtime.GOARCH, asset("release")))
}

// TestReleaseFromActionPath: with no version input and no ref in the context, the release is the
// ref the runner checked the action out at (…/_actions/<owner>/<repo>/<ref>), downloaded from
// GITHUB_SERVER_URL's releases of that repository.
func TestReleaseFromActionPath(t *testing.T) {
	t.Parallel()
	srv := newReleaseServer(t)
	srv.publish("v2", map[string][]byte{asset("release"): fakeBinary("release")}, nil)
	r := newScriptRun(t)
	r.actionPath = filepath.Join(t.TempDir(), "_actions", "hangar-ci", "hangar", "v2")
	require.NoError(t, os.MkdirAll(r.actionPath, 0o755))
	out, code := r.run("HANGAR_MODE=release", "GITHUB_SERVER_URL="+srv.URL)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "release ran with []")
	require.Equal(t, 1, srv.count("v2", asset("release")))
}

// TestNoBinaryAndNoGo: without a release binary (no release, or one that lacks this platform's
// binary) and without Go, the step says exactly what to do; bad modes, versions and URLs are
// refused before any download.
func TestNoBinaryAndNoGo(t *testing.T) {
	t.Parallel()
	srv := newReleaseServer(t)
	srv.publish("v1.0.0", map[string][]byte{"hangar-provision-plan9-mips": fakeBinary("other")}, nil)
	base := "HANGAR_RELEASE_URL=" + srv.URL + "/hangar-ci/hangar/releases/download"
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"branch", []string{"HANGAR_MODE=provision", "HANGAR_ACTION_REF=main"},
			[]string{"no release binary of the provision step for this ref of the action (main), and no Go to build one", "uses: hangar-ci/hangar@v1", "actions/setup-go"}},
		{"release without this platform", []string{"HANGAR_MODE=provision", "HANGAR_VERSION=v1.0.0", base},
			[]string{"release v1.0.0 lists no " + asset("provision"), "no Go to build one"}},
		{"no such release", []string{"HANGAR_MODE=provision", "HANGAR_VERSION=v9.0.0", base},
			[]string{"no checksums file at " + srv.URL + "/hangar-ci/hangar/releases/download/v9.0.0/checksums.txt", "no Go to build one"}},
		{"bad mode", []string{"HANGAR_MODE=deploy"}, []string{`mode: "deploy": want provision, release or refresh`}},
		{"bad version", []string{"HANGAR_MODE=release", "HANGAR_VERSION=latest; rm -rf /"}, []string{`version: "latest; rm -rf /": want a release tag such as v1 or v1.4.2`}},
		{"plain http mirror", []string{"HANGAR_MODE=release", "HANGAR_VERSION=v1", "HANGAR_RELEASE_URL=http://mirror.example/dl"},
			[]string{`release-url: "http://mirror.example/dl/v1/checksums.txt": want an https URL`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newScriptRun(t)
			out, code := r.run(tc.env...)
			require.Equal(t, 2, code, out)
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			require.False(t, r.ran("other"))
		})
	}
}

// TestBuildFromSource: without a release (uses: ./, a branch), the step is built from the
// action's own source with the runner's Go, and runs: here it refuses its empty pool input.
func TestBuildFromSource(t *testing.T) {
	t.Parallel()
	r := newScriptRun(t)
	r.withGo = true
	out, code := r.run("HANGAR_MODE=provision", "HANGAR_GITHUB_TOKEN=x", "GITHUB_RUN_ID=5", "GITHUB_REPOSITORY=octo/app")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "Building the provision step from source")
	require.Contains(t, out, "::error::provision: pool: empty")
}
