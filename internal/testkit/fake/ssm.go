package fake

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// SSM holds parameters in memory (awsapi.SSM), for the real pooldoc.Loader and the
// offers.Directory built on it.
type SSM struct {
	recorder

	mu     sync.Mutex
	params map[string]string
}

// Put sets parameter name to value.
func (s *SSM) Put(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.params == nil {
		s.params = map[string]string{}
	}
	s.params[name] = value
}

// Reset forgets recorded calls and injected errors (the parameters stay).
func (s *SSM) Reset() { s.resetCalls() }

// GetParameter returns one parameter, or ParameterNotFound.
func (s *SSM) GetParameter(_ context.Context, in *ssm.GetParameterInput, _ ...func(*ssm.Options)) (*ssm.GetParameterOutput, error) {
	if err := s.call("GetParameter"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := aws.ToString(in.Name)
	v, ok := s.params[name]
	if !ok {
		return nil, APIError("ParameterNotFound", "parameter "+name+" not found")
	}
	return &ssm.GetParameterOutput{Parameter: &ssmtypes.Parameter{Name: aws.String(name), Value: aws.String(v)}}, nil
}

// GetParametersByPath returns every parameter below the path, in one page.
func (s *SSM) GetParametersByPath(_ context.Context, in *ssm.GetParametersByPathInput, _ ...func(*ssm.Options)) (*ssm.GetParametersByPathOutput, error) {
	if err := s.call("GetParametersByPath"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &ssm.GetParametersByPathOutput{}
	for _, name := range slices.Sorted(maps.Keys(s.params)) {
		if strings.HasPrefix(name, aws.ToString(in.Path)) {
			out.Parameters = append(out.Parameters, ssmtypes.Parameter{Name: aws.String(name), Value: aws.String(s.params[name])})
		}
	}
	return out, nil
}

// PutParameter writes one parameter (pool documents are overwritten: drain, undrain).
func (s *SSM) PutParameter(_ context.Context, in *ssm.PutParameterInput, _ ...func(*ssm.Options)) (*ssm.PutParameterOutput, error) {
	if err := s.call("PutParameter"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := aws.ToString(in.Name)
	if _, ok := s.params[name]; ok && !aws.ToBool(in.Overwrite) {
		return nil, APIError("ParameterAlreadyExists", "parameter "+name+" exists")
	}
	if s.params == nil {
		s.params = map[string]string{}
	}
	s.params[name] = aws.ToString(in.Value)
	return &ssm.PutParameterOutput{Version: 1}, nil
}
