package ghurl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestURLPolicy: a GitHub URL is https; plain http to a loopback address only in the local
// world's builds. Both kinds of build are played, whichever this test binary is.
func TestURLPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url        string
		production bool // accepted by a release build
		localWorld bool // accepted by a -tags localworld build
	}{
		{"https://github.com", true, true},
		{"https://ghe.example.com/api/v3", true, true},
		{"https://127.0.0.1:8443", true, true},
		{"http://127.0.0.1:8080", false, true},
		{"http://localhost:9", false, true},
		{"http://[::1]:9", false, true},
		{"http://github.com", false, false},
		{"http://127.0.0.1.example.com", false, false},
		{"ftp://github.com", false, false},
		{"github.com", false, false},
		{"", false, false},
	}
	for _, tc := range tests {
		for _, build := range []struct {
			localWorld, ok bool
		}{{false, tc.production}, {true, tc.localWorld}} {
			err := checkURL(tc.url, build.localWorld)
			if build.ok {
				require.NoError(t, err, "%s (local world %v)", tc.url, build.localWorld)
			} else {
				require.ErrorContains(t, err, "want an https URL", "%s (local world %v)", tc.url, build.localWorld)
			}
		}
	}
}

// TestServerPolicy: a pinned server is a scheme and a host, nothing more; plain http only to a
// loopback address in the local world's builds.
func TestServerPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url                    string
		production, localWorld bool
		want                   string // the refusal's words, when refused
	}{
		{"https://github.com", true, true, ""},
		{"https://ghe.example.com", true, true, ""},
		{"https://ghe.example.com:8443/", true, true, ""},
		{"http://127.0.0.1:8080", false, true, "want an https URL"},
		{"http://ghe.example.com", false, false, "want an https URL"},
		{"https://ghe.example.com/octo", false, false, "no user, path, query or fragment"},
		{"https://ghe.example.com/api/v3", false, false, "no user, path, query or fragment"},
		{"https://ghe.example.com?x=1", false, false, "no user, path, query or fragment"},
		{"https://ghe.example.com#top", false, false, "no user, path, query or fragment"},
		{"https://user:pw@ghe.example.com", false, false, "no user, path, query or fragment"},
		{"ghe.example.com", false, false, "want an https URL"},
	}
	for _, tc := range tests {
		for _, build := range []struct {
			localWorld, ok bool
		}{{false, tc.production}, {true, tc.localWorld}} {
			err := checkServer(tc.url, build.localWorld)
			if build.ok {
				require.NoError(t, err, "%s (local world %v)", tc.url, build.localWorld)
			} else {
				require.ErrorContains(t, err, tc.want, "%s (local world %v)", tc.url, build.localWorld)
			}
		}
	}
}

func TestSameServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url, server string
		same        bool
	}{
		{"https://github.com/octo/app", "https://github.com", true},
		{"https://GitHub.com/octo", "https://github.com/", true},
		{"https://github.com:443/octo/app", "https://github.com", true},
		{"http://127.0.0.1:8080/octo/app", "http://127.0.0.1:8080", true},
		{"http://127.0.0.1:8081/octo/app", "http://127.0.0.1:8080", false},
		{"https://evil.example.com/octo/app", "https://github.com", false},
		{"https://github.com.evil.example.com/octo/app", "https://github.com", false},
		{"http://github.com/octo/app", "https://github.com", false},
		{"https://github.com:8443/octo/app", "https://github.com", false},
		{"/octo/app", "https://github.com", false},
		{"", "https://github.com", false},
	}
	for _, tc := range tests {
		require.Equal(t, tc.same, SameServer(tc.url, tc.server), "%s on %s", tc.url, tc.server)
	}
}
