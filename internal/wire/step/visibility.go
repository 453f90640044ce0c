package step

import (
	"github.com/sethvargo/go-githubactions"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// RepositoryVisibility returns the workflow repository's visibility from the event payload
// (GITHUB_EVENT_PATH): repository.visibility (public, private or internal), else
// repository.private; public when the payload is missing, unreadable or says neither, so that
// nothing meant for private repositories reaches a public one by default.
func RepositoryVisibility(gha *githubactions.Action) string {
	c, err := gha.Context()
	if err != nil || c == nil {
		return pooldoc.VisibilityPublic
	}
	repo, _ := c.Event["repository"].(map[string]any)
	switch v, _ := repo["visibility"].(string); v {
	case pooldoc.VisibilityPublic, pooldoc.VisibilityPrivate, pooldoc.VisibilityInternal:
		return v
	}
	if private, ok := repo["private"].(bool); ok && private {
		return pooldoc.VisibilityPrivate
	}
	return pooldoc.VisibilityPublic
}
