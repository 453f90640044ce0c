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

// unsupported are the resource types moto's CloudFormation cannot create, with the stand-in
// values references to them get.
var unsupported = map[string]string{
	"AWS::IAM::OIDCProvider": "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com",
	"AWS::CloudWatch::Alarm": "alarm",
	"AWS::SQS::QueuePolicy":  "queue-policy",
}

// untaggable are resource types whose CloudFormation tags moto reads in its API's shape
// (TagKey/TagValue) and fails on.
var untaggable = map[string]bool{"AWS::KMS::Key": true, "AWS::SSM::Parameter": true}

// adapt returns the template with the emulator's gaps worked around, and the gaps.
func adapt(tpl []byte) ([]byte, []Gap, error) {
	var m map[string]any
	if err := json.Unmarshal(tpl, &m); err != nil {
		return nil, nil, fmt.Errorf("parse the template: %w", err)
	}
	resources, _ := m["Resources"].(map[string]any)
	standIn := map[string]string{}
	var gaps []Gap
	for id, r := range resources {
		r, _ := r.(map[string]any)
		typ, _ := r["Type"].(string)
		if v, ok := unsupported[typ]; ok {
			standIn[id] = v
			delete(resources, id)
			gaps = append(gaps, Gap{id, typ, "not deployed: the emulator has no such resource type"})
			continue
		}
		if props, ok := r["Properties"].(map[string]any); ok && untaggable[typ] && props["Tags"] != nil {
			delete(props, "Tags")
			gaps = append(gaps, Gap{id, typ, "deployed without its tags: the emulator fails on them"})
		}
	}
	slices.SortFunc(gaps, func(a, b Gap) int { return strings.Compare(a.Resource, b.Resource) })
	out, err := json.Marshal(replaceRefs(m, standIn))
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
