package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

func tarball(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		body := []byte("x")
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		require.NoError(t, tw.WriteHeader(&h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write(body)
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, gz.Close())
	return buf.Bytes()
}

func TestUntarRefusesEscapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		entry tar.Header
		want  string
	}{
		{"parent path", tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}, "outside"},
		{"deep parent", tar.Header{Name: "bin/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}, "outside"},
		{"absolute symlink", tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "point outside"},
		{"escaping symlink", tar.Header{Name: "bin/link", Typeflag: tar.TypeSymlink, Linkname: "../../x"}, "point outside"},
		{"device", tar.Header{Name: "dev", Typeflag: tar.TypeChar}, "unsupported type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			err := untar(bytes.NewReader(tarball(t, tc.entry)), filepath.Join(dir, "runner"))
			require.ErrorContains(t, err, tc.want)
			_, statErr := os.Stat(filepath.Join(dir, "evil"))
			require.True(t, os.IsNotExist(statErr), "nothing written outside")
		})
	}
	dir := t.TempDir()
	require.NoError(t, untar(bytes.NewReader(tarball(t,
		tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "./config.sh", Typeflag: tar.TypeReg, Mode: 0o755},
		tar.Header{Name: "bin/ok-link", Typeflag: tar.TypeSymlink, Linkname: "../config.sh"},
	)), dir))
	require.FileExists(t, filepath.Join(dir, "config.sh"))

	// A symlink that passes a check of its own text but resolves outside, through one an
	// earlier entry made, cannot carry a later write out of the directory.
	dir = t.TempDir()
	err := untar(bytes.NewReader(tarball(t,
		tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "d/up", Typeflag: tar.TypeSymlink, Linkname: ".."},
		tar.Header{Name: "d/out", Typeflag: tar.TypeSymlink, Linkname: "up/.."},
		tar.Header{Name: "d/out/evil", Typeflag: tar.TypeReg, Mode: 0o644},
	)), filepath.Join(dir, "runner"))
	require.Error(t, err)
	require.NoFileExists(t, filepath.Join(dir, "evil"), "nothing written outside through a symlink")
}

func TestRunnerURL(t *testing.T) {
	t.Parallel()
	r := pooldoc.Runner{Version: "2.321.0", BaseURL: "https://github.com/actions/runner/releases/download/"}
	require.Equal(t, "https://github.com/actions/runner/releases/download/v2.321.0/actions-runner-linux-arm64-2.321.0.tar.gz", RunnerURL(r, "arm64"))
}

func TestRunnerLabels(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"42", "42-linux", "42-gpu"}, runnerLabels("42", []string{"linux", "42"}, []string{"gpu", "linux", ""}),
		"the run id, then composites only: never a bare label a job of another run could ask for")
	require.Equal(t, []string{"7"}, runnerLabels("7", nil, nil))
}

func validConfig() Config {
	c := Config{
		Identity:  Identity{InstanceID: "i-0123456789abcdef0", Region: "us-east-1", Account: "123456789012", Partition: "aws", Arch: "x64"},
		Pool:      &pooldoc.Document{Name: "p", Timeouts: pooldoc.DefaultTimeouts},
		RunnerDir: "/opt/hangar/runner",
	}
	c.ApplyDefaults()
	return c
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := validConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, "/var/lib/hangar/runs", c.RunsDir)
	require.Equal(t, 10*time.Minute, c.BootWait, "boot wait defaults to the pool's created timeout")

	tests := []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"relative runner dir", func(c *Config) { c.RunnerDir = "runner" }, `runner dir "runner": want an absolute path`},
		{"root runs dir", func(c *Config) { c.RunsDir = "/" }, `runs dir "/": want an absolute path other than /`},
		{"runs dir in runner dir", func(c *Config) { c.RunsDir = c.RunnerDir + "/runs" }, "want a directory outside the runner dir"},
		{"hot poll", func(c *Config) { c.PollInterval = 10 * time.Millisecond }, "poll interval 10ms: want 200ms or more"},
		{"negative grace", func(c *Config) { c.TerminateGrace = -time.Second }, "terminate grace -1s"},
		{"no pool", func(c *Config) { c.Pool = nil }, "pool document: missing"},
		{"bad instance", func(c *Config) { c.Identity.InstanceID = "x" }, `instance id "x" is malformed`},
		{"bad arch", func(c *Config) { c.Identity.Arch = "s390x" }, `architecture "s390x"`},
		{"bad account", func(c *Config) { c.Identity.Account = "" }, `account "" is malformed`},
		{"no shutdown", func(c *Config) { c.ShutdownCommand = nil }, "shutdown command: empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tc.mut(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	tl := newTail(8)
	for i := range 100 {
		_, _ = tl.Write([]byte(strings.Repeat(string(rune('a'+i%26)), 3)))
	}
	require.Len(t, tl.String(), 8)
	require.True(t, strings.HasSuffix(tl.String(), "vvv"))
}

func TestRedact(t *testing.T) {
	t.Parallel()
	require.Equal(t, "token *** refused", redact("token AREG123 refused", "AREG123"))
	require.Equal(t, "x", redact("x", ""))
}

func TestPreRunnerTimeout(t *testing.T) {
	t.Parallel()
	out, err := runPreRunner(t.Context(), "echo started; sleep 5", 300*time.Millisecond, nil)
	require.ErrorContains(t, err, "did not finish within 300ms")
	require.Contains(t, out, "started")
	out, err = runPreRunner(t.Context(), "echo $HANGAR_POOL", time.Second, []string{"HANGAR_POOL=p1"})
	require.NoError(t, err)
	require.Equal(t, "p1\n", out)
}

// fakeMetadata serves a fixed identity document (fault injection: real metadata comes from the
// metadata mock in the e2e tests).
type fakeMetadata struct {
	Metadata
	doc imds.InstanceIdentityDocument
	err error
}

func (f fakeMetadata) GetInstanceIdentityDocument(context.Context, *imds.GetInstanceIdentityDocumentInput, ...func(*imds.Options)) (*imds.GetInstanceIdentityDocumentOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &imds.GetInstanceIdentityDocumentOutput{InstanceIdentityDocument: f.doc}, nil
}

func TestReadIdentity(t *testing.T) {
	t.Parallel()
	good := imds.InstanceIdentityDocument{InstanceID: "i-0123456789abcdef0", InstanceType: "m7g.large", Region: "cn-north-1",
		AvailabilityZone: "cn-north-1a", AccountID: "123456789012", Architecture: "arm64"}
	id, err := ReadIdentity(t.Context(), fakeMetadata{doc: good})
	require.NoError(t, err)
	require.Equal(t, "arm64", id.Arch)
	require.Equal(t, "arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-0123456789abcdef0", id.ARN())

	tests := []struct {
		name string
		mut  func(*imds.InstanceIdentityDocument)
		err  error
		want string
	}{
		{"unreachable", nil, errors.New("connection refused"), "read instance identity document: connection refused"},
		{"no instance id", func(d *imds.InstanceIdentityDocument) { d.InstanceID = "" }, nil, `instance id "" is malformed`},
		{"bad account", func(d *imds.InstanceIdentityDocument) { d.AccountID = "0123456789" }, nil, `account "0123456789" is malformed`},
		{"bad region", func(d *imds.InstanceIdentityDocument) { d.Region = "" }, nil, `region "" is malformed`},
		{"unknown arch", func(d *imds.InstanceIdentityDocument) { d.Architecture = "ppc64le" }, nil, `architecture "ppc64le"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := good
			if tc.mut != nil {
				tc.mut(&doc)
			}
			_, err := ReadIdentity(t.Context(), fakeMetadata{doc: doc, err: tc.err})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestJobWatch: the runner's word that it took a job is seen however its output is cut into
// writes, and only that word; the output reaches the tail unchanged.
func TestJobWatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		writes []string
		took   bool
	}{
		{"took a job", []string{"√ Connected to GitHub\n", "2026-11-29 10:00:00Z: Running job: build\n"}, true},
		{"line split across writes", []string{"2026-11-29 10:00:00Z: Runn", "ing jo", "b: build\n"}, true},
		{"one byte at a time", strings.Split("x: Running job: build\n", ""), true},
		{"deleted before it took one", []string{"Listening for Jobs\n", "Error: the runner registration has been deleted\n"}, false},
		{"nothing", nil, false},
	} {
		p := &runnerProc{out: newTail(1024)}
		w := &jobWatch{p: p}
		for _, s := range tc.writes {
			n, err := w.Write([]byte(s))
			require.NoError(t, err)
			require.Equal(t, len(s), n)
		}
		require.Equal(t, tc.took, p.took.Load(), tc.name)
		require.Equal(t, strings.Join(tc.writes, ""), p.out.String(), tc.name)
	}
}
