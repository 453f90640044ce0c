package refresh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Request is a refresh asked for by hand: the payload of an invocation of the stack's refresh
// function ({"action":"refresh"}), answered with the Report.
type Request struct {
	Action string   `json:"action,omitempty"` // "refresh"
	DryRun bool     `json:"dryRun,omitempty"`
	Pools  []string `json:"pools,omitempty"` // default: every pool
}

// ActionRefresh is Request.Action for a refresh.
const ActionRefresh = "refresh"

// Validate checks the pool names; it changes nothing.
func (r Request) Validate() error {
	var errs []error
	for _, p := range r.Pools {
		if err := names.ValidatePool(p); err != nil {
			errs = append(errs, fmt.Errorf("pools: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Invocation is a refresh asked of a stack's refresh function from outside it (Invoke): the
// stack, and the Request it is handed.
type Invocation struct {
	Stack string // stack
	Request
}

// ApplyDefaults fills unset fields.
func (i *Invocation) ApplyDefaults() {
	if i.Stack == "" {
		i.Stack = names.DefaultStack
	}
}

// Validate checks the stack's name and the request, every problem at once, each naming the
// input. It changes nothing and makes no request.
func (i Invocation) Validate() error {
	var errs []error
	if err := names.ValidateStack(i.Stack); err != nil {
		errs = append(errs, fmt.Errorf("stack: %w", err))
	}
	if err := i.Request.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Invoke runs the stack's refresh function synchronously with the invocation's request and
// returns its report. A failure inside the function is an error carrying the function's own
// message.
func Invoke(ctx context.Context, client awsapi.Lambda, inv Invocation) (*Report, error) {
	inv.ApplyDefaults()
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	req := inv.Request
	req.Action = ActionRefresh
	payload, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	fn := pooldoc.RefreshFunction(inv.Stack)
	out, err := client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(fn), Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("invoke the refresh function %s: %w", fn, err)
	}
	if out.FunctionError != nil {
		var fe struct {
			Message string `json:"errorMessage"`
		}
		if json.Unmarshal(out.Payload, &fe) != nil || fe.Message == "" {
			fe.Message = string(out.Payload)
		}
		return nil, fmt.Errorf("the refresh function %s failed (%s): %s", fn, aws.ToString(out.FunctionError), fe.Message)
	}
	var rep Report
	if err := json.Unmarshal(out.Payload, &rep); err != nil {
		return nil, fmt.Errorf("the refresh function %s answered with something other than a report: %w: %.200s", fn, err, out.Payload)
	}
	return &rep, nil
}
