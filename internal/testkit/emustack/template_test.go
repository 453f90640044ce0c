package emustack

import (
	"encoding/json"
	"maps"
	"slices"
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
	out, gaps, err := adapt([]byte(tpl), testEnv)
	require.NoError(t, err)
	require.Equal(t, []Gap{
		{"Alarm", "AWS::CloudWatch::Alarm", noSuchType},
		{"Key", "AWS::KMS::Key", "deployed without its tags: the emulator fails on them"},
		{"Provider", "AWS::IAM::OIDCProvider", noSuchType},
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
	require.Equal(t, "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com", props["Trust"], "references to what was left out get stand-ins")
	require.Equal(t, map[string]any{"Ref": "Key"}, props["Other"], "references to what is deployed kept")
	require.NotContains(t, m.Resources["Queue"], "DependsOn")
	require.NotNil(t, m.Resources["Queue"]["Properties"].(map[string]any)["Tags"], "tags kept where the emulator takes them")
}

var testEnv = environment{partition: "aws", account: "123456789012", region: "eu-west-1"}

// TestAdaptJobs: what label-routed jobs add that the emulator cannot take is left out; a secret's
// references get its partial ARN (an ARN in policies, its name for Secrets Manager), the function
// URL a stand-in, and the event source mappings go (the local world polls the queues itself).
func TestAdaptJobs(t *testing.T) {
	tpl := `{"Resources": {
	  "AppSecret": {"Type": "AWS::SecretsManager::Secret", "Properties": {"Name": "hangar-github-app"}},
	  "Unnamed": {"Type": "AWS::SecretsManager::Secret", "Properties": {"GenerateSecretString": {"PasswordLength": 40}}},
	  "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Environment": {"Variables": {
	    "APP": {"Ref": "AppSecret"}, "OTHER": {"Ref": "Unnamed"}}}}},
	  "Url": {"Type": "AWS::Lambda::Url", "Properties": {"AuthType": "NONE", "TargetFunctionArn": {"Fn::GetAtt": ["Fn", "Arn"]}}},
	  "Source": {"Type": "AWS::Lambda::EventSourceMapping", "DependsOn": ["Fn"], "Properties": {"FunctionName": {"Ref": "Fn"}}},
	  "Policy": {"Type": "AWS::IAM::Policy", "Properties": {"PolicyDocument": {"Statement": [
	    {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": {"Ref": "AppSecret"}}]}}}
	},
	"Outputs": {"WebhookUrl": {"Value": {"Fn::GetAtt": ["Url", "FunctionUrl"]}}}}`
	out, gaps, err := adapt([]byte(tpl), testEnv)
	require.NoError(t, err)
	require.Equal(t, []Gap{
		{"AppSecret", "AWS::SecretsManager::Secret", noSuchType},
		{"Source", "AWS::Lambda::EventSourceMapping", unsupported["AWS::Lambda::EventSourceMapping"].why},
		{"Unnamed", "AWS::SecretsManager::Secret", noSuchType},
		{"Url", "AWS::Lambda::Url", noSuchType},
	}, gaps)
	var m struct {
		Resources map[string]map[string]any
		Outputs   map[string]map[string]any
	}
	require.NoError(t, json.Unmarshal(out, &m))
	require.ElementsMatch(t, []string{"Fn", "Policy"}, slices.Collect(maps.Keys(m.Resources)))
	vars := m.Resources["Fn"]["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	require.Equal(t, "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hangar-github-app", vars["APP"])
	require.Equal(t, "arn:aws:secretsmanager:eu-west-1:123456789012:secret:Unnamed", vars["OTHER"], "an unnamed secret: its logical id")
	require.Contains(t, string(out), `"Resource":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:hangar-github-app"`)
	require.Equal(t, "http://function-url.invalid/", m.Outputs["WebhookUrl"]["Value"])
}

func TestResolve(t *testing.T) {
	env := environment{partition: "aws", account: "123456789012", region: "eu-west-1"}
	require.Equal(t, "cdk-hnb659fds-assets-123456789012-eu-west-1", env.resolve("cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"))
	require.Equal(t, "arn:aws:iam::123456789012:role/x", env.resolve("arn:${AWS::Partition}:iam::${AWS::AccountId}:role/x"))
}
