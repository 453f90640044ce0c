package badinput

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// poolDocCase is a pool document (the world's own, published under another pool name, with
// fields changed) and what refusing it must say.
type poolDocCase struct {
	name   string
	change map[string]any // top-level fields; a nil value removes the field; nested objects replace the field's whole value
	want   []string       // in pooldoc.Parse's error and the provision step's log
	// allowed: the document is valid, and it is the provision request that does not fit it
	// (then only the step refuses, and want is checked in its log).
	allowed bool
	// unclear, when set, is how the refusal falls short (a reported product gap).
	unclear string
	// gap, when set, is a product gap the case shows today (see gapCheck).
	gap string
}

// poolDocCases are the pool-document cases.
func poolDocCases() []poolDocCase {
	return []poolDocCase{
		{name: "unknown field (a typo)", change: map[string]any{"instanceType": "c7i.large"}, want: []string{`unknown field "instanceType"`}},
		{name: "schema version from the future", change: map[string]any{"schemaVersion": 3}, want: []string{"schemaVersion: 3: this Hangar reads version 2"}},
		{name: "schema version of another Hangar", change: map[string]any{"schemaVersion": 1}, want: []string{"schemaVersion: 1: this Hangar reads version 2"}},
		{name: "market unknown", change: map[string]any{"market": "cheapest"}, want: []string{`market: "cheapest": want spot, on-demand or spot-fallback`}},
		{name: "allocation strategy unknown", change: map[string]any{"allocationStrategy": "fastest"}, want: []string{`allocationStrategy: "fastest": want cost or priority`}},
		{name: "reuse unknown", change: map[string]any{"reuse": "sometimes"}, want: []string{`reuse: "sometimes": want repository, owner, any or never`}},
		{name: "reuse any with a sudo runner", change: map[string]any{"reuse": "any", "runner": withRunner(map[string]any{"sudo": true})},
			want: []string{`reuse: "any" with runner.sudo`, "want repository or never"}},
		{name: "reserved tag", change: map[string]any{"tags": map[string]string{"hangar:stack": "other"}},
			want: []string{`tags: "hangar:stack": the hangar: prefix is reserved`}},
		{name: "negative timeout", change: map[string]any{"timeouts": map[string]string{"idle": "-5m"}},
			want: []string{"timeouts.idle: -5m0s: want more than 0 and at most 840h0m0s"}},
		{name: "timeout not a duration", change: map[string]any{"timeouts": map[string]string{"running": "a day"}},
			want:    []string{`duration "a day": want a Go duration such as "10m" or "6h"`},
			unclear: "does not name the field (timeouts.running)"},
		{name: "zero timeout", change: map[string]any{"timeouts": map[string]string{"claimed": "0s"}},
			want: []string{"timeouts.claimed: 0s: want more than 0"}},
		{name: "runner download over plain http", change: map[string]any{"runner": withRunner(map[string]any{"baseUrl": "http://mirror.example.com/runner"})},
			want: []string{`runner.baseUrl: "http://mirror.example.com/runner": plain http only for a loopback host; want https`}},
		{name: "runner checksum malformed", change: map[string]any{"runner": withRunner(map[string]any{"sha256": map[string]string{"x64": "abc"}})},
			want: []string{`runner.sha256: x64: "abc": want 64 lowercase hex digits`}},
		{name: "runner user root", change: map[string]any{"runner": withRunner(map[string]any{"user": "root"})},
			want: []string{`runner.user: "root": want an unprivileged user name`}},
		{name: "instance type malformed", change: map[string]any{"instanceTypes": []string{"c7i large"}},
			want: []string{`instanceTypes: "c7i large": want an instance type such as c7i.large`}},
		{name: "instance types and requirements", change: map[string]any{"instanceRequirements": map[string]any{"arch": "x64", "vcpu": map[string]int{"min": 2}}},
			want: []string{"with instanceRequirements: want one or the other"}},
		{name: "subnet malformed", change: map[string]any{"subnets": []map[string]string{{"id": "sub-1", "az": ""}}},
			want: []string{`subnets: {id "sub-1", az ""}: want subnet-<hex> and its availability zone`}},
		{name: "launch template malformed", change: map[string]any{"launchTemplate": map[string]string{"id": "template-1", "version": "latest"}},
			want: []string{`launchTemplate.id: "template-1": want lt- and hex digits`, `launchTemplate.version: "latest": want a version number, $Latest or $Default`}},
		{name: "allowed repository malformed", change: map[string]any{"allowedRepositories": []string{"octo"}},
			want: []string{`allowedRepositories: "octo": want owner/name or owner/*`}},
		{name: "label all digits", change: map[string]any{"labels": []string{"4200"}}, want: []string{`labels: "4200": all digits could name another run`}},
		{name: "warm window malformed", change: map[string]any{"warm": map[string]any{"schedules": []map[string]any{{"name": "nights", "from": "25:00", "to": "06:00", "hot": 1}}}},
			want: []string{`warm.schedules[0].from: "25:00": want HH:MM (24-hour)`}},
		{name: "warm time zone unknown", change: map[string]any{"warm": map[string]any{"timezone": "Mars/Olympus"}},
			want: []string{`warm.timezone: "Mars/Olympus": want an IANA time zone such as Europe/Paris`}},
		{name: "queue URL missing", change: map[string]any{"queueUrl": nil}, want: []string{`queueUrl: "": want the pool queue's URL`}},
		{name: "repository the pool does not allow", change: map[string]any{"allowedRepositories": []string{"other-org/*"}}, allowed: true,
			want: []string{"GITHUB_REPOSITORY: " + localenv.Repo + " may not use pool", "(allowed: other-org/*)"}},
	}
}

// viaStep are the cases whose document is also published in the stack and read by the
// provision step (the same path for every document, so a few of each kind: a decoding error, a
// validation error of each level, and a request the pool refuses). The others are checked by
// pooldoc.Parse alone, which is what the step calls.
var viaStep = map[string]bool{
	"unknown field (a typo)": true, "schema version from the future": true, "market unknown": true,
	"timeout not a duration": true, "runner download over plain http": true, "warm window malformed": true,
	"zero timeout": true, "repository the pool does not allow": true,
}

// withRunner marks a change of some runner fields: poolDocRun merges them into the document's.
type withRunner map[string]any

// poolDocRun checks a pool-document case: pooldoc.Parse refuses the document naming the field
// and what it accepts; for the cases viaStep, published in the stack, the provision step that
// reads it refuses too, with the same words, no mutating AWS call, and the pool untouched.
func (w *world) poolDocRun(c poolDocCase) func(t *testing.T) {
	return func(t *testing.T) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(c.name))
		name := fmt.Sprintf("doc-%08x", h.Sum32())
		base, err := json.Marshal(w.Doc)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(base, &doc))
		doc["name"] = name
		good, err := json.Marshal(doc)
		require.NoError(t, err)
		_, err = pooldoc.Parse(good)
		require.NoError(t, err, "the unchanged document is valid")
		for k, v := range c.change {
			switch v := v.(type) {
			case nil:
				delete(doc, k)
			case withRunner:
				r, _ := doc["runner"].(map[string]any)
				for rk, rv := range v {
					r[rk] = rv
				}
			default:
				doc[k] = v
			}
		}
		body, err := json.Marshal(doc)
		require.NoError(t, err)
		_, err = pooldoc.Parse(body)
		if c.gap != "" && err == nil {
			gapCheck(t, c.gap, false, "pooldoc.Parse accepted "+string(body))
		}
		if c.allowed {
			require.NoError(t, err)
		} else {
			require.Error(t, err, "%s", body)
			for _, x := range c.want {
				require.Contains(t, err.Error(), x)
			}
		}

		if !viaStep[c.name] {
			gapCheck(t, c.gap, true, "")
			return
		}
		w.publish(t, name, string(body))
		want := c.want
		if !c.allowed {
			want = append([]string{"pool: pool document " + pooldoc.ParameterName(w.Stack, name)}, want...)
		}
		w.stepRun(stepCase{name: c.name, step: provisionStep, set: env("HANGAR_POOL", name), exit: exitRun, want: want, unclear: c.unclear})(t)
		gapCheck(t, c.gap, true, "")
	}
}

// publish puts a pool document in the stack for the length of the test.
func (w *world) publish(t *testing.T, pool, body string) {
	t.Helper()
	client := ssm.NewFromConfig(w.AWS)
	name := pooldoc.ParameterName(w.Stack, pool)
	_, err := client.PutParameter(w.ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(body),
		Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := client.DeleteParameter(context.Background(), &ssm.DeleteParameterInput{Name: aws.String(name)})
		require.NoError(t, err)
	})
}
