package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

// TestCheckRunnerURL: the runner URL must be the repository's or its owner's page on the GitHub
// server the pool document pins, and nothing else; a plain-http URL passes only in the local
// world's builds, and only on the pinned stand-in.
func TestCheckRunnerURL(t *testing.T) {
	t.Parallel()
	const repo = "octo/app"
	tests := []struct {
		name, url, server string
		ok                bool
		want              string
	}{
		{"repository", "https://github.com/octo/app", "https://github.com", true, ""},
		{"owner", "https://github.com/octo", "https://github.com", true, ""},
		{"enterprise", "https://ghe.example.com/octo/app", "https://ghe.example.com", true, ""},
		{"host in another case", "https://GitHub.com/octo/app", "https://github.com", true, ""},
		{"another host", "https://evil.example.com/octo/app", "https://github.com", false, `not on the pool's GitHub server https://github.com`},
		{"a lookalike host", "https://github.com.evil.example.com/octo/app", "https://github.com", false, "not on the pool's GitHub server"},
		{"github.com for an enterprise pool", "https://github.com/octo/app", "https://ghe.example.com", false, "not on the pool's GitHub server https://ghe.example.com"},
		{"another port", "https://github.com:8443/octo/app", "https://github.com", false, "not on the pool's GitHub server"},
		{"another repository", "https://github.com/evil/app", "https://github.com", false, "want https://github.com/octo/app or https://github.com/octo"},
		{"user info", "https://x@github.com/octo/app", "https://github.com", false, "want https://github.com/octo/app"},
		{"query", "https://github.com/octo/app?x=1", "https://github.com", false, "want https://github.com/octo/app"},
		{"plain http elsewhere", "http://github.com/octo/app", "https://github.com", false, "want https://github.com/octo/app"},
		{"another loopback stand-in", "http://127.0.0.1:9001/octo/app", "http://127.0.0.1:9000", false, ""},
		{"the loopback stand-in", "http://127.0.0.1:9000/octo/app", "http://127.0.0.1:9000", ghurl.LocalWorld, "want http://127.0.0.1:9000/octo/app"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkRunnerURL(tc.url, repo, tc.server)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), `runner URL "`+tc.url+`"`)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
