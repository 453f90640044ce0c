package fake

import (
	"github.com/hangar-ci/hangar/pkg/labels/dispatch"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

// Each fake stands in for one whole API: the SDK's (awsapi), the state store's, the launcher's,
// GitHub's.
var (
	_ awsapi.EC2       = (*EC2)(nil)
	_ awsapi.SQS       = (*SQS)(nil)
	_ awsapi.SSM       = (*SSM)(nil)
	_ pool.Store       = (*Store)(nil)
	_ pool.Launcher    = (*Launcher)(nil)
	_ provision.GitHub = (*GitHub)(nil)
	_ dispatch.Runners = (*GitHub)(nil)
)
