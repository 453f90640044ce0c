package stack_test

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// The synthesized stack's account and region, as its statements' ARNs resolve (evaluate).
const (
	testAccount = "123456789012"
	testRegion  = "us-east-1"
)

// request is one request as IAM evaluates it against a role's statements: the action, the
// resource's ARN and the request's condition keys (a key left out is not in the request).
type request struct {
	action, resource string
	keys             map[string][]string
}

// allowed evaluates a role's identity statements as IAM does for a request within one account:
// an explicit deny wins, then any allow; nothing allows by default. It knows the condition
// operators the stack uses and fails the test on any other, so that a statement it cannot read
// is never taken for a refusal.
func allowed(t *testing.T, ss []map[string]any, r request) bool {
	t.Helper()
	allow := false
	for _, s := range ss {
		for _, k := range []string{"NotAction", "NotResource", "NotPrincipal"} {
			require.NotContains(t, s, k, "the evaluator does not read %s: %s", k, js(s))
		}
		if !matchesAny(t, r.action, actions(s), true) || !matchesAny(t, r.resource, resolveAll(t, s["Resource"]), false) ||
			!conditionsHold(t, s["Condition"], r) {
			continue
		}
		if s["Effect"] == "Deny" {
			return false
		}
		allow = true
	}
	return allow
}

func matchesAny(t *testing.T, value string, patterns []string, fold bool) bool {
	t.Helper()
	for _, p := range patterns {
		if fold {
			p, value = strings.ToLower(p), strings.ToLower(value)
		}
		if glob(p, value) {
			return true
		}
	}
	return false
}

// glob is IAM's wildcard match: * any run of characters, ? any one.
func glob(pattern, value string) bool {
	// path.Match treats / specially; IAM does not, so match each side with / replaced.
	ok, err := path.Match(strings.ReplaceAll(pattern, "/", "\x00"), strings.ReplaceAll(value, "/", "\x00"))
	return err == nil && ok
}

// resolveAll resolves a statement's Resource (a string, a list, or CloudFormation functions)
// to ARNs in the test account and region; a reference to another resource of the template
// becomes "<ref:ID>", which no request names.
func resolveAll(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	for _, x := range asList(v) {
		out = append(out, resolve(t, x))
	}
	return out
}

func resolve(t *testing.T, v any) string {
	t.Helper()
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok {
			switch ref {
			case "AWS::Partition":
				return "aws"
			case "AWS::Region":
				return testRegion
			case "AWS::AccountId":
				return testAccount
			case "AWS::URLSuffix":
				return "amazonaws.com"
			}
			return "<ref:" + ref + ">"
		}
		if join, ok := x["Fn::Join"].([]any); ok {
			var parts []string
			for _, p := range asList(join[1]) {
				parts = append(parts, resolve(t, p))
			}
			return strings.Join(parts, join[0].(string))
		}
		if att, ok := x["Fn::GetAtt"]; ok {
			return "<att:" + js(att) + ">"
		}
	}
	t.Fatalf("the evaluator cannot resolve %s", js(v))
	return ""
}

// conditionsHold reports whether every condition of a statement holds for r (AND across
// operators and keys, OR across a key's values).
func conditionsHold(t *testing.T, cond any, r request) bool {
	t.Helper()
	if cond == nil {
		return true
	}
	for op, keys := range cond.(map[string]any) {
		for key, want := range keys.(map[string]any) {
			var values []string
			for _, w := range asList(want) {
				values = append(values, substitute(w.(string), r))
			}
			if !holds(t, op, values, r.keys[key], hasKey(r, key)) {
				return false
			}
		}
	}
	return true
}

func hasKey(r request, key string) bool { _, ok := r.keys[key]; return ok }

// substitute fills in the policy variables of a condition value from the request's keys.
func substitute(v string, r request) string {
	for k, vals := range r.keys {
		if len(vals) == 1 {
			v = strings.ReplaceAll(v, "${"+k+"}", vals[0])
		}
	}
	return v
}

func holds(t *testing.T, op string, want, got []string, present bool) bool {
	t.Helper()
	set, base, _ := strings.Cut(op, ":")
	if base == "" {
		set, base = "", op
	}
	base, ifExists := strings.CutSuffix(base, "IfExists")
	if ifExists && !present {
		return true
	}
	one := func(g string) bool {
		switch base {
		case "StringEquals", "StringNotEquals", "Bool":
			return slices.Contains(want, g)
		case "StringLike", "StringNotLike":
			return slices.ContainsFunc(want, func(w string) bool { return glob(w, g) })
		}
		t.Fatalf("the evaluator does not know the condition operator %s", op)
		return false
	}
	negated := strings.Contains(base, "Not")
	if base == "Null" {
		return (want[0] == "true") == !present
	}
	switch set {
	case "ForAllValues":
		for _, g := range got {
			if !one(g) {
				return false
			}
		}
		return true
	case "ForAnyValue":
		return slices.ContainsFunc(got, one)
	case "":
		if !present {
			return negated // a negated operator holds for a key the request lacks
		}
		return slices.ContainsFunc(got, one) != negated
	}
	t.Fatalf("the evaluator does not know the condition operator %s", op)
	return false
}

// TestDoorbellRights plays, against the synthesized policies, every way a role holder could
// re-point a doorbell: who may make, tag, untag, delete, reconfigure, hear or ring one. A workflow
// role holder (any trusted repository's job) and an instance's credentials are refused all of it
// but ringing (the workflow) and their own doorbell (the instance); only the stack's functions
// make (tagged) and delete doorbells.
func TestDoorbellRights(t *testing.T) {
	cfg, err := config.Load(jobsConfig)
	require.NoError(t, err)
	g := grants(jobsTemplate)
	role := func(prefix string) []map[string]any { return g[roleID(t, jobsTemplate, prefix)] }
	instanceARN := func(id string) string { return "arn:aws:ec2:" + testRegion + ":" + testAccount + ":instance/" + id }
	bell := func(id string) string {
		return "arn:aws:sqs:" + testRegion + ":" + testAccount + ":" + doorbell.Name(cfg.Stack, id)
	}
	const mine, theirs = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"
	tagged := func(id string) map[string][]string {
		return map[string][]string{"aws:ResourceTag/" + doorbell.TagKey: {instanceARN(id)}}
	}
	withKeys := func(base map[string][]string, more map[string][]string) map[string][]string {
		out := map[string][]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	makeTagged := func(arn string) map[string][]string {
		return map[string][]string{"aws:RequestTag/" + doorbell.TagKey: {arn}, "aws:TagKeys": {doorbell.TagKey}}
	}
	reconfigure := []string{"sqs:TagQueue", "sqs:UntagQueue", "sqs:DeleteQueue", "sqs:SetQueueAttributes", "sqs:AddPermission",
		"sqs:RemovePermission", "sqs:PurgeQueue"}

	// A workflow role holder: rings and hands over (after reading the tag), nothing else.
	for _, name := range []string{"WorkflowRole", "WebhookRole"} {
		ss := role(name)
		for _, a := range append([]string{"sqs:CreateQueue", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"}, reconfigure...) {
			for _, keys := range []map[string][]string{makeTagged(instanceARN(theirs)), tagged(theirs), {}} {
				require.False(t, allowed(t, ss, request{a, bell(theirs), keys}), "%s may %s a doorbell (%v)", name, a, keys)
			}
		}
	}
	for _, a := range []string{"sqs:SendMessage", "sqs:ListQueueTags"} {
		require.True(t, allowed(t, role("WorkflowRole"), request{a, bell(theirs), tagged(theirs)}), "the steps hand over: %s", a)
		require.False(t, allowed(t, role("WebhookRole"), request{a, bell(theirs), tagged(theirs)}), "the webhook has no business with doorbells: %s", a)
	}

	// An instance's credentials: its own doorbell, made tagged with its own ARN alone.
	ss := role("InstanceRole")
	as := func(keys map[string][]string) map[string][]string {
		return withKeys(keys, map[string][]string{"ec2:SourceInstanceARN": {instanceARN(mine)}})
	}
	for _, a := range []string{"sqs:CreateQueue", "sqs:TagQueue"} {
		require.True(t, allowed(t, ss, request{a, bell(mine), as(makeTagged(instanceARN(mine)))}), "an instance makes its own doorbell: %s", a)
		require.False(t, allowed(t, ss, request{a, bell(theirs), as(makeTagged(instanceARN(theirs)))}), "in another's name: %s", a)
		require.False(t, allowed(t, ss, request{a, bell(mine), as(map[string][]string{"aws:TagKeys": {doorbell.TagKey, "other"},
			"aws:RequestTag/" + doorbell.TagKey: {instanceARN(mine)}})}), "with another tag beside: %s", a)
		require.False(t, allowed(t, ss, request{a, bell(mine), as(map[string][]string{})}), "untagged: %s", a)
	}
	require.False(t, allowed(t, ss, request{"sqs:TagQueue", bell(theirs), as(withKeys(tagged(theirs), makeTagged(instanceARN(mine))))}),
		"an instance re-tags another's doorbell with its own ARN")
	// What IAM cannot refuse (a queue's name is no condition key): an instance may make, in its
	// own name, the doorbell of an instance that has not made its own yet. The sender reads the
	// tag and sends nothing to it (TestHandOverOnlyToTheInstancesOwnDoorbell).
	require.True(t, allowed(t, ss, request{"sqs:CreateQueue", bell(theirs), as(makeTagged(instanceARN(mine)))}),
		"the evaluator no longer sees the hole docs/security.md describes: update both")
	require.True(t, allowed(t, ss, request{"sqs:TagQueue", bell(mine), as(withKeys(tagged(mine), makeTagged(instanceARN(mine))))}),
		"making its own again after a restart")
	for _, a := range append([]string{"sqs:SendMessage"}, reconfigure[1:]...) {
		for _, id := range []string{mine, theirs} {
			require.False(t, allowed(t, ss, request{a, bell(id), as(tagged(id))}), "an instance may %s a doorbell", a)
		}
	}
	for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"} {
		require.True(t, allowed(t, ss, request{a, bell(mine), as(tagged(mine))}), "its own doorbell: %s", a)
		require.False(t, allowed(t, ss, request{a, bell(theirs), as(tagged(theirs))}), "another's: %s", a)
	}

	// The stack's functions make doorbells tagged with an instance's ARN alone, and delete them.
	for _, name := range []string{"RefreshRole", "DispatchRole"} {
		ss := role(name)
		require.True(t, allowed(t, ss, request{"sqs:CreateQueue", bell(theirs), makeTagged(instanceARN(theirs))}), name)
		require.False(t, allowed(t, ss, request{"sqs:CreateQueue", bell(theirs), map[string][]string{}}), "%s: untagged", name)
		require.True(t, allowed(t, ss, request{"sqs:TagQueue", bell(theirs), makeTagged(instanceARN(theirs))}), "%s: tags in making", name)
		require.False(t, allowed(t, ss, request{"sqs:TagQueue", bell(theirs), withKeys(tagged(theirs), makeTagged(instanceARN(mine)))}),
			"%s re-tags a doorbell", name)
		require.True(t, allowed(t, ss, request{"sqs:DeleteQueue", bell(theirs), tagged(theirs)}), name)
		for _, a := range []string{"sqs:ReceiveMessage", "sqs:UntagQueue", "sqs:SetQueueAttributes", "sqs:AddPermission"} {
			require.False(t, allowed(t, ss, request{a, bell(theirs), tagged(theirs)}), "%s may %s a doorbell", name, a)
		}
	}
}
