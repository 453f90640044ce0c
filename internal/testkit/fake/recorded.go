package fake

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// RecordedEC2 passes every call to another EC2 (the emulator's client, in end-to-end tests) and
// records the fleets asked for, as the fake EC2 does: the tests that count CreateFleet requests
// ask one of them, whichever world they run in.
type RecordedEC2 struct {
	awsapi.EC2

	mu     sync.Mutex
	fleets []int32 // the total target capacity of each CreateFleet
}

// Record wraps base.
func Record(base awsapi.EC2) *RecordedEC2 { return &RecordedEC2{EC2: base} }

// CreateFleet records the request's total target capacity and passes it on.
func (r *RecordedEC2) CreateFleet(ctx context.Context, in *ec2.CreateFleetInput, o ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	r.mu.Lock()
	r.fleets = append(r.fleets, aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity))
	r.mu.Unlock()
	return r.EC2.CreateFleet(ctx, in, o...)
}

// Fleets returns the total target capacity of each CreateFleet so far, in order.
func (r *RecordedEC2) Fleets() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int32(nil), r.fleets...)
}
