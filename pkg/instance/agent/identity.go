package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Identity is who the instance is, from its instance identity document.
type Identity struct {
	InstanceID   string
	InstanceType string
	Region       string
	AZ           string
	Account      string
	Partition    string
	Arch         string // x64 or arm64: the GitHub runner's name for it
}

// ARN returns the instance's ARN: the key of its item.
func (id Identity) ARN() string {
	return state.Account{Partition: id.Partition, Region: id.Region, ID: id.Account}.ARN(id.InstanceID)
}

// Validate checks the identity's fields.
func (id Identity) Validate() error {
	if err := names.ValidateInstanceID(id.InstanceID); err != nil {
		return fmt.Errorf("instance metadata: %w", err)
	}
	if err := (state.Account{Partition: id.Partition, Region: id.Region, ID: id.Account}).Validate(); err != nil {
		return fmt.Errorf("instance metadata: %w", err)
	}
	if id.Arch != "x64" && id.Arch != "arm64" {
		return fmt.Errorf("instance metadata: architecture %q: want x64 or arm64", id.Arch)
	}
	return nil
}

// Metadata is the part of the instance metadata (IMDSv2) client the agent uses.
type Metadata interface {
	GetInstanceIdentityDocument(ctx context.Context, params *imds.GetInstanceIdentityDocumentInput, optFns ...func(*imds.Options)) (*imds.GetInstanceIdentityDocumentOutput, error)
	GetMetadata(ctx context.Context, params *imds.GetMetadataInput, optFns ...func(*imds.Options)) (*imds.GetMetadataOutput, error)
}

// ReadIdentity reads the instance identity document.
func ReadIdentity(ctx context.Context, md Metadata) (Identity, error) {
	doc, err := md.GetInstanceIdentityDocument(ctx, &imds.GetInstanceIdentityDocumentInput{})
	if err != nil {
		return Identity{}, fmt.Errorf("read instance identity document: %w", err)
	}
	id := Identity{
		InstanceID: doc.InstanceID, InstanceType: doc.InstanceType, Region: doc.Region,
		AZ: doc.AvailabilityZone, Account: doc.AccountID, Partition: partitionOf(doc.Region),
	}
	switch doc.Architecture {
	case "x86_64":
		id.Arch = "x64"
	case "arm64", "aarch64":
		id.Arch = "arm64"
	default:
		id.Arch = doc.Architecture
	}
	if err := id.Validate(); err != nil {
		return Identity{}, err
	}
	return id, nil
}

func partitionOf(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}

// metadataText reads one metadata path; ok is false when the path does not exist (404).
func metadataText(ctx context.Context, md Metadata, path string) (string, bool, error) {
	out, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) && status.HTTPStatusCode() == http.StatusNotFound {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 64<<10))
	if err != nil {
		return "", false, err
	}
	return string(b), true, nil
}
