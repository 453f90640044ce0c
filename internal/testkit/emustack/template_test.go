package emustack

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAdapt(t *testing.T) {
	tpl := `{"Resources": {
	  "Provider": {"Type": "AWS::IAM::OIDCProvider", "Properties": {"Url": "https://token.actions.githubusercontent.com"}},
	  "Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {}},
	  "Key": {"Type": "AWS::KMS::Key", "Properties": {"Tags": [{"Key": "a", "Value": "b"}], "EnableKeyRotation": true}},
	  "Role": {"Type": "AWS::IAM::Role", "DependsOn": ["Provider", "Key"], "Properties": {
	    "Trust": {"Fn::GetAtt": ["Provider", "Arn"]}, "Other": {"Ref": "Key"}}},
	  "Queue": {"Type": "AWS::SQS::Queue", "DependsOn": "Alarm", "Properties": {"Tags": [{"Key": "a", "Value": "b"}]}}
	}}`
	out, gaps, err := adapt([]byte(tpl))
	require.NoError(t, err)
	require.Equal(t, []Gap{
		{"Alarm", "AWS::CloudWatch::Alarm", "not deployed: the emulator has no such resource type"},
		{"Key", "AWS::KMS::Key", "deployed without its tags: the emulator fails on them"},
		{"Provider", "AWS::IAM::OIDCProvider", "not deployed: the emulator has no such resource type"},
	}, gaps)
	var m struct {
		Resources map[string]map[string]any
	}
	require.NoError(t, json.Unmarshal(out, &m))
	require.NotContains(t, m.Resources, "Provider")
	require.NotContains(t, m.Resources, "Alarm")
	require.NotContains(t, m.Resources["Key"]["Properties"], "Tags")
	require.Equal(t, true, m.Resources["Key"]["Properties"].(map[string]any)["EnableKeyRotation"], "the rest kept")
	role := m.Resources["Role"]
	require.Equal(t, []any{"Key"}, role["DependsOn"], "dependencies on what was left out dropped")
	props := role["Properties"].(map[string]any)
	require.Equal(t, unsupported["AWS::IAM::OIDCProvider"], props["Trust"], "references to what was left out get stand-ins")
	require.Equal(t, map[string]any{"Ref": "Key"}, props["Other"], "references to what is deployed kept")
	require.NotContains(t, m.Resources["Queue"], "DependsOn")
	require.NotNil(t, m.Resources["Queue"]["Properties"].(map[string]any)["Tags"], "tags kept where the emulator takes them")
}

func TestResolve(t *testing.T) {
	env := environment{partition: "aws", account: "123456789012", region: "eu-west-1"}
	require.Equal(t, "cdk-hnb659fds-assets-123456789012-eu-west-1", env.resolve("cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"))
	require.Equal(t, "arn:aws:iam::123456789012:role/x", env.resolve("arn:${AWS::Partition}:iam::${AWS::AccountId}:role/x"))
}
