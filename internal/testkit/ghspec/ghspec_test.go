package ghspec

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFromOpenAPI30: nullable schemas take null (typed ones by their type, untyped ones by an
// anyOf, enums by a null member), boolean exclusive bounds become numbers, and what is data
// (examples, enums, defaults) or a property's name is left as it is.
func TestFromOpenAPI30(t *testing.T) {
	in := `{"properties": {
		"typed":   {"type": "string", "nullable": true},
		"enum":    {"type": "string", "enum": ["a"], "nullable": true},
		"untyped": {"allOf": [{"$ref": "#/x"}], "nullable": true},
		"off":     {"type": "integer", "nullable": false},
		"bound":   {"type": "integer", "minimum": 1, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": false},
		"data":    {"type": "object", "example": {"nullable": true}, "default": {"nullable": true},
		            "properties": {"nullable": {"type": "boolean"}, "example": {"type": "string", "nullable": true}}}
	}}`
	want := `{"properties": {
		"typed":   {"type": ["string", "null"]},
		"enum":    {"type": ["string", "null"], "enum": ["a", null]},
		"untyped": {"anyOf": [{"allOf": [{"$ref": "#/x"}]}, {"type": "null"}]},
		"off":     {"type": "integer"},
		"bound":   {"type": "integer", "exclusiveMinimum": 1, "maximum": 9},
		"data":    {"type": "object", "example": {"nullable": true}, "default": {"nullable": true},
		            "properties": {"nullable": {"type": "boolean"}, "example": {"type": ["string", "null"]}}}
	}}`
	var doc, expect any
	require.NoError(t, json.Unmarshal([]byte(in), &doc))
	require.NoError(t, json.Unmarshal([]byte(want), &expect))
	require.Equal(t, expect, fromOpenAPI30(doc))
}

// TestOperation: a request finds its operation by method and path template, preferring literal
// segments to parameters, under /api/v3 as at the root; a path the description lacks is an error.
func TestOperation(t *testing.T) {
	rest := LoadREST(t)
	for _, tc := range []struct{ method, path, id string }{
		{"GET", "/repos/o/r/actions/runners/downloads", "actions/list-runner-applications-for-repo"},
		{"GET", "/repos/o/r/actions/runners/12?per_page=1", "actions/get-self-hosted-runner-for-repo"},
		{"POST", "/api/v3/orgs/o/actions/runners/generate-jitconfig", "actions/generate-runner-jitconfig-for-org"},
		{"DELETE", "/api/v3/orgs/o/actions/runners/12", "actions/delete-self-hosted-runner-from-org"},
	} {
		op, err := rest.Operation(tc.method, tc.path)
		require.NoError(t, err, tc.path)
		require.Equal(t, tc.id, op.ID, tc.path)
	}
	_, err := rest.Operation("GET", "/no/such/endpoint")
	require.Error(t, err)
}

// TestValidate: an answer is held to its operation's schema for its status, an undescribed error
// to basic-error; an undescribed success is refused, and an answer described without a body must
// have none; a webhook payload is held to its schema.
func TestValidate(t *testing.T) {
	rest := LoadREST(t)
	runner := `{"id":1,"name":"r","os":"linux","status":"online","busy":false,"labels":[{"id":1,"name":"x","type":"custom"}]}`
	require.NoError(t, rest.Validate("GET", "/repos/o/r/actions/runners/1", 200, []byte(runner)))
	require.Error(t, rest.Validate("GET", "/repos/o/r/actions/runners/1", 200, []byte(`{"id":1}`)), "required fields")
	require.NoError(t, rest.Validate("GET", "/repos/o/r/actions/runners/1", 404, []byte(`{"message":"Not Found"}`)))
	require.Error(t, rest.Validate("GET", "/repos/o/r/actions/runners/1", 404, []byte(`{"message":1}`)), "basic-error's message is a string")
	require.True(t, errors.Is(rest.Validate("GET", "/repos/o/r/actions/runners/1", 201, []byte(runner)), ErrUndescribed))
	require.NoError(t, rest.Validate("DELETE", "/repos/o/r/actions/runners/1", 204, nil))
	require.Error(t, rest.Validate("DELETE", "/repos/o/r/actions/runners/1", 204, []byte(`{}`)), "204 has no body")
	// A webhook payload is held to its action's schema.
	hooks := LoadWebhooks(t)
	require.Error(t, hooks.Validate(WorkflowJobSchema("queued"), []byte(`{"action":"queued"}`)), "required fields")
	require.Error(t, hooks.Validate("webhook-no-such-event", []byte(`{}`)))
}
