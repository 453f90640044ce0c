package stack_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cfntypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/tokens"
)

// assetManifest is the part of <stack>.assets.json the upload needs.
type assetManifest struct {
	Files map[string]struct {
		Source struct {
			Path      string `json:"path"`
			Packaging string `json:"packaging"`
		} `json:"source"`
		Destinations map[string]struct {
			ObjectKey string `json:"objectKey"`
		} `json:"destinations"`
	} `json:"files"`
}

// TestDeployIntoEmulators: the synthesized template, its assets uploaded to the emulator's S3,
// deploys into the emulator's CloudFormation to CREATE_COMPLETE.
func TestDeployIntoEmulators(t *testing.T) {
	testbed.Require(t)
	ctx := testbed.Context(t, 5*time.Minute)
	cfg := testbed.AWSConfig(t)
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	_, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(assetBucket)})
	if err != nil && !strings.Contains(err.Error(), "BucketAlready") {
		require.NoError(t, err)
	}
	b, err := os.ReadFile(filepath.Join(deployOut, deployStack+".assets.json"))
	require.NoError(t, err)
	var m assetManifest
	require.NoError(t, json.Unmarshal(b, &m))
	for id, f := range m.Files {
		if strings.HasSuffix(f.Source.Path, ".template.json") {
			continue
		}
		body := packAsset(t, filepath.Join(deployOut, f.Source.Path), f.Source.Packaging)
		for _, d := range f.Destinations {
			_, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(assetBucket), Key: aws.String(d.ObjectKey), Body: bytes.NewReader(body)})
			require.NoError(t, err, "upload asset %s", id)
		}
	}

	// The pool's image parameter names an SSM parameter; the emulator has none of AWS's public
	// ones, so it gets one of its own naming one of its stock AMIs.
	imageParam := "/" + testbed.Name(t, "hangar-test") + "/ami"
	_, err = ssm.NewFromConfig(cfg).PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(imageParam), Value: aws.String("ami-12c6146b"),
		Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
	require.NoError(t, err)

	tpl, err := os.ReadFile(filepath.Join(deployOut, deployStack+".template.json"))
	require.NoError(t, err)
	tpl = forEmulator(t, tpl)
	if dump := os.Getenv("HANGAR_DUMP_TEMPLATE"); dump != "" {
		require.NoError(t, os.WriteFile(dump, tpl, 0o644))
		t.Logf("image parameter: %s", imageParam)
	}
	cfn := cloudformation.NewFromConfig(cfg, func(o *cloudformation.Options) { o.RetryMaxAttempts = 1 }) // a retried create only says "already exists"
	name := deployStack
	_, err = cfn.CreateStack(ctx, &cloudformation.CreateStackInput{StackName: aws.String(name), TemplateBody: aws.String(string(tpl)),
		Capabilities: []cfntypes.Capability{cfntypes.CapabilityCapabilityIam, cfntypes.CapabilityCapabilityNamedIam},
		Parameters:   []cfntypes.Parameter{{ParameterKey: aws.String("Poollinuxx64Image"), ParameterValue: aws.String(imageParam)}}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cfn.DeleteStack(context.Background(), &cloudformation.DeleteStackInput{StackName: aws.String(name)})
	})
	var status cfntypes.StackStatus
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := cfn.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
		require.NoError(t, err)
		status = out.Stacks[0].StackStatus
		if !strings.HasSuffix(string(status), "_IN_PROGRESS") {
			break
		}
	}
	if status != cfntypes.StackStatusCreateComplete {
		ev, _ := cfn.DescribeStackEvents(ctx, &cloudformation.DescribeStackEventsInput{StackName: aws.String(name)})
		for _, e := range ev.StackEvents {
			if strings.HasSuffix(string(e.ResourceStatus), "FAILED") {
				t.Logf("%s %s: %s", aws.ToString(e.ResourceType), aws.ToString(e.LogicalResourceId), aws.ToString(e.ResourceStatusReason))
			}
		}
	}
	require.Equal(t, cfntypes.StackStatusCreateComplete, status)

	res, err := cfn.ListStackResources(ctx, &cloudformation.ListStackResourcesInput{StackName: aws.String(name)})
	require.NoError(t, err)
	var types []string
	for _, r := range res.StackResourceSummaries {
		types = append(types, aws.ToString(r.ResourceType))
	}
	for _, want := range []string{"AWS::DynamoDB::Table", "AWS::KMS::Key", "AWS::SQS::Queue", "AWS::EC2::LaunchTemplate", "AWS::SSM::Parameter",
		"AWS::Lambda::Function", "AWS::Events::Rule", "AWS::IAM::Role", "AWS::IAM::InstanceProfile"} {
		require.True(t, slices.Contains(types, want), "%s created: %v", want, types)
	}

	// Given only the stack's name, Hangar finds what the stack made, as provision and refresh do:
	// the pool documents, and through them the table, the queues, the templates and the key.
	found, err := poolconfig.LoadStack(ctx, ssm.NewFromConfig(cfg), name)
	require.NoError(t, err, "the stack's pool documents parse as the steps read them")
	require.Len(t, found.Pools, 1)
	doc := found.Pools[0]
	require.Equal(t, name+"-instances", doc.Table)
	require.Regexp(t, `^lt-`, doc.LaunchTemplate.ID)
	require.Regexp(t, `^[0-9a-f]{16}$`, doc.SpecHash)
	_, err = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = cfg.BaseEndpoint }).
		DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(doc.Table)})
	require.NoError(t, err, "the table the document names exists")
	_, err = sqs.NewFromConfig(cfg).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(doc.QueueURL)})
	require.NoError(t, err, "the queue the document names exists")
	lts, err := ec2.NewFromConfig(cfg).DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateIds: []string{doc.LaunchTemplate.ID}})
	require.NoError(t, err)
	require.Len(t, lts.LaunchTemplates, 1, "the launch template the document names exists")
	sealed, err := tokens.Sealer{KMS: kms.NewFromConfig(cfg), Key: doc.TokenKey}.Seal(ctx, doc.StateAccount().ARN("i-0123456789abcdef0"), "token")
	require.NoError(t, err, "the key the document names seals tokens")
	require.NotEmpty(t, sealed)
}

// packAsset returns an asset's upload: the file, or a directory zipped.
func packAsset(t *testing.T, path, packaging string) []byte {
	t.Helper()
	if packaging != "zip" {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return b
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	require.NoError(t, filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(path, p)
		w, err := zw.CreateHeader(&zip.FileHeader{Name: rel, Method: zip.Deflate})
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}))
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// unsupported are the resource types the emulator's CloudFormation cannot create: they are left
// out of the deployment (and said so), and references to them replaced by stand-in values.
var unsupported = map[string]string{
	"AWS::IAM::OIDCProvider": "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com",
	"AWS::CloudWatch::Alarm": "alarm",
	"AWS::SQS::QueuePolicy":  "queue-policy",
}

// forEmulator adapts the template to the emulator's gaps, each said here: the unsupported
// resource types above; and moto reads the CloudFormation tags of KMS keys and SSM parameters in
// its APIs' shapes (TagKey/TagValue, a list) and fails on them, so those resources' tags go.
func forEmulator(t *testing.T, tpl []byte) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(tpl, &m))
	resources := m["Resources"].(map[string]any)
	standIn := map[string]string{}
	for id, r := range resources {
		r := r.(map[string]any)
		typ := r["Type"].(string)
		if v, ok := unsupported[typ]; ok {
			standIn[id] = v
			delete(resources, id)
			t.Logf("emulator gap: %s (%s) not deployed: the emulator has no such resource type", id, typ)
			continue
		}
		if typ == "AWS::KMS::Key" || typ == "AWS::SSM::Parameter" {
			delete(r["Properties"].(map[string]any), "Tags")
			t.Logf("emulator gap: tags of %s (%s) left out", id, typ)
		}
	}
	out, err := json.Marshal(replaceRefs(m, standIn))
	require.NoError(t, err)
	return out
}

// replaceRefs replaces Ref and Fn::GetAtt of the resources in standIn by their stand-in values,
// and drops them from DependsOn lists.
func replaceRefs(v any, standIn map[string]string) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			if ref, ok := x["Ref"].(string); ok && standIn[ref] != "" {
				return standIn[ref]
			}
			if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) > 0 && standIn[ga[0].(string)] != "" {
				return standIn[ga[0].(string)]
			}
		}
		for k, e := range x {
			if k == "DependsOn" {
				if deps, ok := e.([]any); ok {
					x[k] = slices.DeleteFunc(deps, func(d any) bool { return standIn[d.(string)] != "" })
					continue
				}
			}
			x[k] = replaceRefs(e, standIn)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = replaceRefs(e, standIn)
		}
		return x
	}
	return v
}
