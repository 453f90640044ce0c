package fake

import (
	"context"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// Launcher is the real fleet.Launcher on a fake EC2 (capacity shortages come from EC2.NoCapacity),
// with its calls recorded and errors injectable per operation (Launch, Describe, Resolve).
type Launcher struct {
	recorder
	Fleet *fleet.Launcher
}

// NewLauncher returns a launcher on e.
func NewLauncher(e *EC2) *Launcher {
	return &Launcher{Fleet: &fleet.Launcher{EC2: e}}
}

// Reset forgets recorded calls and injected errors.
func (l *Launcher) Reset() { l.resetCalls() }

// Launch launches through the fleet launcher.
func (l *Launcher) Launch(ctx context.Context, req fleet.Request) ([]fleet.Instance, error) {
	if err := l.call("Launch"); err != nil {
		return nil, err
	}
	return l.Fleet.Launch(ctx, req)
}

// Describe returns instance types' sizes through the fleet launcher.
func (l *Launcher) Describe(ctx context.Context, types []string) (map[string]fleet.Spec, error) {
	if err := l.call("Describe"); err != nil {
		return nil, err
	}
	return l.Fleet.Describe(ctx, types)
}

// Resolve fills in the instance types of a pool that chooses them by size, through the fleet
// launcher (a document that names its types is left as it is).
func (l *Launcher) Resolve(ctx context.Context, doc *pooldoc.Document) error {
	if err := l.call("Resolve"); err != nil {
		return err
	}
	return l.Fleet.Resolve(ctx, doc)
}
