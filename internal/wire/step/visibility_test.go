package step

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sethvargo/go-githubactions"
	"github.com/stretchr/testify/require"
)

// TestRepositoryVisibility reads the visibility from the event payload; anything unknown is
// public.
func TestRepositoryVisibility(t *testing.T) {
	for _, tc := range []struct{ name, payload, want string }{
		{"visibility public", `{"repository":{"visibility":"public","private":false}}`, "public"},
		{"visibility private", `{"repository":{"visibility":"private","private":true}}`, "private"},
		{"visibility internal", `{"repository":{"visibility":"internal","private":true}}`, "internal"},
		{"only private", `{"repository":{"private":true}}`, "private"},
		{"only not private", `{"repository":{"private":false}}`, "public"},
		{"unknown visibility, private", `{"repository":{"visibility":"secret","private":true}}`, "private"},
		{"no repository", `{"action":"opened"}`, "public"},
		{"private as a string", `{"repository":{"private":"true"}}`, "public"},
		{"not JSON", `private`, "public"},
		{"no payload", "", "public"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.payload != "" {
				path = filepath.Join(t.TempDir(), "event.json")
				require.NoError(t, os.WriteFile(path, []byte(tc.payload), 0o600))
			}
			gha := githubactions.New(githubactions.WithGetenv(func(k string) string {
				if k == "GITHUB_EVENT_PATH" {
					return path
				}
				return ""
			}))
			require.Equal(t, tc.want, RepositoryVisibility(gha))
		})
	}
}
