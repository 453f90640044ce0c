package emustack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Gap is something of the template the emulator cannot take, and what was done about it.
type Gap struct {
	Resource string // logical id
	Type     string // resource type
	Done     string // what was done
}

func (g Gap) String() string { return fmt.Sprintf("%s (%s): %s", g.Resource, g.Type, g.Done) }

// standIn is what the deployment does about a resource type the emulator cannot take: the
// resource is left out, and references to it (Ref, Fn::GetAtt) get value.
type standIn struct {
	value func(id string, props map[string]any, env environment) string
	why   string // the gap reported; default: noSuchType
}

const noSuchType = "not deployed: the emulator has no such resource type"

func fixed(v string) func(string, map[string]any, environment) string {
	return func(string, map[string]any, environment) string { return v }
}

// unsupported are the resource types left out of the emulator's stack, with the stand-in values
// references to them get. What stands in for them in the local world is the world's business
// (internal/testkit/localenv): the function URL by a loopback server of the webhook handler, the
// event source mappings by pollers of the queues, the secrets by secrets it makes under the
// stack's names.
var unsupported = map[string]standIn{
	"AWS::IAM::OIDCProvider": {value: fixed("arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com")},
	"AWS::CloudWatch::Alarm": {value: fixed("alarm")},
	"AWS::SQS::QueuePolicy":  {value: fixed("queue-policy")},
	// Label-routed jobs (docs/labels.md).
	"AWS::Lambda::Url": {value: fixed("http://function-url.invalid/")},
	// moto would take the queue's messages itself, on every send, to invoke the function in
	// Docker: the local world's pollers could not see them.
	"AWS::Lambda::EventSourceMapping": {value: fixed("event-source-mapping"),
		why: "not deployed: the emulator would consume the queue itself, invoking the function in Docker on every send"},
	// A secret's partial ARN (without the suffix Secrets Manager adds to the name): Secrets
	// Manager takes it wherever it takes the ARN, so the functions' environment still names the
	// secret the local world makes under the stack's name for it, and the policies that name it
	// still hold an ARN (the emulator checks their form).
	"AWS::SecretsManager::Secret": {value: func(id string, props map[string]any, env environment) string {
		name, _ := props["Name"].(string)
		if name == "" {
			name = id
		}
		return fmt.Sprintf("arn:%s:secretsmanager:%s:%s:secret:%s", env.partition, env.region, env.account, name)
	}},
}

// untaggable are resource types whose CloudFormation tags moto reads in its API's shape
// (TagKey/TagValue) and fails on.
var untaggable = map[string]bool{"AWS::KMS::Key": true, "AWS::SSM::Parameter": true}

// adapt returns the template with the emulator's gaps worked around, and the gaps; env is the
// emulator's account and region, for stand-in ARNs.
func adapt(tpl []byte, env environment) ([]byte, []Gap, error) {
	var m map[string]any
	if err := json.Unmarshal(tpl, &m); err != nil {
		return nil, nil, fmt.Errorf("parse the template: %w", err)
	}
	resources, _ := m["Resources"].(map[string]any)
	standIns := map[string]string{}
	var gaps []Gap
	for id, r := range resources {
		r, _ := r.(map[string]any)
		typ, _ := r["Type"].(string)
		props, _ := r["Properties"].(map[string]any)
		if u, ok := unsupported[typ]; ok {
			standIns[id] = u.value(id, props, env)
			delete(resources, id)
			why := u.why
			if why == "" {
				why = noSuchType
			}
			gaps = append(gaps, Gap{id, typ, why})
			continue
		}
		if props != nil && untaggable[typ] && props["Tags"] != nil {
			delete(props, "Tags")
			gaps = append(gaps, Gap{id, typ, "deployed without its tags: the emulator fails on them"})
		}
	}
	slices.SortFunc(gaps, func(a, b Gap) int { return strings.Compare(a.Resource, b.Resource) })
	out, err := json.Marshal(replaceRefs(m, standIns))
	if err != nil {
		return nil, nil, err
	}
	return out, gaps, nil
}

// replaceRefs replaces Ref and Fn::GetAtt of the resources in standIn by their stand-in values,
// and drops them from DependsOn.
func replaceRefs(v any, standIn map[string]string) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			if ref, ok := x["Ref"].(string); ok && standIn[ref] != "" {
				return standIn[ref]
			}
			if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
				if name, _ := ga[0].(string); standIn[name] != "" {
					return standIn[name]
				}
			}
		}
		for k, e := range x {
			if k == "DependsOn" {
				switch deps := e.(type) {
				case []any:
					x[k] = slices.DeleteFunc(deps, func(d any) bool { s, _ := d.(string); return standIn[s] != "" })
					continue
				case string:
					if standIn[deps] != "" {
						delete(x, k)
					}
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
