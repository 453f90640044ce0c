package provision

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

// check refuses, before anything changes, a request the pool cannot serve, and settles the
// instance types and the runtime the run gets.
func (p *provisioning) check(ctx context.Context) error {
	doc := p.d.Doc
	if doc == nil || doc.Name != p.cfg.Pool {
		return fmt.Errorf("pool: %q: no such pool document", p.cfg.Pool)
	}
	if !ghurl.SameServer(p.cfg.ServerURL, doc.GitHubURL) {
		return fmt.Errorf("GITHUB_SERVER_URL: %q: pool %s serves the GitHub server %s only (its githubUrl); run the workflow there, or deploy a stack for this server",
			p.cfg.ServerURL, doc.Name, doc.GitHubURL)
	}
	if !doc.RepoAllowed(p.cfg.Repository) {
		return fmt.Errorf("GITHUB_REPOSITORY: %s may not use pool %s (allowed: %s)", p.cfg.Repository, doc.Name, strings.Join(doc.AllowedRepositories, ", "))
	}
	p.group = p.cfg.RunnerGroup
	if p.group == "" {
		p.group = doc.RunnerGroup
	}
	switch {
	case doc.RunnerGroup != "" && p.cfg.RunnerGroup != "" && p.cfg.RunnerGroup != doc.RunnerGroup:
		return fmt.Errorf("runner-group: %q: pool %s puts its runners in group %q; leave the input empty or name that group", p.cfg.RunnerGroup, doc.Name, doc.RunnerGroup)
	case strings.EqualFold(p.group, "Default"):
		return fmt.Errorf("runner-group: %q: the Default group is open to every repository of the organisation; want a group limited to the repositories that may use pool %s", p.group, doc.Name)
	case p.cfg.RunnerScope().IsOrg() && p.group == "":
		return fmt.Errorf("runner-group: empty with runner-scope org: want the organisation runner group limited to the repositories that may use pool %s (the input, or the pool's runnerGroup); the Default group is open to every repository of the organisation", doc.Name)
	case !p.cfg.RunnerScope().IsOrg() && p.cfg.RunnerGroup != "":
		return fmt.Errorf("runner-group: %q with runner-scope repo: runner groups exist only for organisation runners", p.cfg.RunnerGroup)
	case !p.cfg.RunnerScope().IsOrg():
		p.group = ""
	}
	p.runtime = doc.Timeout(state.Running)
	if p.cfg.MaxRuntime > 0 {
		if p.cfg.MaxRuntime > p.runtime {
			return fmt.Errorf("max-runtime: %s: the pool allows at most %s", p.cfg.MaxRuntime, p.runtime)
		}
		p.runtime = p.cfg.MaxRuntime
	}
	for _, t := range doc.InstanceTypes {
		if matchesAny(p.cfg.InstanceTypes, t) {
			p.types = append(p.types, t)
		}
	}
	if len(p.types) > 0 && (p.cfg.MinVCPU > 0 || p.cfg.MinMemoryMiB > 0) {
		specs, err := p.d.Pool.Describe(ctx, p.types)
		if err != nil {
			return err
		}
		p.types = slices.DeleteFunc(p.types, func(t string) bool {
			s, ok := specs[t]
			return !ok || s.VCPU < p.cfg.MinVCPU || s.MemoryMiB < p.cfg.MinMemoryMiB
		})
	}
	if len(p.types) == 0 {
		return fmt.Errorf("allowed-instance-types, min-vcpu, min-memory-mib: no instance type of pool %s fits %v with at least %d vCPU and %d MiB (the pool has %s)",
			doc.Name, p.cfg.InstanceTypes, p.cfg.MinVCPU, p.cfg.MinMemoryMiB, strings.Join(doc.InstanceTypes, ", "))
	}
	return nil
}

func matchesAny(patterns []string, t string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, t); ok {
			return true
		}
	}
	return false
}
