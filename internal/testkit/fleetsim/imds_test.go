//go:build linux

package fleetsim

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var testIdentity = identity{ID: "i-0123456789abcdef0", Type: "c7i.large", AZ: "us-east-1a", Region: "us-east-1",
	Account: "123456789012", Lifecycle: "on-demand", Arch: "x86_64"}

// metadataLog returns what the mock in dir printed.
func metadataLog(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "imds.log"))
	require.NoError(t, err)
	return string(b)
}

// shortenMetadataStart makes a mock that does not answer fail sooner, for one test.
func shortenMetadataStart(t *testing.T, d time.Duration) {
	old := metadataStartTimeout
	metadataStartTimeout = d
	t.Cleanup(func() { metadataStartTimeout = old })
}

func TestMetadataMockThatNeverAnswersIsKilledWhenTheContextEnds(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	_, silent, _ := scripts(t, bin)
	reapOnFailure(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// End the context only once the mock runs, so that the test is about a started process.
	go func() {
		for len(procsUnder(dir)) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancel()
	}()

	md, err := startMetadata(ctx, silent, dir, testIdentity)

	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, md)
	require.Empty(t, procsUnder(dir), "the mock is left running")
}

func TestMetadataMockThatNeverAnswersIsKilledAfterTheStartTimeout(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	_, silent, _ := scripts(t, bin)
	reapOnFailure(t, dir)
	shortenMetadataStart(t, 5*time.Second)

	_, err := startMetadata(context.Background(), silent, dir, testIdentity)

	require.ErrorContains(t, err, "did not answer within 5s")
	require.Contains(t, metadataLog(t, dir), "silent metadata mock started", "the mock never ran: the test proves nothing")
	require.Empty(t, procsUnder(dir), "the mock is left running")
}

func TestMetadataMockThatExitsAtStartIsReported(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	_, _, exits := scripts(t, bin)
	reapOnFailure(t, dir)

	_, err := startMetadata(context.Background(), exits, dir, testIdentity)

	require.ErrorContains(t, err, "metadata mock exited at start")
	require.Empty(t, procsUnder(dir))
}

func TestMetadataMockFailedRestartLeavesNoProcess(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	imds, silent, _ := scripts(t, bin)
	reapOnFailure(t, dir)
	md, err := startMetadata(context.Background(), imds, dir, testIdentity)
	require.NoError(t, err)
	t.Cleanup(md.stop)
	resp, err := http.Post(md.url()+"/latest/meta-data/", "text/plain", nil) // anything but the token: 404
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the mock answers")
	require.Len(t, procsUnder(dir), 1)

	md.bin = silent // the restart starts a mock that never answers
	shortenMetadataStart(t, 3*time.Second)
	err = md.interrupt(context.Background())

	require.ErrorContains(t, err, "restart the metadata mock with a spot notice")
	require.Empty(t, procsUnder(dir), "a mock is left running")
	md.stop() // stopping a mock that is not running is harmless
}

func TestMetadataMockStopsWhenStopped(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	imds, _, _ := scripts(t, bin)
	reapOnFailure(t, dir)
	md, err := startMetadata(context.Background(), imds, dir, testIdentity)
	require.NoError(t, err)
	require.Equal(t, 1, countUnder(dir, "imds.json"))

	md.stop()

	require.Empty(t, procsUnder(dir))
	resp, err := http.Get(md.url() + "/latest/api/token")
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "nothing listens any more")
}
