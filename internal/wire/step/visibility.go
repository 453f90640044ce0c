package step

import (
	"github.com/sethvargo/go-githubactions"

	"github.com/hangar-ci/hangar/pkg/poolconfig"
)

// RepositoryVisibility returns the workflow repository's visibility from the event payload
// (GITHUB_EVENT_PATH): repository.visibility (public, private or internal), else
// repository.private; public when the payload is missing, unreadable or says neither, so that
// nothing meant for private repositories reaches a public one by default.
func RepositoryVisibility(gha *githubactions.Action) string {
	c, err := gha.Context()
	if err != nil || c == nil {
		return poolconfig.VisibilityPublic
	}
	repo, _ := c.Event["repository"].(map[string]any)
	switch v, _ := repo["visibility"].(string); v {
	case poolconfig.VisibilityPublic, poolconfig.VisibilityPrivate, poolconfig.VisibilityInternal:
		return v
	}
	if private, ok := repo["private"].(bool); ok && private {
		return poolconfig.VisibilityPrivate
	}
	return poolconfig.VisibilityPublic
}
