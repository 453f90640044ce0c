package fake_test

import (
	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// The fakes implement exactly the interfaces the use cases declare.
var (
	_ provision.Store     = (*fake.Store)(nil)
	_ provision.Publisher = (*offers.Queue)(nil) // the real queue, on the fake SQS
	_ provision.Claimer   = (*offers.Selector)(nil)
	_ provision.Launcher  = (*fake.Launcher)(nil)
	_ provision.EC2       = (*fake.EC2)(nil)
	_ provision.GitHub    = (*fake.GitHub)(nil)
	_ provision.Releaser  = (*release.Releaser)(nil) // the real releaser, on the fakes

	_ release.Store  = (*fake.Store)(nil)
	_ release.GitHub = (*fake.GitHub)(nil)
	_ release.EC2    = (*fake.EC2)(nil)
	_ release.Pools  = (*offers.Directory)(nil) // the real directory, on the fake SSM and SQS

	_ refresh.Store    = (*fake.Store)(nil)
	_ refresh.EC2      = (*fake.EC2)(nil)
	_ refresh.Launcher = (*fake.Launcher)(nil)
	_ refresh.Pools    = (*offers.Directory)(nil)

	_ pool.Store      = (*fake.Store)(nil)
	_ pool.Creator    = (*fake.Store)(nil)
	_ pool.Terminator = (*fake.EC2)(nil)
	_ fleet.Tagger    = (*fake.EC2)(nil)
	_ fleet.EC2       = (*fake.EC2)(nil)
	_ offers.SQS      = (*fake.SQS)(nil)
	_ pooldoc.SSM     = (*fake.SSM)(nil)
	_ offers.Claimer  = (*fake.Store)(nil)
	_ offers.Items    = (*fake.Store)(nil)
)
